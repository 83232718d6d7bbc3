"""A memory limit per sandbox (issue 27): all of a prompt's sandbox processes together may hold
`--sandbox_memory_mb`; past it the kernel's OOM killer takes one of that sandbox's processes,
never a worker, and the command's tool result says the limit was reached. Real processes:
a python3 that fills 200 MB under a 64 MB limit, on the local and bwrap backends, alone and in a
batch run whose other prompts must complete. Before: local had no limit (the command got its
200 MB), bwrap had an address-space rlimit per process only (a MemoryError, no total bound)."""

from __future__ import annotations

import dataclasses
import os
from collections import Counter
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import pytest

from agent.protocols import Sandbox, SandboxSpec
from agent.sandboxes import SandboxOptions
from agent.sandboxes.bwrap.sandbox import open_sandbox as open_bwrap
from agent.sandboxes.host import memory_limits
from agent.sandboxes.local.sandbox import open_sandbox as open_local
from agent.servers.simulated.server import SimulatedEndpoint
from tests.support.batch import (
    BatchCLI,
    enterable_workdir,
    human_prompt,
    read_jsonl,
    tool_then_answer,
    trajectory_prompts,
    write_dataset,
)

pytestmark = pytest.mark.anyio
SPEC = SandboxSpec(run_name="run-mem", prompt_key="prompt-0")
LIMIT_MB = 64
HOG = "python3 -c \"b = b'x' * (200 << 20); print('allocated')\""  # 200 MB, touched
SMALL = "python3 -c \"b = b'x' * (16 << 20); print('allocated')\""
REACHED = memory_limits.oom_message(LIMIT_MB)


@pytest.fixture
def workdir() -> Iterator[Path]:
    with enterable_workdir("memcap-test-") as root:
        yield root


def _open(backend: str, root: Path, memory_mb: int) -> AbstractAsyncContextManager[Sandbox]:
    options = SandboxOptions(backend=backend, memory_mb=memory_mb, pids_limit=64, root=str(root))
    return (open_local if backend == "local" else open_bwrap)(SPEC, options)


@pytest.fixture(params=["local", pytest.param("bwrap", marks=pytest.mark.bwrap)])
def backend(request: pytest.FixtureRequest) -> str:
    if memory_limits.hierarchy() is None:
        pytest.skip(f"no memory cgroup here: {memory_limits.why_unlimited()}")
    if request.param == "bwrap":
        request.getfixturevalue("bwrap_available")
    return str(request.param)


async def test_a_command_past_the_limit_is_killed_and_told(backend: str, workdir: Path) -> None:
    async with _open(backend, workdir, LIMIT_MB) as sandbox:
        hog = await sandbox.exec(HOG, timeout=120)
        small = await sandbox.exec(SMALL, timeout=120)
        after = await sandbox.exec("echo still here", timeout=60)
    assert hog.exit_code == 137 and REACHED in hog.output and "allocated" not in hog.output, hog
    assert (small.exit_code, small.output) == (0, "allocated\n"), small  # under the limit: unaffected
    assert (after.exit_code, after.output) == (0, "still here\n"), after  # the sandbox lives on
    assert os.listdir(workdir) == []


async def test_the_limit_covers_all_processes_together(backend: str, workdir: Path) -> None:
    """Three processes of 40 MB each: none is past 64 MB, together they are."""
    each = "python3 -c \"import time; b = b'x' * (40 << 20); time.sleep(3)\""
    async with _open(backend, workdir, LIMIT_MB) as sandbox:
        result = await sandbox.exec(f"{each} & {each} & {each} & wait", timeout=120)
    assert REACHED in result.output, result


async def test_zero_means_no_limit(backend: str, workdir: Path) -> None:
    async with _open(backend, workdir, 0) as sandbox:
        result = await sandbox.exec(HOG, timeout=120)
    assert (result.exit_code, result.output) == (0, "allocated\n"), result


@pytest.mark.parametrize("kind", ["local", pytest.param("bwrap", marks=pytest.mark.bwrap)])
async def test_without_a_memory_cgroup_each_process_gets_an_rlimit(
    kind: str, workdir: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """Where no memory cgroup works, the limit is an address-space rlimit per process: the hog
    gets a MemoryError (no total bound, said once in the log), a small command still runs."""
    if kind == "bwrap":
        request.getfixturevalue("bwrap_available")
    monkeypatch.setattr(memory_limits, "hierarchy", lambda: None)
    assert "RLIMIT_AS" in memory_limits.describe(LIMIT_MB)
    async with _open(kind, workdir, 256) as sandbox:  # room for python3's own mappings
        hog = await sandbox.exec(HOG.replace("200 << 20", "400 << 20"), timeout=120)
        small = await sandbox.exec(SMALL, timeout=120)
    assert hog.exit_code != 0 and "MemoryError" in hog.output, hog
    assert (small.exit_code, small.output) == (0, "allocated\n"), small


def test_a_batch_run_loses_only_the_hog_s_command(backend: str, workdir: Path) -> None:
    """In a real run the hog's tool result says the limit was reached, its prompt goes on to its
    answer like the others, and the run exits 0: no worker was the OOM killer's victim."""
    with SimulatedEndpoint() as endpoint:
        rows = [{"prompt": "hog"}, *({"prompt": f"healthy {i}"} for i in range(3))]
        endpoint.script("hog", tool_then_answer(command=HOG))
        for i in range(3):
            endpoint.script(f"healthy {i}", tool_then_answer(command=SMALL))
        write_dataset(workdir / "prompts.jsonl", rows)
        cli = BatchCLI(workdir, endpoint)
        finished = cli.run(
            "--dataset_file=prompts.jsonl",
            "--run_name=memcap",
            "--batch_size=2",
            f"--sandbox={backend}",
            f"--sandbox_memory_mb={LIMIT_MB}",
            "--num_workers=2",
            timeout=600,
        )
    assert finished.returncode == 0, finished
    assert f"sandbox memory: {LIMIT_MB} MB per sandbox" in finished.stderr + finished.stdout  # said once
    run_dir = cli.run_dir("memcap")
    assert read_jsonl(run_dir / "failures.jsonl") == []
    assert trajectory_prompts(run_dir) == Counter(["hog", "healthy 0", "healthy 1", "healthy 2"])
    for entry in read_jsonl(run_dir / "trajectories.jsonl"):
        text = "\n".join(turn["value"] for turn in entry["conversations"] if turn["from"] == "tool")
        hog = human_prompt(entry) == "hog"
        assert (REACHED in text) == hog, text
        assert ("allocated" in text) != hog, text


def test_options_carry_the_flag() -> None:
    from agent.cli.flags import FLAGS

    flag = next(f for f in FLAGS if f.name == "sandbox_memory_mb")
    assert flag.default == SandboxOptions().memory_mb and flag.minimum == 0
    assert dataclasses.replace(SandboxOptions(), memory_mb=0).memory_mb == 0
