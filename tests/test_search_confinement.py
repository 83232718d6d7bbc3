"""search_files searches the sandbox's files, never the host's: on the local backend its
commands run on the host, so the path it searches must be the slot's (as for the other file
tools), and a symlinked directory inside the sandbox is searched like the directory itself."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

from agent.protocols import Sandbox, SandboxSpec
from agent.sandboxes import SandboxOptions
from agent.sandboxes.bwrap.sandbox import open_sandbox as open_bwrap
from agent.sandboxes.local.sandbox import LocalSandbox
from tools.files.search import search_files

pytestmark = pytest.mark.anyio
CANARY = "HOSTCANARY_search_confinement"
LINKS = "mkdir -p real && echo IN_WS > real/f && ln -s /workspace/real abs && ln -s real rel"


@pytest.fixture
def host_canaries() -> Iterator[list[str]]:
    """A file holding CANARY in a fresh directory under the host's /tmp and under its /home."""
    made: list[str] = []
    for top in ("/tmp", "/home"):
        os.makedirs(top, exist_ok=True)
        directory = tempfile.mkdtemp(prefix="search-canary-", dir=top)
        made.append(directory)
        with open(os.path.join(directory, "canary.txt"), "w") as handle:
            handle.write(f"{CANARY} on the host\n")
    try:
        yield made
    finally:
        for directory in made:
            shutil.rmtree(directory)


async def _search(sandbox: Sandbox, **args: Any) -> dict[str, Any]:
    return await search_files(args, sandbox)


async def test_local_never_searches_the_hosts_tmp_or_home(
    local_sandbox: LocalSandbox, host_canaries: list[str]
) -> None:
    await local_sandbox.write_file("/tmp/mine.txt", f"{CANARY} in the sandbox\n".encode())
    await local_sandbox.write_file("/home/mine.txt", b"nothing here\n")
    mine = {"path": "/tmp/mine.txt", "line": 1, "content": f"{CANARY} in the sandbox"}
    found = await _search(local_sandbox, pattern=CANARY, path="/tmp", file_glob="*.txt")
    assert found == {"total_count": 1, "matches": [mine]}
    found = await _search(local_sandbox, pattern=CANARY, path="/home")
    assert found == {"total_count": 0, "matches": []}
    for top in ("/tmp", "/home"):
        listed = await _search(local_sandbox, pattern="*.txt", path=top, target="files")
        assert listed == {"total_count": 1, "files": [f"{top}/mine.txt"]}
    for directory in host_canaries:  # the host's own directory, by its path: not the sandbox's
        assert "error" in await _search(local_sandbox, pattern=CANARY, path=directory)


async def test_local_results_read_as_sandbox_paths(local_sandbox: LocalSandbox) -> None:
    await local_sandbox.write_file("src/app.py", b"def main():\n")
    found = await _search(local_sandbox, pattern="main", path="/workspace")
    assert found["matches"] == [{"path": "/workspace/src/app.py", "line": 1, "content": "def main():"}]
    listed = await _search(local_sandbox, pattern="*.py", path="/workspace/src", target="files")
    assert listed["files"] == ["/workspace/src/app.py"]
    assert (await _search(local_sandbox, pattern="main", path="src/app.py"))["matches"][0][
        "path"
    ] == "src/app.py"


async def test_local_searches_its_root_as_slash(local_sandbox: LocalSandbox) -> None:
    """local shows its sandbox directory as `/`: `path="/"` is the sandbox's root, not refused."""
    await local_sandbox.write_file("src/app.py", b"def main():\n")
    found = await _search(local_sandbox, pattern="main", path="/")
    assert found["matches"] == [{"path": "/workspace/src/app.py", "line": 1, "content": "def main():"}]


async def test_local_pattern_naming_a_sandbox_path_is_searched_as_written(
    local_sandbox: LocalSandbox,
) -> None:
    # a command's /workspace/x becomes the slot's on local: the pattern must not
    await local_sandbox.write_file("conf/app.cfg", b"data=/workspace/data\n")
    found = await _search(local_sandbox, pattern="=/workspace/data$", file_glob="*.cfg")
    assert found["matches"] == [{"path": "conf/app.cfg", "line": 1, "content": "data=/workspace/data"}]
    listed = await _search(local_sandbox, pattern="./conf/*", target="files")
    assert listed["files"] == ["conf/app.cfg"]
    assert (await _search(local_sandbox, pattern="-x"))["total_count"] == 0  # not an option


async def test_local_symlink_out_of_the_slot_is_not_followed(
    local_sandbox: LocalSandbox, host_canaries: list[str]
) -> None:
    # In a command a host path stays the host's: these links lead out of the slot.
    await local_sandbox.exec(f"ln -s {host_canaries[0]} out && ln -s / root", timeout=30)
    assert (await _search(local_sandbox, pattern=CANARY))["total_count"] == 0
    assert (await _search(local_sandbox, pattern="canary*", target="files"))["total_count"] == 0
    for link in ("out", "root", "root/tmp"):
        assert "outside the sandbox" in (await _search(local_sandbox, pattern=CANARY, path=link))["error"]


async def _searches_symlinked_start(sandbox: Sandbox) -> None:
    assert (await sandbox.exec(LINKS, timeout=30)).exit_code == 0
    for link in ("abs", "rel", "abs/"):
        found = await _search(sandbox, pattern="IN_", path=link)
        shown = link.rstrip("/") + "/f"
        assert found == {"total_count": 1, "matches": [{"path": shown, "line": 1, "content": "IN_WS"}]}, link
        assert (await _search(sandbox, pattern="f", path=link, target="files"))["files"] == [shown]
    assert (await _search(sandbox, pattern="IN_"))["total_count"] == 1  # below the start: not followed


async def test_local_searches_a_symlinked_directory_inside_the_sandbox(local_sandbox: LocalSandbox) -> None:
    await _searches_symlinked_start(local_sandbox)


@pytest.mark.bwrap
async def test_bwrap_searches_a_symlinked_directory_inside_the_sandbox(bwrap_options: SandboxOptions) -> None:
    async with open_bwrap(SandboxSpec(run_name="run-s", prompt_key="p"), bwrap_options) as sandbox:
        await _searches_symlinked_start(sandbox)
        await sandbox.write_file("/tmp/t/g", b"IN_TMP\n")
        found = await _search(sandbox, pattern="IN_", path="/tmp")
        assert found["matches"] == [{"path": "/tmp/t/g", "line": 1, "content": "IN_TMP"}]
