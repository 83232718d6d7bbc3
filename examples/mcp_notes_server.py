"""An example MCP server: a small notebook, written with the official MCP SDK (`pip install mcp`;
`MCPServer` is what SDK 1.x called FastMCP). Notes are text files in `notes/` under the
server's working directory, so in a batch run each conversation's notes live in its own sandbox.

    python examples/mcp_notes_server.py        # speaks MCP over stdin/stdout

The runner starts it from `--mcp_config=examples/mcp_config.json` (see docs/mcp.md): its four
tools become the toolset `notes`, which a distribution can sample like a built-in one.
"""

from __future__ import annotations

import re
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server: MCPServer[None] = MCPServer("notes", instructions="A notebook: add, list, read and search notes.")
TITLE = re.compile(r"[A-Za-z0-9][A-Za-z0-9 _.-]{0,79}")


def note_file(title: str) -> Path:
    """The note's file; a title that could name something outside notes/ is refused."""
    if not TITLE.fullmatch(title) or ".." in title:
        raise ToolError(f"bad title {title!r}: use letters, digits, spaces, '_', '-', '.' (at most 80)")
    return Path("notes") / f"{title}.txt"


@server.tool()
def add_note(title: str, text: str) -> str:
    """Save a note under a title (replacing a note of the same title)."""
    path = note_file(title)
    path.parent.mkdir(exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return f"saved note {title!r} ({len(text)} characters)"


@server.tool()
def list_notes() -> str:
    """The titles of all notes, one per line."""
    titles = sorted(path.stem for path in Path("notes").glob("*.txt"))
    return "\n".join(titles) if titles else "(no notes yet)"


@server.tool()
def read_note(title: str) -> str:
    """The text of the note with this title."""
    path = note_file(title)
    if not path.is_file():
        raise ToolError(f"no note titled {title!r}; list_notes shows the titles")
    return path.read_text(encoding="utf-8")


@server.tool()
def search_notes(query: str) -> str:
    """Lines of any note that contain the query (case-insensitive), as `title: line`."""
    needle = query.lower()
    hits = [
        f"{path.stem}: {line}"
        for path in sorted(Path("notes").glob("*.txt"))
        for line in path.read_text(encoding="utf-8").splitlines()
        if needle in line.lower()
    ]
    return "\n".join(hits) if hits else f"no note mentions {query!r}"


if __name__ == "__main__":
    server.run()  # stdio
