"""The file tools' OpenAI function schemas."""

from __future__ import annotations

from typing import Any

from tools.files.editing import DEFAULT_READ_LINES, MAX_READ_LINES
from tools.files.search import DEFAULT_SEARCH_LIMIT, MAX_SEARCH_LIMIT


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
