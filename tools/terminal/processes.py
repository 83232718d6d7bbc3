"""A conversation's background processes (`terminal(background=true)`): the table the
`process` tool acts on, kept as the conversation's resource "processes" and closed with it
(its processes killed, before the sandbox is closed, which kills everything again).

Each process is one long `Sandbox.exec` of a wrapper script (`process_scripts`) that lasts as
long as the command; its output, stdin and orders go through files and FIFOs in a session
directory, read and written by short execs. Under a blocking backend (bwrap, docker) a long
exec holds a thread for its lifetime, so those come from the table's own threads rather than
the event loop's small shared pool, which every other sandbox call of the worker needs.
"""

from __future__ import annotations

import asyncio
import functools
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from dataclasses import dataclass, field

from agent.errors import AgentError
from agent.protocols import ExecResult, Sandbox, ToolContext
from agent.sandboxes.blocking import ThreadedSandbox
from tools.terminal import process_scripts as scripts
from tools.terminal.output import HEAD_SHARE, MAX_OUTPUT_CHARS, omission_marker, shown, strip_ansi
from tools.terminal.schemas import LIFETIME, MAX_RUNNING

KILL_GRACE = 3.0  # seconds between SIGTERM and SIGKILL
INLINE_BYTES = 16 * 1024  # stdin data up to this size travels inside the script
BACKSTOP = 60.0  # seconds after LIFETIME when the wrapper's exec times out
HEAD_BYTES = int(MAX_OUTPUT_CHARS * HEAD_SHARE)
TAIL_BYTES = MAX_OUTPUT_CHARS - HEAD_BYTES


class ProcessError(AgentError):
    """A background process could not be started or reached: its message is for the model."""


@dataclass
class BackgroundProcess:
    session_id: str
    command: str
    directory: str  # its session directory, as the sandbox sees it
    run: asyncio.Future[ExecResult]  # the wrapper's exec: done when the command has ended
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None
    read_offset: int = 0  # bytes of its log that poll and wait have returned
    stdin_open: bool = True
    killed: bool = False
    expired: bool = False  # killed for running longer than LIFETIME
    expiry: asyncio.Task[None] | None = None  # the kill at LIFETIME, while it is pending or running
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # one read of new output at a time

    def on_end(self, run: asyncio.Future[ExecResult]) -> None:
        self.ended = time.monotonic()
        if not run.cancelled():
            run.exception()  # read by describe(); marked retrieved so asyncio does not log it

    @property
    def status(self) -> str:
        if not self.run.done():
            return "running"
        return "killed" if self.killed else "exited"

    @property
    def exit_code(self) -> int | None:
        if not self.run.done() or self.run.cancelled() or self.run.exception() is not None:
            return None
        return self.run.result().exit_code

    def describe(self) -> dict[str, object]:
        error = None
        if self.run.done() and not self.run.cancelled() and self.run.exception() is not None:
            error = f"the process could not run: {self.run.exception()}"
        described: dict[str, object] = {
            "session_id": self.session_id,
            "command": self.command,
            "status": self.status,
            "exit_code": self.exit_code,
            "seconds": round((self.ended or time.monotonic()) - self.started, 1),
            "stdin_open": self.stdin_open and self.status == "running",
            "error": error,
        }
        if self.expired:
            described["note"] = f"killed after {LIFETIME} s, the limit for a background process"
        return described


