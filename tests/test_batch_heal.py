"""Runs that heal themselves (local backend): a worker process that dies is replaced, the
prompts it ran are requeued, and only a prompt that keeps killing its worker, or workers that
keep dying before any work is done, end a run with exit 1.

Real runner subprocesses against the simulated endpoint, real SIGKILLs from the test (as the
OOM killer or an operator sends them), and a real poison prompt: on the local sandbox a
command is its worker's child, so `kill -9 $PPID` kills the very process running the prompt.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import signal
import struct
import threading
import time
from collections import Counter
from collections.abc import Collection, Iterator
from multiprocessing.connection import Connection
from pathlib import Path

import pytest

from agent.batch.losses import Loss, LossBook, crash_loop_limit
from agent.servers.simulated.server import SimulatedEndpoint
from tests.support.batch import (
    BatchCLI,
    batch_prompts,
    commands_of,
    kill_started,
    read_json,
    read_jsonl,
    requested_prompts,
    session_pids,
    sleepy_run,
    tool_then_answer,
    trajectory_prompts,
    wait_until,
    worker_pids,
    write_dataset,
)

POISON = "kill -9 $PPID"  # the local sandbox's command is a child of its worker process


@pytest.fixture(autouse=True)
def no_stray_processes() -> Iterator[None]:
    yield
    kill_started()


def busy_worker(runner: int, exclude: Collection[int] = (), timeout: float = 120.0) -> int:
    """A worker of `runner` running a command now (as it is seen: it may finish at once)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        busy = [w for w in worker_pids(runner) if w not in exclude and commands_of(w)]
        if busy:
            return busy[0]
        time.sleep(0.05)
    raise AssertionError("gave up waiting for: a busy worker")


def losses_of(cli: BatchCLI, name: str) -> dict[str, object]:
    section: dict[str, object] = read_json(cli.run_dir(name) / "statistics.json")["worker_losses"]
    return section


def assert_exactly_once(cli: BatchCLI, name: str, prompts: list[str]) -> None:
    run_dir = cli.run_dir(name)
    assert trajectory_prompts(run_dir) == Counter(prompts)
    assert batch_prompts(run_dir) == Counter(prompts)


# A tool module whose import takes a while in a worker (not in the runner, which imports it too):
# the window in which a worker is alive but still starting, as it was for a second or more when
# each worker imported the SDK itself (now forked by a fork server that imported it once).
SLOW_START = """
import multiprocessing, time
from agent.protocols import Toolset, ToolSpec
if multiprocessing.parent_process() is not None:
    time.sleep(6)
SCHEMA = {"name": "noop", "description": "nothing", "parameters": {"type": "object", "properties": {}}}
TOOLSET = Toolset("slow_start", "a worker that takes a while to start", (ToolSpec("noop", SCHEMA, None),))
"""


def test_an_idle_worker_killed_is_replaced_and_the_run_completes(tmp_path: Path) -> None:
    # Killed as it starts, before it took a prompt: the jobs sent to it are
    # requeued without costing an attempt, a replacement runs them; no failure, exit 0.
    prompts = [f"Idle kill {i}" for i in range(8)]
    (tmp_path / "slow_start.py").write_text(SLOW_START)
    with SimulatedEndpoint() as endpoint:
        cli = sleepy_run(tmp_path, endpoint, prompts, 2)
        flags = ("--dataset_file=d.jsonl", "--batch_size=4", "--run_name=idle", "--num_workers=2")
        proc = cli.start(*flags, "--tools_module=slow_start.py")
        wait_until(lambda: len(worker_pids(proc.pid)) == 2, "two workers", 120)
        victim = max(worker_pids(proc.pid))
        survivor = min(worker_pids(proc.pid))
        os.kill(victim, signal.SIGKILL)
        wait_until(lambda: len(set(worker_pids(proc.pid)) - {victim}) == 2, "a replacement", 120)
        assert survivor in worker_pids(proc.pid)  # the other worker never noticed
        assert proc.wait(timeout=180) == 0
    assert read_jsonl(cli.run_dir("idle") / "failures.jsonl") == []
    assert_exactly_once(cli, "idle", prompts)
    losses = losses_of(cli, "idle")
    assert (losses["losses"], losses["replacements"], losses["lost_attempts"]) == (1, 1, 0)
    assert losses["exit_codes"] == {"-9": 1}
    err = (tmp_path / "runner.err").read_text()
    assert "exited unexpectedly" in err and "starting a replacement" in err
    assert "killed by SIGKILL, no prompt running) exited unexpectedly (the OOM killer? a kill?)" in err


