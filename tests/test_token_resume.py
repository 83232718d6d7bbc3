"""Exactly once for token sidecars through the real `BatchRun` (run directory, group commit,
repair, filters re-applied, merge, statistics.json, exit code) on a backend double answering
as a capturing worker would (tests/support/token_entries.py): kill -9 mid-run then --resume
leaves each merged entry's sidecar line once in tokens.jsonl, in the entry's place and
consistent with it; --keep_token_drift=false then true moves entries and their tokens both ways.
The two `test_cli_` tests do the same through `batch_runner.py` and real workers against the
SimulatedEndpoint over HTTP (they need the worker side of capture: agent/loop/token_trace.py,
agent/batch/records.py).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from agent.batch.dataset import scan_dataset
from agent.batch.run import BatchRun
from agent.config.agent_config import AgentConfig
from agent.servers.simulated.server import SimulatedEndpoint
from agent.store.layout import batch_files
from tests.support.batch import (
    BatchCLI,
    human_prompt,
    kill_started,
    session_pids,
    tool_then_answer,
    wait_until,
    write_dataset,
)
from tests.support.scripted_backend import scripted
from tests.support.token_entries import capture_config, mixed_prompts, run_capture

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def no_stray_processes() -> Iterator[None]:
    yield
    kill_started()


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def consistent(run_dir: Path) -> dict[str, Any]:
    """Check tokens.jsonl against trajectories.jsonl line for line and statistics.json's counts
    against tokens.jsonl; returns statistics.json."""
    entries = _jsonl(run_dir / "trajectories.jsonl")
    records = _jsonl(run_dir / "tokens.jsonl")
    assert len(records) == len(entries)
    for entry, record in zip(entries, records, strict=True):
        tokens = entry["metadata"]["tokens"]
        assert record["tokens_id"] == tokens["id"] and "missing" not in record
        assert record["prompt_key"] == entry["metadata"]["prompt_key"]
        assert record["prompt_index"] == entry["prompt_index"]
        assert (
            len(record["turns"]) == tokens["turns"] == sum(t["from"] == "gpt" for t in entry["conversations"])
        )
        assert (record["drift"] is None) == (tokens["drift"] is None)
    assert len({r["tokens_id"] for r in records}) == len(records)
    stats: dict[str, Any] = json.loads((run_dir / "statistics.json").read_text())
    assert {
        k: v for k, v in stats["tokens"].items() if k not in ("merged_output", "this_invocation", "whole_run")
    } == {
        "api": "vllm",
        "trajectories": len(records),
        "turns": sum(len(r["turns"]) for r in records),
        "prompt_ids": sum(len(t["prompt_ids"]) for r in records for t in r["turns"]),
        "completion_ids": sum(len(t["completion_ids"]) for r in records for t in r["turns"]),
        "with_drift": sum(r["drift"] is not None for r in records),
        "missing": 0,
        "without": 0,
        "withheld": 0,
        "bytes": (run_dir / "tokens.jsonl").stat().st_size,
    }
    return stats


def _results(run_dir: Path) -> int:
    if not run_dir.exists():
        return 0
    return sum(path.read_bytes().count(b"\n") for path in batch_files(run_dir))


def test_kill_9_mid_run_then_resume_merges_every_sidecar_line_once(tmp_path: Path) -> None:
    prompts = 60
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.support.token_entries", str(tmp_path), str(prompts)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    run_dir = tmp_path / "data" / "tokens"
    deadline = time.monotonic() + 120
    while _results(run_dir) < 20 and child.poll() is None:
        assert time.monotonic() < deadline, "the run wrote no 20 results in 120 s"
        time.sleep(0.005)
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert child.returncode == -signal.SIGKILL, "the run ended before it was killed: raise `prompts`"
    assert not (run_dir / "tokens.jsonl").exists()
    sidecar_lines = sum(p.read_bytes().count(b"\n") for p in run_dir.glob("tokens_*.jsonl"))
    assert sidecar_lines >= _results(run_dir)  # each result's sidecar line went first
    with (run_dir / f"tokens_{prompts // 4 - 1}.jsonl").open("ab") as handle:
        handle.write(b'{"tokens_id":"0123456789abcdef0123456789abcdef","prompt_key":"x","turns":[[')  # torn

    config = capture_config(tmp_path, mixed_prompts(prompts), resume=True)
    assert run_capture(config) == 0
    stats = consistent(run_dir)
    skipped = prompts // 7
    assert stats["completion"]["in_output"] == prompts - skipped and stats["completion"]["exit_code"] == 0
    assert stats["completion"]["discarded"] == skipped
    assert (run_dir / f"tokens_{prompts // 4 - 1}.jsonl.torn").exists()
    keys = Counter(r["prompt_key"] for r in _jsonl(run_dir / "tokens.jsonl"))
    assert len(keys) == prompts - skipped and set(keys.values()) == {1}
    discarded = {r["entry"]["metadata"]["tokens"]["id"] for r in _jsonl(run_dir / "discarded.jsonl")}
    assert len(discarded) == skipped and discarded.isdisjoint(
        r["tokens_id"] for r in _jsonl(run_dir / "tokens.jsonl")
    )


def test_keep_token_drift_moves_entries_and_their_tokens_both_ways(tmp_path: Path) -> None:
    prompts = [f"prompt {n}" for n in range(5)] + ["drift 5", "drift 6", "skip 7"]
    run_dir = tmp_path / "data" / "tokens"
    dropping = capture_config(tmp_path, prompts, keep_token_drift=False)
    assert run_capture(dropping) == 0
    stats = consistent(run_dir)
    assert stats["tokens"]["trajectories"] == 5 and stats["tokens"]["with_drift"] == 0
    assert stats["completion"]["discarded"] == 3
    drifted = {r["entry"]["metadata"]["tokens"]["id"] for r in _jsonl(run_dir / "discarded.jsonl")}
    assert drifted.isdisjoint(r["tokens_id"] for r in _jsonl(run_dir / "tokens.jsonl"))

    keeping = dataclasses.replace(dropping, keep_token_drift=True, resume=True)
    assert run_capture(keeping) == 0
    stats = consistent(run_dir)
    assert stats["tokens"]["trajectories"] == 7 and stats["tokens"]["with_drift"] == 2
    assert stats["recovered_discards"] == {"token_drift": 2}
    merged = {r["tokens_id"] for r in _jsonl(run_dir / "tokens.jsonl")}
    assert len(drifted - merged) == 1  # the no_reasoning discard stays out, with its tokens

    assert run_capture(dataclasses.replace(dropping, resume=True)) == 0
    stats = consistent(run_dir)
    assert stats["tokens"]["trajectories"] == 5 and stats["tokens"]["with_drift"] == 0
    assert stats["withdrawn_entries"] == {"token_drift": 2}


def test_a_run_without_capture_writes_no_tokens_file_nor_section(tmp_path: Path) -> None:
    plain = dataclasses.replace(capture_config(tmp_path, ["prompt 0"]), agent=AgentConfig())
    scan = scan_dataset(plain.dataset_file, backend="local", keys=True)
    assert BatchRun(plain, Console(quiet=True), backend=scripted(lambda: None)).run(scan) == 0
    stats = json.loads((plain.run_dir / "statistics.json").read_text())
    assert set(stats["tokens"]) == {"merged_output", "this_invocation", "whole_run"}
    assert "missing_tokens" not in stats["completion"]
    assert not (plain.run_dir / "tokens.jsonl").exists()
    assert not list(plain.run_dir.glob("tokens_*.jsonl"))


def test_cli_kill_9_during_a_capture_run_then_resume(tmp_path: Path) -> None:
    """`batch_runner.py --capture_tokens=required` against the SimulatedEndpoint over HTTP,
    SIGKILLed once results are on disk, then --resume: each entry's sidecar line once in
    tokens.jsonl, line for line, its turns those of the entry."""
    prompts = [f"Token prompt {n}" for n in range(24)]
    flags = ("--dataset_file=d.jsonl", "--batch_size=4", "--run_name=tk", "--num_workers=2")
    with SimulatedEndpoint() as endpoint:
        for prompt in prompts:
            endpoint.script(prompt, tool_then_answer(delay=0.05))
        write_dataset(tmp_path / "d.jsonl", [{"prompt": p} for p in prompts])
        cli = BatchCLI(tmp_path, endpoint)
        run_dir = cli.run_dir("tk")
        proc = cli.start(*flags, "--capture_tokens=required")
        wait_until(lambda: _results(run_dir) >= 6 or proc.poll() is not None, "six results", timeout=120)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        wait_until(lambda: not session_pids(proc.pid), "the killed runner's workers to exit")
        assert proc.returncode == -signal.SIGKILL, "the run ended before it was killed"
        done = cli.run(*flags, "--capture_tokens=required", "--resume")
        assert done.returncode == 0, done
    stats = consistent(run_dir)
    assert stats["tokens"]["trajectories"] == len(prompts) and stats["tokens"]["with_drift"] == 0
    assert Counter(human_prompt(e) for e in _jsonl(run_dir / "trajectories.jsonl")) == Counter(prompts)


def test_cli_keep_token_drift_false_then_true_moves_entries_and_tokens_both_ways(tmp_path: Path) -> None:
    """An endpoint that re-renders earlier turns: --keep_token_drift=false discards every entry
    (its tokens line kept in its shard's sidecar, never merged); --resume with true brings them
    back line for line with their tokens, no model call; false again withdraws them."""
    prompts = [f"Drift prompt {n}" for n in range(5)]
    flags = ("--dataset_file=d.jsonl", "--batch_size=2", "--run_name=dr", "--num_workers=1")
    with SimulatedEndpoint(token_drift="whitespace") as endpoint:
        for prompt in prompts:
            endpoint.script(prompt, tool_then_answer())
        write_dataset(tmp_path / "d.jsonl", [{"prompt": p} for p in prompts])
        cli = BatchCLI(tmp_path, endpoint)
        run_dir = cli.run_dir("dr")
        capture = (*flags, "--capture_tokens=required")
        first = cli.run(*capture, "--keep_token_drift=false")
        assert first.returncode == 0, first
        stats = consistent(run_dir)
        assert stats["tokens"]["trajectories"] == 0 and not _jsonl(run_dir / "tokens.jsonl")
        calls = len(endpoint.requests)
        back = cli.run(*capture, "--resume")
        assert back.returncode == 0, back
        stats = consistent(run_dir)
        assert stats["tokens"]["trajectories"] == stats["tokens"]["with_drift"] == len(prompts)
        assert stats["recovered_discards"] == {"token_drift": len(prompts)}
        again = cli.run(*capture, "--keep_token_drift=false", "--resume")
        assert again.returncode == 0, again
        stats = consistent(run_dir)
        assert stats["tokens"]["trajectories"] == 0 and stats["withdrawn_entries"] == {
            "token_drift": len(prompts)
        }
        assert len(endpoint.requests) - calls <= 2  # the resumes' probes only: no prompt ran again
