"""A conversation's MCP sessions in-process (the stdio test server, real processes, a real local
sandbox): the session's owner task enters and leaves the SDK's task groups whichever task asks;
a conversation ended while a call hangs or while the server starts leaves nothing running; a
server's session is closed before the conversation's sandbox; results become tool messages."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from agent.protocols import McpServer, McpTool, SandboxSpec, ToolConfig
from agent.sandboxes import SandboxOptions, sandbox_factory
from agent.toolbox.context import ConversationContext, Resources
from tests.support.mcp_files import servers_left, work_fixture
from tests.support.mcp_fixtures import STDIO_SERVER
from tools.mcp import toolsets_for
from tools.mcp.connection import Connection
from tools.mcp.transports import on_host

LIVENESS = 60.0  # seconds: a bound on a loaded machine, not a timing assertion


work = work_fixture("mcp-sessions-")


def tool(name: str, properties: dict[str, Any] | None = None) -> McpTool:
    schema = {"type": "object", "properties": properties or {}}
    return McpTool(name, name, name, json.dumps(schema))


def server(work: Path, *modes: str, host: bool = False) -> McpServer:
    args = (*modes, f"--name={work.name}")
    names = ("add", "hang", "image", "resource", "fail", "env_value", "big", "server_error", "not_mcp")
    names += ("not_utf8", "wrong_id")
    tools = tuple(tool(name) for name in names)
    if host:
        return McpServer(
            name="t", command=sys.executable, args=(str(STDIO_SERVER), *args), host=True, tools=tools
        )
    files = (("server.py", STDIO_SERVER.read_bytes()),)
    return McpServer(
        name="t",
        command="python3",
        args=("server.py", *args),
        files=files,
        tools=tools,
    )


async def until(condition: Any, what: str) -> None:
    for _ in range(int(LIVENESS / 0.05)):
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"gave up waiting for: {what}")


def context(work: Path, artifacts: Path | None = None) -> ConversationContext:
    factory = sandbox_factory(SandboxOptions(backend="local", root=str(work / "boxes")))
    config = ToolConfig(artifacts_dir=str(artifacts) if artifacts else None)
    model: Any = None  # no tool here asks the model
    return ConversationContext(config, model, SandboxSpec("run", "key:0"), factory, Resources())


def handlers(mcp_server: McpServer) -> dict[str, Any]:
    (toolset,) = toolsets_for([mcp_server])
    return {spec.name: spec.handler for spec in toolset.tools}


def test_a_start_cancelled_midway_leaves_no_server(work: Path) -> None:
    async def scenario() -> None:
        slow = server(work, "--slow-start=120", host=True)
        connection = Connection("t", on_host(slow), startup_timeout=300, call_timeout=10)
        starting = asyncio.ensure_future(connection.start())
        await until(lambda: servers_left(work), "the server running")
        starting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await starting
        assert servers_left(work) == []  # now, not when asyncio.run cancels what is left

    asyncio.run(scenario())
    assert servers_left(work) == []


def test_a_conversation_ended_during_a_hung_call_leaves_nothing(work: Path) -> None:
    async def scenario() -> None:
        conversation = context(work)
        calls = handlers(server(work))
        assert await calls["add"]({"a": 1, "b": 2}, conversation) == "3"
        hung = asyncio.ensure_future(calls["hang"]({}, conversation))
        await asyncio.sleep(0.5)
        hung.cancel()  # the prompt's deadline, as the loop cancels a tool call
        await conversation.aclose()  # from this task, not the one that started the session
        assert servers_left(work) == []

    asyncio.run(scenario())
    assert servers_left(work) == []
    assert not any((work / "boxes").rglob("server.py"))  # the sandbox is gone too


def test_a_huge_result_is_capped_as_the_terminals_output(work: Path) -> None:
    from tools.terminal.output import MAX_OUTPUT_CHARS

    async def scenario() -> Any:
        conversation = context(work, artifacts=work / "run")
        try:
            return await handlers(server(work, host=True))["big"]({"n": 5_000_000}, conversation)
        finally:
            await conversation.aclose()

    text = asyncio.run(scenario())
    assert isinstance(text, str) and MAX_OUTPUT_CHARS <= len(text) < MAX_OUTPUT_CHARS + 200, len(text)
    assert "[OUTPUT TRUNCATED - 4950000 chars omitted out of 5000000 total]" in text
    assert servers_left(work) == []


def test_results_become_tool_messages(work: Path) -> None:
    async def scenario() -> list[Any]:
        conversation = context(work, artifacts=work / "run")
        calls = handlers(server(work, host=True))
        try:
            names = ("image", "resource", "fail", "server_error", "fail", "not_mcp", "fail", "wrong_id")
            return [await calls[name]({}, conversation) for name in names]
        finally:
            await conversation.aclose()

    image, resource, fail, server_error, again, not_mcp, still, wrong_id = asyncio.run(scenario())
    # -32000 answered by the server is its error, read by the model; the session lives on
    assert server_error == {"error": "MCP server t: server_error: internal kaboom"}, server_error
    assert again == still == fail
    # a reply to the call that is no MCP result: said at once, not after the call's timeout (60 s)
    assert isinstance(not_mcp, dict), not_mcp
    assert not_mcp["error"].startswith("MCP server t: not_mcp: its reply is not MCP"), not_mcp
    # a reply to an id never sent, the one call waiting: its error at once, too
    assert isinstance(wrong_id, dict) and "its reply names id '" in wrong_id["error"], wrong_id
    assert "which no call of this session had" in wrong_id["error"], wrong_id
    assert image.startswith("a red square\n\n![image](images/key-0-mcp-1.png) (png, 2x2, "), image
    assert (work / "run" / "images" / "key-0-mcp-1.png").read_bytes().startswith(b"\x89PNG")
    assert resource == "[resource <note://readme>]\nthe resource's text"
    assert isinstance(fail, dict) and set(fail) == {"error"}
    assert servers_left(work) == []


@pytest.mark.parametrize("host", [True, False], ids=["host", "sandbox"])
def test_a_reply_that_is_not_utf8_is_read_lossily_at_once(work: Path, host: bool) -> None:
    """A Latin-1 reply: each bad byte becomes U+FFFD, as in a command's output; refused whole,
    the call waited out its call_timeout (60 s) and was reported unanswered."""

    async def scenario() -> Any:
        conversation = context(work)
        try:
            return await handlers(server(work, host=host))["not_utf8"]({}, conversation)
        finally:
            await conversation.aclose()

    answer = asyncio.run(scenario())
    assert answer == "caf\ufffd au lait", answer
    assert servers_left(work) == []
