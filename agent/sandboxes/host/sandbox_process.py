"""One run of a sandbox launcher (bwrap) on the host: fed stdin, its stdout and stderr read
separately into bounded buffers, killed with its whole process group at the deadline.

The launcher's environment is reduced to PATH, so secrets never even reach it. When `user`
is given (the runner is root), the launcher runs under that uid/gid with no supplementary
groups.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from contextlib import suppress
from dataclasses import dataclass

from agent.sandboxes.host.output_buffer import OutputBuffer

KILL_GRACE = 2.0  # seconds to collect output after a kill
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
FAILURE_BYTES = 2048  # of each stream, in an operator's line: its end, where errors are


@dataclass(frozen=True)
class ProcessOutcome:
    stdout: bytes
    stderr: bytes
    exit_code: int  # 128+N when killed by signal N
    timed_out: bool

    def failure(self) -> str:
        """What a failed process printed and how it ended, for an operator's line."""
        said = b" ".join(part.strip()[-FAILURE_BYTES:] for part in (self.stderr, self.stdout) if part.strip())
        how = "timed out" if self.timed_out else f"exit {self.exit_code}"
        return f"{said.decode(errors='replace')} ({how})" if said else f"({how}, nothing printed)"


class _Pipes:
    """Feeds stdin and drains stdout/stderr of one process with poll(2)."""

    def __init__(self, proc: subprocess.Popen[bytes], stdin: bytes, limit: int) -> None:
        assert proc.stdout is not None and proc.stderr is not None
        self.stdout = OutputBuffer(limit)
        self.stderr = OutputBuffer(limit)
        self._sinks = {proc.stdout.fileno(): self.stdout, proc.stderr.fileno(): self.stderr}
        self._stdin = proc.stdin
        self._pending = memoryview(stdin)
        self._poller = select.poll()
        for fd in self._sinks:
            self._poller.register(fd, select.POLLIN)
        if self._stdin is not None:
            os.set_blocking(self._stdin.fileno(), False)
            self._poller.register(self._stdin.fileno(), select.POLLOUT)

    def pump(self, deadline: float) -> bool:
        """Moves data until both output pipes reach EOF (True) or the deadline passes (False)."""
        while self._sinks:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            for fd, _event in self._poller.poll(remaining * 1000):
                if self._stdin is not None and fd == self._stdin.fileno():
                    self._feed()
                    continue
                chunk = os.read(fd, 65536)
                if chunk:
                    self._sinks[fd].append(chunk)
                else:
                    self._poller.unregister(fd)
                    del self._sinks[fd]
        return True

    def _feed(self) -> None:
        assert self._stdin is not None
        try:
            written = os.write(self._stdin.fileno(), self._pending[: 1 << 16])
            self._pending = self._pending[written:]
        except BlockingIOError:
            return
        except BrokenPipeError:  # the process stopped reading: the rest is not wanted
            self._pending = self._pending[:0]
        if not self._pending:
            self._poller.unregister(self._stdin.fileno())
            with suppress(BrokenPipeError):
                self._stdin.close()
            self._stdin = None


def run_process(
    argv: list[str],
    *,
    timeout: float,
    limit: int,
    stdin: bytes = b"",
    user: int | None = None,
    running: set[int] | None = None,
) -> ProcessOutcome:
    """Run argv to its end or its deadline. While it runs its process group id is in `running`,
    for `kill_running` (from another thread) to kill."""
    running = set() if running is None else running
    proc = _spawn(argv, stdin, user)
    pipes = _Pipes(proc, stdin, limit)
    running.add(proc.pid)
    try:
        finished = pipes.pump(time.monotonic() + timeout)
        if not finished:
            _kill_group(proc.pid)
            pipes.pump(time.monotonic() + KILL_GRACE)
        running.discard(proc.pid)  # before the wait: a reaped pid may be reused
        code = proc.wait()
    finally:
        running.discard(proc.pid)
        if proc.poll() is None:  # interrupted (KeyboardInterrupt): leave nothing running
            _kill_group(proc.pid)
            proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                with suppress(BrokenPipeError):  # stdin with unread data
                    stream.close()
    exit_code = 128 - code if code < 0 else code
    return ProcessOutcome(pipes.stdout.getvalue(), pipes.stderr.getvalue(), exit_code, not finished)


def _spawn(argv: list[str], stdin: bytes, user: int | None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        argv,
        stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={"PATH": os.environ.get("PATH") or DEFAULT_PATH},
        start_new_session=True,  # its own process group: the timeout kills all of it
        user=user,
        group=user,
        extra_groups=[] if user is not None else None,
    )


def kill_running(running: set[int]) -> None:
    """Kill the process groups of the `run_process` calls running now (they then return soon)."""
    for pgid in list(running):
        _kill_group(pgid)


def _kill_group(pgid: int) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
