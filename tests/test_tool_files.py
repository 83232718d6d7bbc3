"""The file tool family against a real local sandbox: every tool's success and error shapes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.sandboxes.local.sandbox import LocalSandbox
from agent.toolbox.context import SandboxContext
from tools.files import MAX_READ_LINES, TOOLSET

TOOLS = TOOLSET.tools
pytestmark = pytest.mark.anyio


async def call(name: str, sandbox: LocalSandbox, **args: Any) -> Any:
    handler = next(spec.handler for spec in TOOLS if spec.name == name)
    assert handler is not None
    return await handler(args, SandboxContext(sandbox))


def host(sandbox: LocalSandbox, path: str) -> Path:
    return Path(sandbox.workdir) / path


def _refused(error: str, sandbox: LocalSandbox) -> bool:
    """The refusal of a path outside the sandbox, which never shows the host's sandbox path."""
    return "outside the sandbox" in error and sandbox.root not in error


def test_schemas_are_openai_function_schemas() -> None:
    assert TOOLSET.name == "file"
    assert [s.name for s in TOOLS] == [
        "read_file",
        "write_file",
        "patch",
        "search_files",
    ]
    for spec in TOOLS:
        schema = spec.schema
        assert set(schema) == {"name", "description", "parameters"} and schema["name"] == spec.name
        assert schema["parameters"]["type"] == "object"
        assert set(schema["parameters"]["required"]) <= set(schema["parameters"]["properties"])
        assert all(p.get("description") for p in schema["parameters"]["properties"].values())


# ---------------------------------------------------------------- read_file


async def test_read_file_numbers_lines(local_sandbox: LocalSandbox) -> None:
    host(local_sandbox, "a.txt").write_text("first\nsecond\n")
    assert (await call("read_file", local_sandbox, path="a.txt")) == {
        "content": "     1|first\n     2|second\n",
        "total_lines": 2,
        "file_size": 13,
        "truncated": False,
    }


