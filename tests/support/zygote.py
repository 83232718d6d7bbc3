"""Runner processes forked from a pre-started interpreter (a zygote), for the tests.

Most end-to-end tests start the real runner (`batch_runner.py`, `run_agent.py`) as a process of
its own. Started as `python batch_runner.py ...`, each one paid an interpreter's start (two, with
the secret's re-execution), about a second of CPU importing the runner's modules, and as much
again in its fork server importing the SDK, before doing anything a test looks at: hundreds of
runs, the largest share of the suite's time on two cores. Here two zygotes per test process
(different hash seeds, taken in turn) have imported those modules once; each runner is a fork of
one that runs the script as `__main__` with the test's argv, environment, working directory and
standard streams (`tests.support.zygote_child`): a process of its own, with its own pid, session
(when asked), signals and exit status, a zombie until the test collects that status (as with
Popen). Its early fork server is forked from it (see `zygote_child`).

What still differs from a fresh start, and why no test is weaker for it:
- The imports are done: tests whose subject is the start run fresh (`fresh=True`, or
  RUNNER_ZYGOTE=0: `tests/test_startup.py`, the start-up round of `tests/test_batch_crash.py`,
  `tests/test_secrets.py`, `tests/test_startup_early.py`, which start their own processes).
- /proc shows the argv and environment followed by NUL bytes (the zygote's larger area).
- The memory of the runner, of its forked fork server and workers holds what the zygote and the
  runner held before (the key among it, as in a fresh runner before its re-execution): they
  are non-dumpable, so no test could read it; the tests of secrets in memory run fresh.
- A runner whose environment changes what the interpreter or the zygote's imports read at start
  (`fits`) starts fresh.
`tests/test_zygote.py` compares forked and fresh runs. RUNNER_ZYGOTE=0 makes every run fresh,
the first thing to try when a result looks odd.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import locale
import os
import random
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any, ClassVar, NoReturn, Protocol

from tests.support import zygote_child

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
    # and what a runner's fork server imports (agent.batch.fork_server.PRELOAD but the script and
    # the modules imported for what they do there: server_path, undumpable, the collector's pause)
    "agent.batch.worker_entry",
    "agent.batch.worker",
)
OPTIONAL = ("uvloop",)
# The zygote's argv and environment strings, which a forked runner overwrites with its own (what
# /proc shows of it): this large
AREA = 1 << 16
MESSAGE_MAX = 1 << 20


# The test process's environment when this module was imported: what the zygotes start with
START_ENV = dict(os.environ)
# Read when the zygote imports its modules (rich's console, the SDK, the locale): a runner whose
# environment differs in one of them starts fresh
READ_AT_IMPORT = (
    "COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "TERM", "COLORTERM", "TTY_COMPATIBLE",
    "TTY_INTERACTIVE", "JUPYTER_COLUMNS", "JUPYTER_LINES", "OPENAI_LOG", "LANG", "LANGUAGE",
    "LC_ALL", "LC_CTYPE",
)  # fmt: skip


def fits(env: Mapping[str, str]) -> bool:
    """Whether a runner with environment `env` can be forked from a zygote: what the
    interpreter and the zygote's imports read at their start is the zygote's (the PYTHON
    variables, a PYTHONPATH of the repository at most, `READ_AT_IMPORT`). RUNNER_ZYGOTE=0
    starts every runner as `python script`."""
    if os.environ.get("RUNNER_ZYGOTE", "1") == "0":
        return False
    paths = [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry]
    if any(Path(entry).resolve() != REPO for entry in paths):
        return False
    return _start_variables(env) == _start_variables(START_ENV)


def _start_variables(env: Mapping[str, str]) -> dict[str, str]:
    made_here = ("PYTHONPATH", "PYTHONUNBUFFERED")  # made as the interpreter makes them
    return {
        k: v for k, v in env.items() if (k.startswith("PYTHON") and k not in made_here) or k in READ_AT_IMPORT
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
    """One zygote of this test process, started on first use; it dies with this process.

    Two zygotes serve each test process in turn, started with different hash seeds: a fresh
    interpreter draws its own, and two runs of one test (a run and its resume, local against
    Ray) must not share one, or an output that depends on set order would look stable."""

    _pool: ClassVar[list[Zygote]] = []
    _turn: ClassVar[int] = 0
    _lock: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    def get(cls) -> Zygote | None:
        """The next zygote (None when they cannot fork runners here: a fresh start then)."""
        with cls._lock:
            if not cls._pool or any(zygote._pid != os.getpid() for zygote in cls._pool):
                cls._pool = [cls(seed) for seed in _hash_seeds()]
            cls._turn += 1
            zygote = cls._pool[cls._turn % len(cls._pool)]
        return zygote if zygote.ready() else None

    def __init__(self, seed: str) -> None:
        self._pid = os.getpid()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = {k: v for k, v in START_ENV.items() if k not in ("OPENAI_API_KEY", "OPENROUTER_API_KEY")}
        env.update(PYTHONPATH=str(REPO), PYTHONHASHSEED=seed, ZYGOTE_AREA="." * AREA)
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
        self._ready: bool | None = None  # its preload: done, refused (a warning shown), not yet
        self._started: dict[int, int | str] = {}  # request id -> pid, or why it could not start
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
                    if "ready" in event:
                        self._ready = bool(event["ready"])
                    elif "started" in event:
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

    def ready(self) -> bool:
        """Whether its preload is done and printed nothing a fresh runner would print."""
        with self._changed:
            self._changed.wait_for(lambda: self._ready is not None or self._failed is not None, timeout=120)
            return bool(self._ready)

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
        """Fork a runner: `argv` is [script, *arguments] (the script run as `python script`).
        Returns once the process is set up (its session, streams, directory), as Popen does."""
        with self._send_lock:
            self._next += 1
            request = self._next
            umask = os.umask(0o022)
            os.umask(umask)
            body = {
                "request": request,
                "argv": list(argv),
                "cwd": str(cwd),
                "env": dict(env),
                "session": new_session,
                "umask": umask,
            }
            with open(os.devnull, "rb") as stdin:
                fds = [stdin.fileno(), stdout, stderr]
                socket.send_fds(self._sock, [json.dumps(body).encode()], fds)
        with self._changed:
            self._changed.wait_for(lambda: request in self._started or self._failed is not None, timeout=60)
            if request not in self._started:
                raise RuntimeError(f"the zygote started no runner: {self._failed or 'no answer in 60 s'}")
            started = self._started.pop(request)
        if isinstance(started, str):  # as Popen raises when the child cannot be set up
            raise OSError(f"the runner could not be started: {started}")
        return ZygoteProcess(self, started)

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
        if self._pid != os.getpid():  # a fork of the test process: the link is its parent's
            return
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._server.wait(timeout=10)


def _hash_seeds() -> list[str]:
    """The zygotes' PYTHONHASHSEED: the test process's own when it set one (a fresh runner
    inherits it), else two random ones."""
    if "PYTHONHASHSEED" in START_ENV:
        return [START_ENV["PYTHONHASHSEED"]]
    first = random.randrange(1, 2**32)
    return [str(first), str(first % (2**32 - 1) + 1)]


def run(
    argv: Sequence[str], *, cwd: Path | str, env: Mapping[str, str], timeout: float, fresh: bool = False
) -> subprocess.CompletedProcess[str]:
    """As `subprocess.run([python, *argv], capture_output=True, text=True, timeout=timeout)`,
    forked when it fits: the output read from pipes to their end (every holder closed them),
    decoded strictly, newlines translated."""
    zygote = _zygote(env, fresh)
    command = [sys.executable, *argv]
    if zygote is None:
        return subprocess.run(
            command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    try:
        proc = zygote.spawn(argv, cwd=cwd, env=env, stdout=out_write, stderr=err_write)
    finally:
        os.close(out_write)
        os.close(err_write)
    deadline = time.monotonic() + timeout
    read, ended = _read_to_end({out_read: [], err_read: []}, deadline)
    stdout, stderr = (_text(b"".join(read[fd])) for fd in (out_read, err_read))
    code = _wait(proc, deadline) if ended else None
    if code is None:
        proc.kill()
        proc.wait()
        raise subprocess.TimeoutExpired(command, timeout, output=stdout, stderr=stderr)
    return subprocess.CompletedProcess(command, code, stdout, stderr)


def _zygote(env: Mapping[str, str], fresh: bool) -> Zygote | None:
    """The zygote to fork a runner with environment `env` from (None: start it fresh)."""
    return None if fresh or not fits(env) else Zygote.get()


def _read_to_end(chunks: dict[int, list[bytes]], deadline: float) -> tuple[dict[int, list[bytes]], bool]:
    """Read every pipe of `chunks` until its end or the deadline (then False); each is closed."""
    with selectors.DefaultSelector() as selector:
        for fd in chunks:
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map() and (left := deadline - time.monotonic()) > 0:
            for key, _ in selector.select(left):
                data = os.read(key.fd, 1 << 16)
                if data:
                    chunks[key.fd].append(data)
                else:
                    selector.unregister(key.fd)
                    os.close(key.fd)
        ended = not selector.get_map()
        for key in list(selector.get_map().values()):
            selector.unregister(key.fd)
            os.close(key.fd)
    return chunks, ended


def _wait(proc: ZygoteProcess, deadline: float) -> int | None:
    with contextlib.suppress(subprocess.TimeoutExpired):
        return proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    return None


def _text(data: bytes) -> str:
    """As `subprocess.run(text=True)` decodes: the locale's encoding, strictly, universal
    newlines."""
    return data.decode(locale.getpreferredencoding(False)).replace("\r\n", "\n").replace("\r", "\n")


def start(
    argv: Sequence[str],
    *,
    cwd: Path | str,
    env: Mapping[str, str],
    stdout: IO[bytes],
    stderr: IO[bytes],
    fresh: bool = False,
) -> Process:
    """As `subprocess.Popen([python, *argv], start_new_session=True)`, forked when it fits."""
    zygote = _zygote(env, fresh)
    if zygote is None:
        return subprocess.Popen(
            [sys.executable, *argv], cwd=cwd, env=env, stdout=stdout, stderr=stderr, start_new_session=True
        )
    out, err = stdout.fileno(), stderr.fileno()
    return zygote.spawn(argv, cwd=cwd, env=env, stdout=out, stderr=err, new_session=True)


# ---------------------------------------------------------------------------- the zygote


def serve(fd: int) -> NoReturn:
    """The zygote's loop: fork a runner per request, report each one's pid and exit status."""
    sock = socket.socket(fileno=fd)
    own = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
    base_path = sys.path[1 + len(own) :]
    with warnings.catch_warnings(record=True) as shown:  # what a fresh runner would print
        for module in PRELOAD:
            __import__(module)
        for module in OPTIONAL:
            with contextlib.suppress(ImportError):
                __import__(module)
    zygote_child.BASE_PATH[:] = base_path
    sock.send(json.dumps({"ready": not shown}).encode())
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
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(request["reap"], 0)  # reported exited: a zombie until now
                continue
            started = _fork(request, fds, [sock, selector, wake_read, wake_write])
            if isinstance(started, int):
                running.add(started)
            sock.send(json.dumps({"request": request["request"], "started": started}).encode())
            _report_exits(sock, running)  # one that ended before it was added


def _fork(request: dict[str, Any], fds: list[int], closing: list[Any]) -> int | str:
    """Fork the runner; once it is set up (or could not be: why), its pid."""
    sys.stdout.flush()
    sys.stderr.flush()
    set_up, said_so = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(set_up)
        zygote_child.run_forked(request, fds, closing, said_so)
    os.close(said_so)
    for opened in fds:
        os.close(opened)
    with os.fdopen(set_up, "rb") as reader:
        why = reader.read().decode(errors="replace")
    if why:
        os.waitpid(pid, 0)
        return why
    return pid


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
