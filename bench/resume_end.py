"""A resume's wait when little or nothing is left to run (issue 26: the end of a run is O(1) in
its size for the user's wait; a resume starts from the figures the last end kept,
`agent/store/output_figures.py`, and continues trajectories.jsonl in place,
`agent/store/output_base.py`).

    python bench/resume_end.py --prompts=200000 --left=0,3 --against=<another checkout>

One fresh run of this tree over `--prompts` prompts (`run_size.py`'s workload: one model call a
prompt, latency 0). With `--against`, a copy of its run directory for the other tree, which
resumes it once first, unmeasured (a copy's files are other files: its saved records and kept
figures are made again for it). Then, for each n of `--left`: n new prompts appended to the
dataset and each tree resumed in turn (the other first), each in its own run directory, from
its own last end. Printed per resume: `wall_s` (spawn to exit), `first_request_s`, `tail_s` (the
endpoint's last reply to exit; none when nothing ran), the parent's peak RSS, and whether
statistics.json counts as many entries as trajectories.jsonl holds lines, which must be every
prompt so far.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from run_size import ROOT, runner_cmd, sampled_run, write_dataset


def resume(tree: Path, dataset: Path, workdir: Path, args: argparse.Namespace, total: int) -> dict[str, Any]:
    run = sampled_run(
        tree, args.period, lambda url: [*runner_cmd(tree, dataset, workdir, "run", url, args), "--resume"]
    )
    if run.proc.returncode != 0:
        raise SystemExit(f"{tree}: the resume exited {run.proc.returncode}:\n{run.err.decode()[-3000:]}")
    run_dir = workdir / "runs" / "run"
    with (run_dir / "trajectories.jsonl").open("rb") as handle:
        lines = sum(1 for _line in handle)
    stats = json.loads((run_dir / "statistics.json").read_text())
    entries, merge = stats["trajectories"]["entries"], stats["merge"]
    first, last = run.stats["first_request_at"], run.stats["last_reply_at"]
    return {
        "tree": str(tree),
        "model_calls": run.stats["requests_total"],
        "wall_s": round(run.ended - run.started, 2),
        "first_request_s": round(first - run.started, 2) if first is not None else None,
        "tail_s": round(run.ended - last, 3) if last is not None else None,
        "rss_peak_mib": round(run.sampler.peak() / 1024, 1),
        "counts_agree": entries == lines == total,
        "in_place_files": merge.get("in_place_files"),  # (an older tree's: none)
        "ahead_files": merge["ahead_files"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--prompts", type=int, default=20_000)
    parser.add_argument("--left", default="0,3", help="prompts to add before each resume, comma-separated")
    parser.add_argument("--against", type=Path, default=None, help="another checkout, resumed first")
    parser.add_argument("--workdir", type=Path, default=None, help="keep the run here (default: a temp dir)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--inflight", type=int, default=256)
    parser.add_argument("--batch_size", type=int, default=100)
    parser.add_argument("--period", type=float, default=0.1, help="RSS sampling period, seconds")
    args = parser.parse_args()
    args.profile = args.trace = None  # runner_cmd's
    trees = [ROOT] if args.against is None else [args.against.resolve(), ROOT]
    with tempfile.TemporaryDirectory(prefix="bench-resume-end-") as tmp:
        workdir = args.workdir.resolve() if args.workdir is not None else Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        dataset = workdir / "prompts.jsonl"
        write_dataset(dataset, args.prompts)
        fresh = sampled_run(
            ROOT, args.period, lambda url: runner_cmd(ROOT, dataset, workdir, "run", url, args)
        )
        if fresh.proc.returncode != 0:
            raise SystemExit(f"the fresh run exited {fresh.proc.returncode}:\n{fresh.err.decode()[-3000:]}")
        places = {ROOT: workdir}
        for n, tree in enumerate(trees[:-1]):
            places[tree] = workdir / f"other{n}"
            shutil.copytree(workdir / "runs", places[tree] / "runs")
            resume(tree, dataset, places[tree], args, args.prompts)  # its records and figures, made
        total = args.prompts
        for left in (int(n) for n in args.left.split(",")):
            with dataset.open("a") as handle:
                for i in range(left):
                    handle.write(json.dumps({"prompt": f"Added task number {total + i}: say hello."}) + "\n")
            total += left
            for tree in trees:
                print(
                    json.dumps({"added": left, **resume(tree, dataset, places[tree], args, total)}),
                    flush=True,
                )


if __name__ == "__main__":
    main()
