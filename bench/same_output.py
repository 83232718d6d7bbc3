"""Same data from two versions of the runner: run each tree's `batch_runner.py` over the same
dataset against the same kind of simulated endpoint and compare the merged `trajectories.jsonl`,
ignoring only what differs from run to run by design (timestamps, durations, random call ids).

    git worktree add /tmp/old <commit>
    python bench/same_output.py --old=/tmp/old                # this tree against <commit>
    python bench/same_output.py --old=/tmp/old --backend=ray  # the same on Ray

Exit 0 when both trees wrote the same entries, 1 with the first difference printed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# What two runs of one tree already differ in: clocks, run ids and the ids the simulated model
# draws at random for its tool calls (renumbered in order of appearance within an entry).
VOLATILE_KEYS = {"timestamp", "started_at", "finished_at", "duration_s", "elapsed_s", "run_id"}
CALL_ID = re.compile(r"\b(call|chatcmpl|toolu)[-_][A-Za-z0-9]{6,}\b")


def _dataset(path: Path, prompts: int) -> None:
    lines = [
        json.dumps({"prompt": f"Task {i}: list the files, write notes.txt, then look at an image."})
        for i in range(prompts)
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _corpus(folder: Path) -> None:
    folder.mkdir()
    (folder / "notes.md").write_text("# Notes\n\nhello from the corpus\n", encoding="utf-8")


@contextlib.contextmanager
def _backend_flags(backend: str) -> Iterator[list[str]]:
    """`--backend` and, for Ray, the address of a 2-node cluster on 127.0.0.1 started for it."""
    if backend != "ray":
        yield [f"--backend={backend}"]
        return
    from ray.cluster_utils import Cluster

    own_tmp = tempfile.mkdtemp(prefix="same-output-")
    (Path(own_tmp) / "ray").mkdir()  # where Ray notes the address of the cluster it started
    os.environ.update(RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_USAGE_STATS_ENABLED="0", TMPDIR=own_tmp)
    tempfile.tempdir = None  # read TMPDIR again
    node: dict[str, Any] = {"node_ip_address": "127.0.0.1", "num_cpus": 1, "include_dashboard": False}
    node["temp_dir"] = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: AF_UNIX paths
    cluster = Cluster(initialize_head=True, head_node_args=node)
    try:
        cluster.add_node(**node)
        cluster.wait_for_nodes()
        yield ["--backend=ray", f"--ray_address={cluster.address}"]
    finally:
        cluster.shutdown()  # type: ignore[no-untyped-call]


def _run(tree: Path, work: Path, flags: list[str], reasoning: str) -> Path:
    """One run of `tree`'s runner; the path of its merged trajectories."""
    endpoint = subprocess.Popen(
        [sys.executable, "-m", "agent.servers.simulated", "--port=0", f"--reasoning={reasoning}"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    try:
        assert endpoint.stdout is not None
        base_url = endpoint.stdout.readline().split()[-1]
        command = [
            sys.executable, str(tree / "batch_runner.py"), f"--dataset_file={work / 'prompts.jsonl'}",
            "--batch_size=20", "--run_name=same", f"--output_dir={work / 'runs'}",
            f"--base_url={base_url}", "--api_key=bench", "--model=sim-model", "--num_workers=2",
            "--distribution=balanced", "--allow_missing_toolsets", f"--web_corpus={work / 'corpus'}",
            "--sandbox=local", "--seed=7", *flags,
        ]  # fmt: skip
        done = subprocess.run(
            command, cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True, text=True
        )
        if done.returncode != 0:
            sys.exit(f"{tree}: batch_runner exited {done.returncode}\n{done.stderr[-3000:]}")
    finally:
        endpoint.terminate()
        endpoint.wait()
    return work / "runs" / "same" / "trajectories.jsonl"


def _normal(value: Any, ids: dict[str, str]) -> Any:
    if isinstance(value, dict):
        return {k: _normal(v, ids) for k, v in value.items() if k not in VOLATILE_KEYS}
    if isinstance(value, list):
        return [_normal(v, ids) for v in value]
    if isinstance(value, str):
        return CALL_ID.sub(lambda m: ids.setdefault(m.group(0), f"call_{len(ids)}"), value)
    return value


def _entries(path: Path) -> list[Any]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    normal = [_normal(row, {}) for row in rows]
    return sorted(normal, key=lambda row: json.dumps(row, sort_keys=True))


def _first_difference(old: Any, new: Any, where: str = "") -> str | None:
    if type(old) is not type(new):
        return f"{where}: {old!r:.200} != {new!r:.200}"
    if isinstance(old, dict):
        for key in sorted(set(old) | set(new)):
            if key not in old or key not in new:
                return f"{where}.{key}: only in {'new' if key in new else 'old'}"
            found = _first_difference(old[key], new[key], f"{where}.{key}")
            if found:
                return found
        return None
    if isinstance(old, list):
        if len(old) != len(new):
            return f"{where}: {len(old)} items != {len(new)}"
        pairs = enumerate(zip(old, new, strict=True))
        return next((d for i, (a, b) in pairs if (d := _first_difference(a, b, f"{where}[{i}]"))), None)
    return None if old == new else f"{where}: {old!r:.200} != {new!r:.200}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--old", type=Path, required=True, help="the other tree (a worktree)")
    parser.add_argument("--new", type=Path, default=ROOT)
    parser.add_argument("--prompts", type=int, default=200)
    parser.add_argument("--backend", default="local")
    parser.add_argument("--reasoning", default="field", help="the simulated model's reasoning style")
    args = parser.parse_args()
    found: list[list[Any]] = []
    with _backend_flags(args.backend) as flags:
        for tree in (args.old.resolve(), args.new.resolve()):
            with tempfile.TemporaryDirectory() as name:
                work = Path(name)
                _dataset(work / "prompts.jsonl", args.prompts)
                _corpus(work / "corpus")
                found.append(_entries(_run(tree, work, flags, args.reasoning)))
    old, new = found
    difference = _first_difference(old, new)
    print(f"old {len(old)} entries, new {len(new)} entries: {'different' if difference else 'the same'}")
    if difference:
        print(f"first difference: entries{difference}")
    return 1 if difference or len(old) != args.prompts else 0


if __name__ == "__main__":
    sys.exit(main())
