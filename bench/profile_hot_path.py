"""Where the runner's CPU goes per model call: py-spy over `throughput_against.py`'s workload
(one `echo` call per prompt, then the answer; latency 0, 2 workers, 256 in flight, local
sandboxes), every process of the runner's tree sampled (`--subprocesses`).

    pip install py-spy
    cd bench && python profile_hot_path.py [--tree=/work/wt/base7] [--prompts=2000] [--top=40]

Prints, per process kind (parent, worker), the samples' share and the top functions by own
time and by inclusive time, in µs per model call (samples × the sampling period / calls).
py-spy samples Python stacks only: a tool call's bash process is not in it (measure it alone
with `bench/sandbox_spawn.py`), and a sample is taken whether the thread runs or waits on the
GIL, so the figures are an upper bound of each function's CPU, their shares the useful part.
"""

from __future__ import annotations

import argparse
import collections
import os
import pstats
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from endpoint_process import start_endpoint
from throughput import _dataset
from trees import compiled

ROOT = Path(__file__).resolve().parent.parent
RATE = 250  # samples per second per thread
PERF = os.environ.get("PROFILE_WITH_PERF") == "1"  # perf record over the tree instead (--keep: its data)
PERF_PREFIX = ["perf", "record", "-F", "300", "-g"]
# agent.batch.worker's switch (not imported: this bench profiles any tree)
PROFILE_VARIABLE = "AGENT_BENCH_PROFILE_DIR"


def record(
    tree: Path, workdir: Path, prompts: int, cprofile: bool, policy: str = "tool_then_answer"
) -> tuple[Path, int]:
    """Run the workload under py-spy (its raw samples' file) or, with `cprofile`, with each
    worker's loop under cProfile on CPU time (the directory of their stats); and the calls."""
    dataset = workdir / "prompts.jsonl"
    _dataset(dataset, prompts)
    compiled(tree)  # its imports are not part of a call's cost
    server = start_endpoint(0.0, 0.0, policy=policy)
    raw = workdir / ("profiles" if cprofile else "profile.txt")
    spy = ["py-spy", "record", "--subprocesses", "--nonblocking", f"--rate={RATE}", "--format=raw",
           f"--output={raw}", "--"]  # fmt: skip
    prefix = [*PERF_PREFIX, f"--output={workdir / 'perf.data'}", "--"] if PERF else [] if cprofile else spy
    cmd = [
        *prefix, sys.executable, str(tree / "batch_runner.py"),
        f"--dataset_file={dataset}", "--batch_size=100", "--run_name=profile",
        f"--output_dir={workdir / 'runs'}", f"--base_url={server.base_url}",
        "--model=sim-model", "--num_workers=2", "--max_inflight=256",
        "--distribution=terminal_only", "--sandbox=local",
    ]  # fmt: skip
    # No key on the command line nor in the environment: the runner would re-execute itself
    # without it (agent.common.secrets.conceal), and py-spy loses a process that execs.
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    if cprofile:
        raw.mkdir()
        env[PROFILE_VARIABLE] = str(raw)
    out = subprocess.DEVNULL
    done = subprocess.run(cmd, stdout=out, stderr=subprocess.PIPE, cwd=tree, env=env, check=False)
    calls = max(server.stop()["stats"]["requests_total"], 1)
    if done.returncode != 0:
        raise SystemExit(f"exited {done.returncode}:\n{done.stderr.decode()[-2000:]}")
    return raw, calls


_PROCESS = re.compile(r'process \d+:"[^"]*";')  # its command line may hold ";"


def split_line(line: str) -> tuple[str, list[str], int]:
    """(process kind, frames outermost first, samples) of one raw line."""
    stack, _, count = line.rpartition(" ")
    processes = _PROCESS.findall(stack)
    frames = _PROCESS.sub("", stack).split(";")
    last = processes[-1] if processes else ""
    kind = "worker" if "multiprocessing" in last else "parent" if len(processes) == 1 else "other"
    samples = int(count) if count.isdigit() else 0  # a line cut by a process's exit
    return kind, [f for f in frames if f], samples


def summarize(raw: Path, calls: int, top: int) -> None:
    us_per_sample = 1e6 / RATE / calls
    own: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    inclusive: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    totals: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        kind, frames, count = split_line(line)
        totals[kind] += count
        functions = [f.split(" (")[0] + " " + f.rsplit("/", 1)[-1].rstrip(")") for f in frames]
        if functions:
            own[kind][functions[-1]] += count
        for function in set(functions):
            inclusive[kind][function] += count
    print(f"{calls} model calls; µs per call by process kind (py-spy samples, all threads)")
    for kind, count in totals.most_common():
        print(f"\n== {kind}: {count * us_per_sample:.0f} µs/call")
        for title, table in (("own", own[kind]), ("inclusive", inclusive[kind])):
            print(f"-- {title}")
            for function, n in table.most_common(top):
                print(f"{n * us_per_sample:9.1f}  {function}")


def summarize_cprofile(directory: Path, calls: int, top: int) -> None:
    """The workers' cProfile stats together: CPU µs per model call by function."""
    files = sorted(str(p) for p in directory.glob("*.prof"))
    if not files:
        raise SystemExit(f"no worker profile in {directory}: does this tree read {PROFILE_VARIABLE}?")
    stats = pstats.Stats(*files)
    rows = stats.stats  # type: ignore[attr-defined]  # {(file, line, name): (cc, nc, tt, ct, callers)}
    total = sum(tt for _, _, tt, _, _ in rows.values())
    print(f"{calls} model calls; workers' CPU under cProfile: {1e6 * total / calls:.0f} µs per call")
    for title, column in (("own", 2), ("inclusive", 3)):
        print(f"-- {title} (µs per call, calls per model call, function)")
        ranked = sorted(rows.items(), key=lambda item: -item[1][column])[:top]
        for (file, line, name), row in ranked:
            where = f"{file.rsplit('/', 2)[-2:]!s}:{line}" if "/" in file else file
            print(f"{1e6 * row[column] / calls:9.1f} {row[1] / calls:6.2f}  {name} {where}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tree", type=Path, default=ROOT, help="the checkout to profile")
    parser.add_argument("--prompts", type=int, default=2000)
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--keep", type=Path, help="also copy the raw profile here")
    parser.add_argument("--cprofile", action="store_true", help="cProfile the workers' CPU instead")
    parser.add_argument("--raw", type=Path, help="summarize this raw profile, recording none")
    parser.add_argument("--calls", type=int, default=4000, help="with --raw: its model calls")
    parser.add_argument("--policy", default="tool_then_answer", help="the endpoint's (answer: no tool call)")
    args = parser.parse_args()
    if args.raw is not None:
        summarize(args.raw, args.calls, args.top)
        return
    with tempfile.TemporaryDirectory(prefix="bench-profile-") as tmp:
        raw, calls = record(args.tree.resolve(), Path(tmp), args.prompts, args.cprofile, args.policy)
        if PERF:
            print(f"{calls} model calls")
            if args.keep is not None:
                shutil.copy(Path(tmp) / "perf.data", args.keep)
            return
        if args.cprofile:
            if args.keep is not None:
                shutil.copytree(raw, args.keep, dirs_exist_ok=True)
            summarize_cprofile(raw, calls, args.top)
            return
        if args.keep is not None:
            args.keep.write_bytes(raw.read_bytes())
        summarize(raw, calls, args.top)


if __name__ == "__main__":
    main()
