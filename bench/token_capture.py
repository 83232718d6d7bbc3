"""What --capture_tokens costs: the real `batch_runner.py` against the simulated endpoint (in a
process of its own, as in `throughput.py`: one `echo` tool call per prompt, then the answer,
local sandboxes), the same workload with --capture_tokens=off and =required.

    python bench/token_capture.py            # 5 pairs of 2000 prompts; RSS at 4096 in flight
    python bench/token_capture.py --quick    # under 2 minutes: 3 pairs of 150; 512 in flight

It prints:
- the token data's size: bytes of tokens.jsonl per trajectory and per assistant turn (and ids
  per turn), from the capture runs;
- the CPU per model call that capture adds: CPU seconds of the runner's whole process tree
  (parent, workers, tool processes; start-up and the final merge included, and the one probe
  call) over the endpoint's count of calls, off and on run in pairs, interleaved (off, on, off,
  on, ...: a machine shared with others drifts, and a pair sees the same drift); on minus off
  per pair, with its mean, spread and each pair's figure;
- the peak RSS of the runner's parent + workers (summed: an upper bound, the interpreter's
  shared pages are counted once per process; PSS beside it) with a high in-flight count and an
  endpoint slow enough that all of them are open at once (the endpoint's peak in flight says
  whether they were), capture off vs on.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from endpoint_process import start_endpoint
from throughput import TICKS, _children, _dataset, _memory_kib

ROOT = Path(__file__).resolve().parent.parent
MODES = ("off", "required")


@dataclass(frozen=True)
class Load:
    name: str
    prompts: int
    latency: float  # seconds per model call at the endpoint
    max_inflight: int
    num_workers: int = 2


class PythonRss(threading.Thread):
    """Samples the summed RSS (and PSS) of the runner's parent and its direct children that run
    Python (its workers): not their children, which are the tool calls' processes (the same
    either way), nor a worker's fork that has not yet exec'd its command (a copy of the worker
    for a moment, which would count it twice)."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak_rss_kib = 0
        self.peak_pss_kib = 0
        self.parent_cpu_s = 0.0  # the parent's own CPU (no children's) at the last sample
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            rss = pss = 0
            for current in [self.pid, *_children(self.pid)]:
                try:
                    name = Path(f"/proc/{current}/comm").read_text().strip()
                except OSError:  # gone meanwhile
                    continue
                if name.startswith("python"):
                    one_rss, one_pss = _memory_kib(str(current))
                    rss, pss = rss + one_rss, pss + one_pss
            self.peak_rss_kib = max(self.peak_rss_kib, rss)
            self.peak_pss_kib = max(self.peak_pss_kib, pss)
            with contextlib.suppress(OSError):  # the parent has exited: keep the last sample
                fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
                self.parent_cpu_s = (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime
            self.stop.wait(0.1)


def token_figures(run_dir: Path) -> dict[str, Any]:
    """Size and counts of the run's merged tokens.jsonl (one TokenRecord line per trajectory),
    read line by line."""
    path = run_dir / "tokens.jsonl"
    if not path.exists():
        return {"tokens_jsonl": None}
    lines = turns = prompt_ids = completion_ids = 0
    with path.open("rb") as fh:
        for line in fh:
            record = json.loads(line)
            lines += 1
            turns += len(record["turns"])
            prompt_ids += sum(len(t["prompt_ids"]) for t in record["turns"])
            completion_ids += sum(len(t["completion_ids"]) for t in record["turns"])
    size = path.stat().st_size
    return {
        "tokens_jsonl_bytes": size,
        "trajectories": lines,
        "turns": turns,
        "bytes_per_trajectory": round(size / lines, 1) if lines else None,
        "bytes_per_turn": round(size / turns, 1) if turns else None,
        "ids_per_turn": round((prompt_ids + completion_ids) / turns, 1) if turns else None,
    }


def run_once(load: Load, mode: str, label: str, workdir: Path) -> dict[str, Any]:
    """One run of the runner over `load` with --capture_tokens=`mode`: its figures."""
    dataset = workdir / f"{load.name}.jsonl"
    if not dataset.exists():
        _dataset(dataset, load.prompts)
    server = start_endpoint(load.latency, 0.0)
    cmd = [
        sys.executable, str(ROOT / "batch_runner.py"),
        f"--dataset_file={dataset}", "--batch_size=100", f"--run_name={label}",
        f"--output_dir={workdir / 'runs'}", f"--base_url={server.base_url}", "--api_key=bench",
        "--model=sim-model", f"--num_workers={load.num_workers}", f"--max_inflight={load.max_inflight}",
        "--distribution=terminal_only", "--sandbox=local", f"--capture_tokens={mode}",
    ]  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=workdir)
    sampler = PythonRss(proc.pid)
    sampler.start()
    _, err = proc.communicate()
    sampler.stop.set()
    sampler.join()
    # Read before the endpoint's process is reaped: RUSAGE_CHILDREN then holds the runner's tree only.
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    endpoint = server.stop()
    if proc.returncode != 0:
        raise SystemExit(f"{label}: runner exited {proc.returncode}:\n{err.decode()[-3000:]}")
    calls = max(endpoint["stats"]["requests_total"], 1)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    run_dir = workdir / "runs" / label
    completed = json.loads((run_dir / "statistics.json").read_text())["this_invocation"]["completed"]
    return {
        "run": label,
        "capture_tokens": mode,
        "prompts": load.prompts,
        "completed": completed,
        "model_calls": calls,
        "cpu_ms_per_call": round(1000 * cpu / calls, 3),
        # Of which the parent (scheduling, appends, the final merge), up to its last 0.1 s.
        "parent_cpu_ms_per_call": round(1000 * sampler.parent_cpu_s / calls, 3),
        "peak_inflight_at_endpoint": endpoint["stats"]["peak_inflight"],
        "peak_python_rss_mb": round(sampler.peak_rss_kib / 1024, 1),
        "peak_python_pss_mb": round(sampler.peak_pss_kib / 1024, 1),
        **token_figures(run_dir),
    }


