"""Host processes a sandbox starts: running a command in its own process group with a
timeout and bounded output, and killing every process a sandbox left behind (the local
backend's process control; the processes are recognised by a cwd or HOME inside the sandbox).
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Collection, Sequence
from contextlib import suppress

from agent.errors import SandboxError
from agent.protocols import ExecResult
from agent.sandboxes import orphans
from agent.sandboxes.orphans import belongs_to
from agent.sandboxes.output_buffer import OutputBuffer

OUTPUT_BYTES = 2 << 20  # kept of a command's output: its first and last MiB; the middle is dropped
DRAIN_GRACE = 0.5  # seconds to keep reading after the command exits (background holders)
POLL_INTERVAL = 0.05
TIMEOUT_EXIT_CODE = 124


class ProcessGroups:
    """The process groups one sandbox started; `close` kills them all (thread-safe)."""

    def __init__(self, sandbox_dir: str):
        self._dir = sandbox_dir  # processes working or with HOME under it are the sandbox's
        self._groups: set[int] = set()
        self._lock = threading.Lock()
        self._closed = False

    def run(self, argv: Sequence[str], *, cwd: str, env: dict[str, str], timeout: float) -> ExecResult:
        """Run argv in a new session, stdout+stderr merged; on timeout SIGKILL its whole group."""
        proc = self._spawn(argv, cwd, env)
        assert proc.stdout is not None  # stdout=PIPE
        output = OutputBuffer(OUTPUT_BYTES)
        deadline = time.monotonic() + timeout
        try:
            # EOF comes a moment before the exit, or long before it (`exec >&-; sleep 99`).
            finished = _pump(proc, output, deadline) and _wait(proc, deadline)
            if not finished:
                kill_groups([proc.pid])
                proc.wait()
                _pump(proc, output, time.monotonic() + DRAIN_GRACE)
        except BaseException:  # interrupted (Ctrl-C) while waiting: leave no process behind
            kill_groups([proc.pid])
            raise
        finally:
            proc.wait()
            orphans.waited(proc.pid)
            proc.stdout.close()
            self._forget_if_gone(proc.pid)
        if not finished:
            return ExecResult(output.text(), TIMEOUT_EXIT_CODE, timed_out=True)
        code = proc.returncode
        return ExecResult(output.text(), 128 - code if code < 0 else code)  # killed by N: 128+N

    def close(self) -> None:
        """Refuse new commands; SIGKILL every group started so far and every stray process."""
        with self._lock:
            self._closed = True
            groups, self._groups = self._groups, set()
        # A remembered group may have died on its own and its id been taken by an unrelated
        # group (pid_max is often 32768): kill only groups that still hold one of our processes.
        groups = {g for g in groups if _group_alive(g)}  # most commands ended: skip the /proc walk
        members = _group_members(groups) if groups else {}
        kill_groups([g for g in groups if any(belongs_to(p, self._dir) for p in members[g])])
        kill_strays(self._dir)  # descendants that left their group (setsid, double fork)

    def _spawn(self, argv: Sequence[str], cwd: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
        with self._lock, orphans.spawning() as commands:
            if self._closed:
                raise SandboxError(f"sandbox {self._dir} is closed")
            proc = subprocess.Popen(
                list(argv),
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, so a timeout can kill all of it
            )
            self._groups.add(proc.pid)
            commands.add(proc.pid)
        return proc

    def _forget_if_gone(self, pgid: int) -> None:
        try:
            os.killpg(pgid, 0)  # succeeds while background members still run: close() kills them
        except (ProcessLookupError, PermissionError):  # gone (or the id is someone else's now)
            with self._lock:
                self._groups.discard(pgid)


def _pump(proc: subprocess.Popen[bytes], output: OutputBuffer, deadline: float) -> bool:
    """Read proc's output until EOF and its exit, or until DRAIN_GRACE after its exit when a
    background child still holds the pipe (True); False at the deadline if it still runs.
    The exit is watched through a pidfd, so a quick command costs two or three wake-ups."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    exit_fd = _pidfd(proc.pid)
    eof, exited_at = False, None
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        if exit_fd is not None:
            selector.register(exit_fd, selectors.EVENT_READ)
        try:
            while True:
                now = time.monotonic()
                if exited_at is None and exit_fd is None and proc.poll() is not None:
                    exited_at = now
                if exited_at is not None and (eof or now - exited_at >= DRAIN_GRACE):
                    return True
                if now >= deadline:
                    return exited_at is not None
                wait = deadline - now if exited_at is None else min(deadline, exited_at + DRAIN_GRACE) - now
                for key, _ in selector.select(wait if exit_fd is not None else min(wait, POLL_INTERVAL)):
                    if key.fd == exit_fd:
                        exited_at = time.monotonic()
                        selector.unregister(exit_fd)
                    elif chunk := os.read(fd, 65536):
                        output.append(chunk)
                    else:
                        eof = True
                        selector.unregister(fd)
        finally:
            if exit_fd is not None:
                os.close(exit_fd)


def _pidfd(pid: int) -> int | None:
    """A descriptor that becomes readable when `pid` exits (Linux 5.3+), else None."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _wait(proc: subprocess.Popen[bytes], deadline: float) -> bool:
    """Wait for proc to exit until the deadline; False when it is still running then."""
    try:
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return False
    return True


def kill_groups(pgids: Collection[int], patience: float = 2.0) -> None:
    """SIGKILL every process in the groups and wait (up to `patience` s) until none runs."""
    for pgid in pgids:
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    deadline = time.monotonic() + patience
    while pgids and _running_in(pgids) and time.monotonic() < deadline:
        time.sleep(POLL_INTERVAL / 5)  # SIGKILL is delivered asynchronously


def _group_alive(pgid: int) -> bool:
    """Whether any process (zombies included) is left in the group: one syscall, no /proc walk."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's group now holds that id; _group_members will tell
    return True


def _running_in(pgids: Collection[int]) -> bool:
    return any(_group_members(pgids).values())


def _group_members(pgids: Collection[int]) -> dict[int, list[int]]:
    """The live (non-zombie) processes of each process group."""
    members: dict[int, list[int]] = {pgid: [] for pgid in pgids}
    for pid in _pids():
        try:
            with open(f"/proc/{pid}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) in members:
            members[int(fields[2])].append(pid)
    return members


def kill_strays(sandbox_dir: str, rounds: int = 5) -> None:
    """SIGKILL processes working under `sandbox_dir` or whose HOME is under it (descendants
    that left their process group), until none is left. Needs /proc."""
    if orphans.adopting():  # they are all our children: no need to look at every process
        orphans.kill_adopted(sandbox_dir)
        return
    for _ in range(rounds):
        found = [pid for pid in _pids() if belongs_to(pid, sandbox_dir)]
        if not found:
            return
        for pid in found:
            with suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(POLL_INTERVAL)  # let the kernel tear them down before looking again


def _pids() -> list[int]:
    try:
        names = os.listdir("/proc")
    except OSError:
        return []  # no procfs: process groups are all we can kill
    own = os.getpid()
    return [int(n) for n in names if n.isdigit() and int(n) != own]
