"""search_files: `find` and `grep` run through `Sandbox.exec`, so every backend searches alike;
the pattern, path and glob reach the shell quoted, never as code, and with no "/" in the
command's text: the local backend rewrites a command's sandbox paths (/workspace/x) to its
slot's, which would change a regex or glob that names one.

The search runs *in* the directory it searches (`exec`'s cwd), from ".": the sandbox resolves
that cwd as its file tools resolve a path, so `/tmp` on the local backend is the slot's /tmp (a
command's bare `/tmp` is the host's), a symlinked directory inside the sandbox is followed, and
one leading out of it is refused. Below it `find` follows no symlink."""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent.protocols import Sandbox
from tools.files.arguments import BadArguments, integer, model_errors, text
from tools.files.editing import MAX_LINE_CHARS

DEFAULT_SEARCH_LIMIT = 50
MAX_SEARCH_LIMIT = 500
SEARCH_TIMEOUT = 60.0
_TOTAL = "__TOTAL__ "
_MATCH = re.compile(r"(.*?):(\d+):(.*)", re.S)


@model_errors
async def search_files(args: Mapping[str, Any], sandbox: Sandbox) -> dict[str, Any]:
    pattern = text(args, "pattern")
    target = args.get("target") or "content"
    if target not in ("content", "files"):
        raise BadArguments(f"'target' must be 'content' or 'files', got {target!r}")
    path = text(args, "path", default=".") or "."
    file_glob = text(args, "file_glob", default="") or None
    limit = min(integer(args, "limit", DEFAULT_SEARCH_LIMIT), MAX_SEARCH_LIMIT)
    where = await _start(sandbox, path)
    if target == "files":
        command = _file_search(pattern, where.start, limit)
    else:
        command = _content_search(pattern, where.start, file_glob, limit)
    result = await sandbox.exec(command, timeout=SEARCH_TIMEOUT, cwd=where.cwd)
    if result.timed_out:
        return {"error": f"Search timed out after {SEARCH_TIMEOUT:g} s; narrow 'path' or 'file_glob'"}
    if result.exit_code == 2:
        return {"error": f"Invalid regex pattern {pattern!r}: {result.output.strip()}"}
    *lines, total_line = result.output.rstrip("\n").split("\n")
    if not total_line.startswith(_TOTAL):
        return {"error": f"Search failed (exit code {result.exit_code}): {result.output.strip()[:500]}"}
    total = int(total_line[len(_TOTAL) :])
    found: dict[str, Any] = {"total_count": total}
    if target == "files":
        found["files"] = [where.shown(line) for line in lines]
    else:
        found["matches"] = [m for m in (_match(line, where) for line in lines) if m is not None]
    if total > limit:
        found["truncated"] = True
    return found


@dataclass(frozen=True)
class _Start:
    """Where a search runs: `cwd` (None: the workdir), from `start`; `prefix` is what the
    model's path puts before each found path (relative to `cwd`)."""

    cwd: str | None
    start: str
    prefix: str

    def shown(self, found: str) -> str:
        """A found path ("./x") as the model named its start: "src/x", "/tmp/x", "x"."""
        return _relative(self.prefix + _relative(found))


async def _start(sandbox: Sandbox, path: str) -> _Start:
    """Where to search `path`; SandboxPathError/FileNotFoundError for one the file tools may
    not search. `exec` reaches the whole host on the local backend, so the search itself
    cannot be the gate; read_file is: it tells a directory (searched as the cwd, which the
    sandbox confines again) from a file (searched in its directory). A file that fails to
    read for another reason (too big, not regular) is reachable too.
    """
    try:
        await sandbox.read_file(path)
    except IsADirectoryError:
        return _Start(path, ".", path.rstrip("/") + "/")
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            raise
    directory, name = posixpath.split(path)
    return _Start(directory or None, f"./{name}", directory.rstrip("/") + "/" if directory else "")


def _file_search(glob: str, path: str, limit: int) -> str:
    test = "-path" if "/" in glob else "-name"
    listing = _find(path, f"{test} {_literal(glob)}")
    return f"{listing} | awk -v max={limit} 'NR <= max {{ print }} END {{ print \"{_TOTAL}\" NR }}'"


def _content_search(regex: str, path: str, file_glob: str | None, limit: int) -> str:
    quoted = _literal(regex)
    # grep exits 2 (busybox: >1) on a bad regex; report its message instead of "no matches".
    # (busybox compiles the regex only when it reads a line, hence the input.)
    check = f'err=$(echo | grep -E -e {quoted} 2>&1 >/dev/null); [ $? -gt 1 ] && {{ echo "$err"; exit 2; }}; '
    listing = _find(path, f"-name {_literal(file_glob)}" if file_glob else "")
    grep = f"tr '\\n' '\\0' | xargs -0 -r grep -nHE -e {quoted} -- 2>/dev/null"
    # Only "path:line:text" lines are matches (old greps print "Binary file x matches").
    count = (
        f"awk -v max={limit} '/:[0-9]+:/ {{ n++; if (n <= max) print substr($0, 1, {MAX_LINE_CHARS}) }} "
        f'END {{ print "{_TOTAL}" n + 0 }}\''
    )
    return f"{check}{listing} | {grep} | {count}"


def _literal(value: str) -> str:
    """A shell word for `value` that no path rewriting can alter: printf's octal escape for
    each "/" (POSIX and busybox printf), and for "-" (a leading one would be an option).
    Command substitution drops trailing newlines, which no one-line regex or glob can use."""
    escaped = value.replace("\\", "\\\\").replace("%", "%%").replace("/", "\\057").replace("-", "\\055")
    return f'"$(printf {shlex.quote(escaped)})"'


def _find(path: str, test: str) -> str:
    """Regular files under path (sorted, .git skipped), one per line; POSIX/busybox compatible."""
    # -P (find's default; busybox knows no flag for it): no symlink below the start is followed
    return f"find {shlex.quote(path)} -name .git -prune -o -type f {test} -print 2>/dev/null | LC_ALL=C sort"


def _match(line: str, where: _Start) -> dict[str, Any] | None:
    found = _MATCH.fullmatch(line)
    if found is None:
        return None
    return {"path": where.shown(found[1]), "line": int(found[2]), "content": found[3]}


def _relative(found_path: str) -> str:
    return found_path[2:] if found_path.startswith("./") else found_path