def test_a_busy_worker_killed_loses_one_attempt_and_its_prompt_reruns(tmp_path: Path) -> None:
    # One conversation per worker: the killed worker was running exactly one prompt, which is
    # requeued (one lost attempt, in statistics.json and the log) and then done exactly once.
    prompts = [f"Busy kill {i}" for i in range(4)]
    with SimulatedEndpoint() as endpoint:
        cli = sleepy_run(tmp_path, endpoint, prompts, 3)
        flags = ("--dataset_file=d.jsonl", "--batch_size=4", "--run_name=busy", "--num_workers=2")
        proc = cli.start(*flags, "--max_inflight=2")
        wait_until(lambda: len(worker_pids(proc.pid)) == 2, "two workers", 120)
        wait_until(lambda: all(commands_of(w) for w in worker_pids(proc.pid)), "both workers busy", 120)
        os.kill(worker_pids(proc.pid)[0], signal.SIGKILL)
        assert proc.wait(timeout=180) == 0
        assert sum(requested_prompts(endpoint).values()) == len(prompts) + 1  # the lost one ran twice
    assert read_jsonl(cli.run_dir("busy") / "failures.jsonl") == []
    assert_exactly_once(cli, "busy", prompts)
    losses = losses_of(cli, "busy")
    assert (losses["losses"], losses["replacements"], losses["lost_attempts"]) == (1, 1, 1)
    assert "Busy kill" not in str(losses["failed_prompts"])
    assert losses["replacement_seconds"]["count"] == 1  # type: ignore[index]
    assert not list(cli.sandbox_root("busy").glob("*")), "the dead worker's sandboxes outlived it"
    # the dead worker's limiter counters never arrived: the endpoint figures say they are partial
    assert read_json(cli.run_dir("busy") / "statistics.json")["rate_limiting"]["partial"] is True


def test_a_worker_sent_sigterm_alone_hands_its_prompts_back_and_is_replaced(tmp_path: Path) -> None:
    # An operator's plain `kill <worker pid>`: the worker cancels its conversations (destroying
    # their sandboxes) and says goodbye; the run was not stopping, so its prompts are requeued
    # without a lost attempt and a replacement takes its slot.
    prompts = [f"Term {i}" for i in range(4)]
    with SimulatedEndpoint() as endpoint:
        cli = sleepy_run(tmp_path, endpoint, prompts, 3)
        flags = ("--dataset_file=d.jsonl", "--batch_size=4", "--run_name=term", "--num_workers=2")
        proc = cli.start(*flags, "--max_inflight=2")
        os.kill(busy_worker(proc.pid), signal.SIGTERM)
        assert proc.wait(timeout=180) == 0
    assert read_jsonl(cli.run_dir("term") / "failures.jsonl") == []
    assert_exactly_once(cli, "term", prompts)
    losses = losses_of(cli, "term")
    assert (losses["losses"], losses["replacements"], losses["lost_attempts"]) == (1, 1, 0)
    assert losses["exit_codes"] == {"0": 1}
    err = " ".join((tmp_path / "runner.err").read_text().split())
    assert "exit code 0, no prompt running) exited unexpectedly (a SIGTERM sent to it alone?)" in err


@pytest.mark.long
def test_the_same_worker_killed_again_and_again_still_completes_every_prompt(tmp_path: Path) -> None:
    # Worker slot after slot: each time a fresh worker runs a command it is killed (3 times).
    # The commands last 5 s: one seen running must still run when the kill lands (with 2 s, a
    # loaded machine let one end in between, and its worker died with no prompt).
    prompts = [f"Again {i}" for i in range(6)]
    with SimulatedEndpoint() as endpoint:
        cli = sleepy_run(tmp_path, endpoint, prompts, 5)
        flags = ("--dataset_file=d.jsonl", "--batch_size=3", "--run_name=again", "--num_workers=2")
        proc = cli.start(*flags, "--max_inflight=2", "--max_prompt_attempts=4")
        killed: list[int] = []
        for _ in range(3):
            victim = busy_worker(proc.pid, exclude=killed)
            os.kill(victim, signal.SIGKILL)
            killed.append(victim)
        assert proc.wait(timeout=240) == 0
    assert read_jsonl(cli.run_dir("again") / "failures.jsonl") == []
    assert_exactly_once(cli, "again", prompts)
    losses = losses_of(cli, "again")
    assert losses["losses"] == 3 and losses["lost_attempts"] == 3


