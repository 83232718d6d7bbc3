"""The default backend, `auto`: the strongest one usable here. bwrap when it is installed and a
real sandbox opens, takes a file and runs a command that reads it back; local otherwise. Docker
is never chosen implicitly: it needs images and a daemon the operator asked for.

Decided once per process (the CLI edge resolves `auto` into the concrete backend that
run_config.json records) and said once in the log, with the reason, when a run first uses it
(agent.sandboxes: so that an invalid command line stays one line).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import secrets
from collections.abc import Coroutine
from typing import Any, TypeVar

from agent.errors import AgentError
from agent.protocols import ExecResult, SandboxBackend, SandboxOptions, SandboxSpec

AUTO = "auto"
PROBE_TIMEOUT = 30.0  # seconds for the probe's command (a loaded machine starts bwrap slowly)
T = TypeVar("T")


def probe(chosen: SandboxBackend, options: SandboxOptions) -> str | None:
    """Why a real sandbox of `chosen` does not work here (None when it does): one is opened,
    a file written in it, a command run that reads the file back, and the sandbox closed."""

    async def attempt() -> ExecResult:
        spec = SandboxSpec("backend-probe", secrets.token_hex(6))
        async with chosen.open(spec, options) as sandbox:
            await sandbox.write_file("probe.txt", b"ok\n")
            return await sandbox.exec("cat probe.txt", timeout=PROBE_TIMEOUT)

    try:
        result = _run(attempt())
    except (AgentError, OSError, TimeoutError) as exc:
        return f"a probe sandbox failed: {type(exc).__name__}: {exc}{_hint(str(exc))}"
    if result.exit_code != 0 or result.output.strip() != "ok":
        return f"a probe command failed (exit {result.exit_code}): {result.output.strip()[:200]}"
    return None


def _hint(failure: str) -> str:
    """How to fix the usual cause: a root runner's bwrap sandboxes run under a uid of their own,
    which cannot enter a private TMPDIR (pytest's, a 0700 home)."""
    if os.geteuid() == 0 and "Permission denied" in failure:
        return " (sandboxes run under their own uid: every directory above TMPDIR must be o+x)"
    return ""


def _run(work: Coroutine[Any, Any, T]) -> T:
    """Run `work` to its end from synchronous code, also when this thread runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(work)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, work).result()
