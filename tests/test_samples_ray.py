"""--samples_per_prompt on `--backend=ray` (a real 3-node Ray cluster on this machine, see
tests/fixtures/ray.py): the same units of work as the local backend, so the same entries."""

from __future__ import annotations

import json
import re
from pathlib import Path

from agent.servers.simulated.server import SimulatedEndpoint
from tests.fixtures.ray import RayCluster, ray_args
from tests.support.batch import BatchCLI, prompts_dataset, read_jsonl


def comparable(run_dir: Path) -> list[str]:
    """The merged entries, in their order, without what differs between two runs: timestamps
    and the ids the endpoint makes up per reply."""
    entries = read_jsonl(run_dir / "trajectories.jsonl")
    for entry in entries:
        entry["metadata"].pop("timestamp")
    return [re.sub(r"call_[0-9a-f]{24}", "call_ID", json.dumps(entry, sort_keys=True)) for entry in entries]


def test_ray_runs_each_sample_as_local_does(tmp_path: Path, ray_cluster: RayCluster) -> None:
    with SimulatedEndpoint() as endpoint:
        cli = BatchCLI(tmp_path, endpoint)
        dataset = prompts_dataset(tmp_path / "d.jsonl", [f"ray sample {i}" for i in range(6)])
        common = [f"--dataset_file={dataset}", "--batch_size=5", "--samples_per_prompt=3", "--model_seed=4"]
        local = cli.run(*common, "--run_name=local", "--num_workers=2")
        assert local.returncode == 0, local
        ray = cli.run(*common, "--run_name=onray", *ray_args(ray_cluster))
        assert ray.returncode == 0, ray
    entries = comparable(cli.run_dir("onray"))
    assert entries == comparable(cli.run_dir("local")) and len(entries) == 18
    assert ray_cluster.sandboxes_left("onray") == []
