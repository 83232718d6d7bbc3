"""read_file, write_file and patch: through `Sandbox.read_file/write_file`, which refuse paths
outside the sandbox."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from agent.protocols import Sandbox
from tools.files.arguments import flag, integer, model_errors, text

DEFAULT_READ_LINES = 500
MAX_READ_LINES = 2000
MAX_LINE_CHARS = 2000  # longer lines are cut: minified files would flood the context
MAX_CONTENT_CHARS = 100_000  # a read stops early (with a continuation hint) past this
BINARY_SNIFF_BYTES = 8192
MAX_DIFF_CHARS = 20_000


@model_errors
async def read_file(args: Mapping[str, Any], sandbox: Sandbox) -> dict[str, Any]:
    path = text(args, "path")
    offset = integer(args, "offset", 1)
    limit = min(integer(args, "limit", DEFAULT_READ_LINES), MAX_READ_LINES)
    data = await sandbox.read_file(path)
    if b"\0" in data[:BINARY_SNIFF_BYTES]:
        return {"error": f"Binary file - cannot display as text: {path}", "file_size": len(data)}
    lines = _lines(data.decode("utf-8", errors="replace"))
    if offset > max(len(lines), 1):
        return {"error": f"offset {offset} is past the end of {path} ({len(lines)} lines)"}
    shown = _page(lines, offset, limit)
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


def _page(lines: list[str], offset: int, limit: int) -> list[str]:
    """Numbered lines from `offset`, at most `limit` of them and MAX_CONTENT_CHARS in all."""
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
    return shown


@model_errors
async def write_file(args: Mapping[str, Any], sandbox: Sandbox) -> dict[str, Any]:
    path = text(args, "path")
    data = text(args, "content", allow_empty=True).encode("utf-8")
    await sandbox.write_file(path, data)
    return {"bytes_written": len(data), "path": path}


@model_errors
async def patch(args: Mapping[str, Any], sandbox: Sandbox) -> dict[str, Any]:
    path = text(args, "path")
    old, new = text(args, "old_string"), text(args, "new_string", allow_empty=True)
    replace_all = flag(args, "replace_all")
    if old == new:
        return {"error": "old_string and new_string are identical; nothing to change"}
    data = await sandbox.read_file(path)
    if b"\0" in data[:BINARY_SNIFF_BYTES]:
        return {"error": f"Binary file - cannot patch: {path}"}
    content = data.decode("utf-8", errors="surrogateescape")  # round-trips bytes that are not UTF-8
    count = content.count(old)
    if count == 0:
        return {"error": f"old_string not found in {path} (check whitespace and indentation with read_file)"}
    if count > 1 and not replace_all:
        return {
            "error": f"old_string matches {count} times in {path}; add surrounding context to make "
            "it unique, or set replace_all=true to replace every occurrence"
        }
    updated = content.replace(old, new) if replace_all else content.replace(old, new, 1)
    await sandbox.write_file(path, updated.encode("utf-8", errors="surrogateescape"))
    diff = _diff(content, updated, path)
    return {"success": True, "replacements": count if replace_all else 1, "diff": diff}


def _diff(before: str, after: str, path: str) -> str:
    lines = difflib.unified_diff(
        before.splitlines(), after.splitlines(), f"a/{path}", f"b/{path}", lineterm=""
    )
    diff = "\n".join(lines) + "\n"
    if len(diff) > MAX_DIFF_CHARS:
        return diff[:MAX_DIFF_CHARS] + f"\n... [diff truncated, {len(diff)} chars in total]\n"
    return diff


def _lines(content: str) -> list[str]:
    """Lines as `wc -l` and editors count them: split on \\n only, no phantom last line."""
    lines = content.split("\n")
    return lines[:-1] if lines[-1] == "" else lines
