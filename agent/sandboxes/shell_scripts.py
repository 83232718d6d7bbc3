"""The POSIX sh snippets the container and bubblewrap backends run inside a sandbox, and the
mapping of their exit codes to Python exceptions. Each runs as `sh -c SCRIPT sh ARGS...`.

Running file operations inside the sandbox (rather than on the host) makes paths, symlinks
and permissions mean exactly what they mean to the model's own commands.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Mapping, Sequence

from agent.errors import SandboxError

# $1 command, $2 directory. bash when the image has it, else sh; stdin at EOF; stderr joined
# to stdout so the two interleave in the order they were written.
COMMAND = (
    'cd -- "$2" || exit 1; if command -v bash >/dev/null 2>&1; then exec bash -c "$1" </dev/null 2>&1; fi; '
    'exec sh -c "$1" </dev/null 2>&1'
)
# $1 path, $2 byte cap. Only regular files: /dev/zero must not stream forever.
READ = (
    'if [ -d "$1" ]; then exit 41; elif [ ! -e "$1" ]; then exit 40; elif [ ! -f "$1" ]; then exit 42; fi; '
    'exec head -c "$2" -- "$1"'
)
# $1 path; the content arrives on stdin. `cat >` keeps an existing file's mode (a script stays executable).
WRITE = 'dir=$(dirname -- "$1") && mkdir -p -- "$dir" && cat >"$1"'

# A long-running process (Sandbox.spawn): $1 directory, $2 how many NAME=VALUE follow, then the
# program and its arguments. Its first stdout line is a handshake: its pid when it starts (the
# exec keeps that pid: what a container's kill targets), or why it cannot.
SPAWN = (
    'cd -- "$1" 2>/dev/null || { echo "no such directory: $1"; exit 126; }; n=$2; shift 2; '
    'while [ "$n" -gt 0 ]; do export "$1"; shift; n=$((n - 1)); done; '
    'p=$(command -v -- "$1") || { echo "program not found: $1"; exit 127; }; shift; '
    'echo "$$"; exec "$p" "$@"'
)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

MAX_READ = 64 * 1024 * 1024  # bytes read_file returns at most
OUTPUT_LIMIT = 8 * 1024 * 1024  # bytes of command output kept (head and tail)
FILE_TIMEOUT = 120.0


def raise_for_file(path: str, exit_code: int, stderr: bytes, *, timed_out: bool, reading: bool) -> None:
    """Raises the exception a READ or WRITE outcome stands for (nothing on success)."""
    if timed_out:
        raise OSError(errno.ETIMEDOUT, "file operation timed out", path)
    if exit_code == 0:
        return
    if reading and exit_code == 40:
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
    if reading and exit_code == 41:
        raise IsADirectoryError(errno.EISDIR, "Is a directory", path)
    if reading and exit_code == 42:
        raise OSError(errno.EINVAL, "not a regular file", path)
    lines = stderr.decode("utf-8", errors="replace").strip().splitlines()
    raise OSError(errno.EIO, lines[-1] if lines else f"exit code {exit_code}", path)


def check_read_size(path: str, data: bytes) -> bytes:
    if len(data) > MAX_READ:
        raise OSError(errno.EFBIG, f"file is larger than {MAX_READ} bytes", path)
    return data


def spawn_args(cwd: str, env: Mapping[str, str] | None, argv: Sequence[str]) -> list[str]:
    """SPAWN's arguments; SandboxError for an empty argv or an environment name sh cannot set."""
    if not argv or not argv[0]:
        raise SandboxError("no program to start")
    pairs = []
    for name, value in (env or {}).items():
        if not _ENV_NAME.fullmatch(name) or "\0" in value:
            raise SandboxError(f"cannot set the environment variable {name!r}")
        pairs.append(f"{name}={value}")
    return [cwd, str(len(pairs)), *pairs, *argv]