def test_a_prompt_that_kills_its_worker_fails_after_max_attempts_and_resume_retries_it(
    tmp_path: Path,
) -> None:
    prompts = ["Poison", *(f"Fine {i}" for i in range(5))]
    with SimulatedEndpoint() as endpoint:
        endpoint.script("Poison", tool_then_answer(command=POISON))
        for prompt in prompts[1:]:
            endpoint.script(prompt, tool_then_answer(command="sleep 0.5"))
        write_dataset(tmp_path / "d.jsonl", [{"prompt": p} for p in prompts])
        cli = BatchCLI(tmp_path, endpoint)
        flags = ("--dataset_file=d.jsonl", "--batch_size=3", "--run_name=poison", "--num_workers=2")
        # one conversation per worker: no other prompt is running beside the poison when it kills
        done = cli.run(*flags, "--max_inflight=2", timeout=240)
        assert done.returncode == 1, done
        assert requested_prompts(endpoint)["Poison"] == 2  # --max_prompt_attempts=2 by default
        failures = read_jsonl(cli.run_dir("poison") / "failures.jsonl")
        assert [(f["prompt_index"], f["error_class"]) for f in failures] == [(0, "worker_lost")]
        assert "2 times" in failures[0]["message"] and "--max_prompt_attempts=2" in failures[0]["message"]
        assert trajectory_prompts(cli.run_dir("poison")) == Counter(prompts[1:])
        losses = losses_of(cli, "poison")
        assert losses["failed_prompts"] == [0] and losses["lost_attempts"] == 2
        assert done.stderr.rstrip().splitlines()[-1].startswith("Not done: 1 failed of 6 prompts")
        flat = " ".join(done.stderr.replace("│", " ").split())
        assert "prompt attempts lost: 2; failed after --max_prompt_attempts=2: prompts 0" in flat
        report = (cli.run_dir("poison") / "report.html").read_text()
        assert "<td>Failed in this invocation</td><td>1</td>" in report

        endpoint.script("Poison", tool_then_answer())  # whatever killed it is fixed
        resumed = cli.run(*flags, "--resume", timeout=240)
        assert resumed.returncode == 0, resumed
        assert_exactly_once(cli, "poison", prompts)
        # the run's report knows the output's keys from its merge: the failure is done since
        report = (cli.run_dir("poison") / "report.html").read_text()
        assert "<td>Failed in this invocation</td><td>0</td>" in report


def kill_every_worker(runner: int, stop: threading.Event, killed: list[int]) -> None:
    """Kill each worker of `runner` the moment it appears (a crash loop made from outside)."""
    while not stop.is_set():
        for pid in worker_pids(runner):
            if pid not in killed:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    continue
                killed.append(pid)
        time.sleep(0.02)


def test_workers_dying_as_they_start_stop_the_run_with_one_line(tmp_path: Path) -> None:
    prompts = [f"Loop {i}" for i in range(4)]
    with SimulatedEndpoint() as endpoint:
        cli = sleepy_run(tmp_path, endpoint, prompts, 1)
        # One prompt a worker at a time: a death loses at most one of the 8 attempts, so the
        # prompts cannot all run out of attempts (a run that ends, every prompt failed) before
        # the fifth death stops it. On a loaded machine each worker took two jobs before the
        # killer saw it, and 4 deaths used up all 8.
        flags = ("--dataset_file=d.jsonl", "--batch_size=4", "--run_name=loop", "--num_workers=2")
        started = time.monotonic()
        proc = cli.start(*flags, "--max_inflight=2")
        stop, killed = threading.Event(), []
        killer = threading.Thread(target=kill_every_worker, args=(proc.pid, stop, killed), daemon=True)
        killer.start()
        try:
            assert proc.wait(timeout=120) == 1
        finally:
            stop.set()
            killer.join()
        elapsed = time.monotonic() - started
    limit = crash_loop_limit(2)
    assert len(killed) >= limit, killed  # the runner stops at limit + 1 deaths (the last may be its own)
    assert elapsed < 90, elapsed  # bounded: no endless replacing
    err = (tmp_path / "runner.err").read_text()
    [line] = [x for x in err.splitlines() if "crash loop" in x and "stopping the run" in x]
    died = re.search(r"(\d+) workers died", line)
    assert died is not None and int(died[1]) >= limit + 1 and "exit codes: -9 x" in line
    # How far each prompt got depends on how soon the killer saw each worker (on a loaded machine
    # one may take a job first, twice): never done, each one not started, in flight or failed,
    # and every failure on record a lost worker's.
    completion = read_json(cli.run_dir("loop") / "statistics.json")["completion"]
    assert completion["stopped_by"] == "crash_loop" and completion["in_output"] == 0
    parts = ("not_started", "interrupted_in_flight", "failed")
    assert sum(completion[part] for part in parts) == 4, completion
    failures = read_jsonl(cli.run_dir("loop") / "failures.jsonl")
    assert {record["error_class"] for record in failures} <= {"worker_lost"}
    assert len({record["prompt_key"] for record in failures}) >= completion["failed"]
    assert "(workers kept dying: a crash loop)" in err.rstrip().splitlines()[-1]


