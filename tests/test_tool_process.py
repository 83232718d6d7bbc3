"""Background processes: terminal(background=true) and the `process` tool on real sandboxes.

One scenario (start, poll, write, submit, close, wait, log, list, wait with a timeout, kill)
runs on the local, bwrap and docker backends alike; the local backend also shows what only
its host view can: a kill reaches the whole process group, the end of the conversation kills
what still runs, and the limits.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agent.protocols import Sandbox, SandboxSpec
from agent.sandboxes import SandboxOptions
from agent.sandboxes.bwrap.sandbox import open_sandbox as open_bwrap
from agent.sandboxes.docker.sandbox import open_sandbox as open_docker
from agent.sandboxes.local.sandbox import LocalSandbox
from agent.toolbox.context import SandboxContext
from agent.toolbox.registry import resolve_tools
from tests.fixtures.containers import Engine
from tools.terminal import TOOLSET, processes
from tools.terminal.processes import ProcessTable
from tools.terminal.schemas import DEFAULT_WAIT, LIFETIME, MAX_RUNNING, MAX_STDIN_BYTES, MAX_TIMEOUT

pytestmark = pytest.mark.anyio
HANDLERS = {spec.name: spec.handler for spec in TOOLSET.tools}
ECHO_LINES = "echo ready; while read line; do echo got:$line; done; echo eof; exit 3"
IDLE = {"status": "running", "output": "", "exit_code": None, "error": None}
FIELDS = {"session_id", "command", "status", "exit_code", "stdin_open", "error"}


async def terminal(context: SandboxContext, **args: Any) -> Any:
    handler = HANDLERS["terminal"]
    assert handler is not None
    return await handler(args, context)


async def start(context: SandboxContext, command: str) -> str:
    """The session id of `command` started in the background."""
    started = await terminal(context, command=command, background=True)
    assert started["error"] is None, started
    return str(started["session_id"])


async def process(context: SandboxContext, action: str, session_id: str | None = None, **args: Any) -> Any:
    handler = HANDLERS["process"]
    assert handler is not None
    if session_id is not None:
        args["session_id"] = session_id
    return await handler({"action": action, **args}, context)


async def polled_until(context: SandboxContext, session_id: str, expected: str, within: float = 20) -> str:
    """The output of successive polls, joined, once it holds `expected` (else what came)."""
    seen = ""
    deadline = time.monotonic() + within
    while expected not in seen and time.monotonic() < deadline:
        result = await process(context, "poll", session_id)
        assert result["error"] is None, result
        seen += result["output"]
        await asyncio.sleep(0.05)
    return seen


async def exercise_processes(sandbox: Sandbox) -> None:
    """The whole lifecycle of background processes, as every backend must run it."""
    context = SandboxContext(sandbox)
    try:
        started = await terminal(context, command=ECHO_LINES, background=True)
        sid = started["session_id"]
        assert started == {
            "session_id": sid,
            "status": "running",
            "output": "",
            "exit_code": None,
            "error": None,
        }
        assert await polled_until(context, sid, "ready\n") == "ready\n"
        files = await terminal(context, command=f'ls "${{TMPDIR:-/tmp}}/.agent-processes/{sid}"')
        assert files["output"].split() == ["ctl", "in", "log", "pid"]
        assert (await process(context, "submit", sid, data="hello"))["bytes_written"] == 6
        await process(context, "write", sid, data="wor")
        await process(context, "write", sid, data="ld\n")
        assert await polled_until(context, sid, "got:world\n") == "got:hello\ngot:world\n"
        closed = await process(context, "close", sid)
        assert closed["stdin_open"] is False and closed["error"] is None
        waited = await process(context, "wait", sid, timeout=30)
        assert (waited["status"], waited["exit_code"], waited["output"], waited["timed_out"]) == (
            "exited", 3, "eof\n", False
        )  # fmt: skip
        whole = await process(context, "log", sid)
        assert (whole["total_lines"], whole["offset"], whole["output"]) == (
            4,
            0,
            "ready\ngot:hello\ngot:world\neof\n",
        )
        page = await process(context, "log", sid, offset=1, limit=2)
        assert (page["offset"], page["output"]) == (1, "got:hello\ngot:world\n")
        assert (await process(context, "write", sid, data="late"))["error"].endswith("its stdin is gone")

        slow = (await terminal(context, command="echo started; exec sleep 300", background=True))[
            "session_id"
        ]
        assert await polled_until(context, slow, "started\n") == "started\n"
        partial = await process(context, "wait", slow, timeout=1)
        assert (partial["status"], partial["timed_out"], partial["exit_code"]) == ("running", True, None)
        killed = await process(context, "kill", slow)
        assert (killed["status"], killed["exit_code"]) == ("killed", 128 + 15)
        listed = await process(context, "list")
        assert [(p["session_id"], p["status"]) for p in listed["processes"]] == [
            (sid, "exited"),
            (slow, "killed"),
        ]
        assert set(listed["processes"][0]) == {*FIELDS, "seconds"}  # no pid: meaningless under bwrap
    finally:
        await context.aclose()


# ---------------------------------------------------------------- on every backend


async def test_background_processes_on_the_local_backend(local_sandbox: LocalSandbox) -> None:
    await exercise_processes(local_sandbox)


@pytest.mark.bwrap
async def test_background_processes_on_the_bwrap_backend(bwrap_options: SandboxOptions) -> None:
    async with open_bwrap(SandboxSpec(run_name="proc-run", prompt_key="proc-0"), bwrap_options) as sandbox:
        await exercise_processes(sandbox)


@pytest.mark.docker
async def test_background_processes_on_the_docker_backend(
    container_engine: Engine, docker_options: SandboxOptions, unique_run_name: str
) -> None:
    spec = SandboxSpec(run_name=unique_run_name, prompt_key="proc-0")
    async with open_docker(spec, docker_options) as sandbox:
        await exercise_processes(sandbox)


# ---------------------------------------------------------------- what the host can see (local)


def host_processes(*argvs: str) -> list[int]:
    """Host pids running exactly one of `argvs` (zombies, whose line is empty, excluded)."""
    wanted = {argv.encode().replace(b" ", b"\0") + b"\0" for argv in argvs}
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError):
                if Path(f"/proc/{name}/cmdline").read_bytes() in wanted:
                    found.append(int(name))
    return found


async def running(*argvs: str) -> bool:
    """Whether a process runs each of `argvs`, within 5 s."""
    for _ in range(100):
        if len(host_processes(*argvs)) == len(argvs):
            return True
        await asyncio.sleep(0.05)
    return False


async def gone(*argvs: str, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while host_processes(*argvs) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return not host_processes(*argvs)


@pytest.fixture
async def context(local_sandbox: LocalSandbox) -> AsyncIterator[SandboxContext]:
    made = SandboxContext(local_sandbox)
    try:
        yield made
    finally:
        await made.aclose()


async def test_kill_reaches_everything_the_command_started(context: SandboxContext) -> None:
    sid = (await terminal(context, command="sleep 1001 & sleep 1002 & wait", background=True))["session_id"]
    assert await running("sleep 1001", "sleep 1002")
    assert (await process(context, "kill", sid))["status"] == "killed"
    assert await gone("sleep 1001", "sleep 1002")


async def test_a_process_ignoring_sigterm_is_killed_after_the_grace(context: SandboxContext) -> None:
    sid = (await terminal(context, command="trap '' TERM; echo armed; sleep 1003", background=True))[
        "session_id"
    ]
    assert await polled_until(context, sid, "armed\n") == "armed\n"  # the trap is set
    began = time.monotonic()
    killed = await process(context, "kill", sid)
    assert (killed["status"], killed["exit_code"]) == ("killed", 128 + 9)
    assert 2.5 < time.monotonic() - began < 10
    assert await gone("sleep 1003")


async def test_the_end_of_the_conversation_kills_what_still_runs(local_sandbox: LocalSandbox) -> None:
    context = SandboxContext(local_sandbox)
    await terminal(context, command="exec sleep 1004", background=True)
    await terminal(context, command="sleep 1005 </dev/null", background=True)
    assert await running("sleep 1004", "sleep 1005")
    await context.aclose()
    assert await gone("sleep 1004", "sleep 1005")


async def test_long_output_is_cut_in_the_middle_and_the_offset_moves_on(context: SandboxContext) -> None:
    command = "head -c 300000 /dev/zero | tr '\\0' x; echo; echo last-line"
    sid = (await terminal(context, command=command, background=True))["session_id"]
    waited = await process(context, "wait", sid, timeout=30)
    output = waited["output"]
    assert output.startswith("x" * 1000) and output.endswith("x\nlast-line\n")
    assert "[OUTPUT TRUNCATED - 250011 bytes omitted out of 300011 total]" in output
    assert len(output) < 50_100
    assert (await process(context, "poll", sid))["output"] == ""  # everything was returned once


async def test_ansi_escapes_are_stripped_from_output(context: SandboxContext) -> None:
    sid = (await terminal(context, command="printf '\\033[31mred\\033[0m\\n'", background=True))["session_id"]
    assert (await process(context, "wait", sid, timeout=30))["output"] == "red\n"


async def test_wrong_calls_are_results_the_model_reads(context: SandboxContext) -> None:
    assert await process(context, "list") == {"processes": [], "error": None}
    assert (await process(context, "poll"))["error"] == "'session_id' is required for action 'poll'"
    unknown = await process(context, "poll", "proc_nope")
    assert unknown["error"].startswith("no background process 'proc_nope'; known: none")
    bad_dir = await terminal(context, command="true", background=True, workdir="no/such/dir")
    assert bad_dir["error"].startswith("Invalid workdir 'no/such/dir'")
    # it outlives its stdin by a few seconds: a write after `close` meets a closed stdin, not an
    # exited process (a bare `cat` exits at once on end of input, and then it says so instead)
    sid = (await terminal(context, command="cat; sleep 3", background=True))["session_id"]
    assert (await process(context, "write", sid))["error"] == "'data' (a string) is required for 'write'"
    assert (await process(context, "log", sid, limit=0))["error"].startswith("'limit' must be a positive")
    too_big = await process(context, "write", sid, data="x" * (MAX_STDIN_BYTES + 1))
    assert too_big["error"] == f"'data' is over {MAX_STDIN_BYTES} bytes"
    await process(context, "close", sid)
    assert (await process(context, "submit", sid, data="x"))["error"].endswith("was closed")
    assert (await process(context, "wait", sid, timeout=30))["exit_code"] == 0  # cat saw end of input
    assert (await process(context, "submit", sid, data="x"))["error"].endswith("its stdin is gone")


async def test_at_most_max_running_processes_at_once(context: SandboxContext) -> None:
    sids = [
        (await terminal(context, command="exec sleep 1006", background=True))["session_id"]
        for _ in range(MAX_RUNNING)
    ]
    refused = await terminal(context, command="true", background=True)
    assert refused["error"] == f"{MAX_RUNNING} background processes are running (the limit): kill one first"
    await process(context, "kill", sids[0])
    assert (await terminal(context, command="true", background=True))["error"] is None


async def test_the_process_tool_is_offered_with_terminal_and_its_schema_is_checked() -> None:
    offered = resolve_tools(["terminal"])
    assert [spec.name for spec in offered.specs] == ["process", "terminal"]
    assert offered.unavailable == {}


async def test_a_process_is_killed_at_the_lifetime_limit(
    context: SandboxContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(processes, "LIFETIME", 1)
    sid = await start(context, "echo up; exec sleep 1007")
    waited = await process(context, "wait", sid, timeout=20)
    assert (waited["status"], waited["exit_code"], waited["output"], waited["timed_out"]) == (
        "killed", 128 + 15, "up\n", False
    )  # fmt: skip
    assert waited["note"] == "killed after 1 s, the limit for a background process"
    assert 0.9 < waited["seconds"] < 10
    assert await gone("sleep 1007")


async def test_wait_defaults_to_a_minute_and_is_capped_at_ten(
    context: SandboxContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[float] = []

    original = ProcessTable.wait

    async def recording_wait(self: ProcessTable, process: Any, timeout: float) -> bool:
        if timeout == LIFETIME:  # the table's own wait for the lifetime limit
            return await original(self, process, timeout)
        asked.append(timeout)
        return False

    monkeypatch.setattr(ProcessTable, "wait", recording_wait)  # waiting 600 s would prove it too
    sid = await start(context, "exec sleep 1008")
    await process(context, "wait", sid)
    await process(context, "wait", sid, timeout=10_000)
    assert asked == [DEFAULT_WAIT, MAX_TIMEOUT] == [60, 600]


async def test_large_and_binary_stdin_arrives_whole(context: SandboxContext) -> None:
    sid = await start(context, "wc -c")
    big = "y" * (processes.INLINE_BYTES * 4)  # written as a file, then fed
    assert (await process(context, "write", sid, data=big))["bytes_written"] == len(big)
    binary = await process(context, "write", sid, data="\0\u00e9")  # NUL: via a file too
    assert binary["bytes_written"] == 3
    await process(context, "close", sid)
    assert (await process(context, "wait", sid, timeout=30))["output"].strip() == str(len(big) + 3)
