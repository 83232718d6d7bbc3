"""The terminal tool family against a real local sandbox: result shapes, timeouts, truncation."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from agent.protocols import ExecResult, Sandbox, ToolConfig, ToolSpec
from agent.sandboxes.local.sandbox import LocalSandbox
from agent.toolbox.context import SandboxContext
from tools import terminal
from tools.terminal import DEFAULT_TIMEOUT, MAX_TIMEOUT, TOOLSET, make_terminal_handler, truncate_output

TOOLS = TOOLSET.tools


def _tool(name: str) -> ToolSpec:
    return next(spec for spec in TOOLS if spec.name == name)


pytestmark = pytest.mark.anyio


async def run(args: Mapping[str, Any], sandbox: Sandbox) -> Any:
    """The terminal tool as dispatch calls it."""
    handler = _tool("terminal").handler
    assert handler is not None
    return await handler(args, SandboxContext(sandbox))


def test_family_declares_terminal_and_process_both_offered() -> None:
    assert TOOLSET.name == "terminal"
    assert [spec.name for spec in TOOLS] == ["terminal", "process"]
    for spec in TOOLS:
        assert spec.handler is not None and spec.available(ToolConfig()) is None
    process = _tool("process").schema["parameters"]
    assert process["properties"]["action"]["enum"] == [
        "list", "poll", "log", "wait", "kill", "write", "submit", "close"
    ]  # fmt: skip
    assert set(process["properties"]) == {"action", "session_id", "data", "timeout", "offset", "limit"}
    assert _tool("terminal").schema["parameters"]["properties"]["background"]["type"] == "boolean"
    for spec in TOOLS:
        assert spec.schema["name"] == spec.name and spec.schema["description"]
        parameters = spec.schema["parameters"]
        assert parameters["type"] == "object"
        assert set(parameters["required"]) <= set(parameters["properties"])
    assert _tool("terminal").schema["parameters"]["required"] == ["command"]


async def test_success_result_shape(local_sandbox: LocalSandbox) -> None:
    assert await run({"command": "echo hello"}, local_sandbox) == {
        "output": "hello\n",
        "exit_code": 0,
        "error": None,
    }


async def test_nonzero_exit_is_not_an_error(local_sandbox: LocalSandbox) -> None:
    result = await run({"command": "echo nope >&2; exit 1"}, local_sandbox)
    assert result == {"output": "nope\n", "exit_code": 1, "error": None}


async def test_timeout_is_an_error_with_exit_code_124(local_sandbox: LocalSandbox) -> None:
    result = await run({"command": "echo before; sleep 30", "timeout": 1}, local_sandbox)
    assert result == {"output": "before\n", "exit_code": 124, "error": "Command timed out after 1 s"}


async def test_default_timeout_comes_from_the_handler_factory(local_sandbox: LocalSandbox) -> None:
    result = await make_terminal_handler(default_timeout=1)(
        {"command": "sleep 30"}, SandboxContext(local_sandbox)
    )
    assert result["error"] == "Command timed out after 1 s"


class _RecordingSandbox:
    """Records the timeout it was given (the cap cannot be observed without waiting 600 s)."""

    workdir = "/"

    def __init__(self) -> None:
        self.timeouts: list[float] = []

    async def exec(self, command: str, *, timeout: float, cwd: str | None = None) -> ExecResult:
        self.timeouts.append(timeout)
        return ExecResult("", 0)

    async def read_file(self, path: str) -> bytes:
        raise FileNotFoundError(path)

    async def write_file(self, path: str, data: bytes) -> None:
        raise FileNotFoundError(path)


@pytest.mark.parametrize(
    ("timeout", "used"), [(None, DEFAULT_TIMEOUT), (5, 5), ("7", 7), (10**6, MAX_TIMEOUT)]
)
async def test_timeout_argument_defaults_and_is_capped(timeout: Any, used: float) -> None:
    sandbox = _RecordingSandbox()
    args = {"command": "true"} if timeout is None else {"command": "true", "timeout": timeout}
    assert (await run(args, sandbox))["error"] is None
    assert sandbox.timeouts == [used]


@pytest.mark.parametrize(
    "args",
    [
        {},
        {"command": ""},
        {"command": 5},
        {"command": "true", "timeout": -1},
        {"command": "true", "timeout": "x"},
        {"command": "true", "workdir": 3},
    ],
)
async def test_bad_arguments_become_error_results(local_sandbox: LocalSandbox, args: dict[str, Any]) -> None:
    result = await run(args, local_sandbox)
    assert result["exit_code"] == -1 and result["output"] == ""
    assert isinstance(result["error"], str) and result["error"]


async def test_workdir(local_sandbox: LocalSandbox) -> None:
    await local_sandbox.write_file("sub/marker.txt", b"")
    assert (await run({"command": "ls", "workdir": "sub"}, local_sandbox))["output"] == "marker.txt\n"
    missing = await run({"command": "ls", "workdir": "nowhere"}, local_sandbox)
    assert missing["exit_code"] == -1 and "nowhere" in missing["error"]
    outside = await run({"command": "ls", "workdir": "/etc"}, local_sandbox)
    assert outside["exit_code"] == -1 and "outside the sandbox" in outside["error"]
    assert local_sandbox.root not in outside["error"]


async def test_ansi_escape_codes_are_stripped(local_sandbox: LocalSandbox) -> None:
    command = r"printf '\033[1;31mred\033[0m \033]0;title\007plain\033(B\n'"
    assert (await run({"command": command}, local_sandbox))["output"] == "red plain\n"


async def test_long_output_keeps_40_percent_head_and_60_percent_tail(local_sandbox: LocalSandbox) -> None:
    command = "head -c 60000 /dev/zero | tr '\\0' A; head -c 60000 /dev/zero | tr '\\0' B"
    output = (await run({"command": command}, local_sandbox))["output"]
    marker = "\n\n[OUTPUT TRUNCATED - 70000 chars omitted out of 120000 total]\n\n"
    assert output == "A" * 20_000 + marker + "B" * 30_000


def test_truncation_boundary() -> None:
    assert truncate_output("x" * terminal.MAX_OUTPUT_CHARS) == "x" * terminal.MAX_OUTPUT_CHARS
    assert "[OUTPUT TRUNCATED - 1 chars omitted out of 50001 total]" in truncate_output("x" * 50_001)
