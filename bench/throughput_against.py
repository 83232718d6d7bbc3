"""CPU per model call of this tree against another checkout (an older commit), paired and
interleaved on `throughput.py`'s workload: 2,000 prompts (one `echo` call each, then the
answer), latency 0, 2 workers, 256 in flight, local sandboxes, one endpoint process per run.

    git worktree add --detach /tmp/base 06ceb88
    cd bench && python throughput_against.py --base=/tmp/base [--pairs=3] [--prompts=2000]

Prints each pair (base, this tree) and the mean ratio: whether a change made the runner slower
with the same flags (both trees run the same command).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from endpoint_process import start_endpoint
from throughput import _dataset
from trees import compiled

ROOT = Path(__file__).resolve().parent.parent


def cpu_ms_per_call(tree: Path, label: str, workdir: Path, prompts: int) -> float:
    cpu, calls = cpu_and_calls(tree, label, workdir, prompts)
    return 1000 * cpu / calls


def cpu_and_calls(tree: Path, label: str, workdir: Path, prompts: int) -> tuple[float, int]:
    """(CPU seconds of the runner's whole tree, model calls the endpoint answered) of one run."""
    dataset = workdir / f"prompts-{prompts}.jsonl"
    if not dataset.exists():
        _dataset(dataset, prompts)
    compiled(tree)
    server = start_endpoint(0.0, 0.0)
    cmd = [
        sys.executable, str(tree / "batch_runner.py"), f"--dataset_file={dataset}", "--batch_size=100",
        f"--run_name={label}", f"--output_dir={workdir / 'runs'}", f"--base_url={server.base_url}",
        "--api_key=bench", "--model=sim-model", "--num_workers=2", "--max_inflight=256",
        "--distribution=terminal_only", "--sandbox=local",
    ]  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tree, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # before the endpoint is reaped
    calls = max(server.stop()["stats"]["requests_total"], 1)
    if done.returncode != 0:
        raise SystemExit(f"{label}: exited {done.returncode}:\n{done.stderr.decode()[-2000:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), calls


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base", type=Path, required=True, help="the other checkout's root")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=2000)
    args = parser.parse_args()
    base, this = [], []
    with tempfile.TemporaryDirectory(prefix="bench-against-") as tmp:
        for index in range(args.pairs):
            base.append(cpu_ms_per_call(args.base.resolve(), f"base{index}", Path(tmp), args.prompts))
            this.append(cpu_ms_per_call(ROOT, f"this{index}", Path(tmp), args.prompts))
            print(json.dumps({"pair": index, "base_ms_per_call": round(base[-1], 3),
                              "this_ms_per_call": round(this[-1], 3)}), flush=True)  # fmt: skip
    deltas = [t - b for t, b in zip(this, base, strict=True)]
    spread = statistics.stdev(deltas) if len(deltas) > 1 else 0.0
    print(
        f"CPU ms per call: base {statistics.mean(base):.3f}, this {statistics.mean(this):.3f}, "
        f"this - base {statistics.mean(deltas):+.3f} (stdev {spread:.3f}), "
        f"ratio {statistics.mean(this) / statistics.mean(base):.3f}"
    )


if __name__ == "__main__":
    main()
