"""Samples per prompt cost nothing extra: a run of P prompts × N samples against one of P×N
single-sample prompts (the same units of work, the same model calls), both through the real
`batch_runner.py` against the simulated endpoint in a process of its own.

    python bench/samples.py            # 1,000 prompts × 4 samples vs 4,000 prompts (a few minutes)
    python bench/samples.py --quick    # 100 × 4 vs 400

The endpoint answers at once (`answer` policy: one model call per attempt, no tool call) after
`--latency` seconds; local sandboxes (made only when a tool needs one: never here), so what is
measured is the runner's scheduling, writing and merging of units. Wall time is the runner's
whole run (start-up, merge and statistics included); CPU is the runner's process tree.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from endpoint_process import start_endpoint

ROOT = Path(__file__).resolve().parent.parent


def _dataset(path: Path, prompts: int) -> None:
    with path.open("w") as fh:
        for i in range(prompts):
            fh.write(json.dumps({"prompt": f"Sampled task number {i}: say done."}) + "\n")


def run_case(
    name: str, prompts: int, samples: int, args: argparse.Namespace, workdir: Path
) -> dict[str, Any]:
    dataset = workdir / f"{name}.jsonl"
    _dataset(dataset, prompts)
    server = start_endpoint(args.latency, 0.0, policy="answer")
    cmd = [
        sys.executable, str(ROOT / "batch_runner.py"),
        f"--dataset_file={dataset}", "--batch_size=100", f"--run_name={name}",
        f"--output_dir={workdir / 'runs'}", f"--base_url={server.base_url}", "--api_key=bench",
        "--model=sim-model", f"--num_workers={args.workers}", f"--max_inflight={args.max_inflight}",
        "--distribution=terminal_only", "--sandbox=local", f"--samples_per_prompt={samples}",
    ]  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=workdir, check=False)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    endpoint = server.stop()
    if done.returncode != 0:
        raise SystemExit(f"{name}: runner exited {done.returncode}:\n{done.stderr.decode()[-3000:]}")
    stats = endpoint["stats"]
    first = stats["first_request_at"] or started
    entries = sum(1 for _ in (workdir / "runs" / name / "trajectories.jsonl").open())
    run_stats = json.loads((workdir / "runs" / name / "statistics.json").read_text())
    return {
        "case": name,
        "prompts": prompts,
        "samples_per_prompt": samples,
        "entries": entries,
        "model_calls": stats["requests_total"],
        "wall_s": round(wall, 2),
        "first_request_to_exit_s": round(started + wall - first, 2),
        "runner_duration_s": run_stats["duration_seconds"],  # the runner's own clock: scan to statistics
        "attempts_per_s": run_stats["this_invocation"]["prompts_per_second"],
        "runner_cpu_s": round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 prompts × 4 vs 400")
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--max_inflight", type=int, default=64)
    parser.add_argument(
        "--rounds", type=int, default=1, help="run both cases this many times (odd rounds: single first)"
    )
    args = parser.parse_args()
    prompts = 100 if args.quick else 1000
    with tempfile.TemporaryDirectory(prefix="bench-samples-") as tmp:
        for round_no in range(args.rounds):
            cases = (("samples", prompts, 4), ("single", prompts * 4, 1))
            for name, count, samples in cases if round_no % 2 == 0 else cases[::-1]:
                workdir = Path(tmp) / f"{name}{round_no}"
                workdir.mkdir()
                print(json.dumps(run_case(f"{name}{round_no}", count, samples, args, workdir)), flush=True)


if __name__ == "__main__":
    main()
