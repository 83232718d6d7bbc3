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


async def test_the_local_file_tools_do_not_follow_a_swapped_directory(tmp_path: Path) -> None:
    host_dir = make_host_dir(str(tmp_path))
    options = SandboxOptions(backend="local", root=str(tmp_path / "sandboxes"))
    async with open_local(SPEC, options) as sandbox:
        result = await race(sandbox, host_dir, attempts=ATTEMPTS, seconds=SECONDS)
    _check(result, least=ATTEMPTS)


@pytest.mark.bwrap
async def test_the_bwrap_file_tools_do_not_follow_a_swapped_directory(
    bwrap_options: SandboxOptions, tmp_path: Path
) -> None:
    host_dir = make_host_dir(str(tmp_path))
    async with open_bwrap(SPEC, bwrap_options) as sandbox:
        result = await race(sandbox, host_dir, attempts=ATTEMPTS, seconds=SECONDS, lanes=4)
    _check(result, least=500)  # about half the calls start a sandbox (a symlink leads out of d)


@pytest.mark.docker
async def test_the_docker_file_tools_do_not_follow_a_swapped_directory(
    container_engine: Engine, docker_options: SandboxOptions, tmp_path: Path
) -> None:
    """Docker's file operations run inside the container (a process per call, hence far fewer
    calls), which cannot see the host directory: the same race must find nothing there either."""
    host_dir = make_host_dir(str(tmp_path))
    async with open_docker(SPEC, docker_options) as sandbox:
        result = await race(sandbox, host_dir, attempts=ATTEMPTS, seconds=SECONDS, lanes=2)
    _check(result, least=20)
