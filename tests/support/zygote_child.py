"""What a process forked by the zygote (`tests.support.zygote`) does to become the runner that
`python <script> <arguments>` would have started, and, at the runner's early start, its fork
server.

Set as a fresh interpreter has it: no descriptor but the streams, default signal handlers,
dumpable (execve sets it; the script's `conceal` clears it), the umask of the test, the session
(when asked), the argv, `sys.orig_argv` and `sys.path`, the environment (TMPDIR read again), the
standard streams (made as the interpreter makes them, with PYTHONUNBUFFERED), multiprocessing's
key and directory, and what /proc shows of the command line and environment (written into the
zygote's own larger argv and environment area, which the kernel shows whole: NUL bytes follow).
The exit is the interpreter's own (the script's end leaves the zygote's loop): an exception
printed and 1, `SystemExit`'s code, an uncaught Ctrl-C ended by SIGINT; threads waited for,
atexit handlers run, streams flushed, teardown.

The script's own `execve` of itself (`agent.common.secrets.conceal`) starts it again from its
first line with the new argv and environment, as the exec would.

The runner's fork server (multiprocessing's "forkserver") is started by `python -c 'from
multiprocessing.forkserver import main; ...'`, a fresh interpreter that imports the worker's
modules (the SDK). When the runner starts it at its very start (`agent.backends.warm_up_early`:
no thread yet), it is forked here instead, from this process that already imported them, and
given what that exec would give it: only the descriptors multiprocessing passes, default signal
handlers, dumpable until its preload's `agent.batch.undumpable` runs again, a `__main__` of its
own (the script imported as `__mp_main__`, as multiprocessing does), multiprocessing's state as
a new process has it, `conceal`'s record and the redactor reset, that command line in /proc. Its
memory still holds what the runner held (non-dumpable: nothing reads it). Any later start (the
server died mid-run, threads running) is the real one.
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import multiprocessing
import multiprocessing.forkserver
import multiprocessing.process
import multiprocessing.resource_tracker
import multiprocessing.util
import os
import runpy
import signal
import sys
import tempfile
import threading
import traceback
import types
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn, Protocol

import agent.backends
import agent.common.redaction
import agent.common.secrets

FORK_SERVER_CODE = "from multiprocessing.forkserver import main"


# What the interpreter reads from its configuration for the standard streams (the zygote's)
STDIO_ENCODING, STDIO_ERRORS = sys.stdout.encoding, sys.stdout.errors
# The zygote's sys.path but its first entry and those of its PYTHONPATH (set by `serve`)
BASE_PATH: list[str] = []


class Closable(Protocol):
    def close(self) -> None: ...


def run_forked(
    request: Mapping[str, Any], fds: Sequence[int], closing: Sequence[Closable | int], said_so: int
) -> NoReturn:
    """In the forked process: become `python <argv>` as started from the test and run it; its
    end (SystemExit, an exception) leaves the zygote's loop and ends this interpreter as it
    would have ended the fresh one: threads waited for, atexit handlers, flushes, teardown.
    `said_so` is closed once the process is set up, or carries why it could not be."""
    try:
        _set_up(request, fds, closing)
    except BaseException as error:  # noqa: BLE001 - the zygote raises it in the test, as Popen
        os.write(said_so, f"{type(error).__name__}: {error}".encode() or b"?")
        os._exit(1)
    os.close(said_so)
    argv, env = list(request["argv"]), dict(request["env"])
    real_execve = os.execve

    def execve(path: Any, args: Any, environ: Any) -> NoReturn:
        if path == sys.executable and len(args) > 1 and args[1] == argv[0]:
            raise _Exec([str(arg) for arg in args[1:]], dict(environ))
        real_execve(path, args, environ)

    os.execve = execve  # type: ignore[assignment]
    _fork_the_early_fork_server(real_execve)
    while True:
        _become(argv, env)
        try:
            runpy.run_path(argv[0], run_name="__main__")
        except _Exec as again:
            argv, env = again.argv, again.env
            os.execve = real_execve  # the one re-execution done: any other is a real one
            continue
        raise SystemExit(0)


def _set_up(request: Mapping[str, Any], fds: Sequence[int], closing: Sequence[Closable | int]) -> None:
    """What the process has from its start: no descriptor of the zygote's, default signal
    handlers, its session, streams, directory and umask, dumpable until it says otherwise
    (execve sets it again)."""
    signal.set_wakeup_fd(-1)
    for thing in closing:
        os.close(thing) if isinstance(thing, int) else thing.close()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _set_dumpable(1)
    os.umask(int(request["umask"]))
    if request["session"]:
        os.setsid()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])


def _set_dumpable(flag: int) -> None:
    """As `agent.common.secrets.set_not_dumpable`, either way (execve sets the flag again)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(agent.common.secrets.PR_SET_DUMPABLE, flag, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE) failed")


