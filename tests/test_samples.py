"""--samples_per_prompt=N, end to end (the real batch_runner.py against the simulated endpoint
over HTTP, local sandboxes): each (prompt, sample) is one unit of work with its own key,
sandbox, sampled toolsets and model seed; entries carry `metadata.prompt_id` and
`metadata.sample_index`; kill -9 then --resume leaves every (prompt, sample) exactly once;
growing N on resume runs only the new samples, shrinking it keeps what is written; a run of
one sample per prompt writes the entries it wrote before samples existed, plus the two keys."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.servers.simulated.server import SimulatedEndpoint, Turn
from agent.store.keys import prompt_key, sample_key, split_key
from agent.store.merge import merge_run
from agent.toolbox.distributions import sample_toolsets_from_distribution
from tests.support.batch import (
    BatchCLI,
    human_prompt,
    kill_started,
    read_json,
    read_jsonl,
    requested_prompts,
    session_pids,
    tool_then_answer,
    wait_until,
    write_dataset,
)

ANSWER = [Turn(content="All done.", reasoning="Let me think.")]


@pytest.fixture(autouse=True)
def no_stray_processes() -> Iterator[None]:
    yield
    kill_started()


def entries_of(run_dir: Path) -> list[dict[str, Any]]:
    return read_jsonl(run_dir / "trajectories.jsonl")


def units(entries: list[dict[str, Any]]) -> Counter[tuple[str, int]]:
    return Counter((e["metadata"]["prompt_id"], e["metadata"]["sample_index"]) for e in entries)


def tool_output(entry: dict[str, Any]) -> str:
    return str(next(t["value"] for t in entry["conversations"] if t["from"] == "tool"))


def test_three_samples_per_prompt_are_three_units_with_their_own_keys_and_sandboxes(
    tmp_path: Path, sim_endpoint: SimulatedEndpoint
) -> None:
    # a repeated prompt stays two prompts (two ids), each with its three samples
    write_dataset(
        tmp_path / "d.jsonl", [{"prompt": "where am I"}, {"prompt": "who"}, {"prompt": "where am I"}]
    )
    sim_endpoint.set_default_script(tool_then_answer(command="pwd"))
    cli = BatchCLI(tmp_path, sim_endpoint)
    flags = ("--dataset_file=d.jsonl", "--batch_size=4", "--run_name=s3", "--num_workers=2")
    done = cli.run(*flags, "--samples_per_prompt=3")
    assert done.returncode == 0, done
    run_dir = cli.run_dir("s3")
    entries = entries_of(run_dir)
    ids = [prompt_key("where am I", 0), prompt_key("who", 0), prompt_key("where am I", 1)]
    assert units(entries) == Counter((pid, s) for pid in ids for s in range(3))
    # merged prompt-major: prompt 0's samples 0..2, then prompt 1's…, whatever the finish order
    assert [(e["metadata"]["prompt_id"], e["metadata"]["sample_index"]) for e in entries] == [
        (pid, s) for pid in ids for s in range(3)
    ]
    for entry in entries:
        meta = entry["metadata"]
        pid, s = meta["prompt_id"], meta["sample_index"]
        assert meta["prompt_key"] == (pid if s == 0 else f"{pid}#{s}")
        number = ids.index(pid) * 3 + s  # units fill the shards in order: --batch_size counts units
        assert (entry["prompt_index"], meta["batch_num"]) == (number, number // 4)
    assert len({e["metadata"]["prompt_key"] for e in entries}) == 9
    assert len({tool_output(e) for e in entries}) == 9  # nine sandboxes: one per sample
    assert sorted(p.name for p in run_dir.glob("batch_*.jsonl")) == [
        "batch_0.jsonl",
        "batch_1.jsonl",
        "batch_2.jsonl",
    ]
    stats = read_json(run_dir / "statistics.json")
    assert (stats["samples_per_prompt"], stats["total_prompts"], stats["total_attempts"]) == (3, 3, 9)
    completion = stats["completion"]
    assert (completion["valid_prompts"], completion["valid_attempts"], completion["in_output"]) == (3, 9, 9)
    assert read_json(run_dir / "checkpoint.json")["samples_per_prompt"] == 3
    assert (
        "Done: all 9 attempts (3 prompts × 3 samples) are in trajectories.jsonl" in done.stdout + done.stderr
    )


def toolsets_by_key(run_dir: Path) -> dict[str, list[str]]:
    return {e["metadata"]["prompt_key"]: e["toolsets_used"] for e in entries_of(run_dir)}


def test_each_sample_draws_its_own_toolsets_reproducibly_and_sample_zero_as_before(
    tmp_path: Path, sim_endpoint: SimulatedEndpoint
) -> None:
    prompts = [f"toolsets {i}" for i in range(4)]
    write_dataset(tmp_path / "d.jsonl", [{"prompt": p} for p in prompts])
    sim_endpoint.set_default_script(ANSWER)
    cli = BatchCLI(tmp_path, sim_endpoint)
    flags = (
        "--dataset_file=d.jsonl",
        "--batch_size=8",
        "--distribution=balanced",
        "--allow_missing_toolsets",
    )
    flags += ("--seed=7", "--num_workers=1", "--samples_per_prompt=4")
    for name in ("a", "b"):
        done = cli.run(*flags, f"--run_name={name}")
        assert done.returncode == 0, done
    first, second = toolsets_by_key(cli.run_dir("a")), toolsets_by_key(cli.run_dir("b"))
    assert first == second and len(first) == 16  # the same seed, the same draws
    for prompt in prompts:
        pid = prompt_key(prompt, 0)
        samples = [first[pid if s == 0 else f"{pid}#{s}"] for s in range(4)]
        assert len({tuple(t) for t in samples}) > 1, samples  # samples draw apart
        # sample 0 keeps the derivation of a run without samples: Random(f"{seed}:{prompt key}")
        assert samples[0] == sample_toolsets_from_distribution("balanced", random.Random(f"7:{pid}"))
    distinct = {tuple(t) for t in first.values()}
    assert len(distinct) > 4  # over the distribution, not one draw repeated


def seeds_by_prompt(endpoint: SimulatedEndpoint) -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for request in endpoint.requests:
        user = next(str(m["content"]) for m in request.body["messages"] if m.get("role") == "user")
        found.setdefault(user, []).append(request.body.get("seed"))
    return {prompt: sorted(seeds) for prompt, seeds in found.items()}


def test_sample_s_sends_the_model_seed_plus_s(tmp_path: Path, sim_endpoint: SimulatedEndpoint) -> None:
    rows = [{"prompt": "flag seed"}, {"prompt": "row seed", "sampling": {"seed": 100}}]
    write_dataset(tmp_path / "d.jsonl", rows)
    sim_endpoint.set_default_script(ANSWER)
    cli = BatchCLI(tmp_path, sim_endpoint)
    done = cli.run(
        "--dataset_file=d.jsonl", "--batch_size=8", "--run_name=seed", "--num_workers=1",
        "--samples_per_prompt=3", "--model_seed=11",
    )  # fmt: skip
    assert done.returncode == 0, done
    assert seeds_by_prompt(sim_endpoint) == {"flag seed": [11, 12, 13], "row seed": [100, 101, 102]}
    for entry in entries_of(cli.run_dir("seed")):
        base = 11 if human_prompt(entry) == "flag seed" else 100
        assert entry["metadata"]["sampling"]["seed"] == base + entry["metadata"]["sample_index"]


def test_sigkill_then_resume_leaves_every_prompt_sample_exactly_once(tmp_path: Path) -> None:
    rng = random.Random(23)
    prompts = [f"crash sample prompt {i}" for i in range(8)]
    write_dataset(tmp_path / "d.jsonl", [{"prompt": p} for p in prompts])
    with SimulatedEndpoint() as endpoint:
        endpoint.set_default_script(tool_then_answer(delay=0.1))
        cli = BatchCLI(tmp_path, endpoint)
        flags = ("--dataset_file=d.jsonl", "--batch_size=5", "--run_name=crash", "--samples_per_prompt=4")
        flags += ("--num_workers=2", "--max_inflight=4")
        for round_no in range(2):
            proc = cli.start(*flags, *(("--resume",) if round_no else ()), log_name=f"round{round_no}")
            target = len(endpoint.requests) + rng.randint(4, 16)
            deadline_ok = _wait_requests(endpoint, proc, target)
            if not deadline_ok:
                break  # it finished before the blow fell
            kill_runner(proc)
        final = cli.run(*flags, "--resume")
        assert final.returncode == 0, final
    run_dir = cli.run_dir("crash")
    every = Counter((prompt_key(p, 0), s) for p in prompts for s in range(4))
    kept = units(entries_of(run_dir))
    assert kept == every  # nothing is discarded here: every (prompt, sample) once, in the output
    in_batches = Counter(
        (e["metadata"]["prompt_id"], e["metadata"]["sample_index"])
        for path in run_dir.glob("batch_*.jsonl")
        for e in read_jsonl(path)
    )
    assert in_batches == every  # not even a batch file holds a unit twice
    assert sorted(e["prompt_index"] for e in entries_of(run_dir)) == list(range(32))
    assert read_json(run_dir / "checkpoint.json")["completed_prompts"] == list(range(32))


def kill_runner(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the runner's main process (as an OOM kill does); its workers then exit."""
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    wait_until(lambda: not session_pids(proc.pid), f"the workers of killed runner {proc.pid} to exit")


