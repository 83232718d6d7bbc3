"""The file tools cannot be led out of the sandbox by a process inside it swapping a workspace
directory for a symlink to a host directory while they run (issue 20): thousands of
read/write/patch/mkdir calls against a real swapper on every backend; no canary read, no file
made outside, the root-only canary untouched. (bench/file_race.py runs it longer.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.protocols import SandboxSpec
from agent.sandboxes import SandboxOptions
from agent.sandboxes.bwrap.sandbox import open_sandbox as open_bwrap
from agent.sandboxes.docker.sandbox import open_sandbox as open_docker
from agent.sandboxes.host import safe_paths
from agent.sandboxes.local.sandbox import open_sandbox as open_local
from tests.fixtures.containers import Engine
from tests.fixtures.file_race import RaceResult, make_host_dir, race

pytestmark = pytest.mark.anyio
SPEC = SandboxSpec(run_name="race", prompt_key="p0")
SECONDS = 12.0  # per backend; the calls stop earlier once ATTEMPTS are made
ATTEMPTS = 3000


def _check(result: RaceResult, *, least: int) -> None:
    assert result.swaps > 10_000, result  # the swapper really ran all along
    assert result.attempts >= least, result
    assert result.canary_reads == 0, result
    assert result.created_outside == (), result
    assert result.canary_changed == "", result


@pytest.mark.parametrize("openat2", [True, False], ids=["openat2", "walk"])
async def test_the_local_file_tools_do_not_follow_a_swapped_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, openat2: bool
) -> None:
    """Also without openat2 (Linux < 5.6, or a seccomp filter refusing it): the walk here."""
    monkeypatch.setitem(safe_paths._state, "openat2", openat2)
    host_dir = make_host_dir(str(tmp_path))
    options = SandboxOptions(backend="local", root=str(tmp_path / "sandboxes"))
    async with open_local(SPEC, options) as sandbox:
        result = await race(sandbox, host_dir, attempts=ATTEMPTS, seconds=SECONDS, least=ATTEMPTS)
    _check(result, least=ATTEMPTS)


@pytest.mark.bwrap
async def test_the_bwrap_file_tools_do_not_follow_a_swapped_directory(
    bwrap_options: SandboxOptions, tmp_path: Path
) -> None:
    host_dir = make_host_dir(str(tmp_path))
    async with open_bwrap(SPEC, bwrap_options) as sandbox:
        result = await race(sandbox, host_dir, attempts=ATTEMPTS, seconds=SECONDS, lanes=4, least=500)
    _check(result, least=500)  # about half the calls start a sandbox (a symlink leads out of d)


@pytest.mark.long
@pytest.mark.docker
async def test_the_docker_file_tools_do_not_follow_a_swapped_directory(
    container_engine: Engine, docker_options: SandboxOptions, tmp_path: Path
) -> None:
    """Docker's file operations run inside the container (a process per call, hence far fewer
    calls), which cannot see the host directory: the same race must find nothing there either."""
    host_dir = make_host_dir(str(tmp_path))
    async with open_docker(SPEC, docker_options) as sandbox:
        result = await race(sandbox, host_dir, attempts=ATTEMPTS, seconds=SECONDS, lanes=2, least=20)
    _check(result, least=20)


@pytest.mark.bwrap
async def test_bwrap_symlinks_keep_their_meaning_and_new_files_belong_to_the_sandbox(
    bwrap_options: SandboxOptions,
) -> None:
    """Relative symlinks inside a place are followed on the host; absolute ones and those
    leading to another place are followed inside the sandbox, with its rights."""
    async with open_bwrap(SPEC, bwrap_options) as sandbox:
        await sandbox.exec(
            "mkdir real && echo inside > real/f && ln -s real rel && ln -s /workspace/real abs "
            "&& ln -s ../tmp across && echo tmp > /tmp/t",
            timeout=30,
        )
        for path in ("rel/f", "abs/f", "real/f"):
            assert await sandbox.read_file(path) == b"inside\n", path
        assert await sandbox.read_file("across/t") == b"tmp\n"
        await sandbox.write_file("abs/new/deep.txt", b"through an absolute link")
        await sandbox.write_file("across/made.txt", b"into /tmp")
        await sandbox.write_file("rel/sub/x.txt", b"relative")
        listing = await sandbox.exec(
            "cat real/new/deep.txt /tmp/made.txt real/sub/x.txt; echo; "
            "stat -c '%u %n' real/sub real/sub/x.txt",
            timeout=30,
        )
        assert listing.output.startswith("through an absolute linkinto /tmprelative\n"), listing.output
        owners = {line.split()[0] for line in listing.output.splitlines()[1:]}
        assert owners == {"0"}, listing.output  # root inside the sandbox: its own uid on the host
