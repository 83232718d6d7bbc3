"""`--export` of a run with no entries writes no file (`datasets` loads no file of 0 rows, JSON
Lines or Parquet) and says so in one line, exit 2, at the run's end as later. Real runner
subprocesses against the simulated endpoint."""

from __future__ import annotations

from pathlib import Path

from agent.servers.simulated.server import SimulatedEndpoint, Turn
from tests.support.batch import BatchCLI, write_dataset

FLAGS = ("--batch_size=2", "--num_workers=1")


def test_a_run_with_no_entries_writes_no_export_and_says_so(tmp_path: Path) -> None:
    """Once 0-row files `datasets` cannot load, exit 0; and exit 2 when exported again."""
    prompts = ["Plain one", "Plain two"]
    with SimulatedEndpoint() as endpoint:
        for prompt in prompts:  # answered without reasoning: discarded
            endpoint.script(prompt, [Turn(content="An answer.")])
        cli = BatchCLI(tmp_path, endpoint)
        dataset = write_dataset(tmp_path / "d.jsonl", [{"prompt": p} for p in prompts])
        run = cli.run(f"--dataset_file={dataset}", "--run_name=none", "--export=parquet,openai", *FLAGS)
        again = cli.run("--run_name=none", "--export=sharegpt")
    trajectories = cli.run_dir("none") / "trajectories.jsonl"
    said = f"error: {trajectories}: no entries to export (every prompt failed or was discarded); "
    for finished in (run, again):
        assert finished.returncode == 2, finished
        assert finished.stderr.strip().splitlines()[-1].startswith(said), finished
        assert "Traceback" not in finished.stderr
    assert (cli.run_dir("none") / "discarded.jsonl").read_text().count("\n") == len(prompts)
    assert list((cli.run_dir("none") / "export").iterdir()) == []