def _wait_requests(endpoint: SimulatedEndpoint, proc: subprocess.Popen[bytes], target: int) -> bool:
    """Wait until the endpoint saw `target` requests (True) or the runner exited (False)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        if len(endpoint.requests) >= target:
            return True
        time.sleep(0.02)
    raise AssertionError("the runner made no progress")


def test_growing_n_on_resume_runs_only_the_new_samples_and_shrinking_keeps_them(
    tmp_path: Path, sim_endpoint: SimulatedEndpoint
) -> None:
    prompts = ["grow a", "grow b", "grow c"]
    write_dataset(tmp_path / "d.jsonl", [{"prompt": p} for p in prompts])
    sim_endpoint.set_default_script(ANSWER)
    cli = BatchCLI(tmp_path, sim_endpoint)
    flags = ("--dataset_file=d.jsonl", "--batch_size=4", "--run_name=grow", "--num_workers=1")
    assert (first := cli.run(*flags)).returncode == 0, first
    assert requested_prompts(sim_endpoint) == Counter(prompts)
    sim_endpoint.clear_requests()
    grown = cli.run(*flags, "--resume", "--samples_per_prompt=3")
    assert grown.returncode == 0, grown
    assert requested_prompts(sim_endpoint) == Counter({p: 2 for p in prompts})  # samples 1 and 2 only
    run_dir = cli.run_dir("grow")
    assert units(entries_of(run_dir)) == Counter((prompt_key(p, 0), s) for p in prompts for s in range(3))
    sim_endpoint.clear_requests()
    shrunk = cli.run(*flags, "--resume", "--samples_per_prompt=2")
    assert shrunk.returncode == 0, shrunk
    assert sim_endpoint.requests == []
    assert "3 sample(s) beyond --samples_per_prompt=2 already written: kept as they are" in shrunk.stderr
    assert len(entries_of(run_dir)) == 9
    said = " ".join((shrunk.stdout + shrunk.stderr).split())  # the last line counts all 9, not 6
    assert (
        "Done: all 6 attempts (3 prompts × 2 samples) are in trajectories.jsonl or discarded.jsonl " in said
    )
    assert "(as are 3 samples beyond --samples_per_prompt=2, written earlier)" in said
    completion = read_json(run_dir / "statistics.json")["completion"]
    assert (completion["valid_attempts"], completion["extra_samples"]) == (6, 3)


# The metadata keys a run wrote before samples existed, in their order.
LEGACY_METADATA = [
    "batch_num",
    "timestamp",
    "model",
    "prompt_key",
    "outcome",
    "usage",
    "toolsets_unavailable",
]


def test_one_sample_per_prompt_writes_the_entries_it_wrote_before_plus_the_two_keys(
    tmp_path: Path, sim_endpoint: SimulatedEndpoint
) -> None:
    write_dataset(tmp_path / "d.jsonl", [{"prompt": "same 0", "metadata": {"mine": 1}}, {"prompt": "same 1"}])
    sim_endpoint.set_default_script(tool_then_answer())
    cli = BatchCLI(tmp_path, sim_endpoint)
    flags = ("--dataset_file=d.jsonl", "--batch_size=4", "--num_workers=1", "--seed=3")
    assert (plain := cli.run(*flags, "--run_name=plain")).returncode == 0, plain
    assert (one := cli.run(*flags, "--run_name=one", "--samples_per_prompt=1")).returncode == 0, one
    assert (four := cli.run(*flags, "--run_name=four", "--samples_per_prompt=4")).returncode == 0, four
    plain_entries, one_entries = entries_of(cli.run_dir("plain")), entries_of(cli.run_dir("one"))
    for entry in plain_entries:
        meta = entry["metadata"]
        assert (meta.pop("prompt_id"), meta.pop("sample_index")) == (meta["prompt_key"], 0)
        assert [k for k in meta if k != "mine"] == LEGACY_METADATA  # nothing else added or moved
    for entry in one_entries:
        del entry["metadata"]["prompt_id"], entry["metadata"]["sample_index"]
    assert [_timeless(e) for e in one_entries] == [_timeless(e) for e in plain_entries]
    # the first of four samples is the one-sample run's attempt: the same toolsets and prompt
    first_of_four = [e for e in entries_of(cli.run_dir("four")) if e["metadata"]["sample_index"] == 0]
    assert [(human_prompt(e), e["toolsets_used"]) for e in first_of_four] == [
        (human_prompt(e), e["toolsets_used"]) for e in plain_entries
    ]
    assert "Done: all 2 valid prompts are in trajectories.jsonl" in plain.stdout + plain.stderr


def _timeless(entry: dict[str, Any]) -> str:
    """An entry as JSON without what differs between two identical runs: the time it was written
    and the ids the endpoint gives tool calls (random)."""
    entry = {**entry, "metadata": {k: v for k, v in entry["metadata"].items() if k != "timestamp"}}
    return re.sub(r"call_[0-9a-f]{24}", "call_ID", json.dumps(entry))


def test_sample_keys_split_back_and_a_prompt_key_is_its_sample_zero() -> None:
    pid = prompt_key("some prompt", 2)
    assert sample_key(pid, 0) == pid and split_key(pid) == (pid, 0)
    assert sample_key(pid, 3) == f"{pid}#3" and split_key(f"{pid}#3") == (pid, 3)
    for odd in (f"{pid}#0", f"{pid}#03", f"{pid}#x", f"{pid}#"):  # never made: a key as it is
        assert split_key(odd) == (odd, 0)


def test_the_merge_writes_each_shard_in_prompt_index_order(tmp_path: Path) -> None:
    # workers finish in any order: the shard holds 5, 3, 4 (and 3 again: the first line wins)
    lines = [(5, "late"), (3, "first"), (4, "middle"), (3, "second copy")]
    write_dataset(
        tmp_path / "batch_1.jsonl",
        [{"prompt_index": n, "metadata": {"prompt_key": f"k{n}"}, "text": text} for n, text in lines],
    )
    write_dataset(tmp_path / "batch_0.jsonl", [{"prompt_index": 1, "metadata": {"prompt_key": "k1"}}])
    report = merge_run(tmp_path, valid_tools=())
    merged = read_jsonl(tmp_path / "trajectories.jsonl")
    assert [(e["prompt_index"], e.get("text")) for e in merged] == [
        (1, None),
        (3, "first"),
        (4, "middle"),
        (5, "late"),
    ]
    assert (report.written, report.duplicates) == (4, 1)


def test_more_attempts_than_a_run_plans_is_one_line_and_exit_2(
    tmp_path: Path, sim_endpoint: SimulatedEndpoint
) -> None:
    """Once a MemoryError traceback, exit 1, and a run_config.json left behind."""
    write_dataset(tmp_path / "d.jsonl", [{"prompt": "one"}, {"prompt": "two"}])
    cli = BatchCLI(tmp_path, sim_endpoint)
    huge = cli.run(
        "--dataset_file=d.jsonl", "--batch_size=2", "--run_name=huge", "--samples_per_prompt=100000000000"
    )
    assert huge.returncode == 2, huge
    assert huge.stderr.strip().splitlines()[-1] == (
        "error: --samples_per_prompt=100000000000: 2 prompts x 100,000,000,000 = 200,000,000,000 "
        "attempts, more than one run takes (100,000,000): lower it, or split the dataset into "
        "several runs"
    )
    assert "Traceback" not in huge.stderr and sim_endpoint.requests == []
    assert not cli.run_dir("huge").exists()
