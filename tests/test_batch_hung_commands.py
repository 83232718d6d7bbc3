"""Hung commands must not stall the other prompts of a run (issue 20 item 2), on the backends
whose sandboxes once ran their calls in the loop's shared thread pool (bwrap, docker).

A real batch run against the simulated endpoint: half of the prompts run `sleep` far past
`--prompt_timeout`, half run `echo`. More hung prompts than that pool had threads (cores + 4):
every healthy prompt completes, every hung one fails `prompt_timeout`, the run ends in bounded
time and nothing of it is left running. Before: bwrap 3 of 10 healthy prompts in 183 s.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.sandboxes.docker.lifecycle import LABEL_RUN
from agent.servers.simulated.server import SimulatedEndpoint
from tests.fixtures.containers import DEFAULT_IMAGE, Engine
from tests.support.batch import (
    BatchCLI,
    enterable_workdir,
    read_jsonl,
    tool_then_answer,
    trajectory_prompts,
    write_dataset,
)

# Every docker-backend run removes the containers of dead runners on the engine it shares with
# the other tests, so such runs go to one xdist worker: a run of another test must not reap the
# containers a test killed on purpose before its own run does (tests/conftest.py).
pytestmark = pytest.mark.xdist_group("docker-engine")

HUNG = (os.cpu_count() or 1) + 5  # more than asyncio's default pool has threads (cores + 4)
SLEEP = f"sleep 7{os.getpid() % 100:02d}"  # names this test's hung commands on the host


@pytest.fixture
def workdir() -> Iterator[Path]:
    with enterable_workdir("hung-test-") as root:
        yield root


def _run(workdir: Path, backend: str, prompt_timeout: float, *extra: str) -> tuple[Counter[str], float]:
    """The run's trajectories' prompts, after checking that every failure is a hung prompt's
    prompt_timeout; and its wall time."""
    with SimulatedEndpoint() as endpoint:
        rows = []
        for i in range(HUNG):
            rows += [{"prompt": f"hung {i}"}, {"prompt": f"healthy {i}"}]
            endpoint.script(f"hung {i}", tool_then_answer(command=SLEEP))
            endpoint.script(f"healthy {i}", tool_then_answer(command="echo ok"))
        write_dataset(workdir / "prompts.jsonl", rows)
        cli = BatchCLI(workdir, endpoint)
        started = time.monotonic()
        finished = cli.run(
            "--dataset_file=prompts.jsonl",
            "--run_name=hung",
            "--batch_size=4",
            f"--sandbox={backend}",
            "--num_workers=1",
            f"--prompt_timeout={prompt_timeout}",
            *extra,
            timeout=600,
        )
        wall = time.monotonic() - started
    assert finished.returncode == 1, finished  # the hung prompts failed
    failures = read_jsonl(cli.run_dir("hung") / "failures.jsonl")
    assert sorted(f["prompt_index"] % 2 for f in failures) == [0] * HUNG, failures  # only hung ones
    assert {f["error_class"] for f in failures} == {"prompt_timeout"}
    assert _host_processes(SLEEP) == []
    return trajectory_prompts(cli.run_dir("hung")), wall


def _host_processes(marker: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        try:
            if name.isdigit() and marker.encode() in Path(f"/proc/{name}/cmdline").read_bytes():
                found.append(int(name))
        except OSError:
            continue
    return found


@pytest.mark.bwrap
def test_hung_bwrap_commands_do_not_stall_healthy_prompts(workdir: Path, bwrap_available: None) -> None:
    prompts, wall = _run(workdir, "bwrap", 5)
    assert prompts == Counter(f"healthy {i}" for i in range(HUNG))
    assert wall < 120, f"the run took {wall:.0f} s"  # measured 17 s for 10 + 10 (before: 183 s)


@pytest.mark.docker
def test_hung_docker_commands_do_not_stall_healthy_prompts(workdir: Path, container_engine: Engine) -> None:
    prompts, wall = _run(workdir, "docker", 30, f"--image={DEFAULT_IMAGE}")
    assert prompts == Counter(f"healthy {i}" for i in range(HUNG))
    assert wall < 240, f"the run took {wall:.0f} s"  # measured 46 s for 10 + 10 (before: 0 or 2 of 10)
    assert container_engine.ours(**{LABEL_RUN: "hung"}) == []
