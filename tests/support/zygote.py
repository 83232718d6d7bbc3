"""Runner processes forked from a pre-started interpreter (a zygote), for the tests.

Most end-to-end tests start the real runner (`batch_runner.py`, `run_agent.py`) as a process of
its own. Started as `python batch_runner.py ...`, each one paid an interpreter's start, a second
one for the secret's re-execution, and about a second of CPU importing the runner's modules
before doing anything a test looks at: hundreds of runs, a large share of the suite's time on
two cores. A zygote is one interpreter per test process that has imported those modules once;
each runner is a fork of it that then runs the script as `__main__` with the test's argv,
environment, working directory and standard streams: a process of its own, with its own pid,
session (when asked), signals and exit status, its workers' fork server started by the script as
always (a fresh interpreter: multiprocessing's "forkserver").

Only how the process began differs, so the tests whose subject is the beginning run the script
itself: the secret's re-execution and what /proc shows of a runner's argv and environment
(`tests/test_secrets.py`), start-up (`tests/test_startup*.py`). Here the script's own
re-execution (`agent.common.secrets.conceal`: argv without the key, the key handed over a pipe)
runs as written up to its `execve`, which this process then carries out as an exec would: the
script starts again from its first line with the new argv and environment.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any, NoReturn, Protocol

REPO = Path(__file__).resolve().parents[2]
# What the runners' own processes import: a batch run's parent (its workers are forked by its
# fork server, a fresh interpreter), and the query CLI, which runs its agent in its process (the
# SDK). None of the optional extras (Docker's SDK, Ray, pyarrow, Playwright): a test may hide one.
PRELOAD = (
    "agent.cli.batch_main",
    "agent.cli.batch_cli",
    "agent.cli.agent_cli",
    "agent.batch.run",
    "agent.batch.scheduler",
    "agent.batch.fork_server",
    "agent.batch.completion",
    "agent.batch.rescore",
    "agent.report.build",
    "agent.store.merge",
    "agent.sandboxes.local",
    "agent.sandboxes.bwrap",
    "agent.verify",
    "agent.loop.agent_loop",
    "agent.llm.factory",
    "openai",
    # and what a runner's fork server imports (agent.batch.fork_server.PRELOAD but the script)
    "agent.batch.undumpable",
    "agent.batch.worker_entry",
    "agent.batch.worker",
)
OPTIONAL = ("uvloop",)
# The zygote's argv and environment strings, which a forked runner overwrites with its own (what
# /proc shows of it): this large
AREA = 1 << 16
MESSAGE_MAX = 1 << 20


def fits(env: Mapping[str, str]) -> bool:
    """Whether a runner with environment `env` can be forked from the zygote: what the
    interpreter reads at its start is the zygote's (its PYTHON variables; a PYTHONPATH of
    the repository at most). RUNNER_ZYGOTE=0 starts every runner as `python script`."""
    if os.environ.get("RUNNER_ZYGOTE", "1") == "0":
        return False
    paths = [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry]
    if any(Path(entry).resolve() != REPO for entry in paths):
        return False
    return _start_variables(env) == _start_variables(os.environ)


def _start_variables(env: Mapping[str, str]) -> dict[str, str]:
    return {
        k: v for k, v in env.items() if k.startswith("PYTHON") and k not in ("PYTHONPATH", "PYTHONUNBUFFERED")
    }


# ---------------------------------------------------------------------------- the test side


class Process(Protocol):
    """What tests use of a started runner (a `subprocess.Popen` or a `ZygoteProcess`)."""

    pid: int
    returncode: int | Any

    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def send_signal(self, sig: int) -> None: ...
    def terminate(self) -> None: ...
    def kill(self) -> None: ...


class ZygoteProcess:
    """A runner forked by the zygote: what tests use of `subprocess.Popen`. As with Popen, the
    process stays a zombie, its pid taken, until its exit status is collected here (`poll`,
    `wait`): a signal sent by pid after it exited cannot reach another process."""

    def __init__(self, zygote: Zygote, pid: int) -> None:
        self._zygote = zygote
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._zygote.collect(self.pid, timeout=0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self._zygote.collect(self.pid, timeout=timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(f"runner {self.pid}", timeout or 0)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:  # a zombie still holds its pid: never another process's
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Zygote:
    """The zygote of this test process, started on first use; it dies with this process."""

    _instance: Zygote | None = None
    _lock = threading.Lock()

    @classmethod
    def get(cls) -> Zygote:
        with cls._lock:
            if cls._instance is None or cls._instance._pid != os.getpid():
                cls._instance = cls()
            return cls._instance

    def __init__(self) -> None:
        self._pid = os.getpid()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENROUTER_API_KEY")}
        env["PYTHONPATH"] = str(REPO)
        env["ZYGOTE_AREA"] = "." * AREA
        code = f"from tests.support.zygote import serve; serve({theirs.fileno()})"
        with theirs:
            self._server = subprocess.Popen(
                [sys.executable, "-c", code, "." * AREA],
                pass_fds=[theirs.fileno()],
                env=env,
                cwd=REPO,
                stdin=subprocess.DEVNULL,
            )
        self._sock = ours
        self._send_lock = threading.Lock()
        self._changed = threading.Condition()
        self._started: dict[int, int] = {}  # request id -> pid
        self._exits: dict[int, int] = {}  # pid -> exit code (as Popen.returncode)
        self._failed: str | None = None
        self._next = 0
        threading.Thread(target=self._read, name="zygote-reader", daemon=True).start()
        atexit.register(self.close)

    def _read(self) -> None:
        try:
            while message := self._sock.recv(MESSAGE_MAX):
                event = json.loads(message)
                with self._changed:
                    if "started" in event:
                        self._started[event["request"]] = event["started"]
                    else:
                        self._exits[event["exited"]] = event["code"]
                    self._changed.notify_all()
        except OSError as error:
            reason = f"the zygote's socket failed: {error}"
        else:
            reason = "the zygote exited"
        with self._changed:
            self._failed = reason
            self._changed.notify_all()

    def spawn(
        self,
        argv: Sequence[str],
        *,
        cwd: Path | str,
        env: Mapping[str, str],
        stdout: int,
        stderr: int,
        new_session: bool = False,
    ) -> ZygoteProcess:
        """Fork a runner: `argv` is [script, *arguments] (the script run as `python script`)."""
        with self._send_lock:
            self._next += 1
            request = self._next
            body = {
                "request": request,
                "argv": list(argv),
                "cwd": str(cwd),
                "env": dict(env),
                "session": new_session,
            }
            with open(os.devnull, "rb") as stdin:
                fds = [stdin.fileno(), stdout, stderr]
                socket.send_fds(self._sock, [json.dumps(body).encode()], fds)
        with self._changed:
            self._changed.wait_for(lambda: request in self._started or self._failed is not None, timeout=60)
            if request not in self._started:
                raise RuntimeError(f"the zygote started no runner: {self._failed or 'no answer in 60 s'}")
            return ZygoteProcess(self, self._started.pop(request))

    def collect(self, pid: int, timeout: float | None) -> int | None:
        """Runner `pid`'s exit status once it exited (None: not within `timeout`); its zombie
        is reaped then, and its pid free for another process."""
        with self._changed:
            self._changed.wait_for(lambda: pid in self._exits or self._failed is not None, timeout=timeout)
            if pid not in self._exits and self._failed is not None:
                raise RuntimeError(f"runner {pid}: {self._failed}")
            code = self._exits.pop(pid, None)
        if code is not None:
            with self._send_lock:
                self._sock.send(json.dumps({"reap": pid}).encode())
        return code

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._server.wait(timeout=10)


def run(
    argv: Sequence[str], *, cwd: Path | str, env: Mapping[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    """As `subprocess.run([python, *argv], capture_output=True, text=True)`, forked when it fits."""
    if not fits(env):
        command = [sys.executable, *argv]
        return subprocess.run(
            command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = Zygote.get().spawn(argv, cwd=cwd, env=env, stdout=out.fileno(), stderr=err.fileno())
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode("utf-8", errors="replace")
        stderr = err.read().decode("utf-8", errors="replace")
    return subprocess.CompletedProcess([sys.executable, *argv], code, stdout, stderr)


def start(
    argv: Sequence[str], *, cwd: Path | str, env: Mapping[str, str], stdout: IO[bytes], stderr: IO[bytes]
) -> Process:
    """As `subprocess.Popen([python, *argv], start_new_session=True)`, forked when it fits."""
    if not fits(env):
        return subprocess.Popen(
            [sys.executable, *argv], cwd=cwd, env=env, stdout=stdout, stderr=stderr, start_new_session=True
        )
    return Zygote.get().spawn(
        argv, cwd=cwd, env=env, stdout=stdout.fileno(), stderr=stderr.fileno(), new_session=True
    )


# ---------------------------------------------------------------------------- the zygote


def serve(fd: int) -> NoReturn:
    """The zygote's loop: fork a runner per request, report each one's pid and exit status."""
    sock = socket.socket(fileno=fd)
    own = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
    base_path = sys.path[1 + len(own) :]
    for module in PRELOAD:
        __import__(module)
    for module in OPTIONAL:
        with contextlib.suppress(ImportError):
            __import__(module)
    from tests.support import zygote_child

    zygote_child.BASE_PATH[:] = base_path

    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C of the tests ends us by EOF
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    running: set[int] = set()  # runners whose exit has not been reported yet
    while True:
        for key, _ in selector.select():
            if key.fileobj is not sock:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_read, 4096)
                _report_exits(sock, running)
                continue
            message, fds, _, _ = socket.recv_fds(sock, MESSAGE_MAX, 3)
            if not message:
                os._exit(0)  # the test process is gone
            request = json.loads(message)
            if "reap" in request:
                os.waitpid(request["reap"], 0)  # reported exited: a zombie until now
                continue
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                zygote_child.run_forked(request, fds, [sock, selector, wake_read, wake_write])
            for opened in fds:
                os.close(opened)
            running.add(pid)
            sock.send(json.dumps({"request": request["request"], "started": pid}).encode())
            _report_exits(sock, running)  # one that ended before it was added


def _report_exits(sock: socket.socket, running: set[int]) -> None:
    """Report each runner that exited, leaving it a zombie (WNOWAIT) until the test collects
    its status: as with `subprocess.Popen`, its pid is not reused before."""
    for pid in sorted(running):
        found = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        if found is None:
            continue
        running.discard(pid)
        code = found.si_status if found.si_code == os.CLD_EXITED else -found.si_status
        sock.send(json.dumps({"exited": pid, "code": code}).encode())
