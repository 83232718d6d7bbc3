"""Exit codes that cannot lie: a run exits 0 only when every valid prompt of the dataset is in
the output or discarded, as the run directory itself records it.

Real runner subprocesses against the simulated endpoint, real signals: Ctrl-C, a command that
stops its own worker (SIGSTOP). A worker killed while idle or busy: tests/test_batch_heal.py.
"""

from __future__ import annotations

import socket
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.servers.simulated.server import SimulatedEndpoint
from tests.support.batch import (
    BatchCLI,
    interrupt_after_the_quick_prompts,
    kill_started,
    read_json,
    read_jsonl,
    tool_then_answer,
    trajectory_prompts,
    write_dataset,
)


@pytest.fixture(autouse=True)
def no_stray_processes() -> Iterator[None]:
    yield
    kill_started()


def test_ctrl_c_summary_says_what_is_on_disk_and_the_next_step(tmp_path: Path) -> None:
    with SimulatedEndpoint() as endpoint:
        run_dir = interrupt_after_the_quick_prompts(tmp_path, endpoint, "cc").run_dir("cc")
    err = (tmp_path / "runner.err").read_text()
    flat = " ".join(err.replace("│", " ").split())  # the summary panel wraps at the console width
    assert "Trajectories in merged file: 0" not in flat and "No tool calls" not in flat
    assert "not rewritten (interrupted); on disk: 2 results in the batch files and 0 discards of 4" in flat
    assert "Tokens in merged file" not in flat and "Not started" not in flat
    assert "Interrupted in flight: 2 prompts (dataset indices 1, 3)" in flat  # running, cancelled
    last = err.rstrip().splitlines()[-1]
    assert last.startswith("Interrupted: 2 of 4 prompts are done and on disk (2 interrupted in flight, 0 not")
    assert "--resume" in last
    stats = read_json(run_dir / "statistics.json")
    assert stats["merged"] is False and stats["completion"]["interrupted"] is True
    assert not (run_dir / "trajectories.jsonl").exists()
    report = (run_dir / "report.html").read_text()  # read from the batch files: nothing was merged
    assert "<td>In the output</td><td>2</td>" in report and f"Report: {run_dir / 'report.html'}" in err


def test_a_command_that_stops_its_worker_cannot_hang_the_run(tmp_path: Path) -> None:
    # The command's parent is the worker (local backend): stopped again and again, the worker
    # is continued each time by the runner, so --prompt_timeout fires and the run ends.
    stopper = "while true; do kill -STOP $PPID; sleep 0.3; done"
    with SimulatedEndpoint() as endpoint:
        endpoint.script("Stopper", tool_then_answer(command=stopper))
        endpoint.script("Fine", tool_then_answer())
        write_dataset(tmp_path / "d.jsonl", [{"prompt": "Stopper"}, {"prompt": "Fine"}])
        cli = BatchCLI(tmp_path, endpoint)
        flags = ("--dataset_file=d.jsonl", "--batch_size=2", "--run_name=stop", "--num_workers=1")
        done = cli.run(*flags, "--prompt_timeout=4", timeout=90)
    assert done.returncode == 1, done
    failures = read_jsonl(cli.run_dir("stop") / "failures.jsonl")
    assert [f["error_class"] for f in failures] == ["prompt_timeout"]
    assert trajectory_prompts(cli.run_dir("stop")) == Counter(["Fine"])
    assert done.stderr.count("was stopped (SIGSTOP from one of its commands?)") == 1, done


def test_a_dead_endpoint_is_said_at_the_first_retry_and_the_summary_names_base_url(tmp_path: Path) -> None:
    """Nobody listens at the port: each worker says its first retry (once, as it happens, not
    after every retry), the prompts fail as `connection`, and the summary says what to check."""
    with socket.socket() as probe:  # a port that was free a moment ago
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    write_dataset(tmp_path / "d.jsonl", [{"prompt": p} for p in ("one", "two", "three")])
    cli = BatchCLI(tmp_path)
    done = cli.run("--dataset_file=d.jsonl", "--batch_size=2", "--run_name=dead", "--num_workers=1",
                   f"--base_url=http://127.0.0.1:{port}/v1", "--max_retries=1")  # fmt: skip
    assert done.returncode == 1, done
    said = f"INFO model endpoint http://127.0.0.1:{port}/v1: attempt 1 failed (connection: "
    assert done.stderr.count(said) == 1, done.stderr[-3000:]  # one worker, said once
    assert "  connection: the endpoint was not reached: check --base_url, that it is up" in done.stderr
    assert len(read_jsonl(cli.run_dir("dead") / "failures.jsonl")) == 3
