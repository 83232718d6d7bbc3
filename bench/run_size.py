"""End-of-run benchmark: how long the user waits between the last model reply and the runner's
exit, as the run grows (issue 26: ≤ 1 s at 20,000 entries, ≤ 3 s at 200,000).

    python bench/run_size.py                         # 20,000 prompts
    python bench/run_size.py --prompts=200000        # or 1000000: minutes of CPU
    python bench/run_size.py --against=/work/wt/base7 --pairs=3   # interleaved with another tree

The real `batch_runner.py` against the simulated endpoint in a process of its own
(`endpoint_process.py`) with `--policy=answer` (one model call per prompt, no tool) and latency
0: the shortest conversation, so the end of the run weighs as much as it can. Printed per run:
`tail_s`, from the endpoint's last reply (`EndpointStats.last_reply_at`) to the runner's exit;
`phases_s`, when the files the end writes were written after the last reply (checkpoint.json:
the workers are gone; trajectories.jsonl: merged; statistics.json; report.html); `wall_s`;
the runner's (parent process's) RSS sampled every 0.1 s: its peak, at the last reply,
its peak after it, and the curve (`--curve`); `process_gone`, when the sampler found the
runner's process exited (before its pipes closed: `exit` waits for both). `--profile=FILE`
runs the parent under cProfile (only the parent: the workers are other processes), for where
the tail goes; `--trace=FILE` under tracemalloc (`million_trace.py`): what holds its memory.

`--kill_at=0.5` (issue 26: exactly once under kill -9): the run is killed (SIGKILL, the runner
and its workers) once that fraction of the prompts is in its batch files, then run again with
`--resume`; printed: `resume_s`, from the resume's start to its first model request (it has
found its place: scanned the run directory, planned the rest), both runs' RSS, and
`exactly_once`: trajectories.jsonl holds every prompt index once.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from endpoint_process import start_endpoint

ROOT = Path(__file__).resolve().parent.parent


class SampledRun(NamedTuple):
    proc: subprocess.Popen[bytes]
    err: bytes  # its stderr
    started: float  # time.monotonic() at its spawn
    ended: float  # … once its pipes closed
    sampler: RssSampler
    stats: dict[str, Any]  # the endpoint's


class RssSampler(threading.Thread):
    """The RSS of one process (not its children), every `period` seconds."""

    def __init__(self, pid: int, period: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.pid, self.period = pid, period
        self.series: list[tuple[float, int]] = []  # (time.monotonic(), RSS KiB)
        self.gone_at: float | None = None  # the first sample finding it exited (a zombie has no RSS)
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            rss = _rss_kib(self.pid)
            if rss is not None:
                self.series.append((time.monotonic(), rss))
            elif self.series and self.gone_at is None:
                self.gone_at = time.monotonic()
            self.stop.wait(self.period)

    def peak(self, after: float = 0.0) -> int:
        return max((kib for at, kib in self.series if at >= after), default=0)

    def at(self, moment: float) -> int:
        """The last sample taken at or before `moment`."""
        return next((kib for at, kib in reversed(self.series) if at <= moment), 0)


def _rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def write_dataset(path: Path, prompts: int) -> None:
    with path.open("w") as handle:
        for i in range(prompts):
            handle.write(json.dumps({"prompt": f"Benchmark task number {i}: say hello."}) + "\n")


def runner_cmd(
    tree: Path, dataset: Path, workdir: Path, label: str, base_url: str, args: argparse.Namespace
) -> list[str]:
    profile = ["-m", "cProfile", "-o", str(args.profile)] if args.profile else []
    trace = [str(ROOT / "bench" / "million_trace.py"), str(args.trace)] if args.trace else []
    return [
        sys.executable, *profile, *trace, str(tree / "batch_runner.py"), f"--dataset_file={dataset}",
        f"--batch_size={args.batch_size}", f"--run_name={label}", f"--output_dir={workdir / 'runs'}",
        f"--base_url={base_url}", "--api_key=bench", "--model=sim-model",
        f"--num_workers={args.workers}", f"--max_inflight={args.inflight}",
        "--distribution=terminal_only", "--sandbox=local",
    ]  # fmt: skip


def run_once(
    tree: Path, dataset: Path, workdir: Path, label: str, args: argparse.Namespace
) -> dict[str, Any]:
    """One run of `tree`'s runner over `dataset`; its figures (with `--kill_at`: killed, resumed)."""
    if args.kill_at is not None:
        from million import kill_and_resume  # it uses this module's sampler

        return kill_and_resume(tree, dataset, workdir, label, args)
    sampled = sampled_run(tree, args.period, lambda url: runner_cmd(tree, dataset, workdir, label, url, args))
    proc, err, started, ended, sampler, stats = sampled
    if proc.returncode != 0:
        raise SystemExit(f"{label}: runner exited {proc.returncode}:\n{err.decode()[-3000:]}")
    last = stats["last_reply_at"]
    phases = _phases(workdir / "runs" / label, last, ended)
    if sampler.gone_at is not None:  # its pipes can stay open a little longer (children holding them)
        phases["process_gone"] = round(sampler.gone_at - last, 3)
    return {
        "tree": str(tree),
        "prompts": args.prompts,
        "model_calls": stats["requests_total"],
        "tail_s": round(ended - last, 3),
        "wall_s": round(ended - started, 2),
        "phases_s": phases,
        **_rss(sampler, started, last, args.curve),
    }


