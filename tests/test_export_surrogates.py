"""Exports load any run: an entry that holds a lone surrogate (`{"command":"echo \\ud800"}` in a
tool call's arguments, valid JSON but not Unicode) used to fail `--export` and `--push_to_hub`
for the whole run (exit 2, no files, a pyarrow "Exception ignored" traceback). Now each such
character is replaced with U+FFFD in the exported rows, the count said in one line, and every
format writes and loads with `datasets`. Real runner subprocess, simulated endpoint, Hub double."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.servers.simulated.server import SimulatedEndpoint, Turn
from tests.support.batch import read_jsonl, write_dataset
from tests.support.hub import TOKEN, HubCLI
from tests.support.hub_double import HubDouble

datasets = pytest.importorskip("datasets")

HALF = "Echo half a pair"
PROMPTS = [HALF, "Echo a whole one"]


def test_an_entry_with_a_lone_surrogate_exports_in_every_format_and_says_how_many(tmp_path: Path) -> None:
    arguments = json.dumps({"command": "echo \ud800"})  # '{"command": "echo \\ud800"}' on the wire
    assert "\\ud800" in arguments
    with SimulatedEndpoint() as endpoint, HubDouble(TOKEN) as hub:
        endpoint.script(
            HALF, [Turn(reasoning="Echo it.", tool_calls=(("terminal", arguments),)), Turn("done", "Done.")]
        )
        cli = HubCLI(tmp_path, endpoint, hub.url, TOKEN)
        dataset = write_dataset(tmp_path / "d.jsonl", [{"prompt": p} for p in PROMPTS])
        run = cli.run(
            f"--dataset_file={dataset}", "--run_name=half", "--batch_size=2", "--num_workers=1",
            "--distribution=terminal_only",
            "--export=parquet,openai,sharegpt", "--push_to_hub=my-org/half",
        )  # fmt: skip
        files = hub.state.commits[0].files if hub.state.commits else {}
    assert run.returncode == 0, run
    assert "Exception ignored" not in run.stderr, run.stderr
    run_dir = cli.run_dir("half")
    assert "\\ud800" in (run_dir / "trajectories.jsonl").read_text()  # the run's own file keeps it
    said = [line for line in run.stderr.splitlines() if "U+FFFD" in line]
    assert len(said) == 1 and "1 character" in said[0] and "1 entry" in said[0], run.stderr
    export = run_dir / "export"
    for name in ("trajectories.parquet", "openai.jsonl", "sharegpt.jsonl"):
        kind = "parquet" if name.endswith(".parquet") else "json"
        loaded = datasets.load_dataset(
            kind, data_files=str(export / name), cache_dir=str(tmp_path / "hf"), split="train"
        )
        assert loaded.num_rows == len(PROMPTS), name
    openai = read_jsonl(export / "openai.jsonl")  # its rows parse the call's arguments: U+FFFD
    calls = [c for row in openai for m in row["messages"] for c in m.get("tool_calls") or []]
    assert {"command": "echo \ufffd"} in [json.loads(c["function"]["arguments"]) for c in calls]
    tree = tmp_path / "repo"
    for path, data in files.items():
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        (tree / path).write_bytes(data)
    for config in ("openai", "sharegpt"):
        pushed = datasets.load_dataset(str(tree), config, split="train", cache_dir=str(tmp_path / "hf"))
        assert pushed.num_rows == len(PROMPTS), config


def test_a_failed_parquet_export_is_one_line_without_a_collector_traceback(tmp_path: Path) -> None:
    """Its writer is closed when the export fails, not left to `ParquetWriter.__del__`, which
    wrote to the closed temp file and printed "Exception ignored" after the error line."""
    with SimulatedEndpoint() as endpoint:
        cli = HubCLI(tmp_path, endpoint, "http://127.0.0.1:9", None)
        dataset = write_dataset(tmp_path / "d.jsonl", [{"prompt": p} for p in PROMPTS])
        run = cli.run(f"--dataset_file={dataset}", "--run_name=bad", "--batch_size=2", "--num_workers=1")
        assert run.returncode == 0, run
        trajectories = cli.run_dir("bad") / "trajectories.jsonl"
        with trajectories.open("a") as handle:
            handle.write("[1]\n")
        failed = cli.run("--run_name=bad", "--export=parquet,openai")
    assert failed.returncode == 2, failed
    lines = failed.stderr.strip().splitlines()
    assert len(lines) == 1 and "not a JSON object" in lines[0], failed.stderr
    assert not (cli.run_dir("bad") / "export" / "trajectories.parquet").exists()
