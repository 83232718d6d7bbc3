"""What the MCP tests write and look for, shared by tests/test_mcp_*.py and the tests that put
MCP servers in a run: the --mcp_config file, the stdio test server's entry in it, the processes a
test server left, and the `work` fixture (a working directory bwrap can enter)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.batch import enterable_workdir
from tests.support.mcp_fixtures import STDIO_SERVER

SECRET = "mcp-secret-5d1e9a7c2b"


def work_fixture(prefix: str) -> Callable[[], Iterator[Path]]:
    """A `work` fixture: the command's cwd, one a root runner's bwrap can enter (pytest's
    tmp_path is 0700); assign it to `work` in the test module."""

    @pytest.fixture
    def work() -> Iterator[Path]:
        with enterable_workdir(prefix) as root:
            yield root

    return work


def write_mcp_config(path: Path, servers: Any) -> Path:
    """An --mcp_config file holding `servers` (any JSON: the config tests write bad ones too)."""
    path.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    return path


def stdio_entry(tag: Path, *modes: str, **extra: Any) -> dict[str, Any]:
    """The stdio test server shipped into the sandbox by `files` (host: run from tests/support),
    its command line marked with `tag` (the test's directory) so `servers_left` finds it."""
    args = [*modes, f"--name={tag.name}"]
    if extra.get("host"):
        return {"command": sys.executable, "args": [str(STDIO_SERVER), *args], **extra}
    return {
        "command": "python3",
        "args": ["server.py", *args],
        "files": {"server.py": str(STDIO_SERVER)},
        **extra,
    }


def servers_left(tag: Path) -> list[str]:
    """The command lines of processes still running a test server marked with `tag`."""
    left = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile
            continue
        if f"--name={tag.name}" in text:
            left.append(text)
    return left
