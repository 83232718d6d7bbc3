"""The fork server local worker processes are forked from (multiprocessing's "forkserver").

It imports the worker's modules once (`PRELOAD`): a worker then starts in milliseconds instead
of importing the SDK itself (~1.5 s of CPU each, all of them at once on the same cores). It
holds no secret: it is started after `conceal()` and is handed none; each worker gets its
config, key included, over its own pipe (`agent.batch.crew`). `start_server` starts it before
the parent reads its command line when the arguments plainly ask for a run
(`agent.backends.warm_up_early`), else `warm_workers` as soon as a run is asked for, so that
its imports run beside the parent's own, its checks and dataset scan; `warm_workers` stops it
at the end: at once, even in the middle of its imports when the run stops on an
error before any worker started. This module imports nothing of ours: the parent imports it
before the rest of the run.

multiprocessing keeps the server's pid and "alive" descriptor private (`_forkserver_pid`,
`_forkserver_alive_fd`): read with getattr, so that a Python naming them otherwise only loses
the quick stop and the early exit of a killed runner's workers, not the run.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import site
import sysconfig
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from multiprocessing import forkserver, resource_tracker, util
from typing import Any

# What the fork server imports for every worker: the script run (multiprocessing's default),
# the worker with what it imports (the SDK, the loop, the tools), and what it imports when it
# starts (its event loop's package: one the server cannot import is skipped, as uvloop may be;
# the host sandbox backends, the default's and `local`'s; the codec the first connect encodes
# its host name with, ~10 ms in each worker otherwise). First `agent.batch.ctrl_c_ignored`,
# then `agent.batch.server_path` (see `_package_on_path`), then `agent.batch.undumpable`: the
# server, and so every worker it forks, is non-dumpable. The imports run without cyclic
# collection (`agent.batch.collector_paused`, then `collector_resumed`: the run's first request
# waits for them).
PRELOAD = (
    "agent.batch.ctrl_c_ignored",
    "agent.batch.server_path",
    "agent.batch.undumpable",
    "agent.batch.collector_paused",
    "__main__",
    "agent.batch.worker_entry",
    "agent.batch.worker",
    "uvloop",
    "agent.sandboxes.bwrap",
    "agent.sandboxes.local",
    "encodings.idna",
    "agent.batch.collector_resumed",
)

# agent.batch.server_path's name, written here too: this module imports nothing of ours
SAVED_PATH = "AGENT_RUNNER_PYTHONPATH"  # "=" + the runner's PYTHONPATH; "" where it had none

# The socket's path is the base + "/pymp-XXXXXXXX/listener-XXXXXXXX" (33 bytes) + a NUL.
SOCKET_BASE_MAX = 72
SHORT_BASES = ("/tmp", "/var/tmp", "/dev/shm")


def worker_context() -> Any:
    """The multiprocessing context workers are started with: the fork server, preloading."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(PRELOAD))
    _short_socket_directory()
    return context


@contextmanager
def warm_workers() -> Iterator[None]:
    """Start the fork server now (unless `start_server` did), so that its imports run beside
    the caller's work; stop it on the way out (every worker has been reaped by then)."""
    start_server()
    try:
        yield
    finally:
        stop_server()


def start_server() -> None:
    """Start the fork server (it starts importing at once); nothing when it runs already."""
    worker_context()
    with _package_on_path(), _ctrl_c_held():
        forkserver.ensure_running()


@contextmanager
def _ctrl_c_held() -> Iterator[None]:
    """SIGINT blocked while the server is started: the server starts with it blocked, until its
    first import ignores it (`agent.batch.ctrl_c_ignored`); one sent meanwhile waits here for the
    runner's handler. Never ignored here: a pending one would be discarded. Multiprocessing's
    resource tracker is started first, as the server's start would: its start unblocks SIGINT."""
    resource_tracker.ensure_running()
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


@contextmanager
def _package_on_path() -> Iterator[None]:
    """PYTHONPATH with this package's root in front while the server is started: Python 3.11's
    multiprocessing starts it with the default sys.path (the sys_path it hands the server is
    dropped), which finds an installed copy of the package before the checkout the runner was
    started from; the parent and its workers then ran different code. Not where the default
    path finds this root anyway (an installed package), which would put site-packages before
    the standard library. The server puts the runner's PYTHONPATH back (`server_path`)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if root in {sysconfig.get_path("purelib"), sysconfig.get_path("platlib"), site.getusersitepackages()}:
        yield
        return
    saved = os.environ.get("PYTHONPATH")
    os.environ[SAVED_PATH] = "" if saved is None else "=" + saved
    os.environ["PYTHONPATH"] = os.pathsep.join([root, *([saved] if saved else [])])
    try:
        yield
    finally:
        os.environ.pop(SAVED_PATH, None)
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def _short_socket_directory() -> None:
    """multiprocessing puts the server's socket in a `pymp-` directory it makes under TMPDIR
    (`multiprocessing.util.get_temp_dir`, made once per process); under a long TMPDIR the
    socket's path is longer than AF_UNIX allows (107 bytes) and no worker can start. Then that
    directory is made under the first short writable one of `SHORT_BASES` instead."""
    if len(os.fsencode(tempfile.gettempdir())) <= SOCKET_BASE_MAX:
        return
    short = next((base for base in SHORT_BASES if os.access(base, os.W_OK | os.X_OK)), None)
    if short is None:
        return  # multiprocessing says why it cannot listen
    saved, tempfile.tempdir = tempfile.tempdir, short
    try:
        util.get_temp_dir()
    finally:
        tempfile.tempdir = saved


def server_pid() -> int | None:
    """The fork server's pid (None: not known, see above)."""
    pid = getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None)
    return pid if isinstance(pid, int) else None


def stop_server() -> None:
    """Kill the fork server, then let multiprocessing close its end and reap it. Only closing
    its end (multiprocessing's own way) would leave it running until its imports are done: a
    second or more holding our stdout and stderr after an early error. Nothing once stopped."""
    pid = server_pid()
    if pid is None:
        return
    with suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    server: Any = forkserver._forkserver
    if getattr(server, "_forkserver_alive_fd", 0) is None:  # a stop cut short by a signal after
        with suppress(ChildProcessError):  # it closed that end: its second close was a TypeError
            os.waitpid(pid, 0)
        server._forkserver_pid = None
        return
    stop = getattr(server, "_stop", None)
    if stop is not None:
        stop()


def leave_server() -> None:
    """In a worker: close the server's "alive" pipe end that a forked worker inherits. The
    server exits once every holder has closed it, and a worker dies with the server
    (PR_SET_PDEATHSIG): with workers holding it, a runner killed with SIGKILL left them all
    running. A process the server did not fork has none."""
    server: Any = getattr(forkserver, "_forkserver", None)
    fd = getattr(server, "_forkserver_alive_fd", None)
    if isinstance(fd, int) and forkserver.get_inherited_fds() is not None:
        os.close(fd)
        server._forkserver_alive_fd = None
