"""When each model call of a run reaches the endpoint, at a fixed latency: where a generation of
conversations waits (`scale.py`'s workload: each prompt makes a terminal call, then answers).

    cd bench && python generation_trace.py [--tree=..] [--prompts=1024] [--inflight=1024] [--latency=10]

The simulated endpoint runs in a process of its own and notes, per call, when it arrived and
when its handler returned (latency included). Prints, for the gap between a prompt's first
reply and its second call (its tool call and the worker's own work), the median, p90 and
maximum; the time from each prompt's end to the next prompt's first call in order of ends;
and the calls that arrived in each quarter second (`c1`: a prompt's first call, `c2`: its
second), from the first call on. The tree's runner starts with the tree first on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, ClassVar

import uvloop
from throughput import _dataset
from trees import tree_env

from agent.servers.simulated.server import SimulatedEndpoint

ROOT = Path(__file__).resolve().parent.parent
Call = tuple[str, int, float, float]  # first user text, messages, arrived, answered (time.time())


class NotingEndpoint(SimulatedEndpoint):
    """The simulated endpoint, noting each chat call's arrival and answer."""

    calls: ClassVar[list[Call]] = []

    async def _respond(self, body: dict[str, Any]) -> dict[str, Any]:
        arrived = time.time()
        reply = await super()._respond(body)
        messages = body.get("messages") or []
        first = next((str(m.get("content")) for m in messages if m.get("role") == "user"), "")
        NotingEndpoint.calls.append((first, len(messages), arrived, time.time()))
        return reply


def _serve(conn: Connection, latency: float) -> None:
    endpoint = NotingEndpoint(latency=latency, record=False, policy="tool_then_answer")

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        told = asyncio.Event()
        loop.add_reader(conn.fileno(), told.set)
        server = asyncio.create_task(endpoint.serve_forever(on_ready=lambda: conn.send(endpoint.base_url)))
        await told.wait()
        loop.remove_reader(conn.fileno())
        os.set_blocking(conn.fileno(), True)
        conn.recv()
        conn.send(NotingEndpoint.calls)
        server.cancel()

    uvloop.run(serve())


def _quantiles(values: list[float]) -> str:
    cuts = statistics.quantiles(values, n=100)
    return f"p50 {cuts[49]:.2f} s, p90 {cuts[89]:.2f} s, max {max(values):.2f} s"


def report(calls: list[Call], inflight: int, spawned: float, exited: float) -> None:
    by_prompt: dict[str, list[tuple[int, float, float]]] = collections.defaultdict(list)
    for first, messages, arrived, answered in calls:
        by_prompt[first].append((messages, arrived, answered))
    pairs = [sorted(c) for c in by_prompt.values() if len(c) == 2]
    starts = sorted(p[0][1] for p in pairs)
    ends = sorted(p[1][2] for p in pairs)
    print(f"prompts with both calls: {len(pairs)}; spawn to first call {starts[0] - spawned:.2f} s,")
    span, end = ends[-1] - starts[0], exited - ends[-1]
    print(f"first call to last answer {span:.2f} s, last answer to exit {end:.2f} s")
    print("first answer -> second call:", _quantiles([p[1][1] - p[0][2] for p in pairs]))
    turnover = [starts[i + inflight] - ends[i] for i in range(len(ends) - inflight)]
    if len(turnover) > 1:
        print("a prompt's end -> the next prompt's first call:", _quantiles(turnover))
    bins = collections.Counter(
        (int((arrived - starts[0]) * 4) / 4, "c1" if messages <= 2 else "c2")
        for _, messages, arrived, _ in calls
    )
    print(" ".join(f"{at:.2f}{kind}:{n}" for (at, kind), n in sorted(bins.items())))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, default=ROOT)
    parser.add_argument("--prompts", type=int, default=1024)
    parser.add_argument("--inflight", type=int, default=1024)
    parser.add_argument("--latency", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    ours, theirs = multiprocessing.Pipe()
    endpoint = multiprocessing.Process(target=_serve, args=(theirs, args.latency))
    endpoint.start()
    base_url = ours.recv()
    with tempfile.TemporaryDirectory() as tmp:
        dataset = Path(tmp) / "prompts.jsonl"
        _dataset(dataset, args.prompts)
        env = tree_env(args.tree)
        cmd = [
            sys.executable, str(args.tree / "batch_runner.py"), f"--dataset_file={dataset}",
            "--batch_size=100", "--run_name=trace", f"--output_dir={tmp}/runs", f"--base_url={base_url}",
            "--model=sim-model", f"--num_workers={args.workers}", f"--max_inflight={args.inflight}",
            "--distribution=terminal_only", "--sandbox=local",
        ]  # fmt: skip
        spawned = time.time()
        out = subprocess.DEVNULL
        done = subprocess.run(cmd, env=env, cwd=tmp, stdout=out, stderr=subprocess.PIPE, check=False)
        exited = time.time()
    ours.send("stop")
    calls: list[Call] = ours.recv()
    endpoint.join()
    if done.returncode != 0:
        raise SystemExit(f"the runner exited {done.returncode}:\n{done.stderr.decode()[-3000:]}")
    report(calls, args.inflight, spawned, exited)


if __name__ == "__main__":
    main()
