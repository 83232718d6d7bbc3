"""The hot path's savings (issue 26) change no byte and no behaviour: a request carries what
the SDK sent before its options were given whole, a reused slot's view is the same view, a
command's environment is the same allowlist, and the collector's spacing is undone where the
parent asks for it."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path
from typing import Any

import openai
import pytest

from agent.batch.collection import OLDER_THRESHOLD, YOUNG_THRESHOLD, space_collections
from agent.llm.client import OpenAIChatModel
from agent.protocols import ChatRequest
from agent.sandboxes.local.environment import passed_env, scrubbed_env
from agent.sandboxes.local.view import SandboxView, view_of
from agent.servers.simulated.server import SimulatedEndpoint, Turn

MESSAGES: list[dict[str, Any]] = [{"role": "user", "content": "hello"}]
BODY = {"model": "sim-model", "messages": MESSAGES}


async def _ours(endpoint: SimulatedEndpoint, timeout: float) -> None:
    model = OpenAIChatModel(base_url=endpoint.base_url, api_key="k", model="sim-model", timeout=timeout)
    try:
        await model.complete(ChatRequest(messages=MESSAGES, tools=[]))
    finally:
        await model.aclose()


async def _plain_sdk(endpoint: SimulatedEndpoint, timeout: float) -> None:
    """The SDK's own defaults for every option, telemetry headers left out as ours are."""
    client = openai.AsyncOpenAI(base_url=endpoint.base_url, api_key="k", timeout=timeout, max_retries=0)
    omitted: dict[str, str | openai.Omit] = {name: openai.Omit() for name in client.platform_headers()}
    try:
        await client.post("/chat/completions", body=BODY, cast_to=bytes, options={"headers": omitted})
    finally:
        await client.close()


def test_a_request_carries_the_headers_and_path_of_the_sdk_with_its_default_options(
    sim_endpoint: SimulatedEndpoint,
) -> None:
    sim_endpoint.script("hello", [Turn(content="hi"), Turn(content="hi")])
    asyncio.run(_ours(sim_endpoint, 37.5))
    asyncio.run(_plain_sdk(sim_endpoint, 37.5))
    ours, plain = sim_endpoint.requests

    def shown(headers: dict[str, str]) -> dict[str, str]:
        return {k.lower(): v for k, v in headers.items() if k.lower() != "content-length"}

    assert ours.path == plain.path
    assert shown(ours.headers) == shown(plain.headers)
    assert shown(ours.headers)["x-stainless-read-timeout"] == "37.5"
    assert ours.body == plain.body


def test_a_slot_keeps_one_view_and_a_dataset_cwd_gets_its_own(tmp_path: Path) -> None:
    slot = str(tmp_path / "run" / "pool" / "1")
    assert view_of(slot) is view_of(slot)
    assert view_of(slot, "app") is not view_of(slot)
    made = SandboxView(slot, "app")
    command = "cd /app && ls /workspace"
    assert view_of(slot, "app").on_host(command) == made.on_host(command)
    assert view_of(slot, "app").shown(f"{slot}/workspace/x") == made.shown(f"{slot}/workspace/x")


def test_a_command_environment_is_the_allowlist_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    monkeypatch.setenv("LANG", "C")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("HOTPATH_OTHER", "x")
    env = scrubbed_env("/slot", "/bin/bash", passed_env())
    assert env["LC_ALL"] == "C.UTF-8" and env["LANG"] == "C" and "PATH" in env
    assert "OPENAI_API_KEY" not in env and "HOTPATH_OTHER" not in env
    assert env["HOME"] == "/slot/home" and env["TMPDIR"] == "/slot/tmp" and env["SHELL"] == "/bin/bash"


def test_spacing_collections_says_what_to_restore() -> None:
    original = gc.get_threshold()
    try:
        before = space_collections()
        assert before == original
        assert gc.get_threshold() == (YOUNG_THRESHOLD, OLDER_THRESHOLD, OLDER_THRESHOLD)
    finally:
        gc.set_threshold(*original)
