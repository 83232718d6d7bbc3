"""The file tool family: read_file, write_file, patch and search_files, on the prompt's sandbox.

Reads and writes go through `Sandbox.read_file/write_file` (which refuse paths outside the
sandbox); searches run `find`/`grep` through `Sandbox.exec`, so every backend works alike.
Every failure the model should see comes back as {"error": "..."}; only a broken sandbox raises.
"""

from __future__ import annotations

import difflib
import functools
import re
import shlex
from collections.abc import Mapping
from typing import Any

from agent.errors import SandboxPathError
from agent.protocols import Sandbox, ToolHandler, Toolset, ToolSpec

DEFAULT_READ_LINES = 500
MAX_READ_LINES = 2000
MAX_LINE_CHARS = 2000  # longer lines are cut: minified files would flood the context
MAX_CONTENT_CHARS = 100_000  # a read stops early (with a continuation hint) past this
BINARY_SNIFF_BYTES = 8192
MAX_DIFF_CHARS = 20_000
DEFAULT_SEARCH_LIMIT = 50
MAX_SEARCH_LIMIT = 500
SEARCH_TIMEOUT = 60.0
_TOTAL = "__TOTAL__ "
_MATCH = re.compile(r"(.*?):(\d+):(.*)", re.S)


class _BadArguments(ValueError):
    """The model's arguments cannot be used; the message tells it why."""


def _model_errors(handler: ToolHandler) -> ToolHandler:
    """Turn failures the model caused or can fix into {"error": ...} results."""

    @functools.wraps(handler)
    def guarded(args: Mapping[str, Any], sandbox: Sandbox) -> Any:
        try:
            return handler(args, sandbox)
        except (_BadArguments, SandboxPathError) as exc:
            return {"error": str(exc)}
        except OSError as exc:
            return {"error": _describe(exc, str(args.get("path", "")))}

    return guarded


def _describe(exc: OSError, path: str) -> str:
    if isinstance(exc, FileNotFoundError):
        return f"File not found: {path}"
    if isinstance(exc, IsADirectoryError):
        return f"{path} is a directory, not a file (list it with search_files target='files')"
    if isinstance(exc, PermissionError):
        return f"Permission denied: {path}"
    return f"Cannot access {path}: {exc.strerror or exc}"


# ---------------------------------------------------------------- read_file / write_file


@_model_errors
def read_file(args: Mapping[str, Any], sandbox: Sandbox) -> dict[str, Any]:
    path = _text(args, "path")
    offset = _integer(args, "offset", 1)
    limit = min(_integer(args, "limit", DEFAULT_READ_LINES), MAX_READ_LINES)
    data = sandbox.read_file(path)
    if b"\0" in data[:BINARY_SNIFF_BYTES]:
        return {"error": f"Binary file - cannot display as text: {path}", "file_size": len(data)}
    lines = _lines(data.decode("utf-8", errors="replace"))
    if offset > max(len(lines), 1):
        return {"error": f"offset {offset} is past the end of {path} ({len(lines)} lines)"}
    shown: list[str] = []
    size = 0
    for number in range(offset, min(len(lines), offset + limit - 1) + 1):
        line = lines[number - 1]
        if len(line) > MAX_LINE_CHARS:
            line = line[:MAX_LINE_CHARS] + "... [truncated]"
        if shown and size + len(line) > MAX_CONTENT_CHARS:
            break
        shown.append(f"{number:>6}|{line}\n")
        size += len(shown[-1])
    end = offset + len(shown) - 1
    result: dict[str, Any] = {
        "content": "".join(shown),
        "total_lines": len(lines),
        "file_size": len(data),
        "truncated": end < len(lines),
    }
    if end < len(lines):
        result["hint"] = (
            f"Use offset={end + 1} to continue reading (showing {offset}-{end} of {len(lines)} lines)"
        )
    return result


@_model_errors
def write_file(args: Mapping[str, Any], sandbox: Sandbox) -> dict[str, Any]:
    path = _text(args, "path")
    data = _text(args, "content", allow_empty=True).encode("utf-8")
    sandbox.write_file(path, data)
    return {"bytes_written": len(data), "path": path}


# ---------------------------------------------------------------- patch


