"""The `command` check: a shell command run in the attempt's own sandbox after its last turn.

It runs where the agent worked (its files, its installed packages), in the sandbox's working
directory, with the sandbox's scrubbed environment (no host secret reaches it), under its own
timeout — never the model's: nothing it prints goes back to the model. Exit 0 passes; when the
last non-blank line of its output is a number in [0, 1], that number is the score (a partial
credit: "7 of 10 tests" → 0.7), else the score is 1.0 on a pass and 0.0 otherwise. A command
that runs out of time fails (details say `timed_out`). The sandbox's `exec` gives stdout and
stderr interleaved; the details keep the last MAX_OUTPUT characters with the exit code.

A sandbox that cannot be had (the run has none, or opening it failed) is no fail of the agent:
the check's error is `sandbox_error`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from agent.config.verify_config import CommandCheck
from agent.errors import SandboxError
from agent.protocols import ExecResult, Sandbox
from agent.protocols.verification import CheckError, CheckResult

MAX_OUTPUT = 4096  # bytes (UTF-8) of the command's output kept in the entry: its end
# The sandbox kills a command at its timeout; this margin only bounds a sandbox call that
# itself hangs (a container engine that stopped answering).
_GRACE_S = 30.0

SandboxOpener = Callable[[], Awaitable[Sandbox]]


def score_line(output: str) -> float | None:
    """The score the output's last non-blank line states (a number in [0, 1]), or None."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    if not lines:
        return None
    try:
        value = float(lines[-1])
    except ValueError:
        return None
    return value if 0.0 <= value <= 1.0 else None


def tail(output: str) -> str:
    """The last MAX_OUTPUT bytes of `output` as UTF-8, a character cut in two dropped (undecodable
    bytes came as U+FFFD, three bytes each: cut by characters, the tail could be 12 KB)."""
    return output[-MAX_OUTPUT:].encode("utf-8", "replace")[-MAX_OUTPUT:].decode("utf-8", "ignore")


def command_result(check: CommandCheck, result: ExecResult, duration_s: float) -> CheckResult:
    """The check's record for the command's `result`."""
    passed = result.exit_code == 0 and not result.timed_out
    stated = None if result.timed_out else score_line(result.output)
    score = stated if stated is not None else (1.0 if passed else 0.0)
    details = {
        "command": check.run,
        "exit_code": result.exit_code,
        "timed_out": result.timed_out,
        "output": tail(result.output),
    }
    if result.timed_out:
        details["reason"] = f"timeout: the command ran past {check.timeout_s:g}s"
    return CheckResult("command", passed, score, details, duration_s=duration_s)


async def check_command(check: CommandCheck, open_sandbox: SandboxOpener | None) -> CheckResult:
    """Run `check` in the sandbox `open_sandbox` gives (the attempt's: opened now if the agent
    never needed one); its record."""
    started = time.monotonic()

    def unusable(why: str) -> CheckResult:
        details = {"command": check.run}
        error = f"{CheckError.SANDBOX_ERROR}: {why}"
        return CheckResult("command", None, None, details, duration_s=time.monotonic() - started, error=error)

    if open_sandbox is None:
        return unusable("the run has no sandbox to run the command in")
    try:
        sandbox = await open_sandbox()
    except (SandboxError, OSError) as exc:
        return unusable(f"the attempt's sandbox could not be opened: {exc}")
    try:
        async with asyncio.timeout(check.timeout_s + _GRACE_S):
            result = await sandbox.exec(check.run, timeout=check.timeout_s)
    except TimeoutError:
        result = ExecResult("", -1, timed_out=True)
    except (SandboxError, OSError, ValueError) as exc:  # ValueError: a command no process takes
        return unusable(f"the command could not run in the sandbox: {exc}")
    return command_result(check, result, time.monotonic() - started)
