"""`--export` that cannot export says why in one line and exits non-zero, keeping what exists:
of a run whose first invocation still runs (exit 3: the lock, not "no merged trajectories"), of
a run with no entries (exit 2: `datasets` loads no file of 0 rows, so none is written, at the
run's end as later), and onto a directory where an export file goes (exit 1, not a traceback;
the other exports stay). Real runner subprocesses against the simulated endpoint."""

from __future__ import annotations

import json
import os
import signal
import socket
from pathlib import Path

import pytest

from agent.export.run_export import ExportWriteError, export_run
from agent.servers.simulated.server import SimulatedEndpoint, Turn
from bench.export import synthetic_entry
from tests.support.batch import BatchCLI, requested_prompts, tool_then_answer, wait_until, write_dataset

FLAGS = ("--batch_size=2", "--num_workers=1")


def test_exporting_a_run_whose_first_invocation_runs_is_refused_by_its_lock(tmp_path: Path) -> None:
    """Once exit 2: "no merged trajectories", checked before the lock."""
    with SimulatedEndpoint() as endpoint:
        endpoint.script("Sleep", tool_then_answer(command="sleep 60"))
        cli = BatchCLI(tmp_path, endpoint)
        dataset = write_dataset(tmp_path / "d.jsonl", [{"prompt": "Sleep"}])
        proc = cli.start(f"--dataset_file={dataset}", "--run_name=live", *FLAGS)
        try:
            wait_until(lambda: requested_prompts(endpoint)["Sleep"] == 1, "the prompt running", 120)
            assert not (cli.run_dir("live") / "trajectories.jsonl").exists()
            run = cli.run("--run_name=live", "--export=openai")
        finally:
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait(timeout=90)
    assert run.returncode == 3, run
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and f"error: {cli.run_dir('live')} is in use by another runner" in lines[0], run
    assert not (cli.run_dir("live") / "export").exists()


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
    assert not (cli.run_dir("none") / "export").exists()  # nor the directory made for them


def test_a_run_whose_prompts_all_failed_keeps_exit_1_and_says_there_is_nothing_to_export(
    tmp_path: Path,
) -> None:
    """Its next step is --resume (which exports again), not a fix of the flags (exit 2)."""
    with socket.socket() as probe:  # a port that was free a moment ago: nobody answers
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    cli = BatchCLI(tmp_path)
    dataset = write_dataset(tmp_path / "d.jsonl", [{"prompt": "one"}, {"prompt": "two"}])
    run = cli.run(
        f"--dataset_file={dataset}", "--run_name=failed", "--export=openai", "--max_retries=1",
        f"--base_url=http://127.0.0.1:{port}/v1", *FLAGS,
    )  # fmt: skip
    assert run.returncode == 1, run
    assert f"error: {cli.run_dir('failed') / 'trajectories.jsonl'}: no entries to export" in run.stderr, run
    assert "--resume" in run.stderr and "Traceback" not in run.stderr
    assert not (cli.run_dir("failed") / "export").exists()


def test_a_directory_where_an_export_goes_is_one_line_and_the_other_exports_stay(tmp_path: Path) -> None:
    with SimulatedEndpoint() as endpoint:
        cli = BatchCLI(tmp_path, endpoint)
        dataset = write_dataset(tmp_path / "d.jsonl", [{"prompt": "Hello"}])
        run = cli.run(f"--dataset_file={dataset}", "--run_name=dir", "--export=parquet", *FLAGS)
        assert run.returncode == 0, run
        export = cli.run_dir("dir") / "export"
        parquet = (export / "trajectories.parquet").read_bytes()
        (export / "openai.jsonl").mkdir()
        blocked = cli.run("--run_name=dir", "--export=parquet,openai,sharegpt")
    assert blocked.returncode == 1, blocked
    lines = blocked.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {export / 'openai.jsonl'}: a directory"), blocked
    assert (export / "trajectories.parquet").read_bytes() == parquet
    assert sorted(p.name for p in export.iterdir()) == ["openai.jsonl", "trajectories.parquet"]


def test_a_file_where_the_export_directory_goes_is_one_line_naming_it(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "trajectories.jsonl").write_text(json.dumps(synthetic_entry(0)) + "\n", encoding="utf-8")
    (run_dir / "export").write_text("not a directory")
    with pytest.raises(ExportWriteError) as refused:
        export_run(run_dir, ("openai",))
    assert str(refused.value).startswith(f"{run_dir / 'export'}: File exists; the run's files")
    assert refused.value.exit_code == 1
