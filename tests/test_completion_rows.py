"""The completion's named units are dataset rows (and samples, with --samples_per_prompt > 1),
true of the run directory after an interrupted resume that raised --samples_per_prompt: every
row named has the attempts named in that state, and none of the first rows in it is left out.

The real batch_runner.py against the simulated endpoint over HTTP, local sandboxes."""

from __future__ import annotations

import os
import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.batch.completion import NAMED
from agent.servers.endpoint_server import EndpointFault
from agent.servers.simulated.server import SimulatedEndpoint, Turn
from tests.support import batch
from tests.support.batch import BatchCLI, human_prompt, read_json, read_jsonl

ROWS = 30
FAILING = (5, 17)  # rows whose sample 0 fails in the first invocation (a 500, no retry)


@pytest.fixture(autouse=True)
def no_stray_processes() -> Iterator[None]:
    yield
    batch.kill_started()


def written(run_dir: Path) -> set[tuple[int, int]]:
    """(row, sample) of every result line in the batch files (rows are "P<row>")."""
    return {
        (int(human_prompt(entry)[1:]), int(entry["metadata"]["sample_index"]))
        for path in run_dir.glob("batch_*.jsonl")
        for entry in read_jsonl(path)
    }


def started_since(endpoint: SimulatedEndpoint, first: int) -> Counter[int]:
    """Per row, the conversations the endpoint saw start from request `first` on."""
    rows: Counter[int] = Counter()
    for request in endpoint.requests[first:]:
        messages = request.body.get("messages") or []
        if not any(m.get("role") == "assistant" for m in messages):
            rows[int(next(str(m["content"]) for m in messages if m.get("role") == "user")[1:])] += 1
    return rows


def named(done: dict[str, Any], part: str) -> dict[int, list[int]]:
    rows, samples = done[f"{part}_indices"], done[f"{part}_samples"]
    assert len(rows) == len(samples) <= NAMED
    return dict(zip(rows, samples, strict=True))


def test_the_indices_named_after_a_resume_that_raised_the_samples_are_rows_in_that_state(
    tmp_path: Path, sim_endpoint: SimulatedEndpoint
) -> None:
    batch.write_dataset(tmp_path / "d.jsonl", [{"prompt": f"P{row}"} for row in range(ROWS)])
    sim_endpoint.set_default_script(batch.tool_then_answer())
    for row in FAILING:
        sim_endpoint.script(f"P{row}", [Turn(fault=EndpointFault(500, "down"))])
    cli = BatchCLI(tmp_path, sim_endpoint)
    flags = ("--dataset_file=d.jsonl", "--batch_size=10", "--run_name=rows", "--num_workers=1")
    first = cli.run(*flags, "--max_retries=0")
    assert first.returncode == 1, first  # the failing rows failed
    run_dir = cli.run_dir("rows")
    assert written(run_dir) == {(row, 0) for row in range(ROWS) if row not in FAILING}

    # every attempt of the resume hangs: two in flight, the rest not started, when it is stopped
    sim_endpoint.clear()
    sim_endpoint.set_default_script(batch.tool_then_answer(command="sleep 30"))
    before = len(sim_endpoint.requests)
    runner = cli.start(*flags, "--resume", "--samples_per_prompt=2", "--max_inflight=2")
    batch.wait_until(
        lambda: sum(started_since(sim_endpoint, before).values()) == 2, "two attempts in flight", 120
    )
    os.killpg(runner.pid, signal.SIGINT)
    assert runner.wait(timeout=90) == 130

    done = read_json(run_dir / "statistics.json")["completion"]
    on_disk, in_flight = written(run_dir), started_since(sim_endpoint, before)
    left = {row: [s for s in (0, 1) if (row, s) not in on_disk] for row in range(ROWS)}
    assert done["interrupted_in_flight"] == 2 and done["not_started"] == 2 * ROWS - len(on_disk) - 2
    flying, waiting = named(done, "interrupted_in_flight"), named(done, "not_started")
    for row, samples in flying.items():  # each named attempt is one not written, that started
        assert set(samples) <= set(left[row]) and len(samples) == in_flight[row], (row, samples)
    assert sum(map(len, flying.values())) == 2
    # the rows with an attempt not started are those with more left than started; the first
    # NAMED of them are named, each with every such attempt, none also named in flight
    expected = [row for row in range(ROWS) if len(left[row]) > in_flight[row]][:NAMED]
    assert list(waiting) == expected, (waiting, left, in_flight)
    for row, samples in waiting.items():
        assert set(samples) <= set(left[row]) and not set(samples) & set(flying.get(row, []))
        assert len(samples) == len(left[row]) - in_flight[row], (row, samples)
    # a failed row of the first invocation has its two samples not started (unless one runs)
    assert any(samples == [0, 1] for samples in waiting.values()), waiting
    err = (tmp_path / "runner.err").read_text(encoding="utf-8")
    row, samples = next(iter(waiting.items()))
    named_first = f"{row} (sample{'s' if len(samples) > 1 else ''} {', '.join(map(str, samples))})"
    assert f"Not started: {done['not_started']} attempts (dataset indices {named_first}" in err, err[-3000:]
