"""Crash safety of the batch runner, with real signals on the real subprocess.

SIGKILL to the runner's main pid (as an OOM kill does) at random moments, then `--resume`
until done: every valid prompt ends up exactly once in trajectories.jsonl or discarded.jsonl.
After each kill no process of the runner lives on and nothing in the run directory changes.
Torn last lines are repaired, a second runner on the same directory is refused, and Ctrl-C
stops cleanly (exit 130, checkpoint written, sandboxes and their processes gone).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.servers.simulated.server import SimulatedEndpoint
from tests.support.batch import (
    BatchCLI,
    batch_prompts,
    human_prompt,
    kill_started,
    read_json,
    read_jsonl,
    requested_prompts,
    session_pids,
    snapshot,
    tool_then_answer,
    trajectory_prompts,
    wait_until,
    worker_pids,
    write_dataset,
)


@pytest.fixture(autouse=True)
def no_stray_processes() -> Iterator[None]:
    yield
    kill_started()


SEED = int(os.environ.get("BATCH_CRASH_SEED", "20240611"))  # vary it to soak-test the kill moments
KILL_ROUNDS = 6
TORN_TAIL = b'{"prompt_index": 3, "conversations": [{"from": "human", "value": "torn'


def crash_dataset(path: Path, rng: random.Random) -> tuple[Counter[str], set[str]]:
    """~60 prompts (three repeated, two invalid lines, three without reasoning), each scripted
    later with its own latency. Returns (expected prompt copies, no-reasoning prompts)."""
    unique = [f"Crash prompt {i}: count to {i}" for i in range(55)]
    rows: list[dict[str, Any] | str] = [{"prompt": p} for p in unique]
    for repeated, position in ((unique[3], 20), (unique[3], 41), (unique[17], 50)):
        rows.insert(position, {"prompt": repeated})
    rows.insert(10, "{ not json")
    rows.insert(33, {"prompt": 7})
    write_dataset(path, rows)
    expected = Counter(r["prompt"] for r in rows if isinstance(r, dict) and isinstance(r["prompt"], str))
    return expected, set(rng.sample(unique, 3))


def script_all(endpoint: SimulatedEndpoint, prompts: set[str], silent: set[str], rng: random.Random) -> None:
    for prompt in sorted(prompts):
        endpoint.script(
            prompt, tool_then_answer(reasoning=prompt not in silent, delay=rng.uniform(0.05, 0.2))
        )


def kill_main_pid(proc: subprocess.Popen[bytes], cli: BatchCLI, run_name: str) -> None:
    """SIGKILL only the runner's main process, then prove nothing of it lives on or writes."""
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    wait_until(lambda: not session_pids(proc.pid), f"the workers of killed runner {proc.pid} to exit")
    run_dir = cli.run_dir(run_name)
    if run_dir.exists():
        before = snapshot(run_dir)
        time.sleep(0.5)
        assert snapshot(run_dir) == before, "a file of the run changed after its runner was killed"
    sandboxes = cli.sandbox_root(run_name)
    assert not sandboxes.exists() or not list(sandboxes.iterdir()), list(sandboxes.iterdir())


def append_torn_line(run_dir: Path) -> Path | None:
    batches = sorted(run_dir.glob("batch_*.jsonl"))
    if not batches:
        return None
    with batches[-1].open("ab") as handle:
        handle.write(TORN_TAIL)
    return batches[-1]


def strike(
    proc: subprocess.Popen[bytes], endpoint: SimulatedEndpoint, round_no: int, rng: random.Random
) -> None:
    """Wait for a random moment of this round: during start-up in round 0, later after a random
    number of further requests (or the runner's exit) plus a random pause."""
    if round_no == 0:
        time.sleep(rng.uniform(0.2, 1.5))
        return
    target = len(endpoint.requests) + rng.randint(1, 40)

    def progressed() -> bool:
        return len(endpoint.requests) >= target or proc.poll() is not None

    wait_until(progressed, "the runner to make progress", timeout=120)
    time.sleep(rng.uniform(0.0, 0.4))


def kill_rounds(cli: BatchCLI, flags: tuple[str, ...], rng: random.Random) -> tuple[int, Path | None]:
    """Start, SIGKILL at a random moment, repeat with --resume. Returns (kills that landed while
    workers ran, the batch file a torn line was appended to)."""
    assert cli.endpoint is not None
    killed_with_workers, torn_into = 0, None
    for round_no in range(KILL_ROUNDS):
        resume = ("--resume",) if round_no else ()
        # round 0 strikes during start-up: a fresh interpreter's, imports included
        proc = cli.start(*flags, *resume, log_name=f"round{round_no}", fresh=round_no == 0)
        strike(proc, cli.endpoint, round_no, rng)
        if proc.poll() is not None:
            break  # it finished before the blow fell
        killed_with_workers += len(worker_pids(proc.pid)) > 0
        kill_main_pid(proc, cli, "crash")
        if round_no == 2:
            torn_into = append_torn_line(cli.run_dir("crash"))
    return killed_with_workers, torn_into