@_model_errors
def patch(args: Mapping[str, Any], sandbox: Sandbox) -> dict[str, Any]:
    path = _text(args, "path")
    old, new = _text(args, "old_string"), _text(args, "new_string", allow_empty=True)
    replace_all = _flag(args, "replace_all")
    if old == new:
        return {"error": "old_string and new_string are identical; nothing to change"}
    data = sandbox.read_file(path)
    if b"\0" in data[:BINARY_SNIFF_BYTES]:
        return {"error": f"Binary file - cannot patch: {path}"}
    text = data.decode("utf-8", errors="surrogateescape")  # round-trips bytes that are not UTF-8
    count = text.count(old)
    if count == 0:
        return {"error": f"old_string not found in {path} (check whitespace and indentation with read_file)"}
    if count > 1 and not replace_all:
        return {
            "error": f"old_string matches {count} times in {path}; add surrounding context to make "
            "it unique, or set replace_all=true to replace every occurrence"
        }
    updated = text.replace(old, new) if replace_all else text.replace(old, new, 1)
    sandbox.write_file(path, updated.encode("utf-8", errors="surrogateescape"))
    return {"success": True, "replacements": count if replace_all else 1, "diff": _diff(text, updated, path)}


def _diff(before: str, after: str, path: str) -> str:
    lines = difflib.unified_diff(
        before.splitlines(), after.splitlines(), f"a/{path}", f"b/{path}", lineterm=""
    )
    diff = "\n".join(lines) + "\n"
    if len(diff) > MAX_DIFF_CHARS:
        return diff[:MAX_DIFF_CHARS] + f"\n... [diff truncated, {len(diff)} chars in total]\n"
    return diff


# ---------------------------------------------------------------- search_files


@_model_errors
def search_files(args: Mapping[str, Any], sandbox: Sandbox) -> dict[str, Any]:
    pattern = _text(args, "pattern")
    target = args.get("target") or "content"
    if target not in ("content", "files"):
        raise _BadArguments(f"'target' must be 'content' or 'files', got {target!r}")
    path = _text(args, "path", default=".") or "."
    file_glob = _text(args, "file_glob", default="") or None
    limit = min(_integer(args, "limit", DEFAULT_SEARCH_LIMIT), MAX_SEARCH_LIMIT)
    _check_reachable(sandbox, path)
    if target == "files":
        command = _file_search(pattern, path, limit)
    else:
        command = _content_search(pattern, path, file_glob, limit)
    result = sandbox.exec(command, timeout=SEARCH_TIMEOUT)
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
        found["files"] = [_relative(line) for line in lines]
    else:
        found["matches"] = [m for m in map(_match, lines) if m is not None]
    if total > limit:
        found["truncated"] = True
    return found


def _check_reachable(sandbox: Sandbox, path: str) -> None:
    """Raise SandboxPathError/FileNotFoundError for a path the file tools may not search.

    `exec` reaches the whole host on the local backend, so the search itself cannot be the
    gate; the protocol's only path check is read_file. A directory (or an oversized file)
    fails to read for other reasons, which means it is reachable.
    """
    try:
        sandbox.read_file(path)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            raise


def _file_search(glob: str, path: str, limit: int) -> str:
    test = "-path" if "/" in glob else "-name"
    listing = _find(path, f"{test} {shlex.quote(glob)}")
    return f"{listing} | awk -v max={limit} 'NR <= max {{ print }} END {{ print \"{_TOTAL}\" NR }}'"


def _content_search(regex: str, path: str, file_glob: str | None, limit: int) -> str:
    quoted = shlex.quote(regex)
    # grep exits 2 (busybox: >1) on a bad regex; report its message instead of "no matches".
    # (busybox compiles the regex only when it reads a line, hence the input.)
    check = f'err=$(echo | grep -E -e {quoted} 2>&1 >/dev/null); [ $? -gt 1 ] && {{ echo "$err"; exit 2; }}; '
    listing = _find(path, f"-name {shlex.quote(file_glob)}" if file_glob else "")
    grep = f"tr '\\n' '\\0' | xargs -0 -r grep -nHE -e {quoted} -- 2>/dev/null"
    # Only "path:line:text" lines are matches (old greps print "Binary file x matches").
    count = (
        f"awk -v max={limit} '/:[0-9]+:/ {{ n++; if (n <= max) print substr($0, 1, {MAX_LINE_CHARS}) }} "
        f'END {{ print "{_TOTAL}" n + 0 }}\''
    )
    return f"{check}{listing} | {grep} | {count}"


def _find(path: str, test: str) -> str:
    """Regular files under path (sorted, .git skipped), one per line; POSIX/busybox compatible."""
    start = shlex.quote(path if not path.startswith("-") else f"./{path}")
    return f"find {start} -name .git -prune -o -type f {test} -print 2>/dev/null | LC_ALL=C sort"