class ProcessTable:
    """The background processes of one conversation's sandbox."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._sandbox = sandbox
        self._processes: dict[str, BackgroundProcess] = {}
        self._threads: ThreadPoolExecutor | None = None

    def processes(self) -> list[BackgroundProcess]:
        return list(self._processes.values())

    def get(self, session_id: str) -> BackgroundProcess:
        try:
            return self._processes[session_id]
        except KeyError:
            known = ", ".join(self._processes) or "none (start one with terminal(background=true))"
            raise ProcessError(f"no background process {session_id!r}; known: {known}") from None

    async def start(self, command: str, workdir: str | None) -> BackgroundProcess:
        running = sum(p.status == "running" for p in self._processes.values())
        if running >= MAX_RUNNING:
            raise ProcessError(f"{running} background processes are running (the limit): kill one first")
        sid = f"proc_{uuid.uuid4().hex[:12]}"
        made = await self._sandbox.exec(scripts.setup(sid), timeout=scripts.SETUP_TIMEOUT, cwd=workdir)
        if made.exit_code != 0 or made.timed_out:
            raise ProcessError(f"could not start the process: {_detail(made)}")
        directory = made.output.strip().splitlines()[-1]
        run = asyncio.ensure_future(self._hold(scripts.wrapper(directory, command), workdir))
        process = BackgroundProcess(sid, command, directory, run)
        run.add_done_callback(process.on_end)
        process.expiry = asyncio.ensure_future(self._expire(process))
        self._processes[sid] = process
        return process

    async def _expire(self, process: BackgroundProcess) -> None:
        """Kill the process once it has run LIFETIME seconds (the exec's own timeout, a little
        later, is the backstop: it may not reach a command in a process group of its own)."""
        if not await self.wait(process, LIFETIME):
            process.expired = True
            with suppress(ProcessError, OSError, AgentError):
                await self.kill(process)

    def _hold(self, script: str, workdir: str | None) -> Awaitable[ExecResult]:
        sandbox = self._sandbox
        if isinstance(sandbox, ThreadedSandbox):
            if self._threads is None:
                self._threads = ThreadPoolExecutor(MAX_RUNNING, thread_name_prefix="background-process")
            call = functools.partial(sandbox.blocking.exec, script, timeout=LIFETIME + BACKSTOP, cwd=workdir)
            return asyncio.get_running_loop().run_in_executor(self._threads, call)
        return sandbox.exec(script, timeout=LIFETIME + BACKSTOP, cwd=workdir)

    async def new_output(self, process: BackgroundProcess) -> str:
        """What the process wrote since the last call (capped like terminal's output)."""
        async with process.lock:
            script = scripts.read(process.directory, process.read_offset, HEAD_BYTES, TAIL_BYTES)
            result = await self._exec(script, scripts.READ_TIMEOUT)
            size, text = _counted(result)
            new = size - process.read_offset
            process.read_offset = size
        head, gap, tail = text.partition(scripts.GAP)
        if gap:  # cut to size already, by bytes
            marker = omission_marker(new - HEAD_BYTES - TAIL_BYTES, new, "bytes")
            return strip_ansi(head) + marker + strip_ansi(tail)
        return shown(text)

    async def log(self, process: BackgroundProcess, offset: int | None, limit: int) -> tuple[int, str]:
        """(lines in the log, the lines asked for)."""
        result = await self._exec(scripts.lines(process.directory, offset, limit), scripts.READ_TIMEOUT)
        total, text = _counted(result)
        return total, shown(text)

    async def wait(self, process: BackgroundProcess, timeout: float) -> bool:
        """Whether the process ended within `timeout` seconds."""
        await asyncio.wait({process.run}, timeout=timeout)
        return process.run.done()

    async def kill(self, process: BackgroundProcess) -> None:
        """SIGTERM its process group, SIGKILL it after KILL_GRACE seconds."""
        for order in ("term", "kill"):
            if process.run.done():
                return
            process.killed = True
            await self._order(process, order)
            if await self.wait(process, KILL_GRACE):
                return

    async def write(self, process: BackgroundProcess, data: bytes) -> None:
        if process.run.done():
            raise ProcessError(f"{process.session_id} has {process.status}: its stdin is gone")
        if not process.stdin_open:
            raise ProcessError(f"the stdin of {process.session_id} was closed")
        fed = await self._sandbox.exec(await self._feeder(process, data), timeout=scripts.ORDER_TIMEOUT)
        if fed.timed_out:
            raise ProcessError(f"{process.session_id} is not reading its stdin (the pipe is full)")
        if fed.exit_code != 0:
            raise ProcessError(f"could not write to {process.session_id}: {_detail(fed)}")

    async def _feeder(self, process: BackgroundProcess, data: bytes) -> str:
        """The script that feeds `data` to the process: inline when small text (one exec),
        else from a file written into its session directory first."""
        if len(data) <= INLINE_BYTES and b"\0" not in data:
            with suppress(UnicodeDecodeError):
                return scripts.feed_text(process.directory, data.decode("utf-8"))
        name = f"{process.directory}/stdin-{uuid.uuid4().hex[:8]}"
        await self._sandbox.write_file(name, data)
        return scripts.feed(process.directory, name)

    async def close_stdin(self, process: BackgroundProcess) -> None:
        if process.stdin_open and not process.run.done():
            await self._order(process, "close")
        process.stdin_open = False

    async def _order(self, process: BackgroundProcess, order: str) -> None:
        script = scripts.order(process.directory, order)
        sent = await self._sandbox.exec(script, timeout=scripts.ORDER_TIMEOUT)
        if sent.exit_code != 0 and not process.run.done():
            raise ProcessError(f"could not reach {process.session_id}: {_detail(sent)}")

    async def _exec(self, script: str, timeout: float) -> str:
        result = await self._sandbox.exec(script, timeout=timeout)
        if result.exit_code != 0 or result.timed_out:
            raise ProcessError(f"could not read the output: {_detail(result)}")
        return result.output

    async def aclose(self) -> None:
        """Kill what still runs and wait for it; what does not end is left to the sandbox's
        close, which kills every process it has."""
        for process in self._processes.values():
            if process.expiry is not None:
                process.expiry.cancel()
        running = [p for p in self._processes.values() if not p.run.done()]
        for process in running:
            with suppress(ProcessError, OSError, AgentError):
                await self._order(process, "kill")
        if running:
            await asyncio.wait([p.run for p in running], timeout=KILL_GRACE)
        for process in running:
            process.run.cancel()  # a local exec kills its group; a thread's exec ends with the sandbox
        if running:
            await asyncio.wait([p.run for p in running], timeout=KILL_GRACE)
        if self._threads is not None:
            self._threads.shutdown(wait=False, cancel_futures=True)


def _counted(output: str) -> tuple[int, str]:
    """(the number on the first line, the rest) of a read script's output."""
    first, _, rest = output.partition("\n")
    try:
        return int(first.strip()), rest
    except ValueError:
        raise ProcessError(f"could not read the output: {first.strip()[:200]!r}") from None


def _detail(result: ExecResult) -> str:
    return result.output.strip() or ("timed out" if result.timed_out else f"exit code {result.exit_code}")


def opener(sandbox: Sandbox) -> Callable[[], AbstractAsyncContextManager[ProcessTable]]:
    """The context.resource opener of a conversation's table over `sandbox`."""

    @asynccontextmanager
    async def opened() -> AsyncIterator[ProcessTable]:
        table = ProcessTable(sandbox)
        try:
            yield table
        finally:
            await table.aclose()

    return opened


async def processes_of(context: ToolContext) -> ProcessTable:
    """The conversation's table (made with its sandbox, so it closes before the sandbox)."""
    sandbox = await context.sandbox()
    return await context.resource("processes", opener(sandbox))
