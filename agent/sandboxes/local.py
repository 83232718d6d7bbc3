"""The `local` sandbox backend: a private host directory per prompt, commands run by host bash.

Layout under the root (default `<tmp>/agent-sandboxes`):

    <run_name>/<prompt_key>-<random>/          the sandbox dir (workspace/, home/, tmp/, cwd dir)
    <run_name>/<prompt_key>-<random>.owner     JSON {pid, start, host} of the process that owns it

The owner marker is written before the directory is made and removed after it is deleted, so a
directory without a marker is an orphan. Leaving `open_sandbox`'s block kills the sandbox's
processes and removes both; `reap_stale` cleans up after owners that died (kill -9).

This backend isolates files and environment variables, not the host: commands run as the
runner's user with the host's filesystem visible. The path checks keep the file tools inside
the sandbox dir; they are no defence against a hostile command.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import secrets
import shutil
import socket
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from agent.errors import SandboxError, SandboxPathError, SandboxUnavailable
from agent.protocols import ExecResult, SandboxSpec
from agent.sandboxes import SandboxOptions
from agent.sandboxes.host_processes import ProcessGroups, kill_strays, start_time

log = logging.getLogger(__name__)

MAX_READ_BYTES = 50 << 20  # read_file refuses larger files (the whole file is loaded)
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PASSED_ENV = ("PATH", "LANG", "LANGUAGE", "USER")  # plus LC_*; everything else is dropped
SANDBOX_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*-[0-9a-f]{12}")  # <prompt_key>-<random>


def default_root() -> str:
    return os.path.join(tempfile.gettempdir(), "agent-sandboxes")


def unavailable_reason(options: SandboxOptions) -> str | None:
    if shutil.which("bash") is None:
        return "bash was not found on PATH; install bash to use the local backend"
    return None


@contextmanager
def open_sandbox(spec: SandboxSpec, options: SandboxOptions) -> Iterator[LocalSandbox]:
    """A fresh sandbox for `spec`; leaving the block kills its processes and deletes it."""
    sandbox = LocalSandbox.create(spec, options.root or default_root())
    try:
        yield sandbox
    except BaseException:
        sandbox.close(strict=False)  # never let a cleanup failure mask what is propagating
        raise
    sandbox.close()


class LocalSandbox:
    """A prompt's private directory on the host. Create it with `open_sandbox`."""

    def __init__(self, root: str, workdir: str, marker: str, bash: str):
        self.root = root  # realpath of the sandbox dir; every file path must stay under it
        self._workdir = workdir
        self._marker = marker
        self._bash = bash
        self._env = _scrubbed_env(root, bash)
        self._processes = ProcessGroups(root, home=os.path.join(root, "home"))

    @classmethod
    def create(cls, spec: SandboxSpec, base: str) -> LocalSandbox:
        bash = shutil.which("bash")
        if bash is None:
            raise SandboxUnavailable("bash was not found on PATH; install bash to use the local backend")
        run_dir = os.path.join(os.path.realpath(base), _safe_name(spec.run_name))
        root, marker = _claim_dir(run_dir, _safe_name(spec.prompt_key))
        sandbox = cls(root, root, marker, bash)
        try:
            for sub in ("workspace", "home", "tmp"):
                os.mkdir(os.path.join(root, sub), 0o700)
            sandbox._workdir = sandbox._make_workdir(spec.cwd)
        except BaseException:
            sandbox.close(strict=False)
            raise
        return sandbox

    @property
    def workdir(self) -> str:
        return self._workdir

    # ------------------------------------------------------------ commands

    def exec(self, command: str, *, timeout: float, cwd: str | None = None) -> ExecResult:
        """Run `bash -c command` in its own process group; on timeout kill the whole group."""
        directory = self._workdir if cwd is None else self._existing_dir(cwd)
        return self._processes.run([self._bash, "-c", command], cwd=directory, env=self._env, timeout=timeout)

    # ------------------------------------------------------------ files

    def resolve_path(self, path: str) -> str:
        """The host path for `path` (relative to workdir); SandboxPathError outside the sandbox."""
        real = os.path.realpath(os.path.join(self._workdir, path))
        if real != self.root and not real.startswith(self.root + os.sep):
            raise SandboxPathError(f"{path}: outside the sandbox (paths must stay under {self.root})")
        return real

    def read_file(self, path: str) -> bytes:
        real = self.resolve_path(path)
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)  # a FIFO must not hang us
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if stat.S_ISDIR(info.st_mode):
                raise IsADirectoryError(errno.EISDIR, "Is a directory", path)
            if not stat.S_ISREG(info.st_mode):
                raise OSError(errno.EINVAL, "Not a regular file", path)
            if info.st_size > MAX_READ_BYTES:
                limit = f"{info.st_size} bytes, limit {MAX_READ_BYTES}"
                raise OSError(errno.EFBIG, f"File too large to load ({limit}); use the terminal", path)
            return handle.read()

    def write_file(self, path: str, data: bytes) -> None:
        real = self.resolve_path(path)
        parent = os.path.dirname(real)
        os.makedirs(parent, exist_ok=True)
        try:
            mode = stat.S_IMODE(os.stat(real).st_mode)  # keep e.g. the executable bit
        except FileNotFoundError:
            mode = 0o644
        fd, tmp = tempfile.mkstemp(dir=parent, prefix=f".{os.path.basename(real)}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.chmod(tmp, mode)
            os.replace(tmp, real)
        except BaseException:
            with suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    # ------------------------------------------------------------ lifecycle

    def close(self, *, strict: bool = True) -> None:
        """Kill every process the sandbox started and delete its directory and marker."""
        self._processes.close()
        try:
            _remove_tree(self.root)
            with suppress(FileNotFoundError):
                os.unlink(self._marker)
            with suppress(OSError):
                os.rmdir(os.path.dirname(self.root))  # the run dir, once its last sandbox is gone
        except OSError as exc:
            message = f"could not remove sandbox {self.root}: {exc}"
            if strict:
                raise SandboxError(message) from exc
            log.warning(message)

    def _make_workdir(self, cwd: str | None) -> str:
        if not cwd:
            return os.path.join(self.root, "workspace")
        # The dataset's cwd ("/app", "src") names a directory inside the sandbox dir.
        target = os.path.realpath(os.path.join(self.root, cwd.lstrip("/")))
        if target != self.root and not target.startswith(self.root + os.sep):
            raise SandboxPathError(f"cwd {cwd!r} leaves the sandbox {self.root}")
        os.makedirs(target, exist_ok=True)
        return target

    def _existing_dir(self, cwd: str) -> str:
        real = self.resolve_path(cwd)
        if not os.path.isdir(real):
            raise FileNotFoundError(errno.ENOENT, "No such directory", cwd)
        return real


def reap_stale(root: str | None = None) -> list[str]:
    """Delete sandbox dirs under `root` whose owner process is dead; returns the paths removed."""
    base = Path(os.path.realpath(root or default_root()))
    removed: list[str] = []
    for run_dir in (p for p in _entries(base) if p.is_dir()):
        for entry in _entries(run_dir):
            if not SANDBOX_NAME.fullmatch(entry.name.removesuffix(".owner")):
                continue  # not made by this backend: never delete what we cannot recognise
            if entry.suffix == ".owner" and not _owner_alive(entry):
                removed += _reap(entry.with_suffix(""), entry)
            elif entry.is_dir() and not entry.with_name(entry.name + ".owner").exists():
                removed += _reap(entry, None)  # markers outlive their dirs: this is an orphan
        with suppress(OSError):
            run_dir.rmdir()
    return removed


# ---------------------------------------------------------------- helpers


def _claim_dir(run_dir: str, key: str) -> tuple[str, str]:
    """Write an owner marker, then make the dir it owns; returns (realpath of dir, marker path)."""
    for _ in range(5):  # a concurrent reap_stale may remove the empty run dir under us
        os.makedirs(run_dir, exist_ok=True)
        name = f"{key}-{secrets.token_hex(6)}"
        path, marker = os.path.join(run_dir, name), os.path.join(run_dir, name + ".owner")
        owner = {"pid": os.getpid(), "start": start_time(os.getpid()), "host": socket.gethostname()}
        try:
            _write_atomic(marker, json.dumps(owner).encode())
            os.mkdir(path, 0o700)
        except FileNotFoundError:
            with suppress(FileNotFoundError):
                os.unlink(marker)
            continue
        return os.path.realpath(path), marker
    raise SandboxError(f"could not create a sandbox directory under {run_dir}")


def _write_atomic(path: str, data: bytes) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as handle:
        handle.write(data)
    os.replace(tmp, path)


def _owner_alive(marker: Path) -> bool:
    try:
        owner = json.loads(marker.read_text())
        pid, start, host = int(owner["pid"]), owner.get("start"), owner.get("host")
    except (OSError, ValueError, KeyError, TypeError):
        return False  # unreadable marker: markers are written atomically, so its owner died
    if host != socket.gethostname():
        return True  # another machine's sandbox (shared root): not ours to judge
    current = start_time(pid)
    return current is not None and (start is None or current == start)


def _reap(path: Path, marker: Path | None) -> list[str]:
    existed = path.is_dir()
    kill_strays(str(path), home=str(path / "home"))
    try:
        _remove_tree(str(path))
        if marker is not None:
            marker.unlink(missing_ok=True)
    except OSError as exc:
        log.warning("could not reap stale sandbox %s: %s", path, exc)
        return []
    return [str(path)] if existed else []


def _remove_tree(path: str) -> None:
    """rmtree that first restores permissions a command may have taken away (chmod 000)."""

    def retry(func: Callable[..., object], failed: str, _exc: object) -> None:
        os.chmod(os.path.dirname(failed), 0o700)
        if func in (os.unlink, os.rmdir):  # the parent was not writable
            func(failed)
        else:  # the directory itself could not be opened or listed
            os.chmod(failed, 0o700)
            shutil.rmtree(failed, onerror=retry)

    if os.path.lexists(path):
        shutil.rmtree(path, onerror=retry)


def _entries(directory: Path) -> list[Path]:
    try:
        return list(directory.iterdir())
    except OSError:
        return []


def _safe_name(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._")[:64]
    return cleaned or "_"


def _scrubbed_env(root: str, bash: str) -> dict[str, str]:
    """An allowlisted environment: no API keys or other host secrets reach commands."""
    env = {k: v for k, v in os.environ.items() if k in PASSED_ENV or k.startswith("LC_")}
    env.setdefault("PATH", DEFAULT_PATH)
    env.update(TERM="dumb", HOME=os.path.join(root, "home"), TMPDIR=os.path.join(root, "tmp"), SHELL=bash)
    return env
