"""A streamable-HTTP MCP server for the tests, written with the official SDK (`MCPServer`, the
2.x name of FastMCP), served by uvicorn on 127.0.0.1 on a free port.

    python mcp_http_server.py --token=TOKEN [--path=/mcp]

Every HTTP request must carry `Authorization: Bearer TOKEN` (401 otherwise), so the tests can
check that the runner sends the configured headers and that a wrong one is refused. Once it
listens it prints its URL (`http://127.0.0.1:PORT/mcp`) as one line on stdout.

Tools: add(a, b), echo(text), image() (a 2x2 PNG), fail() (an isError result), sleep(seconds).
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
from pathlib import Path
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script: its sibling below
from mcp_stdio_server import tiny_png  # one PNG for both test servers

Scope = dict[str, Any]


def build_server() -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer("test-http-server", log_level="WARNING")

    @server.tool(description="Add two numbers.")
    def add(a: float, b: float) -> float:
        return a + b

    @server.tool(description="Return the text given.")
    def echo(text: str) -> str:
        return text

    @server.tool(description="A small PNG image.")
    def image() -> Image:
        return Image(data=tiny_png(), format="png")

    @server.tool(description="Always fails (an error result).")
    def fail() -> str:
        raise ToolError("it failed, as asked")

    @server.tool(description="Sleep some seconds, then answer.")
    async def sleep(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return f"slept {seconds}"

    return server


class RequireBearer:
    """ASGI middleware: HTTP requests without `Authorization: Bearer <token>` get 401;
    lifespan events pass (the SDK's session manager starts on them)."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != self.expected:
            body = b'{"error":"unauthorized"}'
            headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
            await send({"type": "http.response.start", "status": 401, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)


async def serve(token: str, path: str) -> None:
    app = RequireBearer(build_server().streamable_http_app(streamable_http_path=path), token)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))  # port 0: the kernel picks a free one, printed below
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if serving.done():
            await serving  # it failed to start: raise why
            raise SystemExit("the server stopped before it started")
        await asyncio.sleep(0.02)
    print(f"http://127.0.0.1:{port}{path}", flush=True)
    await serving


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--token", required=True, help="the bearer token every request must carry")
    parser.add_argument("--path", default="/mcp", help="the MCP endpoint's path")
    args = parser.parse_args()
    asyncio.run(serve(args.token, args.path))


if __name__ == "__main__":
    main()
