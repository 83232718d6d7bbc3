"""The test MCP servers (tests/support/mcp_*_server.py) and the example notes server satisfy the
official SDK client: listed and every tool called, over stdio on the host and over streamable
HTTP (with its bearer token; without it, refused); the stdio server's start-up modes and
misbehaving tools do what they are named for. The runner's own MCP tests build on these."""

from __future__ import annotations

import ast
import asyncio
import base64
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx2
import mcp_types
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from agent.servers.simulated.server import SimulatedEndpoint
from tests.support.batch import REPO, BatchCLI, prompts_dataset, read_jsonl
from tests.support.mcp_fixtures import HTTP_TOOLS, STDIO_SERVER, STDIO_TOOLS, McpHttpServer, stdio_server_argv

T = TypeVar("T")
Body = Callable[[ClientSession], Awaitable[T]]
NOTES_SERVER = REPO / "examples" / "mcp_notes_server.py"


def stdio(body: Body[T], *modes: str, cwd: Path | None = None, timeout: float | None = None) -> T:
    """`body(session)` against the stdio test server run by this python without site-packages
    (`-I -S`: nothing but the standard library, as under a sandbox's bare python3)."""
    python, *rest = stdio_server_argv(*modes, python=sys.executable)
    params = StdioServerParameters(
        command=python, args=["-I", "-S", *rest], cwd=cwd, env={"TEST_MCP_VALUE": "v-42"}
    )

    async def scenario() -> T:
        with tempfile.TemporaryFile("w+") as errlog:
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write, read_timeout_seconds=timeout) as session,
            ):
                return await body(session)

    return asyncio.run(scenario())


def http(server: McpHttpServer, body: Body[T], headers: dict[str, str] | None = None) -> T:
    """`body(session)` against the streamable-HTTP test server, sending `headers`
    (by default its bearer token)."""
    sent = {"Authorization": f"Bearer {server.token}"} if headers is None else headers

    async def scenario() -> T:
        async with (
            httpx2.AsyncClient(headers=sent) as client,
            streamable_http_client(server.url, http_client=client) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            return await body(session)

    return asyncio.run(scenario())


def texts(result: mcp_types.CallToolResult) -> list[str]:
    return [block.text for block in result.content if isinstance(block, mcp_types.TextContent)]


def leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaves(inner)]
    return [exc]


def png_of(result: mcp_types.CallToolResult) -> bytes:
    [image] = [block for block in result.content if isinstance(block, mcp_types.ImageContent)]
    assert image.mime_type == "image/png"
    return base64.b64decode(image.data)


# --- the stdio server over the SDK's stdio client -------------------------------------------


def test_stdio_server_is_initialized_and_lists_its_tools() -> None:
    async def body(session: ClientSession) -> tuple[mcp_types.InitializeResult, mcp_types.ListToolsResult]:
        return await session.initialize(), await session.list_tools()

    init, listed = stdio(body)
    assert init.protocol_version == "2025-11-25"
    assert init.capabilities.tools is not None
    assert tuple(tool.name for tool in listed.tools) == STDIO_TOOLS
    for tool in listed.tools:
        assert tool.description
        assert tool.input_schema["type"] == "object"
    add = next(tool for tool in listed.tools if tool.name == "add")
    assert add.input_schema["required"] == ["a", "b"]


