"""Throughput benchmark: the real `batch_runner.py` against the simulated endpoint.

    python bench/throughput.py            # the full set of cases (about 10 minutes)
    python bench/throughput.py --quick    # smaller datasets

Each prompt makes one tool call, then gives a final answer (2 model calls). The endpoint runs
in a process of its own (its CPU is not the runner's); the runner is a subprocess whose CPU time
(parent + workers + their tool processes) and peak memory (PSS of the whole process tree) are measured.
Efficiency = achieved prompts/s / ideal, ideal = in-flight limit / (calls per prompt × latency),
measured from the endpoint's first request to the runner's exit (worker start-up excluded,
reported separately).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from endpoint_process import start_endpoint
from trees import tree_first

ROOT = Path(__file__).resolve().parent.parent
CALLS_PER_PROMPT = 2


@dataclass(frozen=True)
class Case:
    name: str
    prompts: int
    latency: float
    max_inflight: int
    num_workers: int
    rate_429: float = 0.0


TICKS = os.sysconf("SC_CLK_TCK")


def _memory_kib(pid: str) -> tuple[int, int]:
    """(RSS, PSS) of one process. PSS divides shared pages among their sharers; RSS counts
    them in each process, so a sum of RSS over the tree is an upper bound (it counts the
    interpreter's shared pages once per worker, and a worker twice while a fork for a tool
    command has not exec'd yet)."""
    rss = pss = 0
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Rss:"):
                rss = int(line.split()[1])
            elif line.startswith("Pss:"):
                pss = int(line.split()[1])
    except OSError:
        pass
    return rss, pss


def _children(pid: int) -> list[int]:
    """pid's children, from each of its threads' lists (no walk over every process): a child
    is listed under the thread that started it, and the bench must see every one. Needs
    /proc/<pid>/task/<tid>/children (Linux 3.5+ with CONFIG_PROC_CHILDREN)."""
    found: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tids:
        try:
            found += map(int, Path(f"/proc/{pid}/task/{tid}/children").read_text().split())
        except OSError:
            continue
    return found


class TreeSample(NamedTuple):
    pss_kib: int  # the whole tree
    rss_kib: int  # the whole tree, summed per process (an upper bound: shared pages counted each time)
    python_pss_kib: int  # its Python processes only
    cpu_s: float  # the whole tree, reaped children included
    parent_cpu_s: float  # the runner's own process, without its children


def _tree(pid: int, tools: dict[int, float]) -> TreeSample:
    """A sample of `pid` and its descendants, from /proc. The tree also holds the tool calls'
    shells, alive only while a command runs. Only the tree is read (each sample costs the
    machine the runner shares: the sampler must not slow the run it measures). `tools` gets,
    per worker, the CPU of the children it reaped: the tool calls' processes."""
    total, rss_total, runner, seconds, parent, stack = 0, 0, 0, 0.0, 0.0, [pid]
    while stack:
        current = stack.pop()
        try:
            stat = Path(f"/proc/{current}/stat").read_text()
        except OSError:
            continue
        name, rest = stat.split("(", 1)[1].rsplit(")", 1)
        fields = [name, *rest.split()]  # fields[1] state, [2] ppid, [12:16] utime..cstime
        rss, pss = _memory_kib(str(current))
        total += pss
        rss_total += rss
        runner += pss if name.startswith("python") else 0
        seconds += sum(int(x) for x in fields[12:16]) / TICKS
        if current == pid:
            parent = sum(int(x) for x in fields[12:14]) / TICKS
        elif name.startswith("python"):
            tools[current] = sum(int(x) for x in fields[14:16]) / TICKS
        stack += _children(current)
    return TreeSample(total, rss_total, runner, seconds, parent)


class Sampler(threading.Thread):
    """Samples the runner's tree: memory (PSS) and CPU over time."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak_kib = 0
        self.peak_rss_kib = 0
        self.peak_runner_kib = 0
        self.cpu_series: list[tuple[float, float]] = []  # (time.monotonic(), CPU s of the tree)
        self.tool_cpu: dict[int, float] = {}  # worker pid -> CPU s of the tool processes it reaped
        self.parent_cpu = 0.0  # CPU s of the runner's own process, at the last sample
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            sample = _tree(self.pid, self.tool_cpu)
            self.peak_kib = max(self.peak_kib, sample.pss_kib)
            self.peak_rss_kib = max(self.peak_rss_kib, sample.rss_kib)
            self.peak_runner_kib = max(self.peak_runner_kib, sample.python_pss_kib)
            self.cpu_series.append((time.monotonic(), sample.cpu_s))
            self.parent_cpu = sample.parent_cpu_s
            self.stop.wait(0.05)

    def cpu_at(self, moment: float) -> float:
        """The tree's CPU seconds at the last sample taken before `moment`."""
        return max((cpu for at, cpu in self.cpu_series if at <= moment), default=0.0)


def _dataset(path: Path, n: int) -> None:
    with path.open("w") as fh:
        for i in range(n):
            fh.write(json.dumps({"prompt": f"Benchmark task number {i}: list the files."}) + "\n")


def _open_files(case: Case) -> Any:
    """Where we may (root), the hard open-file limit raised to what each worker's share of the
    conversations needs (`agent.batch.capacity`; the runner raises its soft limit itself)."""
    need = 256 + 6 * -(-case.max_inflight // case.num_workers)

    def raise_hard() -> None:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard != resource.RLIM_INFINITY and hard < need and os.geteuid() == 0:
            with contextlib.suppress(ValueError, OSError):  # root without CAP_SYS_RESOURCE
                resource.setrlimit(resource.RLIMIT_NOFILE, (soft, need))

    return raise_hard


def run_case(case: Case, workdir: Path) -> dict[str, Any]:
    dataset = workdir / f"{case.name}.jsonl"
    _dataset(dataset, case.prompts)
    server = start_endpoint(case.latency, case.rate_429)
    base_url = server.base_url
    cmd = [
        sys.executable, str(ROOT / "batch_runner.py"),
        f"--dataset_file={dataset}", "--batch_size=100", f"--run_name={case.name}",
        f"--output_dir={workdir / 'runs'}", f"--base_url={base_url}", "--api_key=bench",
        "--model=sim-model", f"--num_workers={case.num_workers}", f"--max_inflight={case.max_inflight}",
        # The runner on local sandboxes, as every figure of this bench since it was written:
        # --sandbox=auto now picks bwrap where it works, a different (costlier) thing to measure.
        "--distribution=terminal_only", "--sandbox=local",
    ]  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=workdir,
        env=tree_first(ROOT),  # `throughput_trees.py` runs older trees' copies of this script
        preexec_fn=_open_files(case),
    )
    sampler = Sampler(proc.pid)
    sampler.start()
    _, err = proc.communicate()
    ended = time.monotonic()
    sampler.stop.set()
    sampler.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    endpoint = server.stop()
    if proc.returncode != 0:
        raise SystemExit(f"{case.name}: runner exited {proc.returncode}:\n{err.decode()[-3000:]}")
    stats = endpoint["stats"]
    first_request = stats["first_request_at"] or started
    calls = max(stats["requests_total"], 1)
    run_stats = json.loads((workdir / "runs" / case.name / "statistics.json").read_text())
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    window = ended - first_request
    achieved = case.prompts / window
    ideal = case.max_inflight / (CALLS_PER_PROMPT * case.latency) if case.latency else float("nan")
    inv = run_stats["this_invocation"]
    return {
        "case": case.name,
        "prompts": case.prompts,
        "latency_s": case.latency,
        "max_inflight": case.max_inflight,
        "workers": case.num_workers,
        "rate_429": case.rate_429,
        "wall_s": round(ended - started, 2),
        "startup_s": round(first_request - started, 2),
        "prompts_per_s": round(achieved, 1),
        "efficiency": round(achieved / ideal, 3) if case.latency else None,
        "peak_inflight_at_endpoint": stats["peak_inflight"],
        "model_calls": stats["requests_total"],
        "cpu_ms_per_call": round(1000 * cpu / calls, 3),
        "steady_cpu_ms_per_call": round(1000 * (cpu - sampler.cpu_at(first_request)) / calls, 3),
        # Of which the tool calls' own processes (bash and what it runs), not the runner's code.
        "tool_process_cpu_ms_per_call": round(1000 * sum(sampler.tool_cpu.values()) / calls, 3),
        # Of which the parent process (scheduling, writing shards, statistics, the final merge).
        "parent_cpu_ms_per_call": round(1000 * sampler.parent_cpu / calls, 3),
        # The simulated endpoint shares this machine's two cores with the runner.
        "endpoint_cpu_ms_per_call": round(1000 * endpoint["cpu_s"] / calls, 3),
        "peak_pss_mb": round(sampler.peak_kib / 1024, 1),
        "peak_runner_pss_mb": round(sampler.peak_runner_kib / 1024, 1),
        "peak_rss_sum_mb": round(sampler.peak_rss_kib / 1024, 1),
        # What one open conversation costs: the tree's peak over the most in flight at once.
        "pss_kib_per_conversation": round(sampler.peak_kib / max(stats["peak_inflight"], 1), 1),
        "completed": inv["completed"],
        "failed": inv["failed"],
        "failures": run_stats["failures"],
        "rate_limited": run_stats["rate_limiting"]["rate_limited"],
    }


def cases(quick: bool) -> list[Case]:
    n = 500 if quick else 2000
    return [
        Case("ours_256", n, 0.5, 256, 2),
        # A slower endpoint, as most are: the runner's CPU is then a small share of the cores.
        Case("ours_256_latency2", n, 2.0, 256, 2),
        Case("reference_sched", 100 if quick else 200, 0.5, 4, 4),
        Case("cpu_latency0", n, 0.0, 256, 2),
        Case("throttled_429", n, 0.5, 256, 2, rate_429=0.2),
        Case("ours_256_x10", n * 10, 0.5, 256, 2),
    ]


# Only when named (--only): every conversation of a run this size in flight at once, each
# waiting 30 s on the model, to see it works here and what an open conversation costs in memory.
# Five workers: 3,277 conversations each need 19,918 open files (`agent.batch.capacity`), under
# a hard limit of 20,000, as on the machines here where it cannot be raised.
ON_REQUEST = [Case("inflight_16384", 16384, 30.0, 16384, 5)]


def main() -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", help="comma-separated case names")
    args = parser.parse_args()
    named = [c for c in ON_REQUEST if args.only and c.name in args.only.split(",")]
    selected = [c for c in cases(args.quick) if not args.only or c.name in args.only.split(",")] + named
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-throughput-") as tmp:
        for case in selected:
            result = run_case(case, Path(tmp))
            results.append(result)
            print(json.dumps(result), flush=True)
    by_name = {r["case"]: r for r in results}
    if "ours_256" in by_name and "reference_sched" in by_name:
        ratio = by_name["ours_256"]["prompts_per_s"] / by_name["reference_sched"]["prompts_per_s"]
        print(f"throughput ratio ours_256 / reference scheduling (4 workers, 1 each): {ratio:.1f}x")
    if "ours_256" in by_name and "ours_256_x10" in by_name:
        for key in ("peak_runner_pss_mb", "peak_pss_mb", "peak_rss_sum_mb"):
            a, b = by_name["ours_256"][key], by_name["ours_256_x10"][key]
            print(f"{key}: {by_name['ours_256']['prompts']} prompts {a} MB; ×10 prompts {b} MB")


if __name__ == "__main__":
    main()
