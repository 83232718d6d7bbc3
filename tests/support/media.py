"""Shared parts of the vision, image generation and mixture-of-agents tests (no tests here):
a real HTTP server on 127.0.0.1 serving fixed answers (images, pages, redirects), and checks
on what the runner wrote."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agent.llm.client import OpenAIChatModel
from agent.protocols import Sandbox, ToolConfig
from agent.servers.simulated.server import SimulatedEndpoint
from agent.toolbox.context import SandboxContext

# 200 base64 characters in a row: no sentence, path or hash in a trajectory looks like that.
BASE64_RUN = re.compile(r"[A-Za-z0-9+/]{200,}={0,2}")


@dataclass(frozen=True)
class Answer:
    status: int = 200
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)


class LoopbackServer:
    """`answers[path]` for each GET; 404 for anything else; counts the requests it served."""

    def __init__(self, answers: Mapping[str, Answer]) -> None:
        self.answers = dict(answers)
        self.hits: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.hits.append(self.path)
                answer = outer.answers.get(self.path, Answer(404, b"not found"))
                self.send_response(answer.status)
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                if "Content-Length" not in answer.headers:
                    self.send_header("Content-Length", str(len(answer.body)))
                self.end_headers()
                self.wfile.write(answer.body)

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"


@contextmanager
def serving(answers: Mapping[str, Answer]) -> Iterator[LoopbackServer]:
    server = LoopbackServer(answers)
    thread = threading.Thread(target=server.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.server.shutdown()
        server.server.server_close()
        thread.join()


def sim_prompt_tokens(body: Mapping[str, Any]) -> int:
    """The prompt tokens the simulated endpoint reports for a request body (4 characters a
    token over the messages and tools, as agent.servers.simulated.replies counts them)."""
    chars = len(json.dumps(body.get("messages") or [])) + len(json.dumps(body.get("tools") or []))
    return max(1, chars // 4)


@asynccontextmanager
async def tool_context(
    endpoint: SimulatedEndpoint, sandbox: Sandbox, config: ToolConfig | None = None
) -> AsyncIterator[SandboxContext]:
    """A tool context over `sandbox` whose model is the real HTTP client of `endpoint`
    (no retries: a fault is seen as it is)."""
    model = OpenAIChatModel(base_url=endpoint.base_url, api_key="none", model="sim-model", max_retries=0)
    context = SandboxContext(sandbox, config or ToolConfig(), model)
    try:
        yield context
    finally:
        await context.aclose()
        await model.aclose()
