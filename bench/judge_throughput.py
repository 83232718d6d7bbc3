"""Judge throughput through the run's shared limiter: `batch_runner.py --judge_model` against
the simulated endpoint.

    python bench/judge_throughput.py [--prompts 200] [--latency 0.05] [--max_inflight 32] [--rpm 1200]

The endpoint answers each prompt at once (policy `answer`: one agent call) and its `sim-judge`
model judges it (one judge call), every reply after --latency seconds; it runs in this process,
where it records when each request came. Four runs of the real runner, one after the other:
no judge; --judge_model=sim-judge; the same with --rpm; no judge with --rpm. Printed for each:
the runner's wall time, agent and judge calls, calls/s from the endpoint's first request to its
last, and judge calls/s (over the judge's own first to last request). With --rpm, agent and
judge calls together are held to it (one limiter): the judged run makes twice the calls, so it
takes about twice the time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from agent.servers.simulated.server import SimulatedEndpoint

ROOT = Path(__file__).resolve().parent.parent


def _run(
    endpoint: SimulatedEndpoint, workdir: Path, name: str, flags: list[str], args: argparse.Namespace
) -> str:
    endpoint.clear_requests()
    run_name = name.replace(" ", "_").replace("=", "")
    command = [
        sys.executable, str(ROOT / "batch_runner.py"),
        f"--dataset_file={workdir / 'd.jsonl'}", "--batch_size=50", f"--run_name={run_name}",
        f"--output_dir={workdir / 'runs'}", f"--base_url={endpoint.base_url}", "--api_key=bench",
        "--model=sim-model", f"--max_inflight={args.max_inflight}", "--distribution=terminal_only",
        "--sandbox=local", *flags,
    ]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=workdir)
    wall = time.monotonic() - started
    if done.returncode != 0:
        return f"{name}: exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}"
    requests = endpoint.requests
    judged = [r for r in requests if r.body.get("model") == "sim-judge"]
    span = max(r.received_at for r in requests) - min(r.received_at for r in requests)
    judge_span = (max(r.received_at for r in judged) - min(r.received_at for r in judged)) if judged else 0
    judge_rate = f"{len(judged) / judge_span:.1f}" if judge_span else "-"
    return (
        f"{name:<17} wall {wall:6.1f} s  agent calls {len(requests) - len(judged):4d}"
        f"  judge calls {len(judged):4d}"
        f"  calls/s {len(requests) / span:6.1f}  judge calls/s {judge_rate:>6}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--prompts", type=int, default=200)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--max_inflight", type=int, default=32)
    parser.add_argument("--rpm", type=float, default=1200.0)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="judge-bench-") as tmp,
        SimulatedEndpoint(latency=args.latency, policy="answer", max_recorded=None) as endpoint,
    ):
        workdir = Path(tmp)
        rows = [{"prompt": f"Task {i} [answer={i}]"} for i in range(args.prompts)]
        (workdir / "d.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
        (workdir / "rubric.md").write_text("Pass when the final answer is the task's answer.\n")
        judge = ["--judge_model=sim-judge", f"--judge_rubric={workdir / 'rubric.md'}"]
        latency = f"{args.latency * 1000:.0f} ms per reply"
        print(f"{args.prompts} prompts, {latency}, --max_inflight={args.max_inflight}")
        print(_run(endpoint, workdir, "no judge", [], args))
        print(_run(endpoint, workdir, "judge", judge, args))
        print(_run(endpoint, workdir, f"judge rpm={args.rpm:g}", [*judge, f"--rpm={args.rpm:g}"], args))
        print(_run(endpoint, workdir, f"no judge rpm={args.rpm:g}", [f"--rpm={args.rpm:g}"], args))


if __name__ == "__main__":
    main()
