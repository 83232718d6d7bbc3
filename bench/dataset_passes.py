"""CPU of the dataset work before a run's first request (issue 26): the validating scan, then
the plan's units, read either from a second pass over the dataset (as before) or from the keys
the scan kept (`scan_dataset(keys=True)`, what a run does now). Best of `--repeat` runs each.

    python bench/dataset_passes.py [--rows=200000] [--samples=1] [--repeat=3]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent.batch.dataset import iter_rows, iter_units, keyed_units, scan_dataset


def cpu(work: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.process_time()
        work()
        best = min(best, time.process_time() - started)
    return best


def _plan_from_keys(path: Path, samples: int) -> float:
    """CPU of the plan's pass over the keys one scan kept."""
    kept = scan_dataset(path, keys=True).keys
    assert kept is not None
    started = time.process_time()
    sum(1 for _ in keyed_units(kept, samples))
    return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--samples", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "d.jsonl"
        with path.open("w", encoding="utf-8") as handle:
            for i in range(args.rows):
                row = {"prompt": f"Prompt {i}: sum a list of integers, then explain how"}
                handle.write(json.dumps(row) + "\n")
        scan = cpu(lambda: scan_dataset(path), args.repeat)
        scan_keys = cpu(lambda: scan_dataset(path, keys=True), args.repeat)
        second_pass = cpu(lambda: sum(1 for _ in iter_units(iter_rows(path), args.samples)), args.repeat)

        planned = min(_plan_from_keys(path, args.samples) for _ in range(args.repeat))
    before, after = scan + second_pass, scan_keys + planned
    print(f"{args.rows:,} rows, {args.samples} sample(s) each; CPU seconds, best of {args.repeat}")
    print(f"  scan {scan:.2f} | scan keeping keys {scan_keys:.2f}")
    print(f"  plan: second pass over the dataset {second_pass:.2f} | from the kept keys {planned:.2f}")
    print(f"  before the first request: {before:.2f} -> {after:.2f} ({before / after:.2f}x less)")


if __name__ == "__main__":
    main()