def _match(line: str) -> dict[str, Any] | None:
    found = _MATCH.fullmatch(line)
    if found is None:
        return None
    return {"path": _relative(found[1]), "line": int(found[2]), "content": found[3]}


def _relative(found_path: str) -> str:
    return found_path[2:] if found_path.startswith("./") else found_path


# ---------------------------------------------------------------- arguments


def _text(
    args: Mapping[str, Any], name: str, *, default: str | None = None, allow_empty: bool = False
) -> str:
    value = args.get(name, default)
    if value is None:
        raise _BadArguments(f"missing required argument '{name}'")
    if not isinstance(value, str):
        raise _BadArguments(f"'{name}' must be a string, got {type(value).__name__}")
    if not value and not allow_empty and default is None:
        raise _BadArguments(f"'{name}' must not be empty")
    return value


def _integer(args: Mapping[str, Any], name: str, default: int) -> int:
    value = args.get(name)
    if value is None:
        return default
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)  # models sometimes quote numbers
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _BadArguments(f"'{name}' must be a positive integer, got {value!r}")
    return value


def _flag(args: Mapping[str, Any], name: str) -> bool:
    value = args.get(name, False)
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if not isinstance(value, bool):
        raise _BadArguments(f"'{name}' must be true or false, got {value!r}")
    return value


def _lines(text: str) -> list[str]:
    """Lines as `wc -l` and editors count them: split on \\n only, no phantom last line."""
    lines = text.split("\n")
    return lines[:-1] if lines[-1] == "" else lines


# ---------------------------------------------------------------- schemas


def _schema(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    parameters = {"type": "object", "properties": properties, "required": required}
    return {"name": name, "description": description, "parameters": parameters}


_PATH = {"type": "string", "description": "File path, relative to the working directory or absolute."}

READ_FILE_SCHEMA = _schema(
    "read_file",
    "Read a text file with line numbers ('   12|text'). Long files are read in pages: "
    "pass the offset from the returned hint to continue. Binary files are refused.",
    {
        "path": _PATH,
        "offset": {
            "type": "integer",
            "minimum": 1,
            "description": "First line to show (1-based, default 1).",
        },
        "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_READ_LINES,
            "description": f"Lines to show (default {DEFAULT_READ_LINES}, at most {MAX_READ_LINES}).",
        },
    },
    ["path"],
)
WRITE_FILE_SCHEMA = _schema(
    "write_file",
    "Create or overwrite a file with the given content (parent directories are created). "
    "To change part of an existing file, prefer patch.",
    {"path": _PATH, "content": {"type": "string", "description": "The complete new file content."}},
    ["path", "content"],
)
PATCH_SCHEMA = _schema(
    "patch",
    "Replace an exact string in a file and return the unified diff. old_string must match "
    "exactly once (include surrounding lines to make it unique) unless replace_all is true.",
    {
        "path": _PATH,
        "old_string": {"type": "string", "description": "The exact text to replace, whitespace included."},
        "new_string": {"type": "string", "description": "The replacement text (may be empty)."},
        "replace_all": {"type": "boolean", "description": "Replace every occurrence (default false)."},
    },
    ["path", "old_string", "new_string"],
)
SEARCH_FILES_SCHEMA = _schema(
    "search_files",
    "Search file contents with an extended regex (target='content', like grep -rnE) or find "
    "files by name glob (target='files', like find -name). .git directories are skipped.",
    {
        "pattern": {
            "type": "string",
            "description": "A POSIX extended regex for content, or a name glob such as '*.py' for files.",
        },
        "target": {"type": "string", "enum": ["content", "files"], "description": "What to search."},
        "path": {"type": "string", "description": "Directory or file to search (default '.')."},
        "file_glob": {
            "type": "string",
            "description": "Content search only: file names to include, e.g. '*.py'.",
        },
        "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_SEARCH_LIMIT,
            "description": f"Most results to return (default {DEFAULT_SEARCH_LIMIT}).",
        },
    },
    ["pattern"],
)

TOOLSET = Toolset(
    "file",
    "Read, write, patch and search files",
    (
        ToolSpec("read_file", READ_FILE_SCHEMA, read_file),
        ToolSpec("write_file", WRITE_FILE_SCHEMA, write_file),
        ToolSpec("patch", PATCH_SCHEMA, patch),
        ToolSpec("search_files", SEARCH_FILES_SCHEMA, search_files),
    ),
)