def test_kill_9_of_the_runner_during_a_replacement_then_resume_is_exactly_once(tmp_path: Path) -> None:
    prompts = [f"Replace crash {i}" for i in range(6)]
    with SimulatedEndpoint() as endpoint:
        cli = sleepy_run(tmp_path, endpoint, prompts, 2)
        flags = ("--dataset_file=d.jsonl", "--batch_size=3", "--run_name=rc", "--num_workers=2")
        proc = cli.start(*flags, "--max_inflight=2")
        victim = busy_worker(proc.pid)
        before = set(worker_pids(proc.pid))
        os.kill(victim, signal.SIGKILL)
        wait_until(lambda: bool(set(worker_pids(proc.pid)) - before), "the replacement to start", 60)
        os.kill(proc.pid, signal.SIGKILL)  # while the replacement is still importing
        proc.wait(timeout=30)
        wait_until(lambda: not session_pids(proc.pid), "the killed runner's workers to exit")
        for prompt in prompts:
            endpoint.script(prompt, tool_then_answer())
        resumed = cli.run(*flags, "--resume", timeout=240)
        assert resumed.returncode == 0, resumed
    assert_exactly_once(cli, "rc", prompts)


def die_mid_message(events: Connection) -> None:
    """A worker killed while it wrote an event: a message's header and part of its body."""
    os.write(events.fileno(), struct.pack("!i", 1000) + b"half")
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_worker_killed_mid_message_reads_as_eof_not_a_hang() -> None:
    # What made a death fatal before: on one shared queue a half-written message (or a held
    # lock) wedged every worker. On its own pipe, whose other end the parent closed, it is EOF.
    ctx = multiprocessing.get_context("spawn")
    events_in, events_out = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=die_mid_message, args=(events_out,))
    proc.start()
    events_out.close()
    proc.join(timeout=60)
    assert proc.exitcode == -signal.SIGKILL
    assert events_in.poll(10)
    with pytest.raises((EOFError, OSError), match="end of file"):  # mid-message: OSError
        events_in.recv()
    events_in.close()


def test_the_loss_book_counts_attempts_and_names_what_a_crash_loop_had_in_common() -> None:
    book = LossBook(max_attempts=2, crash_limit=crash_loop_limit(1))
    assert book.lose(Loss(0.0, 0, 10, -9, (3,)), {"k3": 3}) == []
    assert book.lose(Loss(1.0, 0, 11, -9, (3,)), {"k3": 3}) == ["k3"]
    assert book.gave_up == [3] and book.crash_loop(1.0) is None
    for n in range(3):
        book.lose(Loss(2.0 + n, 0, 12 + n, -9, (3,)), {"k3": 3})
    line = book.crash_loop(5.0)
    assert line is not None and "5 workers died within 5 s" in line
    assert "exit codes: -9 x5" in line and "every one was running prompt(s) 3" in line
    book.progress()  # a prompt answered: no crash loop
    assert book.crash_loop(5.0) is None
    for n in range(5):
        book.lose(Loss(100.0 + n, 0, 20 + n, 1, ()), {})
    assert "none was running a prompt (they died starting up?)" in str(book.crash_loop(104.0))
    assert book.crash_loop(200.0) is None  # past the window, those losses no longer count
