"""What a batch run writes: trajectory entries with exactly the spec's fields, reproducible
toolset sampling, the de-duplicating and filtering merge, statistics.json, a file Hugging Face
`datasets` loads, and whole `--verbose` log lines."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from agent.servers.simulated.server import SimulatedEndpoint, Turn
from model_tools import TOOL_TO_TOOLSET_MAP
from tests.support.batch import (
    SPEC_FIELDS,
    BatchCLI,
    human_prompt,
    read_json,
    read_jsonl,
    requested_prompts,
    tool_then_answer,
    write_dataset,
)

ROWS: list[dict[str, Any]] = [
    {"prompt": "Output row zero", "metadata": {"prompt_source": "unit", "difficulty": "easy"}},
    {"prompt": "Output row one", "metadata": {"topic": "math", "level": 3}},
    {"prompt": "Output row two"},
    {"prompt": "Output row three, cut short", "metadata": {"difficulty": "hard"}},
    {"prompt": "Output row four"},
    {"prompt": "Output row five", "metadata": {"prompt_source": "other"}},
]
TRUNCATED = ROWS[3]["prompt"]
FLAGS = (
    "--batch_size=4",
    "--distribution=development",
    "--allow_missing_toolsets",  # sampling over every toolset, whichever can run here
    "--seed=11",
    "--num_workers=2",
    "--model=sim/model-x",
)


@dataclass
class FinishedRun:
    cli: BatchCLI
    dataset: Path
    run_dir: Path
    entries: list[dict[str, Any]]


def script_endpoint(endpoint: SimulatedEndpoint) -> None:
    # A final answer cut at max_tokens: a partial entry (it has reasoning, so it is kept).
    cut = Turn(content="The answer is", reasoning="Thinking…", finish_reason="length")
    endpoint.script(TRUNCATED, [cut])


@pytest.fixture(scope="module")
def endpoint() -> Iterator[SimulatedEndpoint]:
    with SimulatedEndpoint() as sim:
        script_endpoint(sim)
        yield sim


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory, endpoint: SimulatedEndpoint) -> FinishedRun:
    cli = BatchCLI(tmp_path_factory.mktemp("output"), endpoint)
    dataset = write_dataset(cli.workdir / "rows.jsonl", ROWS)
    run = cli.run(f"--dataset_file={dataset}", "--run_name=out", *FLAGS)
    assert run.returncode == 0, run
    run_dir = cli.run_dir("out")
    return FinishedRun(cli, dataset, run_dir, read_jsonl(run_dir / "trajectories.jsonl"))


def by_prompt(entries: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {human_prompt(e): e for e in entries}


def test_entries_have_exactly_the_spec_fields(finished: FinishedRun) -> None:
    entries = by_prompt(finished.entries)
    assert sorted(entries) == sorted(row["prompt"] for row in ROWS)
    for index, row in enumerate(ROWS):
        entry = entries[row["prompt"]]
        assert list(entry) == SPEC_FIELDS
        assert entry["prompt_index"] == index
        metadata = entry["metadata"]
        assert metadata["batch_num"] == index // 4
        assert metadata["model"] == "sim/model-x"
        datetime.fromisoformat(metadata["timestamp"])
        assert isinstance(metadata["prompt_key"], str) and metadata["prompt_key"]
        assert metadata["usage"]["prompt_tokens"] > 0 and metadata["usage"]["completion_tokens"] > 0
        for key, value in row.get("metadata", {}).items():
            assert metadata[key] == value
        assert set(entry["tool_stats"]) == set(TOOL_TO_TOOLSET_MAP)
        assert set(entry["tool_error_counts"]) == set(TOOL_TO_TOOLSET_MAP)
        for name, counts in entry["tool_stats"].items():  # terminal also counts non-zero exits
            assert set(counts) == {"count", "success", "failure"} | (
                {"nonzero_exit"} if name == "terminal" else set()
            )
        assert entry["api_calls"] >= 1
        assert entry["toolsets_used"]
    assert entries[TRUNCATED]["partial"] is True and entries[TRUNCATED]["completed"] is False
    assert entries[ROWS[0]["prompt"]]["completed"] is True and entries[ROWS[0]["prompt"]]["partial"] is False


def test_batch_files_follow_the_batch_size(finished: FinishedRun) -> None:
    assert {human_prompt(e) for e in read_jsonl(finished.run_dir / "batch_0.jsonl")} == {
        row["prompt"] for row in ROWS[:4]
    }
    assert {human_prompt(e) for e in read_jsonl(finished.run_dir / "batch_1.jsonl")} == {
        row["prompt"] for row in ROWS[4:]
    }


def test_seed_makes_toolset_sampling_reproducible(finished: FinishedRun) -> None:
    again = finished.cli.run(f"--dataset_file={finished.dataset}", "--run_name=out-again", *FLAGS)
    assert again.returncode == 0, again
    first = {e["prompt_index"]: e["toolsets_used"] for e in finished.entries}
    second = {
        e["prompt_index"]: e["toolsets_used"]
        for e in read_jsonl(finished.cli.run_dir("out-again") / "trajectories.jsonl")
    }
    assert first == second
    assert len({tuple(v) for v in first.values()}) > 1  # sampled per prompt, not one fixed set


def test_statistics_json_reports_usage_reasoning_filters_failures_tokens_duration(
    finished: FinishedRun,
) -> None:
    stats = read_json(finished.run_dir / "statistics.json")
    calls = sum(e["tool_stats"]["terminal"]["count"] for e in finished.entries)
    assert calls > 0
    terminal = stats["tool_statistics"]["terminal"]
    assert terminal["count"] == calls
    assert terminal["success"] + terminal["failure"] == calls
    assert {"success_rate", "failure_rate"} <= set(terminal)
    reasoning = stats["reasoning_statistics"]
    assert reasoning["total_assistant_turns"] > 0
    assert reasoning["coverage_percent"] == 100.0
    assert stats["discarded"] == {} and stats["discarded_no_reasoning"] == 0
    assert stats["failures"] == {}
    assert stats["tokens"]["merged_output"]["total"] == sum(
        e["metadata"]["usage"]["total_tokens"] for e in finished.entries
    )
    assert stats["tokens"]["this_invocation"]["total"] > 0
    assert stats["duration_seconds"] > 0
    assert stats["trajectories"] == {
        "entries": 6,
        "completed": 5,
        "partial": 1,
        "api_calls": sum(e["api_calls"] for e in finished.entries),
    }
    assert (stats["total_prompts"], stats["total_batches"], stats["batch_size"]) == (6, 2, 4)


def test_huggingface_datasets_loads_the_output(finished: FinishedRun, tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    loaded = datasets.load_dataset(
        "json", data_files=str(finished.run_dir / "trajectories.jsonl"), cache_dir=str(tmp_path / "hf")
    )["train"]
    assert loaded.num_rows == 6
    rows = {row["conversations"][1]["value"]: row for row in loaded}
    assert rows[ROWS[0]["prompt"]]["metadata"]["difficulty"] == "easy"
    assert rows[ROWS[1]["prompt"]]["metadata"]["level"] == 3
    assert rows[ROWS[1]["prompt"]]["metadata"].get("difficulty") is None  # a key only other rows carry
    assert sorted(loaded["partial"]) == [False] * 5 + [True]
    assert rows[TRUNCATED]["tool_stats"]["terminal"]["count"] == 0


def test_merge_drops_duplicates_and_moves_unknown_tool_entries_to_discards(finished: FinishedRun) -> None:
    """An entry calling a tool no toolset has is malformed: without --keep_malformed it goes to
    discarded.jsonl with its reason (the merge used to drop it without a record)."""
    cli = BatchCLI(finished.cli.workdir / "merge", finished.cli.endpoint)
    run_dir = cli.run_dir("out")
    shutil.copytree(finished.run_dir, run_dir)
    (run_dir / "trajectories.jsonl").unlink()
    first_line = (run_dir / "batch_0.jsonl").read_text().splitlines()[0]
    ghost = json.loads(first_line)
    ghost["conversations"][1]["value"] = "A ghost prompt nobody asked"
    ghost["metadata"]["prompt_key"] = "ghost:0"
    ghost["tool_stats"]["hallucinated_tool"] = {"count": 1, "success": 1, "failure": 0}
    with (run_dir / "batch_1.jsonl").open("a") as handle:
        handle.write(first_line + "\n")  # the same prompt again, in another batch file
        handle.write(json.dumps(ghost) + "\n")
    assert cli.endpoint is not None
    cli.endpoint.clear_requests()
    run = cli.run(f"--dataset_file={finished.dataset}", "--run_name=out", "--resume", *FLAGS)
    assert run.returncode == 0, run
    assert requested_prompts(cli.endpoint) == {}
    merged = [human_prompt(e) for e in read_jsonl(run_dir / "trajectories.jsonl")]
    assert sorted(merged) == sorted(row["prompt"] for row in ROWS)
    merge = read_json(run_dir / "statistics.json")["merge"]
    assert (merge["duplicates"], merge["not_kept"]) == (1, 1)
    assert merge["unknown_tools"] == {"hallucinated_tool": 1}
    [moved] = [d for d in read_jsonl(run_dir / "discarded.jsonl") if d.get("moved_from_output")]
    assert (moved["prompt_key"], moved["reason"]) == ("ghost:0", "tool_not_offered")
    assert moved["entry"]["metadata"]["discard_reasons"] == ["tool_not_offered"]


def test_verbose_log_lines_are_whole_with_prefix_and_preview(tmp_path: Path) -> None:
    command = "echo " + "abcdefghij" * 12
    arguments = json.dumps({"command": command})
    with SimulatedEndpoint() as sim:
        sim.script("Verbose one", tool_then_answer(command=command))
        sim.script("Verbose two", tool_then_answer(command=command))
        cli = BatchCLI(tmp_path, sim)
        write_dataset(tmp_path / "v.jsonl", [{"prompt": "Verbose one"}, {"prompt": "Verbose two"}])
        run = cli.run(
            "--dataset_file=v.jsonl",
            "--batch_size=1",
            "--run_name=verbose",
            "--verbose",
            "--log_prefix_chars=90",
            "--distribution=terminal_only",
            "--num_workers=2",
        )
    assert run.returncode == 0, run
    lines = run.stderr.splitlines()
    for prefix in ("[B0:P0] ", "[B1:P1] "):
        call = [line for line in lines if f"{prefix}🔧 terminal({arguments[:90]})" in line]
        assert len(call) == 1, run
        assert re.search(rf"{re.escape(prefix)}↳ \S", "\n".join(lines)), run
    assert arguments[:91] not in run.stderr  # the preview is cut at --log_prefix_chars
    assert any(re.fullmatch(r"progress: 2/2 prompts \(.*\) · .* ETA .*", line) for line in lines), run
