"""The bubblewrap backend: every command runs in fresh pid/net/ipc/uts/mount/user namespaces
(only `lo`, its own pid 1), on a read-only root, with a cleared environment and rlimits (see
bwrap_command). Starts take milliseconds and need no daemon.

A prompt's sandbox is a host directory holding its `/workspace` and `/tmp` (and its cwd when
that lies outside both); files persist across the prompt's commands, processes do not: when a
command ends its pid namespace ends with it. A timeout kills the whole namespace. Leaving the
block deletes the directory. Sandboxes die with a runner killed by SIGKILL (parent
death signals); `reap_stale` deletes what such a runner left, first killing any process that
still uses it (bwrap cannot close the race of its parent dying while it sets itself up).

A dataset row's image is used when it names an unpacked root filesystem directory (an
absolute path); otherwise (e.g. a registry name) the host's `/usr` is the root.

Files: paths under the writable places are read and written on the host directly, each
lookup held beneath its place by the kernel (see host_files: the sandbox may swap directories
meanwhile); anything else, or a symlink leading out of its place, is read or written inside
the sandbox (so it sees exactly the sandbox's view, with its rights); writing on the
read-only root raises SandboxPathError.
"""

from __future__ import annotations

import os
import posixpath
import re
import shutil
import tempfile
import uuid
from contextlib import AbstractAsyncContextManager
from types import TracebackType

from agent.errors import SandboxError, SandboxPathError
from agent.protocols import ExecResult, SandboxOptions, SandboxSpec
from agent.sandboxes import shell_scripts
from agent.sandboxes.blocking import ThreadedSandbox, opened_in_thread
from agent.sandboxes.bwrap import host_files
from agent.sandboxes.bwrap.command import Layout, bwrap_argv, root_mounts
from agent.sandboxes.host.sandbox_dirs import make_sandbox_dir, reap_dirs, remove_tree
from agent.sandboxes.host.sandbox_process import ProcessOutcome, kill_running, run_process

DIR_PREFIX = "bwrap-"
SANDBOX_UID_BASE = 2_000_000_000  # a root runner gives each sandbox its own uid above this
WRITABLE = ("/workspace", "/tmp")
_probe_verdicts: dict[int, str | None] = {}


def _sandbox_uid(sandbox_id: str) -> int | None:
    return SANDBOX_UID_BASE + int(sandbox_id[:6], 16) if os.geteuid() == 0 else None


def unavailable_reason(options: SandboxOptions) -> str | None:
    for tool, package in (("bwrap", "bubblewrap"), ("prlimit", "util-linux"), ("setpriv", "util-linux")):
        if shutil.which(tool) is None:
            return (
                f"`{tool}` is not installed; install the `{package}` package (e.g. apt-get install {package})"
            )
    pid = os.getpid()
    if pid not in _probe_verdicts:
        _probe_verdicts[pid] = _probe(options)
    return _probe_verdicts[pid]


def _probe(options: SandboxOptions) -> str | None:
    layout = Layout(image_root=None, binds=(), workdir="/")
    uid = _sandbox_uid("000000")
    nproc = options.pids_limit + (0 if uid is not None else _tasks_of(os.getuid()))
    outcome = run_process(bwrap_argv(layout, options, nproc, "exit 0", []), timeout=30, limit=65536, user=uid)
    if outcome.exit_code == 0:
        return None
    detail = outcome.stderr.decode(errors="replace").strip() or f"exit code {outcome.exit_code}"
    return (
        f"bwrap cannot create a sandbox here ({detail}); it needs unprivileged user namespaces "
        "(sysctl kernel.unprivileged_userns_clone=1; on Ubuntu 24.04+ also "
        "kernel.apparmor_restrict_unprivileged_userns=0)"
    )


def _tasks_of(uid: int) -> int:
    """How many processes `uid` runs now (the process limit counts them all for non-root)."""
    count = 0
    for entry in os.scandir("/proc"):
        try:
            if entry.name.isdigit() and entry.stat().st_uid == uid:
                count += 1
        except OSError:
            continue  # exited while we looked
    return count


