"""The static tool registry: tool map, which tools are offered, validation and dispatch."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import shutil
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import model_tools
import toolsets
from agent.errors import ConfigError
from agent.export.tool_stats import tool_stats
from agent.protocols import Sandbox, SandboxSpec, ToolConfig, ToolSpec, on_sandbox
from agent.protocols.turns import from_openai_messages
from agent.sandboxes.blocking import blocking_tool
from agent.sandboxes.local.environment import passed_env
from agent.sandboxes.local.sandbox import Session
from agent.sandboxes.local.slots import SlotPool
from agent.toolbox import registry
from agent.toolbox.context import SandboxContext
from model_tools import (
    ALL_TOOLS,
    TOOL_TO_TOOLSET_MAP,
    dispatch,
    get_tool_definitions,
    handle_function_call,
    resolve_tools,
    validate_arguments,
)
from tools import browser

pytestmark = pytest.mark.anyio
BROWSER_HERE = browser.TOOLSET.tools[0].available(ToolConfig()) is None  # Chromium + Playwright
IMPLEMENTED = sorted(
    ["patch", "process", "read_file", "search_files", "terminal", "vision_analyze", "write_file"]
    + (list(browser.TOOLSET.tool_names) if BROWSER_HERE else [])
)
# Real tools that the default settings leave without a backend (no web backend, run directory, models).
UNCONFIGURED = {"image_generate", "mixture_of_agents", "web_extract", "web_search"}


async def call(name: str, args: Any, sandbox: Sandbox, allowed: Mapping[str, ToolSpec]) -> Any:
    raw = args if isinstance(args, str) else json.dumps(args)
    return json.loads(await dispatch(name, raw, SandboxContext(sandbox), allowed))


# ---------------------------------------------------------------- the static map


def test_tool_map_is_static_and_agrees_with_the_toolsets() -> None:
    assert {
        tool: name for name, toolset in toolsets.TOOLSETS.items() for tool in toolset.tool_names
    } == TOOL_TO_TOOLSET_MAP
    assert len(TOOL_TO_TOOLSET_MAP) == 21
    assert list(TOOL_TO_TOOLSET_MAP) == sorted(TOOL_TO_TOOLSET_MAP)
    assert TOOL_TO_TOOLSET_MAP["web_search"] == "web"
    assert all(spec.schema["name"] == name for name, spec in ALL_TOOLS.items())


def test_every_tool_has_a_handler_and_an_unavailable_one_says_how_to_enable_it() -> None:
    assert all(spec.handler is not None for spec in ALL_TOOLS.values())
    for name in sorted(UNCONFIGURED):
        reason = ALL_TOOLS[name].available(ToolConfig()) or ""
        assert re.search(r"--\w+|[A-Z]+_API_KEY|pip install|artifacts_dir", reason), (name, reason)
        params = ALL_TOOLS[name].schema["parameters"]
        assert params["type"] == "object" and set(params.get("required", ())) <= set(params["properties"])


# ---------------------------------------------------------------- which tools are offered


def test_unavailable_tools_are_never_offered() -> None:
    resolved = resolve_tools(["web", "image_gen", "moa"])
    assert resolved.specs == () and resolved.definitions == [] and resolved.toolsets_used == []
    assert set(resolved.unavailable) == UNCONFIGURED
    assert all(resolved.unavailable.values())


def test_all_toolsets_offer_exactly_the_usable_tools() -> None:
    resolved = resolve_tools(None)
    assert [spec.name for spec in resolved.specs] == IMPLEMENTED
    assert [d["function"]["name"] for d in resolved.definitions] == IMPLEMENTED
    assert all(d["type"] == "function" for d in resolved.definitions)
    assert resolved.toolsets_used == ["vision", "terminal", "file"] + (["browser"] if BROWSER_HERE else [])
    assert "process" not in resolved.unavailable and "web_search" in resolved.unavailable
    assert set(resolved.allowed) == set(IMPLEMENTED)
    assert resolve_tools(["all"]) == resolved


def test_disabled_toolsets_and_order_of_toolsets_used() -> None:
    resolved = resolve_tools(["file", "web", "terminal"], ["terminal"])
    assert [spec.name for spec in resolved.specs] == ["patch", "read_file", "search_files", "write_file"]
    assert resolved.toolsets_used == ["file"]
    assert get_tool_definitions("terminal") == get_tool_definitions(["terminal"])  # a bare name
    assert resolve_tools([]).specs == ()


def test_unknown_toolsets_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="unknown toolset 'web_tools'"):
        resolve_tools(["terminal", "web_tools"])
    with pytest.raises(ConfigError, match="unknown toolset 'nope'") as raised:
        resolve_tools(None, ["nope"])
    assert str(raised.value).endswith("needs its --tools_module or --mcp_config again, also on --resume)")


def test_definitions_are_copies() -> None:
    get_tool_definitions(["file"])[0]["function"]["name"] = "changed"
    assert ALL_TOOLS["patch"].schema["name"] == "patch"


def test_unavailability_is_logged_once_per_tool(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(registry, "_reported", set())
    with caplog.at_level(logging.INFO, logger="agent.toolbox.registry"):
        resolve_tools(["web", "terminal"])
        resolve_tools(["web"])
    logged = sorted(r.getMessage().split()[1] for r in caplog.records)
    assert logged == ["web_extract", "web_search"]


def test_toolset_availability() -> None:
    availability = model_tools.toolset_availability()
    assert availability["terminal"] is None and availability["file"] is None
    assert availability["browser"] == browser.TOOLSET.tools[0].available(ToolConfig())


# ---------------------------------------------------------------- validation and dispatch

SCHEMA = {
    "name": "probe",
    "description": "echoes its arguments",
    "parameters": {
        "type": "object",
        "properties": {
            "text": {"type": "string"},
            "count": {"type": "integer"},
            "ratio": {"type": "number"},
            "mode": {"type": "string", "enum": ["a", "b"]},
            "tags": {"type": "array", "items": {"type": "string"}},
            "maybe": {"type": ["string", "null"]},
        },
        "required": ["text"],
        "additionalProperties": False,
    },
}


async def echo(args: Mapping[str, Any], sandbox: Sandbox) -> Any:
    return {"args": dict(args), "workdir": sandbox.workdir, "note": "é"}


async def raiser(args: Mapping[str, Any], sandbox: Sandbox) -> Any:
    raise ValueError("disk on fire")


async def as_text(args: Mapping[str, Any], sandbox: Sandbox) -> Any:
    return "already a string"


async def unserialisable(args: Mapping[str, Any], sandbox: Sandbox) -> Any:
    return {"a set": {1, 2}}


PROBES = {
    "probe": ToolSpec("probe", SCHEMA, on_sandbox(echo)),
    "boom": ToolSpec("boom", {**SCHEMA, "name": "boom"}, on_sandbox(raiser)),
    "text": ToolSpec("text", {"name": "text", "parameters": {"type": "object"}}, on_sandbox(as_text)),
    "odd": ToolSpec("odd", {"name": "odd"}, on_sandbox(unserialisable)),
    "gone": ToolSpec("gone", {"name": "gone"}, None, available=lambda _config: "no backend"),
}


async def test_valid_call_reaches_the_handler(local_sandbox: Sandbox) -> None:
    raw = await dispatch(
        "probe",
        '{"text": "hi", "count": 2, "ratio": 1, "tags": ["x"]}',
        SandboxContext(local_sandbox),
        PROBES,
    )
    assert '"é"' in raw  # ensure_ascii=False
    assert json.loads(raw) == {
        "args": {"text": "hi", "count": 2, "ratio": 1, "tags": ["x"]},
        "workdir": local_sandbox.workdir,
        "note": "é",
    }


async def test_unknown_tool_is_not_renamed(local_sandbox: Sandbox) -> None:
    assert (await call("prob", {"text": "x"}, local_sandbox, PROBES)) == {
        "error": "Unknown tool 'prob'. Available tools: boom, gone, odd, probe, text"
    }
    assert (await call("x", {}, local_sandbox, {})) == {"error": "Unknown tool 'x'. Available tools: none"}


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ('{"text": "x"', "not valid JSON: Expecting ',' delimiter at line 1 column 13"),
        ("[1]", "must be a JSON object, got array"),
        ('"text"', "must be a JSON object, got string"),
    ],
)
async def test_malformed_arguments(local_sandbox: Sandbox, raw: str, fragment: str) -> None:
    error = (await call("probe", raw, local_sandbox, PROBES))["error"]
    assert error.startswith("Arguments for 'probe'") and fragment in error


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ({}, "missing required field 'text'"),
        ({"text": 3}, "field 'text' must be string, got integer"),
        ({"text": "x", "count": "42"}, "field 'count' must be integer, got string"),
        ({"text": "x", "count": True}, "field 'count' must be integer, got boolean"),
        ({"text": "x", "count": 1.5}, "field 'count' must be integer, got number"),
        ({"text": "x", "mode": "c"}, 'field \'mode\' must be one of "a", "b", got "c"'),
        ({"text": "x", "tags": ["ok", 7]}, "field 'tags[1]' must be string, got integer"),
        ({"text": "x", "colour": "red"}, "unexpected field 'colour'"),
        ({"text": None}, "field 'text' must be string, got null"),  # required: null is not omission
    ],
)
async def test_schema_violations_name_the_field(
    local_sandbox: Sandbox, args: dict[str, Any], fragment: str
) -> None:
    error = (await call("probe", args, local_sandbox, PROBES))["error"]
    assert error.startswith("Invalid arguments for 'probe': ") and fragment in error


async def test_null_optional_fields_count_as_omitted(local_sandbox: Sandbox) -> None:
    out = await call("probe", {"text": "x", "count": None, "maybe": None}, local_sandbox, PROBES)
    assert out["args"] == {"text": "x"}


def test_all_problems_are_reported_together() -> None:
    problems = validate_arguments({"count": "1", "zzz": 0}, SCHEMA["parameters"])  # type: ignore[arg-type]
    assert len(problems) == 3


async def test_handler_exception_becomes_a_result_and_is_logged(
    local_sandbox: Sandbox, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="agent.toolbox.dispatch"):
        out = await call("boom", {"text": "x"}, local_sandbox, PROBES)
    assert out == {"error": "Tool 'boom' failed: ValueError: disk on fire"}
    assert caplog.records[-1].exc_info is not None


async def test_string_results_pass_through_and_unserialisable_ones_fail(local_sandbox: Sandbox) -> None:
    assert (
        await dispatch("text", "", SandboxContext(local_sandbox), PROBES) == "already a string"
    )  # "" means {}
    assert (await call("odd", "{}", local_sandbox, PROBES))["error"].startswith(
        "Tool 'odd' failed: TypeError:"
    )
    assert (await call("gone", "{}", local_sandbox, PROBES)) == {
        "error": "Tool 'gone' is not available: no backend"
    }


# ---------------------------------------------------------------- the real tools


async def test_real_file_and_terminal_tools_through_dispatch(local_sandbox: Sandbox) -> None:
    allowed = resolve_tools(["terminal", "file"]).allowed
    written = await call(
        "write_file", {"path": "notes/a.txt", "content": "alpha\nbeta\n"}, local_sandbox, allowed
    )
    assert written["bytes_written"] == 11
    read = await call("read_file", {"path": "notes/a.txt"}, local_sandbox, allowed)
    assert "alpha" in read["content"] and read["total_lines"] == 2
    ran = await call("terminal", {"command": "wc -l < notes/a.txt"}, local_sandbox, allowed)
    assert ran["output"].strip() == "2" and ran["exit_code"] == 0
    bad = await call("read_file", {"path": 5}, local_sandbox, allowed)
    assert bad["error"] == "Invalid arguments for 'read_file': field 'path' must be string, got integer"
    listed = await call("process", {"action": "list"}, local_sandbox, allowed)
    assert listed == {"processes": [], "error": None}


async def test_real_results_are_classified_by_tool_stats(local_sandbox: Sandbox) -> None:
    allowed = resolve_tools(["terminal", "file"]).allowed
    plan = [
        ("terminal", {"command": "exit 3"}),  # ran; a non-zero exit is not a tool failure
        ("read_file", {"path": "missing.txt"}),
        ("patch", {"mode": "replace", "path": "missing.txt", "old_string": "a", "new_string": "b"}),
    ]
    calls = [
        {"id": str(i), "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
        for i, (n, a) in enumerate(plan)
    ]
    messages: list[dict[str, Any]] = [{"role": "assistant", "content": "", "tool_calls": calls}]
    for i, (name, args) in enumerate(plan):
        content = await dispatch(name, json.dumps(args), SandboxContext(local_sandbox), allowed)
        messages.append({"role": "tool", "tool_call_id": str(i), "content": content})
    stats, _ = tool_stats(from_openai_messages(messages), TOOL_TO_TOOLSET_MAP)
    assert stats["terminal"] == {"count": 1, "success": 1, "failure": 0, "nonzero_exit": 1}  # apart
    assert stats["read_file"] == {"count": 1, "success": 0, "failure": 1}
    assert stats["patch"] == {"count": 1, "success": 0, "failure": 1}
    assert set(stats) == set(TOOL_TO_TOOLSET_MAP)


# ---------------------------------------------------------------- the facade and blocking tools

CASES = [
    ("probe", '{"text": "hi", "count": 2}'),
    ("prob", "{}"),
    ("probe", '{"text": "x"'),
    ("probe", '{"text": 3}'),
    ("boom", '{"text": "x"}'),
    ("text", ""),
    ("odd", "{}"),
    ("gone", "{}"),
]


@contextmanager
def sandbox_of_a_script(root: Path) -> Iterator[Sandbox]:
    """A local sandbox held by synchronous code, as a script written against the reference holds
    it: each call runs on an event loop of its own."""
    bash = shutil.which("bash")
    with SlotPool(str(root), "facade", "script") as pool:
        session = Session(SandboxSpec("facade", "script"), pool, bash, 0, passed_env())  # no memory limit
        sandbox = asyncio.run(session.__aenter__())
        try:
            yield sandbox
        finally:
            asyncio.run(session.__aexit__(None, None, None))


def test_the_synchronous_facade_answers_as_dispatch(local_sandbox_root: Path) -> None:
    with sandbox_of_a_script(local_sandbox_root) as sandbox:
        for name, raw in CASES:
            expected = asyncio.run(dispatch(name, raw, SandboxContext(sandbox), PROBES))
            assert handle_function_call(name, raw, sandbox, PROBES) == expected
        allowed = resolve_tools(["terminal"]).allowed
        ran = json.loads(handle_function_call("terminal", '{"command": "echo hi"}', sandbox, allowed))
        assert ran == {"output": "hi\n", "exit_code": 0, "error": None}


async def test_a_blocking_tool_runs_in_a_thread(local_sandbox: Sandbox) -> None:
    threads: dict[str, int] = {}

    def blocking(args: Mapping[str, Any]) -> Any:
        threads["blocking"] = threading.get_ident()
        raise ValueError("blocking and broken")

    schema = {"name": "t", "parameters": {"type": "object"}}
    allowed = {"blocking": ToolSpec("blocking", schema, blocking_tool(blocking))}
    result = await dispatch("blocking", "{}", SandboxContext(local_sandbox), allowed)
    assert result == '{"error": "Tool \'blocking\' failed: ValueError: blocking and broken"}'
    assert threads["blocking"] != threading.get_ident()


async def test_a_cancelled_call_of_a_blocking_tool_returns_only_once_the_tool_is_done(
    local_sandbox: Sandbox,
) -> None:
    """A thread cannot be stopped; the sandbox closes as the cancellation unwinds, so the
    cancellation waits for the tool rather than let it write into a slot handed on."""
    events: list[str] = []
    entered = threading.Event()

    def slow_writer(args: Mapping[str, Any]) -> Any:
        entered.set()
        time.sleep(0.3)
        events.append("tool done")
        return "written"

    schema = {"name": "w", "parameters": {"type": "object"}}
    allowed = {"w": ToolSpec("w", schema, blocking_tool(slow_writer))}
    call = asyncio.create_task(dispatch("w", "{}", SandboxContext(local_sandbox), allowed))
    await asyncio.to_thread(entered.wait, 5)
    call.cancel()
    await asyncio.sleep(0.05)
    call.cancel()  # cancelled twice (a timeout, then shutdown): still waits
    with pytest.raises(asyncio.CancelledError):
        await call
    events.append("cancellation seen")
    assert events == ["tool done", "cancellation seen"]