def test_stdio_server_uses_the_standard_library_only() -> None:
    tree = ast.parse(STDIO_SERVER.read_text())
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    imported |= {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert imported - {"__future__"} <= set(sys.stdlib_module_names)


def test_every_stdio_tool_answers_the_sdk_client(tmp_path: Path) -> None:
    async def body(session: ClientSession) -> dict[str, mcp_types.CallToolResult]:
        await session.initialize()
        await session.list_tools()  # the client checks `add`'s structured result against its schema
        calls: list[tuple[str, dict[str, Any]]] = [
            ("add", {"a": 2, "b": 3.5}),
            ("echo", {"text": "héllo"}),
            ("note_write", {"name": "todo", "text": "buy milk"}),
            ("note_read", {"name": "todo"}),
            ("env_value", {"name": "TEST_MCP_VALUE"}),
            ("image", {}),
            ("resource", {}),
            ("fail", {}),
            ("sleep", {"seconds": 0.05}),
            ("big", {"n": 1_000_000}),
        ]
        return {name: await session.call_tool(name, args) for name, args in calls}

    results = stdio(body, cwd=tmp_path)
    assert results["add"].structured_content == {"result": 5.5} and texts(results["add"]) == ["5.5"]
    assert texts(results["echo"]) == ["héllo"]
    assert (tmp_path / "todo").read_text() == "buy milk"  # notes are files in the server's cwd
    assert texts(results["note_read"]) == ["buy milk"]
    assert texts(results["env_value"]) == ["v-42"]
    assert png_of(results["image"]).startswith(b"\x89PNG\r\n\x1a\n")
    [resource] = results["resource"].content
    assert isinstance(resource, mcp_types.EmbeddedResource) and resource.resource.uri == "note://readme"
    assert results["fail"].is_error and texts(results["fail"]) == ["it failed, as asked"]
    assert not any(results[name].is_error for name in results if name != "fail")
    assert texts(results["sleep"]) == ["slept 0.05"]
    assert len(texts(results["big"])[0]) == 1_000_000


def test_bad_note_names_and_unknown_tools_are_errors(tmp_path: Path) -> None:
    async def body(session: ClientSession) -> tuple[list[mcp_types.CallToolResult], str]:
        await session.initialize()
        results = [
            await session.call_tool("note_write", {"name": "../escape", "text": "x"}),
            await session.call_tool("note_read", {"name": "missing"}),
            await session.call_tool("add", {"a": 1}),
        ]
        with pytest.raises(MCPError) as unknown:
            await session.call_tool("no_such_tool", {})
        return results, str(unknown.value)

    results, unknown = stdio(body, cwd=tmp_path)
    assert all(result.is_error for result in results)
    assert "no_such_tool" in unknown
    assert not (tmp_path.parent / "escape").exists()


def test_a_hung_call_times_out_and_the_server_still_answers() -> None:
    async def body(session: ClientSession) -> list[str]:
        await session.initialize()
        with pytest.raises(MCPError, match="timed out"):
            await session.call_tool("hang", {}, read_timeout_seconds=0.5)
        slow = asyncio.ensure_future(session.call_tool("sleep", {"seconds": 1.0}))
        quick = await session.call_tool("add", {"a": 1, "b": 1})  # answered while `sleep` runs
        order = ["add" if not slow.done() else "sleep", *texts(quick)]
        await session.send_ping()
        await slow
        return order

    assert stdio(body) == ["add", "2"]


def test_a_call_that_crashes_the_server_ends_the_session() -> None:
    async def body(session: ClientSession) -> str:
        await session.initialize()
        with pytest.raises(MCPError) as crashed:
            await session.call_tool("crash", {})
        return str(crashed.value)

    assert "Connection closed" in stdio(body)


def test_crash_at_start_fails_the_initialize() -> None:
    async def body(session: ClientSession) -> str:
        with pytest.raises(MCPError) as failed:
            await session.initialize()
        return str(failed.value)

    assert "Connection closed" in stdio(body, "--crash-at-start")


def test_hang_at_start_never_initializes() -> None:
    async def body(session: ClientSession) -> None:
        with pytest.raises(MCPError, match="timed out"):
            await session.initialize()

    stdio(body, "--hang-at-start", timeout=1.0)


def test_slow_start_initializes_late() -> None:
    async def body(session: ClientSession) -> float:
        started = time.monotonic()
        await session.initialize()
        return time.monotonic() - started

    assert stdio(body, "--slow-start=1.0") >= 1.0


def test_stderr_noise_is_written_and_the_server_still_serves() -> None:
    python, *rest = stdio_server_argv("--stderr-noise", python=sys.executable)
    params = StdioServerParameters(command=python, args=rest)

    async def scenario(errlog: Any) -> list[str]:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            return texts(await session.call_tool("echo", {"text": "still here"}))

    with tempfile.TemporaryFile("w+") as errlog:
        assert asyncio.run(scenario(errlog)) == ["still here"]
        errlog.seek(0)
        assert len(errlog.read()) > 1_000_000  # more than a pipe holds: undrained, it would block


def test_the_wire_is_one_json_message_per_line() -> None:
    """Raw protocol: unknown methods (the SDK's `server/discover` probe) get -32601, so a client
    in auto mode falls back to `initialize`; junk gets a parse error; notifications no answer."""
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": "p", "method": "ping"},
        {"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {"protocolVersion": "2024-11-05"}},
    ]
    stdin = "".join(json.dumps(line) + "\n" for line in lines) + "not json\n"
    done = subprocess.run(
        stdio_server_argv(), input=stdin, capture_output=True, text=True, timeout=30, check=True
    )
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert [answer.get("id") for answer in answers] == [1, "p", 2, None]
    assert answers[0]["error"]["code"] == -32601
    assert answers[1]["result"] == {}
    assert answers[2]["result"]["protocolVersion"] == "2024-11-05"  # an older client's version kept
    assert answers[3]["error"]["code"] == -32700


# --- the HTTP server over the SDK's streamable HTTP client -----------------------------------


def test_http_server_lists_and_answers_with_its_token(mcp_http_server: McpHttpServer) -> None:
    async def body(session: ClientSession) -> tuple[list[str], dict[str, mcp_types.CallToolResult]]:
        listed = [tool.name for tool in (await session.list_tools()).tools]
        calls: dict[str, dict[str, Any]] = {
            "add": {"a": 2, "b": 3},
            "echo": {"text": "hi"},
            "image": {},
            "fail": {},
        }
        calls["sleep"] = {"seconds": 0.05}
        return listed, {name: await session.call_tool(name, args) for name, args in calls.items()}

    listed, results = http(mcp_http_server, body)
    assert tuple(listed) == HTTP_TOOLS
    assert results["add"].structured_content == {"result": 5.0}
    assert texts(results["echo"]) == ["hi"]
    assert png_of(results["image"]).startswith(b"\x89PNG")
    assert results["fail"].is_error and "it failed, as asked" in texts(results["fail"])[0]
    assert texts(results["sleep"]) == ["slept 0.05"]


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}], ids=["missing", "wrong"])
def test_http_server_refuses_a_missing_or_wrong_token(
    mcp_http_server: McpHttpServer, headers: dict[str, str]
) -> None:
    assert httpx2.post(mcp_http_server.url, json={}, headers=headers).status_code == 401

    async def body(session: ClientSession) -> None:
        raise AssertionError("initialized without the token")

    with pytest.raises((MCPError, BaseExceptionGroup)) as refused:  # the SDK's task groups wrap it
        http(mcp_http_server, body, headers=headers)
    assert any(isinstance(leaf, MCPError) for leaf in leaves(refused.value))