def spread(values: list[float], sign: str = "+") -> str:
    """Mean, stdev, min, max and each value (`sign` "+" for differences, "" for amounts)."""
    stdev = statistics.stdev(values) if len(values) > 1 else 0.0
    each = ", ".join(f"{v:{sign}.3f}" for v in values)
    return (
        f"mean {statistics.mean(values):{sign}.3f}, stdev {stdev:.3f}, min {min(values):{sign}.3f}, "
        f"max {max(values):{sign}.3f} (pairs: {each})"
    )


def cpu_pairs(load: Load, pairs: int, workdir: Path) -> list[dict[str, Any]]:
    """`pairs` off/on pairs of `load`, interleaved; prints each run and the CPU each pair adds."""
    results: list[dict[str, Any]] = []
    deltas: list[float] = []
    parents: list[float] = []
    for index in range(pairs):
        runs = {mode: run_once(load, mode, f"{load.name}_{index}_{mode}", workdir) for mode in MODES}
        for result in runs.values():
            print(json.dumps(result), flush=True)
        deltas.append(runs["required"]["cpu_ms_per_call"] - runs["off"]["cpu_ms_per_call"])
        parents.append(runs["required"]["parent_cpu_ms_per_call"] - runs["off"]["parent_cpu_ms_per_call"])
        results += runs.values()
    off = [r["cpu_ms_per_call"] for r in results if r["capture_tokens"] == "off"]
    print(f"CPU ms per model call, capture off: {spread(off, sign='')}")
    print(f"CPU ms per model call that capture adds (on - off, per pair): {spread(deltas)}")
    print(f"  of which in the parent process: {spread(parents)}")
    return results


def report_sizes(results: list[dict[str, Any]]) -> None:
    captured = [r for r in results if r["capture_tokens"] == "required"]
    if not captured or "tokens_jsonl_bytes" not in captured[0]:
        print("token data: no tokens.jsonl in the capture runs (is the sidecar merge on this branch?)")
        return
    first = captured[0]
    print(
        f"token data: {first['bytes_per_trajectory']} bytes per trajectory, {first['bytes_per_turn']} "
        f"bytes per assistant turn ({first['ids_per_turn']} ids per turn; {first['trajectories']} "
        f"trajectories, {first['turns']} turns, tokens.jsonl {first['tokens_jsonl_bytes']} bytes)"
    )


def memory(load: Load, workdir: Path) -> None:
    """Peak RSS of parent + workers with `load.max_inflight` conversations open, off vs on."""
    runs = {mode: run_once(load, mode, f"{load.name}_{mode}", workdir) for mode in MODES}
    for result in runs.values():
        print(json.dumps(result), flush=True)
    off, on = runs["off"], runs["required"]
    print(
        f"peak parent+worker RSS at --max_inflight={load.max_inflight} (endpoint saw "
        f"{off['peak_inflight_at_endpoint']} / {on['peak_inflight_at_endpoint']} in flight): "
        f"off {off['peak_python_rss_mb']} MB, on {on['peak_python_rss_mb']} MB "
        f"({on['peak_python_rss_mb'] - off['peak_python_rss_mb']:+.1f} MB); PSS off "
        f"{off['peak_python_pss_mb']} MB, on {on['peak_python_pss_mb']} MB"
    )
    if min(off["peak_inflight_at_endpoint"], on["peak_inflight_at_endpoint"]) < 0.9 * load.max_inflight:
        print("  (not every slot was open at once: they were not all opened within one call's latency)")


def main() -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--quick", action="store_true", help="small loads: under 2 minutes")
    parser.add_argument("--pairs", type=int, help="off/on pairs for the CPU figure (default 5; 3 quick)")
    parser.add_argument("--only", choices=("cpu", "memory"), help="run one of the two cases")
    parser.add_argument("--memory_latency", type=float, help="seconds a call, memory case (10; 2 quick)")
    args = parser.parse_args()
    pairs = args.pairs or (3 if args.quick else 5)
    if pairs < 2:
        raise SystemExit("--pairs: at least 2 (a spread needs two)")
    cpu_load = Load("cpu", 150 if args.quick else 2000, 0.0, 256)
    inflight = 512 if args.quick else 4096
    # Twice as many prompts as slots, and each call slow enough that every slot fills first.
    latency = args.memory_latency or (2.0 if args.quick else 10.0)
    memory_load = Load("rss", 2 * inflight, latency, inflight)
    with tempfile.TemporaryDirectory(prefix="bench-token-capture-") as tmp:
        if args.only != "memory":
            report_sizes(cpu_pairs(cpu_load, pairs, Path(tmp)))
        if args.only != "cpu":
            memory(memory_load, Path(tmp))


if __name__ == "__main__":
    main()
