"""Exactly once under kill -9, and how long a resume takes to find its place (issue 26).

Called by `run_size.py --kill_at=FRACTION`: the real runner over the dataset, killed with
SIGKILL (its whole process group: the parent, the fork server, the workers, as an OOM kill or
a lost machine would) once FRACTION of the prompts have a line in its batch files; then the
same command with `--resume`, run to its end. Printed: `killed_at` (lines on disk when killed),
`first_request_s` (the fresh run's start to its first model request: the start-up alone),
`resume_s` (the resume's start to its first model request: start-up, the run directory
scanned, the rest planned; `resume_s - first_request_s` is what finding its place cost),
`resume_wall_s`, `resume_tail_s` (last reply to exit), both runs' parent RSS, and `exactly_once`
(trajectories.jsonl holds each prompt index once and every one of them).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from endpoint_process import start_endpoint
from run_size import RssSampler, _rss, runner_cmd, sampled_run


class LineCounter:
    """Lines in the run's batch files, read as they grow (each byte once)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir, self.lines = run_dir, 0
        self.seen: dict[Path, int] = {}

    def poll(self) -> int:
        for path in self.run_dir.glob("batch_*.jsonl"):
            start = self.seen.get(path, 0)
            with path.open("rb") as handle:
                handle.seek(start)
                data = handle.read()
            self.lines += data.count(b"\n")
            self.seen[path] = start + len(data)
        return self.lines


def kill_and_resume(
    tree: Path, dataset: Path, workdir: Path, label: str, args: argparse.Namespace
) -> dict[str, Any]:
    run_dir = workdir / "runs" / label
    first = _killed_run(tree, dataset, workdir, label, args, run_dir)
    resumed = sampled_run(
        tree, args.period, lambda url: [*runner_cmd(tree, dataset, workdir, label, url, args), "--resume"]
    )
    proc, err, started, ended, sampler, stats = resumed
    (workdir / f"{label}.resume.stderr").write_bytes(err)  # its log: where the resume's time went
    if proc.returncode != 0:
        raise SystemExit(f"{label}: the resume exited {proc.returncode}:\n{err.decode()[-3000:]}")
    begun = stats["first_request_at"]
    return {
        "tree": str(tree),
        "prompts": args.prompts,
        **first,
        "resume_s": round(begun - started, 2) if begun is not None else None,
        "resume_model_calls": stats["requests_total"],
        "resume_wall_s": round(ended - started, 2),
        # from the endpoint's last reply to the resume's exit: its end (the earlier invocations'
        # lines are counted with the resume's answers, `agent.store.earlier_lines`)
        "resume_tail_s": round(ended - last, 3) if (last := stats["last_reply_at"]) is not None else None,
        "exactly_once": exactly_once(run_dir / "trajectories.jsonl", args.prompts),
        "resume": _rss(sampler, started, stats["last_reply_at"] or ended, args.curve),
    }


def _killed_run(
    tree: Path, dataset: Path, workdir: Path, label: str, args: argparse.Namespace, run_dir: Path
) -> dict[str, Any]:
    """The first run, killed -9 (its process group) at `args.kill_at` of the prompts."""
    server = start_endpoint(0.0, 0.0, policy="answer")
    cmd = runner_cmd(tree, dataset, workdir, label, server.base_url, args)
    started = time.monotonic()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tree, start_new_session=True
    )
    sampler = RssSampler(proc.pid, args.period)
    sampler.start()
    counter, target = LineCounter(run_dir), int(args.prompts * args.kill_at)
    while counter.poll() < target and proc.poll() is None:
        time.sleep(0.2)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    proc.wait()
    sampler.stop.set()
    sampler.join()
    begun = server.stop()["stats"]["first_request_at"]
    _reap_group(proc.pid)
    return {
        "killed_at_lines": counter.poll(),
        # a fresh run's start to its first model request: what the resume's `resume_s` has to beat
        "first_request_s": round(begun - started, 2) if begun is not None else None,
        "first": _rss(sampler, started, killed_at, args.curve),
    }


def _reap_group(pgid: int) -> None:
    """Wait until no process of the killed group is left (an orphan would hold the run's lock)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)


def exactly_once(merged: Path, prompts: int) -> dict[str, Any]:
    """Whether `merged` holds every prompt index in range(prompts) exactly once."""
    seen = bytearray(prompts)
    lines = duplicates = outside = 0
    with merged.open("rb") as handle:
        for raw in handle:
            lines += 1
            index = json.loads(raw).get("prompt_index")
            if not isinstance(index, int) or not 0 <= index < prompts:
                outside += 1
            elif seen[index]:
                duplicates += 1
            else:
                seen[index] = 1
    missing = prompts - sum(seen)
    ok = lines == prompts and not duplicates and not outside and not missing
    return {"ok": ok, "lines": lines, "duplicates": duplicates, "missing": missing, "outside": outside}
