"""Exit codes that cannot lie: a run exits 0 only when every valid prompt of the dataset is in
the output or discarded, as the run directory itself records it.

Real runner subprocesses against the simulated endpoint, real signals: a worker killed while
idle or busy, Ctrl-C, a command that stops its own worker (SIGSTOP).
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.servers.simulated.server import SimulatedEndpoint
from tests.test_batch_support import (
    BatchCLI,
    batch_prompts,
    children_of,
    kill_started,
    read_json,
    read_jsonl,
    tool_then_answer,
    trajectory_prompts,
    wait_until,
    write_dataset,
)


@pytest.fixture(autouse=True)
def no_stray_processes() -> Iterator[None]:
    yield
    kill_started()


def worker_pids(runner: int) -> list[int]:
    """The runner's worker processes (spawned by multiprocessing; not its resource tracker)."""
    found = []
    for pid in children_of(runner):
        try:
            if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except (FileNotFoundError, ProcessLookupError):
            continue
    return found


def commands_of(worker: int) -> list[int]:
    return children_of(worker)


def sleepy_run(tmp_path: Path, endpoint: SimulatedEndpoint, prompts: list[str], seconds: int) -> BatchCLI:
    for prompt in prompts:
        endpoint.script(prompt, tool_then_answer(command=f"sleep {seconds}"))
    write_dataset(tmp_path / "d.jsonl", [{"prompt": p} for p in prompts])
    return BatchCLI(tmp_path, endpoint)


def test_a_worker_dying_with_no_prompt_never_exits_0_with_prompts_missing(tmp_path: Path) -> None:
    # 8 prompts whose first call runs `sleep 6`, 2 workers; one worker is killed as it starts,
    # holding no prompt. The run stops (the survivor's prompts are cancelled): no failure is
    # recorded, every prompt is "not started", named, and the run exits 1 with --resume.
    prompts = [f"Idle kill {i}" for i in range(8)]
    with SimulatedEndpoint() as endpoint:
        cli = sleepy_run(tmp_path, endpoint, prompts, 6)
        flags = ("--dataset_file=d.jsonl", "--batch_size=4", "--run_name=idle", "--num_workers=2")
        proc = cli.start(*flags)
        wait_until(lambda: len(worker_pids(proc.pid)) == 2, "two workers", 120)
        os.kill(max(worker_pids(proc.pid)), signal.SIGKILL)  # still importing: it took no job
        assert proc.wait(timeout=120) == 1
        run_dir = cli.run_dir("idle")
        err = (tmp_path / "runner.err").read_text()
        assert read_jsonl(run_dir / "failures.jsonl") == []
        completion = read_json(run_dir / "statistics.json")["completion"]
        assert (completion["failed"], completion["in_output"], completion["not_started"]) == (0, 0, 8)
        assert completion["stopped_by"] == "worker_lost" and completion["exit_code"] == 1
        assert "Not started: 8 prompts (dataset indices 0, 1, 2, 3, 4, 5, 6, 7)" in err
        assert (
            err.rstrip().splitlines()[-1].endswith("(a worker died). Next: rerun with --resume to run them.")
        )

        for prompt in prompts:
            endpoint.script(prompt, tool_then_answer())
        resumed = cli.run(*flags, "--resume")
        assert resumed.returncode == 0, resumed
        assert trajectory_prompts(run_dir) == Counter(prompts)
        assert batch_prompts(run_dir) == Counter(prompts)


def test_a_dead_busy_worker_loses_only_the_prompt_it_was_running(tmp_path: Path) -> None:
    # One conversation per worker: the killed worker was running exactly one prompt, which gets
    # exactly one worker_lost record; the prompts waiting in the queue are not failures.
    prompts = [f"Busy kill {i}" for i in range(8)]
    with SimulatedEndpoint() as endpoint:
        cli = sleepy_run(tmp_path, endpoint, prompts, 6)
        flags = ("--dataset_file=d.jsonl", "--batch_size=4", "--run_name=busy", "--num_workers=2")
        proc = cli.start(*flags, "--max_inflight=2")
        wait_until(lambda: len(worker_pids(proc.pid)) == 2, "two workers", 120)
        wait_until(lambda: all(commands_of(w) for w in worker_pids(proc.pid)), "both workers busy", 120)
        os.kill(worker_pids(proc.pid)[0], signal.SIGKILL)
        assert proc.wait(timeout=120) == 1
        run_dir = cli.run_dir("busy")
        lost = read_jsonl(run_dir / "failures.jsonl")
        assert [f["error_class"] for f in lost] == ["worker_lost"]
        completion = read_json(run_dir / "statistics.json")["completion"]
        assert completion["failed"] == 1
        assert completion["failed"] == 1
        stopped = completion["not_started"] + completion["interrupted_in_flight"]  # the survivor's cancelled
        assert completion["failed"] + stopped + completion["in_output"] == 8
        err = (tmp_path / "runner.err").read_text()
        assert "Failed this run: worker_lost 1" in err
        # the dead worker's limiter counters never arrived: the endpoint figures say they are partial
        assert read_json(run_dir / "statistics.json")["rate_limiting"]["partial"] is True
        flat = " ".join(err.replace("│", " ").split())
        assert "partial: a worker died before reporting its counters" in flat
        assert err.rstrip().splitlines()[-1].endswith("Next: rerun with --resume to run them.")


def test_ctrl_c_summary_says_what_is_on_disk_and_the_next_step(tmp_path: Path) -> None:
    prompts = ["Quick 0", "Slow 0", "Quick 1", "Slow 1"]
    with SimulatedEndpoint() as endpoint:
        for prompt in prompts:
            endpoint.script(prompt, tool_then_answer(command="sleep 30" if "Slow" in prompt else "echo hi"))
        write_dataset(tmp_path / "d.jsonl", [{"prompt": p} for p in prompts])
        cli = BatchCLI(tmp_path, endpoint)
        flags = ("--dataset_file=d.jsonl", "--batch_size=2", "--run_name=cc", "--num_workers=2")
        proc = cli.start(*flags)
        run_dir = cli.run_dir("cc")
        wait_until(lambda: sum(batch_prompts(run_dir).values()) == 2, "the quick prompts written", 120)
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=90) == 130
    err = (tmp_path / "runner.err").read_text()
    flat = " ".join(err.replace("│", " ").split())  # the summary panel wraps at the console width
    assert "Trajectories in merged file: 0" not in flat and "tools available" not in flat
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
