"""CPU per model call of several checkouts, interleaved round by round on `throughput.py`'s
workload (as `throughput_against.py`, which compares two): the first tree is the baseline, each
other's ratio to it is printed with the medians and spreads.

    cd bench && python throughput_trees.py /work/wt/base7 /tmp/before .. [--rounds=3] [--prompts=2000]
    cd bench && python throughput_trees.py /work/wt/base7 .. --marginal=500   # CPU per call after
        # the fixed cost: each round also runs 500 prompts, and a call's share is the difference
        # of the two runs' CPU over the difference of their calls
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from throughput_against import cpu_and_calls


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("trees", type=Path, nargs="+", help="checkout roots; the first is the baseline")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=2000)
    parser.add_argument("--marginal", type=int, default=0, help="a second, smaller run per round")
    args = parser.parse_args()
    if args.marginal and args.marginal >= args.prompts:
        parser.error("--marginal must be below --prompts")
    trees = [tree.resolve() for tree in args.trees]
    figures: list[list[float]] = [[] for _ in trees]
    with tempfile.TemporaryDirectory(prefix="bench-trees-") as tmp:
        for index in range(args.rounds):
            for n, tree in enumerate(trees):
                cpu, calls = cpu_and_calls(tree, f"t{n}r{index}", Path(tmp), args.prompts)
                if args.marginal:
                    small_cpu, small_calls = cpu_and_calls(tree, f"t{n}r{index}s", Path(tmp), args.marginal)
                    cpu, calls = cpu - small_cpu, calls - small_calls
                figures[n].append(1000 * cpu / calls)
            print(json.dumps({"round": index, "ms_per_call": [round(f[-1], 3) for f in figures]}), flush=True)
    base = statistics.median(figures[0])
    for tree, values in zip(trees, figures, strict=True):
        median = statistics.median(values)
        print(f"{tree}: median {median:.3f} ms/call (min {min(values):.3f}, max {max(values):.3f}), "
              f"ratio to the first {median / base:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
