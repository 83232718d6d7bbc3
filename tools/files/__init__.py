"""The file tool family: read_file, write_file, patch and search_files, on the prompt's sandbox.

Reads and writes go through `Sandbox.read_file/write_file` (which refuse paths outside the
sandbox); searches run `find`/`grep` through `Sandbox.exec`, so every backend works alike.
Every failure the model should see comes back as {"error": "..."}; only a broken sandbox raises.
"""

from __future__ import annotations

from agent.protocols import Toolset, ToolSpec, on_sandbox
from tools.files.editing import MAX_READ_LINES, patch, read_file, write_file
from tools.files.schemas import PATCH_SCHEMA, READ_FILE_SCHEMA, SEARCH_FILES_SCHEMA, WRITE_FILE_SCHEMA
from tools.files.search import search_files

__all__ = ["MAX_READ_LINES", "TOOLSET", "patch", "read_file", "search_files", "write_file"]

TOOLSET = Toolset(
    "file",
    "Read, write, patch and search files",
    (
        ToolSpec("read_file", READ_FILE_SCHEMA, on_sandbox(read_file)),
        ToolSpec("write_file", WRITE_FILE_SCHEMA, on_sandbox(write_file)),
        ToolSpec("patch", PATCH_SCHEMA, on_sandbox(patch)),
        ToolSpec("search_files", SEARCH_FILES_SCHEMA, on_sandbox(search_files)),
    ),
)