def _rss(sampler: RssSampler, started: float, last: float, curve: bool) -> dict[str, Any]:
    return {
        "rss_peak_mib": round(sampler.peak() / 1024, 1),
        "rss_at_last_reply_mib": round(sampler.at(last) / 1024, 1),
        "rss_peak_after_last_reply_mib": round(sampler.peak(after=last) / 1024, 1),
        **({"rss_curve": _curve(sampler.series, started, last)} if curve else {}),
    }


PHASES = ("checkpoint.json", "trajectories.jsonl", "statistics.json", "report.html")


def sampled_run(tree: Path, period: float, command: Callable[[str], list[str]]) -> SampledRun:
    """`command(base_url)` run in `tree` against a fresh endpoint (latency 0, one call per prompt)
    with its RSS sampled; the endpoint's statistics once it has exited."""
    server = start_endpoint(0.0, 0.0, policy="answer")
    started = time.monotonic()
    proc = subprocess.Popen(
        command(server.base_url), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tree
    )
    sampler = RssSampler(proc.pid, period)
    sampler.start()
    _, err = proc.communicate()
    ended = time.monotonic()
    sampler.stop.set()
    sampler.join()
    return SampledRun(proc, err, started, ended, sampler, server.stop()["stats"])


def _phases(run_dir: Path, last: float, ended: float) -> dict[str, float]:
    """When each file of the end was last written, in seconds after the last reply (their
    mtimes on the monotonic clock): the workers' shutdown and the last checkpoint, the merge,
    the statistics, the report; then the exit."""
    offset = time.time() - time.monotonic()
    found = {
        name: (run_dir / name).stat().st_mtime - offset - last for name in PHASES if (run_dir / name).exists()
    }
    return {**{name: round(at, 3) for name, at in found.items()}, "exit": round(ended - last, 3)}


def _curve(
    series: list[tuple[float, int]], started: float, last: float, points: int = 40
) -> list[list[float]]:
    """(seconds since start, MiB) thinned evenly to `points` before the last reply and again after it."""
    before = [s for s in series if s[0] < last]
    after = [s for s in series if s[0] >= last]
    kept = before[:: max(1, len(before) // points)] + after[:: max(1, len(after) // points)]
    return [[round(at - started, 2), round(kib / 1024, 1)] for at, kib in kept]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--prompts", type=int, default=20_000, help="20000 (default), 200000 or 1000000")
    parser.add_argument("--against", type=Path, default=None, help="another checkout, run interleaved")
    parser.add_argument("--pairs", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--inflight", type=int, default=256)
    parser.add_argument("--batch_size", type=int, default=100)
    parser.add_argument("--period", type=float, default=0.1, help="RSS sampling period, seconds")
    parser.add_argument("--curve", action="store_true", help="print the sampled RSS curve too")
    parser.add_argument("--profile", type=Path, default=None, help="cProfile the parent into this file")
    parser.add_argument("--trace", type=Path, default=None, help="tracemalloc the parent: top sites to FILE")
    parser.add_argument("--kill_at", type=float, default=None, help="kill -9 at this fraction, then --resume")
    parser.add_argument("--workdir", type=Path, default=None, help="keep the runs here (default: a temp dir)")
    args = parser.parse_args()
    trees = [ROOT] if args.against is None else [args.against.resolve(), ROOT]
    results: dict[str, list[dict[str, Any]]] = {str(tree): [] for tree in trees}
    with tempfile.TemporaryDirectory(prefix="bench-run-size-") as tmp:
        workdir = args.workdir.resolve() if args.workdir is not None else Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        dataset = workdir / "prompts.jsonl"
        write_dataset(dataset, args.prompts)
        for pair in range(args.pairs):
            for number, tree in enumerate(trees):
                result = run_once(tree, dataset, workdir, f"run{pair}_{number}", args)
                results[str(tree)].append(result)
                print(json.dumps(result), flush=True)
    for tree, runs in results.items():
        if args.kill_at is not None:
            # none when a resume made no request (the run had ended before the kill)
            resumes = [r["resume_s"] for r in runs if r["resume_s"] is not None]
            median = f"{statistics.median(resumes):.2f}" if resumes else "-"
            print(f"{tree}: resume_s median {median} over {len(resumes)} of {len(runs)} run(s)")
            continue
        tails = [r["tail_s"] for r in runs]
        peaks = [r["rss_peak_mib"] for r in runs]
        spread = f"(min {min(tails):.3f}, max {max(tails):.3f})"
        print(
            f"{tree}: tail_s median {statistics.median(tails):.3f} {spread}; "
            f"parent RSS peak median {statistics.median(peaks):.1f} MiB over {len(runs)} run(s)"
        )


if __name__ == "__main__":
    main()
