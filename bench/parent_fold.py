"""The parent's work per result line, alone: what it counts of each entry it appends (issue 26:
the parent is one process, and at latency 0 its share bounds the run), timed in this process
on real entries, for this tree and others, interleaved.

    cd bench && python parent_fold.py [--entries=3000] [--rounds=5] [--against=<checkout> ...]

The entries are made once by a real run (one `terminal` call per prompt, then the answer).
Timed per entry, as `agent.batch.end_fold` and the run's tally do it: the entry's figures
counted as its event (`FiguresTable.put`), the line parsed (`parse_object`), then the fold
(`MergeCheck.entry`, `RunStatistics.add_entry`, `RunReport.add_entry`). Not timed: the pipes,
the shard write and its records, the job feed. Each tree runs in a subprocess of its own,
importing its own `agent`; prints the median µs per entry of each tree over the rounds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from endpoint_process import start_endpoint
from throughput import ROOT, _dataset
from trees import tree_env

TIMER = r"""
import json, sys, tempfile, time
from pathlib import Path
from agent.batch.tally import MergeCheck
from agent.report import RunReport
from agent.store.figures import EntryFigures, FiguresTable
from agent.store.jsonl import parse_object
from agent.store.statistics import RunStatistics

lines = Path(sys.argv[1]).read_bytes().splitlines(keepends=True)
events = [EntryFigures.of(json.loads(line)) for line in lines]  # as the worker's event says
keys = [json.loads(line)["metadata"]["prompt_key"] for line in lines]
best = []
for _ in range(int(sys.argv[2])):
    with tempfile.TemporaryDirectory() as run_dir:
        table, stats, report = FiguresTable(), RunStatistics(), RunReport(Path(run_dir))
        check = MergeCheck(table)
        started = time.process_time()
        for index, (line, figures, key) in enumerate(zip(lines, events, keys)):
            table.put(key, index, figures)
            entry = parse_object(line)
            entry["prompt_index"] = index
            stats.add_entry(entry, check.entry(entry))
            report.add_entry(entry)
        best.append((time.process_time() - started) / len(lines))
        assert check.checked == len(lines) and not check.differences, check.differences
print(json.dumps(best))
"""


def make_entries(workdir: Path, count: int) -> Path:
    dataset = workdir / "prompts.jsonl"
    _dataset(dataset, count)
    server = start_endpoint(0.0, 0.0)
    cmd = [
        sys.executable, str(ROOT / "batch_runner.py"), f"--dataset_file={dataset}", "--batch_size=500",
        "--run_name=entries", f"--output_dir={workdir}", f"--base_url={server.base_url}", "--api_key=bench",
        "--model=sim-model", "--num_workers=2", "--max_inflight=64", "--distribution=terminal_only",
        "--sandbox=local",
    ]  # fmt: skip
    subprocess.run(cmd, check=True, cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server.stop()
    return workdir / "entries" / "trajectories.jsonl"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--entries", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--against", type=Path, nargs="*", default=[], help="other checkouts")
    args = parser.parse_args()
    trees = [tree.resolve() for tree in args.against] + [ROOT]
    figures: dict[Path, list[float]] = {tree: [] for tree in trees}
    with tempfile.TemporaryDirectory(prefix="bench-fold-") as tmp:
        entries = make_entries(Path(tmp), args.entries)
        for _ in range(args.rounds):
            for tree in trees:
                out = subprocess.run(
                    [sys.executable, "-c", TIMER, str(entries), "1"], cwd=tree, env=tree_env(tree),
                    check=True, capture_output=True, text=True,
                )  # fmt: skip
                figures[tree] += json.loads(out.stdout)
    base = statistics.median(figures[trees[0]])
    for tree, values in figures.items():
        median = statistics.median(values)
        low, high = 1e6 * min(values), 1e6 * max(values)
        ratio = median / base
        print(f"{tree}: {1e6 * median:.1f} µs per entry (min {low:.1f}, max {high:.1f}), ratio {ratio:.3f}")


if __name__ == "__main__":
    main()