class _Exec(BaseException):
    """The script called execve on itself (the secret's re-execution): start it again. Not
    an Exception: no `except Exception` of the script may take it for an error."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        super().__init__()
        self.argv = argv
        self.env = env


def _become(argv: list[str], env: Mapping[str, str]) -> None:
    show_in_proc([sys.executable, *argv], env)
    os.environ.clear()
    os.environ.update(env)
    # multiprocessing made the zygote's key at import: each runner has its own, as if started anew
    multiprocessing.current_process().authkey = os.urandom(32)
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again
    multiprocessing.process.__dict__["ORIGINAL_DIR"] = os.getcwd()  # what its import saw
    sys.argv = list(argv)
    sys.orig_argv = [sys.executable, *argv]
    extra = [os.path.abspath(entry) for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry]
    sys.path[:] = [str(Path(argv[0]).resolve().parent), *extra, *BASE_PATH]
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))
    for fd, name in enumerate(("stdin", "stdout", "stderr")):
        stream = _stream(fd, "r" if fd == 0 else "w", unbuffered)
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def _stream(fd: int, mode: str, unbuffered: bool) -> io.TextIOWrapper:
    """The standard stream on `fd` as the interpreter makes it at its start (create_stdio)."""
    raw = io.FileIO(fd, mode, closefd=False)
    raw.name = ("<stdin>", "<stdout>", "<stderr>")[fd]
    buffered: Any = raw
    if mode == "r":
        buffered = io.BufferedReader(raw)
    elif not unbuffered:
        buffered = io.BufferedWriter(raw)
    return io.TextIOWrapper(
        buffered,
        encoding=STDIO_ENCODING,
        errors="backslashreplace" if fd == 2 else STDIO_ERRORS,
        newline="\n",
        line_buffering=not unbuffered and (raw.isatty() or fd == 2),
        write_through=unbuffered and mode == "w",
    )


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()


# ---------------------------------------------------------------------------- /proc


def _areas() -> tuple[int, int, int, int]:
    """(arg_start, arg_end, env_start, env_end) of this process (/proc/self/stat 48-51)."""
    fields = Path("/proc/self/stat").read_text().rpartition(")")[2].split()
    return tuple(int(fields[n - 3]) for n in (48, 49, 50, 51))  # type: ignore[return-value]


def show_in_proc(argv: Sequence[str], env: Mapping[str, str]) -> None:
    """Make /proc/<pid>/cmdline and environ show `argv` and `env` (then NUL bytes)."""
    arg_start, arg_end, env_start, env_end = _areas()
    args = b"".join(os.fsencode(arg) + b"\0" for arg in argv)
    environ = b"".join(os.fsencode(f"{k}={v}") + b"\0" for k, v in env.items())
    if len(args) > arg_end - arg_start or len(environ) > env_end - env_start:
        raise RuntimeError(f"the zygote's argv or environment area is too small for {list(argv)[:2]}")
    saved = dict(os.environ)
    os.environ.clear()  # libc's environ no longer points into the area about to be overwritten
    for start, end, data in ((arg_start, arg_end, args), (env_start, env_end, environ)):
        ctypes.memmove(start, data, len(data))
        ctypes.memset(start + len(data), 0, end - start - len(data))
    os.environ.update(saved)


# ---------------------------------------------------------------------------- the fork server


def _fork_the_early_fork_server(real_execve: Callable[..., NoReturn]) -> None:
    """While the script's `warm_up_early` runs, its fork server is forked from this process."""
    early = agent.backends.warm_up_early
    real_spawn = multiprocessing.util.spawnv_passfds

    def spawn(path: Any, args: Any, passfds: Any) -> int:
        if not (args and FORK_SERVER_CODE in args[-1] and threading.active_count() == 1):
            return real_spawn(path, args, passfds)
        _flush()
        pid = os.fork()
        if pid == 0:
            os.execve = real_execve
            _be_fork_server(list(args), passfds)
        return pid

    def warm_up_early(argv: Sequence[str]) -> None:
        multiprocessing.util.spawnv_passfds = spawn
        try:
            early(argv)
        finally:
            multiprocessing.util.spawnv_passfds = real_spawn

    agent.backends.warm_up_early = warm_up_early


def _be_fork_server(args: list[str], passfds: Sequence[int]) -> NoReturn:
    """In the forked fork server: what `python *args` would start with, then its code."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        _close_all_but((0, 1, 2, *passfds))
        for sig in signal.valid_signals():
            with contextlib.suppress(OSError, ValueError):
                if callable(signal.getsignal(sig)):
                    signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        multiprocessing.forkserver._forkserver.__init__()  # type: ignore[misc]
        multiprocessing.resource_tracker._resource_tracker.__init__()  # type: ignore[misc]
        process = multiprocessing.current_process()
        process._config.pop("tempdir", None)  # type: ignore[attr-defined]
        process.authkey = os.urandom(32)
        multiprocessing.process._children.clear()  # type: ignore[attr-defined]
        # the `-c` command's own __main__, so that multiprocessing imports the script as
        # __mp_main__ as it does in a fresh server; what imports set the process up run again
        sys.modules["__main__"] = types.ModuleType("__main__")
        sys.modules.pop("agent.batch.undumpable", None)
        _set_dumpable(1)
        agent.common.secrets._started = None
        agent.common.redaction.install(())
        show_in_proc(args, os.environ)
        sys.argv = ["-c"]
        sys.orig_argv = list(args)
        exec(args[-1], {"__name__": "__main__"})  # multiprocessing's own command
        code = 0
    except SystemExit as stop:
        code = _exit_code(stop.code)
    except BaseException:  # noqa: BLE001 - the interpreter prints it and exits 1
        traceback.print_exc()
    _flush()
    os._exit(code)


def _close_all_but(keep: Sequence[int]) -> None:
    """Close every descriptor but `keep`, as spawning with close_fds does."""
    low = 0
    for fd in sorted(set(keep)):
        if fd > low:  # never closerange(0, 0): Python 3.11 hands close_range an end of -1, all
            os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, os.sysconf("SC_OPEN_MAX"))