def reap_stale(root: str | None = None) -> list[str]:
    """Deletes sandbox directories under `root` (default: the temp dir) whose owner process
    is dead: a runner killed with SIGKILL leaves them behind (its bwrap processes die with
    it). Returns the paths removed."""
    return reap_dirs(root or tempfile.gettempdir(), DIR_PREFIX)


def open_sandbox(
    spec: SandboxSpec, options: SandboxOptions
) -> AbstractAsyncContextManager[ThreadedSandbox[BwrapSandbox]]:
    """The prompt's sandbox, used from the event loop (its blocking work runs in threads);
    entering it makes its directory, leaving it deletes it."""
    return opened_in_thread(BwrapSandbox(spec, options))


def _image_root(spec: SandboxSpec) -> str | None:
    image = spec.image or ""
    if not image.startswith("/"):
        return None
    if not os.path.lexists(os.path.join(image, "bin/sh")):
        raise SandboxError(f"image root {image} is not an unpacked root filesystem (no /bin/sh in it)")
    return os.path.realpath(image)


class BwrapSandbox:
    def __init__(self, spec: SandboxSpec, options: SandboxOptions) -> None:
        self._spec = spec
        self._options = options
        self._id = uuid.uuid4().hex
        self._uid = _sandbox_uid(self._id)
        self._workdir = posixpath.normpath(posixpath.join("/workspace", spec.cwd or "."))
        self._dir: str | None = None
        self._binds: tuple[tuple[str, str], ...] = ()
        self._layout: Layout | None = None
        self._running: set[int] = set()  # process groups of the launches running now

    @property
    def workdir(self) -> str:
        return self._workdir

    @property
    def host_dir(self) -> str | None:
        """The host directory holding this sandbox's writable places (None when closed)."""
        return self._dir

    def __enter__(self) -> BwrapSandbox:
        image_root = _image_root(self._spec)
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", self._spec.run_name)[:24]
        self._dir = make_sandbox_dir(f"{DIR_PREFIX}{slug}-", self._options.root)
        try:
            self._layout = self._make_layout(image_root)
            outcome = self._launch("exit 0", [], timeout=30)
            if outcome.exit_code != 0:
                detail = outcome.stderr.decode(errors="replace").strip()
                raise SandboxError(f"bwrap could not start the sandbox: {detail}")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _make_layout(self, image_root: str | None) -> Layout:
        assert self._dir is not None
        binds = [
            (os.path.join(self._dir, "workspace"), "/workspace"),
            (os.path.join(self._dir, "tmp"), "/tmp"),
        ]
        if not _inside(self._workdir, WRITABLE):
            _check_mount_point(self._workdir, image_root)
            binds.append((os.path.join(self._dir, "cwd"), self._workdir))
        self._binds = tuple((os.path.realpath(host), inside) for host, inside in binds)
        self._chown(self._dir)
        for host, _inside_dir in self._binds:
            self._makedirs(host)
        self._makedirs(self._host_path(self._workdir) or "")
        return Layout(image_root=image_root, binds=self._binds, workdir=self._workdir)

    def close(self) -> None:
        directory, self._dir = self._dir, None
        if directory is not None:
            remove_tree(directory)

    def _launch(self, script: str, args: list[str], *, timeout: float, stdin: bytes = b"") -> ProcessOutcome:
        if self._layout is None or self._dir is None:
            raise SandboxError("the sandbox is not open")
        nproc = self._options.pids_limit + (0 if self._uid is not None else _tasks_of(os.getuid()))
        argv = bwrap_argv(self._layout, self._options, nproc, script, args)
        limit = 2 * shell_scripts.MAX_READ + 2 if script == shell_scripts.READ else shell_scripts.OUTPUT_LIMIT
        return run_process(
            argv, timeout=timeout, limit=limit, stdin=stdin, user=self._uid, running=self._running
        )

    def interrupt(self) -> None:
        """Kill every command running now (each launch's whole namespace dies with it)."""
        kill_running(self._running)

    def exec(self, command: str, *, timeout: float, cwd: str | None = None) -> ExecResult:
        target = self._resolve(cwd) if cwd else self._workdir
        outcome = self._launch(shell_scripts.COMMAND, [command, target], timeout=timeout)
        output = (outcome.stderr + outcome.stdout).decode("utf-8", errors="replace")
        if outcome.timed_out:
            return ExecResult(output, 124, timed_out=True)
        return ExecResult(output, outcome.exit_code)

    def _resolve(self, path: str) -> str:
        if not path or "\0" in path:
            raise SandboxPathError(f"invalid path {path!r}")
        return posixpath.normpath(posixpath.join(self._workdir, path))

    def _host_path(self, target: str) -> str | None:
        """The host path behind a sandbox path in a writable place, symlinks resolved; None
        when it is elsewhere or a symlink leads out of its place."""
        for host, inside in sorted(self._binds, key=lambda bind: -len(bind[1])):
            if _inside(target, (inside,)):
                real = os.path.realpath(host + target[len(inside) :])
                return real if real == host or real.startswith(host + "/") else None
        return None

    def _place_of(self, target: str) -> tuple[str, str] | None:
        """The host directory of the writable place holding `target`, and the rest of the path."""
        for host, inside in sorted(self._binds, key=lambda bind: -len(bind[1])):
            if _inside(target, (inside,)):
                return host, target[len(inside) :]
        return None

    def read_file(self, path: str) -> bytes:
        target = self._resolve(path)
        place = self._place_of(target)
        if place is not None:
            data = host_files.read_beneath(*place, target)
            if data is not None:
                return data
        # elsewhere, or a symlink leads out of its place: read as the sandbox sees it
        cap = str(shell_scripts.MAX_READ + 1)
        outcome = self._launch(shell_scripts.READ, [target, cap], timeout=shell_scripts.FILE_TIMEOUT)
        _raise_for_file(outcome, target, reading=True)
        return shell_scripts.check_read_size(target, outcome.stdout)

    def write_file(self, path: str, data: bytes) -> None:
        target = self._resolve(path)
        place = self._place_of(target)
        if place is None:
            places = ", ".join(inside for _host, inside in self._binds)
            raise SandboxPathError(f"{target} is on the sandbox's read-only root; write under {places}")
        if not host_files.write_beneath(*place, data, target=target, owner=self._uid):
            # a symlink in a writable place points elsewhere: let the sandbox resolve it
            outcome = self._launch(
                shell_scripts.WRITE, [target], timeout=shell_scripts.FILE_TIMEOUT, stdin=data
            )
            _raise_for_file(outcome, target, reading=False)

    def _makedirs(self, host: str) -> None:
        missing = []
        while host and not os.path.isdir(host):
            missing.append(host)
            host = os.path.dirname(host)
        for directory in reversed(missing):
            os.mkdir(directory, 0o755)
            self._chown(directory)

    def _chown(self, path: str) -> None:
        if self._uid is not None:
            os.chown(path, self._uid, self._uid)


def _inside(path: str, places: tuple[str, ...]) -> bool:
    return any(path == place or path.startswith(place + "/") for place in places)


def _check_mount_point(workdir: str, image_root: str | None) -> None:
    """A cwd outside /workspace and /tmp becomes a bind; its mount point must be creatable."""
    top = "/" + workdir.split("/")[1]
    read_only = {arg for arg in root_mounts(image_root) if arg.startswith("/")} | {"/proc", "/dev"}
    source = workdir if image_root is None else image_root + workdir
    if any(_inside(top, (entry,)) for entry in read_only) and not os.path.isdir(source):
        raise SandboxPathError(
            f"cwd {workdir} lies in the sandbox's read-only root; use a path under /workspace"
        )


def _raise_for_file(outcome: ProcessOutcome, path: str, *, reading: bool) -> None:
    shell_scripts.raise_for_file(
        path, outcome.exit_code, outcome.stderr, timed_out=outcome.timed_out, reading=reading
    )