@pytest.mark.long
def test_sigkill_at_random_moments_then_resume_is_exactly_once(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    with SimulatedEndpoint() as endpoint:
        cli = BatchCLI(tmp_path, endpoint)
        expected, silent = crash_dataset(tmp_path / "crash.jsonl", rng)
        script_all(endpoint, set(expected), silent, rng)
        # --max_inflight=4: a few conversations at a time, so the kills land mid-stream
        flags: tuple[str, ...] = ("--dataset_file=crash.jsonl", "--batch_size=7", "--run_name=crash")
        flags += ("--num_workers=2", "--max_inflight=4")
        killed_with_workers, torn_into = kill_rounds(cli, flags, rng)
        final = cli.run(*flags, "--resume")
        assert final.returncode == 0, final

    run_dir = cli.run_dir("crash")
    assert killed_with_workers >= 3, "the kills did not land while workers ran"
    kept = trajectory_prompts(run_dir)
    dropped = Counter(human_prompt(d["entry"]) for d in read_jsonl(run_dir / "discarded.jsonl"))
    assert kept + dropped == expected  # every valid prompt copy, exactly once
    assert set(dropped) == silent
    assert batch_prompts(run_dir) == kept  # not even a batch file holds a line twice
    assert read_jsonl(run_dir / "failures.jsonl") == []
    every_index = list(range(sum(expected.values())))
    entries = read_jsonl(run_dir / "trajectories.jsonl")
    entries += [d["entry"] for d in read_jsonl(run_dir / "discarded.jsonl")]
    assert sorted(e["prompt_index"] for e in entries) == every_index
    assert read_json(run_dir / "checkpoint.json")["completed_prompts"] == every_index
    assert read_json(run_dir / "statistics.json")["trajectories"]["entries"] == sum(kept.values())
    # what the next resume loads instead of reading: every shard's line records, the scan
    shards = {f".{path.name}.records" for path in run_dir.glob("batch_*.jsonl")}
    assert {path.name for path in run_dir.glob(".*.records")} == shards and (
        run_dir / ".dataset_scan"
    ).is_file()
    if torn_into is not None:
        torn = torn_into.with_name(torn_into.name + ".torn")
        assert TORN_TAIL in torn.read_bytes()
        for path in run_dir.glob("batch_*.jsonl"):  # every line whole again
            assert all(json.loads(line) for line in path.read_text().splitlines())


def sandbox_sleepers(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                continue
            if marker.encode() in cmdline and b"pytest" not in cmdline:
                found.append(int(entry.name))
    return found


def lines_in_batches(run_dir: Path) -> int:
    """Whole lines in the batch files of a run still writing them: a line being appended is
    not counted until its newline is there (a reader can see its first 8 KiB alone)."""
    return sum(path.read_bytes().count(b"\n") for path in run_dir.glob("batch_*.jsonl"))


@pytest.fixture
def marker() -> Iterator[str]:
    """A `sleep` duration no other process uses, to find the sandboxed sleepers; any left
    after the test (when it failed) are killed."""
    text = f"{random.Random(SEED).randint(100, 899)}.{os.getpid() % 1000}"
    yield text
    for pid in sandbox_sleepers(text):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_second_runner_is_refused_and_ctrl_c_stops_cleanly(tmp_path: Path, marker: str) -> None:
    prompts = ["Quick task 0", "Long task 0", "Quick task 1", "Long task 1"]
    with SimulatedEndpoint() as endpoint:
        for prompt in prompts[1::2]:
            endpoint.script(prompt, tool_then_answer(command=f"sleep {marker}"))
        cli = BatchCLI(tmp_path, endpoint)
        write_dataset(tmp_path / "long.jsonl", [{"prompt": p} for p in prompts])
        flags = ("--dataset_file=long.jsonl", "--batch_size=2", "--run_name=cc", "--num_workers=2")
        run_dir, sandboxes = cli.run_dir("cc"), cli.sandbox_root("cc")
        proc = cli.start(*flags)
        try:
            wait_until(lambda: len(sandbox_sleepers(marker)) >= 2, "sandboxed commands to run", 120)
            wait_until(lambda: lines_in_batches(run_dir) == 2, "the quick prompts to be written", 120)
            assert sandboxes.exists() and list(sandboxes.iterdir())

            second = cli.run(*flags, "--resume")
            assert second.returncode not in (0, None), second
            lines = [line for line in second.stderr.splitlines() if line.strip()]
            assert len(lines) == 1 and "in use by another runner" in lines[0], second
            assert f"pid {proc.pid}" in lines[0]

            os.killpg(proc.pid, signal.SIGINT)  # what a terminal sends on Ctrl-C
            assert proc.wait(timeout=90) == 130
        finally:
            if proc.poll() is None:  # failed before it stopped: the rest is the fixture's job
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
        assert read_json(run_dir / "checkpoint.json")["completed_prompts"] == [0, 2]
        wait_until(lambda: not session_pids(proc.pid), "the workers to exit")
        assert not sandboxes.exists() or not list(sandboxes.iterdir()), list(sandboxes.iterdir())
        assert sandbox_sleepers(marker) == []
        assert read_jsonl(run_dir / "failures.jsonl") == []  # interrupted is not failed

        for prompt in prompts[1::2]:
            endpoint.script(prompt, tool_then_answer())
        endpoint.clear_requests()
        resumed = cli.run(*flags, "--resume")
        assert resumed.returncode == 0, resumed
        assert requested_prompts(endpoint) == Counter(prompts[1::2])
        assert trajectory_prompts(run_dir) == Counter(prompts)


def sandbox_owners(root: Path) -> set[int]:
    """Pids of the workers holding a local sandbox open now (from the sandboxes' owner markers)."""
    owners = set()
    for marker in root.glob("*.owner") if root.exists() else ():
        try:
            owners.add(int(json.loads(marker.read_text())["pid"]))
        except (FileNotFoundError, ValueError):
            continue  # removed or being written as we looked
    return owners


def test_a_killed_worker_is_replaced_and_its_sandboxes_do_not_outlive_it(tmp_path: Path) -> None:
    # A worker that dies unannounced (an OOM kill) is replaced: its prompts are requeued and run
    # again, every prompt ends up exactly once, and the sandboxes it held are removed in the run.
    prompts = [f"Worker loss {i}" for i in range(16)]
    with SimulatedEndpoint() as endpoint:
        for prompt in prompts:
            endpoint.script(prompt, tool_then_answer(delay=0.15))
        cli = BatchCLI(tmp_path, endpoint)
        write_dataset(tmp_path / "w.jsonl", [{"prompt": p} for p in prompts])
        flags = ("--dataset_file=w.jsonl", "--batch_size=4", "--run_name=wl", "--num_workers=2")
        proc = cli.start(*flags, "--max_inflight=4")
        try:
            busy = cli.sandbox_root("wl")
            wait_until(lambda: bool(sandbox_owners(busy) & set(worker_pids(proc.pid))), "a busy worker", 120)
            victim = min(sandbox_owners(busy) & set(worker_pids(proc.pid)))
            os.kill(victim, signal.SIGKILL)  # an OOM kill
            assert proc.wait(timeout=120) == 0
        finally:
            if proc.poll() is None:  # failed before it stopped: the rest is the fixture's job
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
        run_dir = cli.run_dir("wl")
        assert read_jsonl(run_dir / "failures.jsonl") == []
        assert trajectory_prompts(run_dir) == Counter(prompts)
        assert batch_prompts(run_dir) == Counter(prompts)
        assert read_json(run_dir / "statistics.json")["worker_losses"]["losses"] == 1
        assert victim not in sandbox_owners(busy), "the dead worker's sandboxes outlived it"


def _small_files() -> None:
    """In the runner's process (and all it starts): files of at most 24 KB, a write beyond that
    fails with EFBIG (SIGXFSZ ignored) as a full disk fails one with ENOSPC."""
    import resource

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (24_000, 24_000))


def test_a_disk_that_stops_taking_writes_is_one_line_and_resume_finishes(
    tmp_path: Path, sim_endpoint: SimulatedEndpoint
) -> None:
    """Once a 40-line traceback, no summary. Files capped at 24 KB stand in for a full disk."""
    prompts = [f"Disk prompt {i}" for i in range(60)]
    write_dataset(tmp_path / "d.jsonl", [{"prompt": p} for p in prompts])
    cli = BatchCLI(tmp_path, sim_endpoint)
    flags = ("--dataset_file=d.jsonl", "--batch_size=60", "--run_name=disk", "--num_workers=1")
    argv = cli.argv(*flags)
    full = subprocess.run(argv, cwd=tmp_path, env=cli.env(), capture_output=True, text=True,
                          timeout=300, preexec_fn=_small_files, check=False)  # fmt: skip
    assert full.returncode == 1, full.stderr[-3000:]
    assert "Traceback" not in full.stderr, full.stderr[-3000:]
    last = full.stderr.rstrip().splitlines()[-1]
    assert last.startswith("error: cannot write ") and "File too large" in last and "--resume" in last, last
    done = cli.run(*flags, "--resume")
    assert done.returncode == 0, done
    assert trajectory_prompts(cli.run_dir("disk")) == Counter(prompts)  # each once
