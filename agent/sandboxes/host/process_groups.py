"""Host processes a sandbox starts: running a command in its own process group with a
timeout and bounded output, and killing every process a sandbox left behind (the local
backend's process control). Those are the sandbox's cgroup when it has one (nothing escapes
it), else the processes recognised by a cwd or HOME inside the sandbox.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import threading
import time
from collections.abc import Collection, Sequence
from contextlib import suppress

from agent.errors import SandboxError
from agent.protocols import ExecResult
from agent.sandboxes.host import orphans
from agent.sandboxes.host.cgroups import ProcessCgroup
from agent.sandboxes.host.orphans import belongs_to
from agent.sandboxes.host.output_buffer import OutputBuffer
from agent.sandboxes.host.process_output import DRAIN_GRACE, pidfds_work, pump, read_ready, wait_until, watch

OUTPUT_BYTES = 2 << 20  # kept of a command's output: its first and last MiB; the middle is dropped
POLL_INTERVAL = 0.05
TIMEOUT_EXIT_CODE = 124


class ProcessGroups:
    """The process groups one sandbox started; `close` kills them all (thread-safe). With a
    `cgroup` (its commands join it, see local.tracking), closing kills that group whole."""

    def __init__(self, sandbox_dir: str, cgroup: ProcessCgroup | None = None):
        self._dir = sandbox_dir  # processes working or with HOME under it are the sandbox's
        self._cgroup = cgroup
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
            finished = pump(proc, output, deadline) and wait_until(proc, deadline)
            if not finished:
                kill_groups([proc.pid])
                proc.wait()
                pump(proc, output, time.monotonic() + DRAIN_GRACE)
        except BaseException:  # interrupted (Ctrl-C) while waiting: leave no process behind
            kill_groups([proc.pid])
            raise
        finally:
            self._reap(proc)
        return _result(proc, output, finished)

    async def arun(self, argv: Sequence[str], *, cwd: str, env: dict[str, str], timeout: float) -> ExecResult:
        """`run` from the event loop: the loop watches the output and the exit (a pidfd), so a
        command costs no thread. Without pidfds (Linux < 5.3), `run` goes to a thread."""
        if not pidfds_work():
            return await asyncio.to_thread(self.run, argv, cwd=cwd, env=env, timeout=timeout)
        proc = self._spawn(argv, cwd, env)  # vfork + exec: the loop waits only until the exec
        assert proc.stdout is not None  # stdout=PIPE
        output = OutputBuffer(OUTPUT_BYTES)
        try:
            finished = await watch(proc, output, timeout)
            if not finished:  # its group dies in a thread: that waits until no member runs
                await asyncio.to_thread(kill_groups, [proc.pid])
                read_ready(proc.stdout.fileno(), output)
        except BaseException:  # cancelled (prompt timeout, shutdown): leave no process behind
            # SIGKILL without waiting for every member to die (that walks /proc, on the loop);
            # what outlives the wait below is killed again when the sandbox closes.
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            raise
        finally:
            self._reap(proc)  # the command itself: a SIGKILLed process exits at once
        return _result(proc, output, finished)

    def close_if_idle(self) -> bool:
        """`close` when nothing is left to kill: no group of ours has a process and no adopted
        orphan works in the sandbox (known cheaply from a cgroup, or while adopting orphans).
        False, and still open, otherwise."""
        if self._cgroup is not None:
            with self._lock:
                if not self._cgroup.empty():
                    return False
                self._closed, self._groups = True, set()
            orphans.reap_ended()
            return True
        if not orphans.adopting():
            return False
        with self._lock:
            if any(_group_alive(g) for g in self._groups) or orphans.strays(self._dir):
                return False
            self._closed = True
            self._groups = set()
        return True

    def close(self) -> bool:
        """Refuse new commands; SIGKILL every group started so far and every stray process.
        False when a process of the cgroup still lived after the wait (see cgroups.KILL_WAIT)."""
        with self._lock:
            self._closed = True
            groups, self._groups = self._groups, set()
        if self._cgroup is not None:
            dead = self._cgroup.kill()
            orphans.reap_ended()
            return dead
        # A remembered group may have died on its own and its id been taken by an unrelated
        # group (pid_max is often 32768): kill only groups that still hold one of our processes.
        groups = {g for g in groups if _group_alive(g)}  # most commands ended: skip the /proc walk
        members = _group_members(groups) if groups else {}
        kill_groups([g for g in groups if any(belongs_to(p, self._dir) for p in members[g])])
        kill_strays(self._dir)  # descendants that left their group (setsid, double fork)
        return True

    def start(self, argv: Sequence[str], *, cwd: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
        """A long-running process in a group of its own with stdin, stdout and stderr pipes;
        the caller kills its group (`kill_groups`) and waits for it (`reap`)."""
        return self._spawn(argv, cwd, env, piped=True)

    def reap(self, proc: subprocess.Popen[bytes]) -> None:
        """`_reap` for a process of `start` that has exited or been killed."""
        self._reap(proc)

    def _spawn(
        self, argv: Sequence[str], cwd: str, env: dict[str, str], *, piped: bool = False
    ) -> subprocess.Popen[bytes]:
        with self._lock, orphans.spawning() as commands:
            if self._closed:
                raise SandboxError(f"sandbox {self._dir} is closed")
            proc = subprocess.Popen(
                list(argv),
                cwd=cwd,
                env=env,
                stdin=subprocess.PIPE if piped else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE if piped else subprocess.STDOUT,
                start_new_session=True,  # its own process group, so a timeout can kill all of it
            )
            self._groups.add(proc.pid)
            commands.add(proc.pid)
        return proc

    def _reap(self, proc: subprocess.Popen[bytes]) -> None:
        """Wait for the command (it has exited or been killed) and forget it if its group is gone."""
        proc.wait()
        orphans.waited(proc.pid)
        if proc.stdout is not None:
            proc.stdout.close()
        self._forget_if_gone(proc.pid)

    def _forget_if_gone(self, pgid: int) -> None:
        try:
            os.killpg(pgid, 0)  # succeeds while background members still run: close() kills them
        except (ProcessLookupError, PermissionError):  # gone (or the id is someone else's now)
            with self._lock:
                self._groups.discard(pgid)


def _result(proc: subprocess.Popen[bytes], output: OutputBuffer, finished: bool) -> ExecResult:
    if not finished:
        return ExecResult(output.text(), TIMEOUT_EXIT_CODE, timed_out=True)
    code = proc.returncode
    return ExecResult(output.text(), 128 - code if code < 0 else code)  # killed by N: 128+N


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