# --- the example notes server (examples/mcp_notes_server.py, written with the SDK) -------------


def test_the_example_notes_server_satisfies_the_sdk_client(tmp_path: Path) -> None:
    params = StdioServerParameters(command=sys.executable, args=[str(NOTES_SERVER)], cwd=tmp_path)

    async def scenario() -> tuple[list[str], list[mcp_types.CallToolResult]]:
        with tempfile.TemporaryFile("w+") as errlog:
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                listed = [tool.name for tool in (await session.list_tools()).tools]
                calls: list[tuple[str, dict[str, Any]]] = [
                    ("add_note", {"title": "shopping", "text": "milk\nEggs"}),
                    ("add_note", {"title": "work", "text": "ship the eggs report"}),
                    ("list_notes", {}),
                    ("read_note", {"title": "shopping"}),
                    ("search_notes", {"query": "eggs"}),
                    ("read_note", {"title": "missing"}),
                    ("add_note", {"title": "../escape", "text": "x"}),
                ]
                return listed, [await session.call_tool(name, args) for name, args in calls]

    listed, results = asyncio.run(scenario())
    assert listed == ["add_note", "list_notes", "read_note", "search_notes"]
    assert [result.is_error for result in results] == [False] * 5 + [True, True]
    assert texts(results[2]) == ["shopping\nwork"]
    assert texts(results[3]) == ["milk\nEggs"]
    assert texts(results[4]) == ["shopping: Eggs\nwork: ship the eggs report"]
    assert (tmp_path / "notes" / "shopping.txt").read_text() == "milk\nEggs"
    assert not (tmp_path / "escape.txt").exists()


def test_the_worked_example_runs_offline(
    tmp_path: Path, sim_endpoint: SimulatedEndpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/mcp.md's worked example: the notes server of examples/mcp_config.json, run in each
    prompt's local sandbox, sampled by examples/distributions.yaml, against the simulated endpoint."""
    examples = REPO / "examples"
    # the local sandbox keeps the runner's PATH: its `python` must be this one (it has the SDK)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    dataset = prompts_dataset(tmp_path / "prompts.jsonl", ["Note the milk.", "Note the eggs."])
    done = BatchCLI(tmp_path, sim_endpoint).run(
        f"--dataset_file={dataset}",
        "--batch_size=2",
        "--run_name=notes",
        "--num_workers=1",
        "--sandbox=local",
        f"--mcp_config={examples / 'mcp_config.json'}",
        f"--distributions_file={examples / 'distributions.yaml'}",
        "--distribution=notes_only",
    )
    assert done.returncode == 0, done
    entries = read_jsonl(tmp_path / "data" / "notes" / "trajectories.jsonl")
    assert len(entries) == 2
    for entry in entries:
        assert entry["toolsets_used"] == ["notes"]
        assert entry["tool_stats"]["add_note"] == {"count": 1, "success": 1, "failure": 0}
        assert "saved note 'example'" in entry["conversations"][3]["value"]
