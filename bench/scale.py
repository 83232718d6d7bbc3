"""Scale benchmark: thousands of slow conversations in flight on one machine, local vs Ray.

    python bench/scale.py                 # 20,000 prompts, 4,096 in flight, 10 s per call
    python bench/scale.py --prompts=8192  # shorter
    python bench/scale.py --only=local --workers=8,16 --base=/tmp/base --endpoint_processes=4
        # a many-core machine: the local case per worker count, each beside another checkout's
        # (interleaved), the endpoint in 4 processes sharing its port

The real `batch_runner.py` against the simulated endpoint (a process of its own, 10 s latency;
every prompt makes a terminal tool call, then answers: 2 calls). Two cases at the same in-flight
limit: the local backend (2 worker processes) and the Ray backend on a 3-node Ray cluster
started here on 127.0.0.1 (3 worker actors). Efficiency = prompts/s ÷ (in-flight ÷ (2 × latency)),
from the endpoint's first request to the runner's exit; whole-wall efficiency = the ideal wall
(prompts ÷ that rate) ÷ the runner's wall from its spawn to its exit. Memory: PSS of every
process of the run (the runner's tree; with Ray also the cluster's processes), sampled; per open
conversation = (peak − the same processes before the first request) ÷ in-flight. CPU: the run's processes.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from endpoint_process import start_endpoint
from throughput import CALLS_PER_PROMPT, ROOT, _children, _dataset, _tree
from trees import tree_first

LOOPBACK = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}


class RunSampler(threading.Thread):
    """PSS of this process's children but `skip` (the endpoint's), and CPU of those but `runner`
    too (its CPU is counted when it is reaped), every 0.5 s."""

    def __init__(self, skip: set[int]) -> None:
        super().__init__(daemon=True)
        self.skip = skip
        self.runner = 0
        self.series: list[tuple[float, int, float]] = []  # (monotonic, PSS KiB, CPU s)
        self.stop = threading.Event()

    def sample(self) -> tuple[int, float]:
        pss, cpu = 0, 0.0
        for child in _children(os.getpid()):
            if child not in self.skip:
                part = _tree(child, {})
                pss += part.pss_kib
                cpu += part.cpu_s if child != self.runner else 0.0
        return pss, cpu

    def run(self) -> None:
        while not self.stop.is_set():
            pss, cpu = self.sample()
            self.series.append((time.monotonic(), pss, cpu))
            self.stop.wait(0.5)

    def before(self, moment: float) -> tuple[int, float]:
        earlier = [(pss, cpu) for at, pss, cpu in self.series if at <= moment]
        return earlier[-1] if earlier else (0, 0.0)


def start_cluster(tmp: Path) -> Any:
    os.environ.update(LOOPBACK)
    from ray.cluster_utils import Cluster

    node: dict[str, Any] = {"node_ip_address": "127.0.0.1", "num_cpus": 1, "include_dashboard": False,
            "temp_dir": tempfile.mkdtemp(prefix="ray-", dir="/tmp")}  # fmt: skip
    cluster = Cluster(initialize_head=True, head_node_args=dict(node, dashboard_host="127.0.0.1"))
    for _ in range(2):
        cluster.add_node(**node)
    cluster.wait_for_nodes()
    return cluster


def run_case(
    name: str,
    backend: list[str],
    prompts: int,
    inflight: int,
    latency: float,
    tmp: Path,
    tree: Path = ROOT,
    endpoint_processes: int = 1,
) -> dict[str, Any]:
    dataset = tmp / f"{name}.jsonl"
    _dataset(dataset, prompts)
    server = start_endpoint(latency, 0.0, processes=endpoint_processes)
    base_url = server.base_url
    sampler = RunSampler(skip=server.pids)
    idle_pss, idle_cpu = sampler.sample()
    cmd = [
        sys.executable, str(tree / "batch_runner.py"), f"--dataset_file={dataset}", "--batch_size=1000",
        f"--run_name={name}", f"--output_dir={tmp / 'runs'}", f"--base_url={base_url}", "--api_key=bench",
        "--model=sim-model", f"--max_inflight={inflight}", "--distribution=terminal_only",
        "--request_timeout=120", *backend,
    ]  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    env = tree_first(tree)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tmp, env=env)
    sampler.runner = proc.pid
    sampler.start()
    _, err = proc.communicate()
    ended = time.monotonic()
    sampler.stop.set()
    sampler.join()
    last_pss, last_cpu = sampler.sample()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    endpoint = server.stop()
    if proc.returncode != 0:
        raise SystemExit(f"{name}: runner exited {proc.returncode}:\n{err.decode()[-3000:]}")
    stats = endpoint["stats"]
    first = stats["first_request_at"] or started
    window = ended - first
    span = max((stats["last_reply_at"] or ended) - first, 1e-9)
    ideal = inflight / (CALLS_PER_PROMPT * latency)
    runner_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    # The Ray nodes' processes (none for the local backend): the highest reading, since an
    # actor's CPU leaves the tree with it when it is killed at the end.
    cluster_cpu = max([last_cpu, *(cpu for _, _, cpu in sampler.series)]) - idle_cpu
    base_pss, _ = sampler.before(first)
    peak = max(pss for _, pss, _ in sampler.series)
    calls = max(stats["requests_total"], 1)
    return {
        "case": name,
        "prompts": prompts,
        "max_inflight": inflight,
        "latency_s": latency,
        "tree": str(tree),
        "endpoint_processes": endpoint_processes,
        "startup_s": round(first - started, 1),
        "wall_s": round(ended - started, 1),
        "whole_wall_efficiency": round(prompts / ideal / (ended - started), 3),
        "window_s": round(window, 1),
        # Where the whole wall goes: before the first request (startup_s), the endpoint's span
        # (first request to last reply) and after the last reply; in the span, how full the
        # in-flight limit was on average (each call holds a slot for the latency).
        "endpoint_span_s": round(span, 1),
        "last_reply_to_exit_s": round(ended - (stats["last_reply_at"] or ended), 2),
        "mean_inflight_in_span": round(stats["requests_total"] * latency / span, 1),
        "prompts_per_s": round(prompts / window, 1),
        "efficiency": round(prompts / window / ideal, 3),
        "peak_inflight_at_endpoint": stats["peak_inflight"],  # several processes: their peaks summed
        "model_calls": stats["requests_total"],
        "cpu_ms_per_call": round(1000 * (runner_cpu + cluster_cpu) / calls, 2),
        "cpu_ms_per_prompt": round(1000 * (runner_cpu + cluster_cpu) / prompts, 2),
        "endpoint_cpu_ms_per_call": round(1000 * endpoint["cpu_s"] / calls, 2),
        "peak_pss_mb": round(peak / 1024, 1),
        "pss_before_first_request_mb": round(base_pss / 1024, 1),
        "kib_per_open_conversation": round((peak - base_pss) / inflight, 1),
        "idle_cluster_pss_mb": round(idle_pss / 1024, 1),
        "last_pss_mb": round(last_pss / 1024, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--prompts", type=int, default=20_000)
    parser.add_argument("--inflight", type=int, default=4096)
    parser.add_argument("--latency", type=float, default=10.0)
    parser.add_argument("--only", choices=("local", "ray"))
    parser.add_argument("--workers", default="2", help="the local case's worker counts, comma-separated")
    parser.add_argument("--sandbox", default="auto", help="the local case's --sandbox")
    parser.add_argument("--endpoint_processes", type=int, default=1, help="the endpoint's, sharing its port")
    parser.add_argument("--base", type=Path, help="another checkout: its local case runs before each of ours")
    args = parser.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the endpoint holds every connection
    print(f"load average at start: {os.getloadavg()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as name:
        tmp = Path(name)
        common = (args.prompts, args.inflight, args.latency, tmp)
        if args.only != "ray":
            for workers in (int(n) for n in args.workers.split(",")):
                local = [f"--num_workers={workers}", f"--sandbox={args.sandbox}"]
                for label, tree in (("base", args.base), ("local", ROOT)):
                    if tree is not None:
                        result = run_case(
                            f"{label}_{workers}", local, *common, tree.resolve(), args.endpoint_processes
                        )
                        print(json.dumps(result), flush=True)
        if args.only != "local":
            cluster = start_cluster(tmp)
            try:
                ray = ["--backend=ray", f"--ray_address={cluster.address}", "--num_workers=3"]
                print(json.dumps(run_case("ray_3_nodes", ray, *common)), flush=True)
            finally:
                cluster.shutdown()
    print(f"load average at end: {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    main()
