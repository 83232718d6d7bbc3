"""CPU per model call of several checkouts, interleaved round by round on `throughput.py`'s
workload (as `throughput_against.py`, which compares two): the first tree is the baseline, each
other's ratio to it is printed with the medians and spreads.

    cd bench && python throughput_trees.py /work/wt/base7 /tmp/before .. [--rounds=3] [--prompts=2000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from throughput_against import cpu_ms_per_call


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("trees", type=Path, nargs="+", help="checkout roots; the first is the baseline")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=2000)
    args = parser.parse_args()
    trees = [tree.resolve() for tree in args.trees]
    figures: list[list[float]] = [[] for _ in trees]
    with tempfile.TemporaryDirectory(prefix="bench-trees-") as tmp:
        for index in range(args.rounds):
            for n, tree in enumerate(trees):
                figures[n].append(cpu_ms_per_call(tree, f"t{n}r{index}", Path(tmp), args.prompts))
            print(json.dumps({"round": index, "ms_per_call": [round(f[-1], 3) for f in figures]}), flush=True)
    base = statistics.median(figures[0])
    for tree, values in zip(trees, figures, strict=True):
        median = statistics.median(values)
        print(f"{tree}: median {median:.3f} ms/call (min {min(values):.3f}, max {max(values):.3f}), "
              f"ratio to the first {median / base:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