async def test_read_file_pages_with_a_hint(local_sandbox: LocalSandbox) -> None:
    host(local_sandbox, "n.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    page = await call("read_file", local_sandbox, path="n.txt", offset=4, limit=3)
    assert page["content"] == "     4|line 4\n     5|line 5\n     6|line 6\n"
    assert page["truncated"] is True and page["total_lines"] == 10
    assert page["hint"] == "Use offset=7 to continue reading (showing 4-6 of 10 lines)"
    last = await call("read_file", local_sandbox, path="n.txt", offset=7, limit=500)
    assert last["truncated"] is False and "hint" not in last
    assert last["content"].endswith("    10|line 10\n")


async def test_read_file_limit_is_capped(local_sandbox: LocalSandbox) -> None:
    host(local_sandbox, "big.txt").write_text("x\n" * 2500)
    page = await call("read_file", local_sandbox, path="big.txt", limit=10_000)
    assert page["content"].count("\n") == MAX_READ_LINES
    assert page["hint"] == "Use offset=2001 to continue reading (showing 1-2000 of 2500 lines)"
    default = await call("read_file", local_sandbox, path="big.txt")
    assert default["content"].count("\n") == 500


async def test_read_file_cuts_very_long_lines(local_sandbox: LocalSandbox) -> None:
    host(local_sandbox, "min.js").write_text("y" * 5000 + "\n")
    content = (await call("read_file", local_sandbox, path="min.js"))["content"]
    assert content == "     1|" + "y" * 2000 + "... [truncated]\n"


async def test_read_file_errors(local_sandbox: LocalSandbox) -> None:
    host(local_sandbox, "bin.dat").write_bytes(b"\x7fELF\x00\x01\x02")
    host(local_sandbox, "dir").mkdir()
    host(local_sandbox, "short.txt").write_text("one\n")
    binary = await call("read_file", local_sandbox, path="bin.dat")
    assert binary["error"].startswith("Binary file") and binary["file_size"] == 7
    assert (await call("read_file", local_sandbox, path="nope.txt")) == {"error": "File not found: nope.txt"}
    assert "directory" in (await call("read_file", local_sandbox, path="dir"))["error"]
    assert _refused((await call("read_file", local_sandbox, path="/etc/passwd"))["error"], local_sandbox)
    assert "past the end" in (await call("read_file", local_sandbox, path="short.txt", offset=5))["error"]
    assert "offset" in (await call("read_file", local_sandbox, path="short.txt", offset=0))["error"]
    assert "path" in (await call("read_file", local_sandbox))["error"]


async def test_read_empty_file(local_sandbox: LocalSandbox) -> None:
    host(local_sandbox, "empty").write_text("")
    result = await call("read_file", local_sandbox, path="empty")
    assert result == {"content": "", "total_lines": 0, "file_size": 0, "truncated": False}


# ---------------------------------------------------------------- write_file


async def test_write_file_creates_parents_and_counts_bytes(local_sandbox: LocalSandbox) -> None:
    result = await call("write_file", local_sandbox, path="deep/er/f.txt", content="héllo\n")
    assert result == {"bytes_written": 7, "path": "deep/er/f.txt"}
    assert host(local_sandbox, "deep/er/f.txt").read_text() == "héllo\n"


async def test_write_file_refuses_host_paths(local_sandbox: LocalSandbox, tmp_path: Path) -> None:
    result = await call("write_file", local_sandbox, path="/etc/agent-test-outside.txt", content="x")
    assert set(result) == {"error"} and _refused(result["error"], local_sandbox)
    assert not Path("/etc/agent-test-outside.txt").exists()
    target = tmp_path / "outside.txt"  # under /tmp: the sandbox's /tmp, as in bwrap and docker
    assert "error" not in await call("write_file", local_sandbox, path=str(target), content="x")
    assert not target.exists()
    assert (Path(local_sandbox.root) / str(target).lstrip("/")).read_text() == "x"
    assert "content" in (await call("write_file", local_sandbox, path="f.txt"))["error"]
    host(local_sandbox, "adir").mkdir()
    assert "error" in (await call("write_file", local_sandbox, path="adir", content="x"))


# ---------------------------------------------------------------- patch


async def test_patch_replaces_a_unique_match_and_returns_a_diff(local_sandbox: LocalSandbox) -> None:
    host(local_sandbox, "m.py").write_text("def f():\n    return 1\n")
    result = await call("patch", local_sandbox, path="m.py", old_string="return 1", new_string="return 2")
    assert result["success"] is True and result["replacements"] == 1
    assert "-    return 1\n+    return 2\n" in result["diff"]
    assert result["diff"].startswith("--- a/m.py\n+++ b/m.py\n")
    assert host(local_sandbox, "m.py").read_text() == "def f():\n    return 2\n"


async def test_patch_refuses_ambiguous_and_missing_matches(local_sandbox: LocalSandbox) -> None:
    original = "x = 1\ny = 2\nx = 1\n"
    host(local_sandbox, "d.py").write_text(original)
    ambiguous = await call("patch", local_sandbox, path="d.py", old_string="x = 1", new_string="x = 3")
    assert set(ambiguous) == {"error"}
    assert "2 times" in ambiguous["error"] and "replace_all" in ambiguous["error"]
    missing = await call("patch", local_sandbox, path="d.py", old_string="z = 9", new_string="z = 8")
    assert missing["error"].startswith("old_string not found in d.py")
    assert host(local_sandbox, "d.py").read_text() == original  # untouched by failed patches


async def test_patch_replace_all(local_sandbox: LocalSandbox) -> None:
    host(local_sandbox, "d.py").write_text("x = 1\ny = 2\nx = 1\n")
    result = await call(
        "patch", local_sandbox, path="d.py", old_string="x = 1", new_string="x = 3", replace_all=True
    )
    assert result["success"] is True and result["replacements"] == 2
    assert host(local_sandbox, "d.py").read_text() == "x = 3\ny = 2\nx = 3\n"


async def test_patch_keeps_bytes_that_are_not_utf8(local_sandbox: LocalSandbox) -> None:
    host(local_sandbox, "latin1.txt").write_bytes(b"caf\xe9 old\n")
    await call("patch", local_sandbox, path="latin1.txt", old_string="old", new_string="new")
    assert host(local_sandbox, "latin1.txt").read_bytes() == b"caf\xe9 new\n"


async def test_patch_errors(local_sandbox: LocalSandbox) -> None:
    host(local_sandbox, "a.txt").write_text("same\n")
    assert (await call("patch", local_sandbox, path="nope", old_string="a", new_string="b")) == {
        "error": "File not found: nope"
    }
    outside = await call("patch", local_sandbox, path="/etc/hostname", old_string="a", new_string="b")
    assert _refused(outside["error"], local_sandbox)
    assert (
        "identical"
        in (await call("patch", local_sandbox, path="a.txt", old_string="same", new_string="same"))["error"]
    )
    assert (
        "empty" in (await call("patch", local_sandbox, path="a.txt", old_string="", new_string="x"))["error"]
    )
    assert (
        "replace_all"
        in (
            await call(
                "patch", local_sandbox, path="a.txt", old_string="same", new_string="x", replace_all="yes"
            )
        )["error"]
    )


# ---------------------------------------------------------------- search_files


@pytest.fixture
async def tree(local_sandbox: LocalSandbox) -> LocalSandbox:
    files = {
        "src/app.py": "import os\ndef main():\n    return os.getcwd()\n",
        "src/util.py": "def helper():\n    pass\n",
        "src/notes name.txt": "main idea: 42\n",
        "README.md": "Run main() to start.\n",
        ".git/config": "main = true\n",
    }
    for path, text in files.items():
        host(local_sandbox, path).parent.mkdir(parents=True, exist_ok=True)
        host(local_sandbox, path).write_text(text)
    host(local_sandbox, "src/blob.bin").write_bytes(b"main\x00\x01")
    return local_sandbox


async def test_content_search(tree: LocalSandbox) -> None:
    result = await call("search_files", tree, pattern=r"main\(\)")
    assert result == {
        "total_count": 2,
        "matches": [
            {"path": "README.md", "line": 1, "content": "Run main() to start."},
            {"path": "src/app.py", "line": 2, "content": "def main():"},
        ],
    }


async def test_content_search_with_glob_path_and_limit(tree: LocalSandbox) -> None:
    only_py = await call("search_files", tree, pattern="main", path="src", file_glob="*.py")
    assert only_py["matches"] == [{"path": "src/app.py", "line": 2, "content": "def main():"}]
    limited = await call("search_files", tree, pattern="main", limit=1)
    assert limited["total_count"] == 3 and len(limited["matches"]) == 1 and limited["truncated"] is True
    paths = {m["path"] for m in (await call("search_files", tree, pattern="main"))["matches"]}
    assert paths == {"README.md", "src/app.py", "src/notes name.txt"}  # no .git, no binary


async def test_file_search(tree: LocalSandbox) -> None:
    assert (await call("search_files", tree, pattern="*.py", target="files")) == {
        "total_count": 2,
        "files": ["src/app.py", "src/util.py"],
    }
    limited = await call("search_files", tree, pattern="*", target="files", limit=2)
    assert limited["total_count"] == 5 and len(limited["files"]) == 2 and limited["truncated"] is True


async def test_search_arguments_are_never_run_by_the_shell(tree: LocalSandbox) -> None:
    for pattern in ["$(touch pwned)", "'; touch pwned; '", "`touch pwned`"]:
        assert (await call("search_files", tree, pattern=pattern))["total_count"] == 0
        assert (await call("search_files", tree, pattern=pattern, target="files"))["total_count"] == 0
        assert (await call("search_files", tree, pattern="x", file_glob=pattern))["total_count"] == 0
    assert not host(tree, "pwned").exists()


async def test_search_errors(tree: LocalSandbox) -> None:
    invalid = await call("search_files", tree, pattern="(unclosed")
    assert set(invalid) == {"error"} and "Invalid regex" in invalid["error"]
    assert _refused((await call("search_files", tree, pattern="root", path="/etc"))["error"], tree)
    await tree.exec("ln -s /etc etc-link", timeout=30)
    assert _refused((await call("search_files", tree, pattern="root", path="etc-link/"))["error"], tree)
    assert "not found" in (await call("search_files", tree, pattern="x", path="missing"))["error"]
    assert "target" in (await call("search_files", tree, pattern="x", target="dirs"))["error"]
    assert "pattern" in (await call("search_files", tree))["error"]
