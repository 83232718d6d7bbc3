"""A Parquet dataset: streamed by record batches, its rows judged by the same rules as a JSONL
line's (bad ones named `FILE:row N`), its columns mapped to row fields by --prompt_field and
--field_map (JSONL too), and a real batch run over it SIGKILLed then resumed exactly once."""

from __future__ import annotations

import json
import tracemalloc
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from agent.batch.dataset import iter_rows, scan_dataset
from agent.config.dataset_config import DatasetOptions
from agent.servers.simulated.server import SimulatedEndpoint, Turn
from tests.support.batch import BatchCLI, kill_started, read_jsonl, write_dataset
from tests.support.dataset_runs import kill_mid_run_then_resume, script_prompts


@pytest.fixture(autouse=True)
def no_stray_processes() -> Iterator[None]:
    yield
    kill_started()


def write_parquet(path: Path, rows: list[dict[str, Any]], row_group_size: int = 3) -> Path:
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=row_group_size)
    return path


MIXED = [
    {"question": "Add 2 and 2", "gold": "4", "metadata": {"topic": "math", "level": 1}, "id": 1},
    {"question": None, "gold": "x", "metadata": None, "id": 2},  # no prompt
    {"question": "   ", "gold": None, "metadata": None, "id": 3},  # blank prompt
    {"question": "Add 2 and 2", "gold": "4", "metadata": {"topic": "again", "level": 2}, "id": 4},
    {"question": "List files", "gold": None, "metadata": {"topic": "fs", "level": 3}, "id": 5},
    {"question": "Bad regex", "gold": "(", "metadata": None, "id": 6},
]
MAPPED = DatasetOptions(prompt_field="question", field_map=(("answer", "gold"),))


def test_parquet_rows_follow_the_line_rules_and_bad_ones_are_named_by_row_number(tmp_path: Path) -> None:
    path = write_parquet(tmp_path / "d.parquet", MIXED)
    (tmp_path / "regex.json").write_text("{}")
    scan = scan_dataset(path, require_valid=False, options=MAPPED)
    assert [str(error) for error in scan.errors] == [
        f"{path}:row 2: prompt: must be a non-empty string (got null) (column 'question')",
        f"{path}:row 3: prompt: must be a non-empty string (got a blank string) (column 'question')",
    ]
    assert (scan.valid, scan.total_lines, scan.noun, scan.with_verify) == (4, 6, "rows", 3)
    rows = list(iter_rows(path, options=MAPPED))
    assert [row.line_no for row in rows] == [1, 4, 5, 6]
    assert rows[0].metadata == {"topic": "math", "level": 1}  # a struct column is an object
    assert rows[0].verify is not None and rows[0].verify.answer == "4"
    assert rows[2].verify is None  # a null answer is no check
    # prompt identity as a JSONL file of the same prompts has it: hash of the text + copy number
    jsonl = write_dataset(tmp_path / "d.jsonl", [{"prompt": r["question"]} for r in MIXED if r["question"]])
    jsonl_keys = [row.key for row in iter_rows(jsonl) if row.prompt.strip()]
    assert [row.key for row in rows] == jsonl_keys
    assert rows[1].key.endswith(":1")  # the second copy of "Add 2 and 2"


def test_values_json_cannot_hold_and_rule_breaking_fields_are_bad_rows(tmp_path: Path) -> None:
    rows = [
        {"prompt": "ok", "sampling": {"temperature": 0.5}, "cwd": "src"},
        {"prompt": "nan", "sampling": {"temperature": float("nan")}, "cwd": None},
        {"prompt": "up", "sampling": None, "cwd": "../etc"},
        {"prompt": "hot", "sampling": {"temperature": 9.0}, "cwd": None},
    ]
    path = write_parquet(tmp_path / "s.parquet", rows)
    scan = scan_dataset(path, require_valid=False)
    errors = [str(error) for error in scan.errors]
    assert errors[0] == f"{path}:row 2: sampling: holds nan, which is not valid JSON"
    assert errors[1].startswith(f"{path}:row 3: cwd: '../etc' has a '..' component")
    assert errors[2].startswith(f"{path}:row 4: sampling.temperature: ")
    assert [row.line_no for row in iter_rows(path)] == [1]


def test_a_parquet_file_is_streamed_by_batches_never_loaded_whole(tmp_path: Path) -> None:
    rows = [{"prompt": f"Prompt number {i} " + "x" * 200, "unread": "y" * 500} for i in range(20_000)]
    path = write_parquet(tmp_path / "big.parquet", rows, row_group_size=1000)
    del rows
    tracemalloc.start()
    try:
        count = sum(1 for _ in iter_rows(path))
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 20_000
    assert peak < 3_000_000  # the prompts alone are ~4.5 MB of Python strings, the file ~14 MB


def test_jsonl_columns_map_too_and_their_errors_keep_the_line_form(tmp_path: Path) -> None:
    path = write_dataset(
        tmp_path / "d.jsonl",
        [{"question": "What is 6*7?", "gold": 42, "prompt": "ignored"}, {"prompt": "no question"}],
    )
    scan = scan_dataset(path, require_valid=False, options=MAPPED)
    assert [str(e) for e in scan.errors] == [f"{path}:2: prompt: missing (column 'question')"]
    (row,) = iter_rows(path, options=MAPPED)
    assert row.prompt == "What is 6*7?" and row.verify is not None and row.verify.answer == "42"


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        (
            "--field_map=colour=c",
            "error: --field_map: unknown field 'colour'; fields: image, docker_image, cwd, "
            "metadata, sampling, verify, answer",
        ),
        ("--field_map=answer", "error: --field_map: 'answer' is not field=column"),
        ("--field_map=answer=gold,answer=id", "error: --field_map: field 'answer' mapped twice"),
        (
            "--field_map=answer=solution",
            "error: d.parquet: no column 'solution' (--field_map); its columns: question, gold, metadata, id",
        ),
        (
            "--field_map=answer=gold --answer_match=regex",
            "error: d.parquet:row 6: verify.answer: not a valid regex: missing ) at position 1",
        ),
        (
            "--dataset_revision=v1",
            "error: --dataset_revision is a Hub dataset's: --dataset_file is not hf://…",
        ),
        (
            "--prompt_field=prompt",
            "error: d.parquet: no column 'prompt' (--prompt_field); its columns: "
            "question, gold, metadata, id",
        ),
    ],
)
def test_bad_column_flags_are_one_line_and_exit_2(tmp_path: Path, flag: str, message: str) -> None:
    write_parquet(tmp_path / "d.parquet", MIXED)
    cli = BatchCLI(tmp_path)
    flags = ("--dataset_file=d.parquet", "--batch_size=2", "--run_name=r", "--model=x")
    done = cli.run(*flags, "--base_url=http://127.0.0.1:9/v1", "--prompt_field=question", *flag.split())
    assert done.returncode == 2, done
    *skipped, last = done.stderr.strip().splitlines()
    assert last == message, done
    assert all(line.startswith("skipped d.parquet:row ") for line in skipped), done  # the bad rows, named


def test_a_parquet_run_killed_mid_run_then_resumed_runs_each_prompt_once(
    tmp_path: Path, sim_endpoint: SimulatedEndpoint
) -> None:
    prompts = [f"Parquet task {i}" for i in range(10)] + ["Parquet task 3"]  # one repeated
    rows: list[dict[str, Any]] = [{"prompt": p, "metadata": {"n": i}} for i, p in enumerate(prompts)]
    rows.insert(4, {"prompt": None, "metadata": None})  # a bad row, skipped and named
    write_parquet(tmp_path / "d.parquet", rows)
    script_prompts(sim_endpoint, prompts)
    cli = BatchCLI(tmp_path, sim_endpoint)
    resumed = kill_mid_run_then_resume(cli, ("--dataset_file=d.parquet", "--batch_size=3"), Counter(prompts))
    assert "skipped d.parquet:row 5: prompt: must be a non-empty string (got null)" in resumed.stderr
    entries = read_jsonl(cli.run_dir("ds") / "trajectories.jsonl")
    assert sorted(e["metadata"]["n"] for e in entries) == list(range(11))  # the struct, carried


def test_field_map_answer_is_checked_in_a_parquet_run(
    tmp_path: Path, sim_endpoint: SimulatedEndpoint
) -> None:
    rows = [{"question": "Seven?", "gold": "7", "id": 1}, {"question": "Eight?", "gold": "9", "id": 2}]
    write_parquet(tmp_path / "q.parquet", rows)
    for row in rows:
        call = (("terminal", json.dumps({"command": "echo hi"})),)
        final = "The answer is 7." if row["question"] == "Seven?" else "The answer is 8."
        sim_endpoint.script(str(row["question"]), [Turn(reasoning="r", tool_calls=call), Turn(content=final)])
    cli = BatchCLI(tmp_path, sim_endpoint)
    flags = ("--dataset_file=q.parquet", "--batch_size=5", "--run_name=v", "--sandbox=local")
    done = cli.run(*flags, "--prompt_field=question", "--field_map=answer=gold", "--answer_match=number")
    assert done.returncode == 0, done
    passed = {}
    for entry in read_jsonl(cli.run_dir("v") / "trajectories.jsonl"):
        (check,) = entry["metadata"]["verification"]["checks"]
        passed[entry["conversations"][1]["value"]] = (check["method"], check["passed"])
    assert passed == {"Seven?": ("answer", True), "Eight?": ("answer", False)}
    rescored = cli.run(
        "--run_name=v", "--rescore", "--answer_match=number"
    )  # the run's columns, from its config
    assert rescored.returncode == 0, rescored
    rechecked = read_jsonl(cli.run_dir("v") / "trajectories.jsonl")
    assert sorted(e["metadata"]["verification"]["checks"][0]["passed"] for e in rechecked) == [False, True]
    saved = json.loads((cli.run_dir("v") / "run_config.json").read_text())
    assert saved["dataset"] == {
        "prompt_field": "question",
        "field_map": [["answer", "gold"]],
        "revision": None,
        "commit": None,
    }


def test_a_file_named_parquet_that_is_not_one_is_said_so(tmp_path: Path) -> None:
    from agent.batch.dataset import scan_dataset
    from agent.errors import DatasetError

    (tmp_path / "d.parquet").write_text('{"prompt": "x"}\n', encoding="utf-8")
    with pytest.raises(DatasetError, match=r"d\.parquet: cannot read the Parquet file \(.*not a parquet"):
        scan_dataset(str(tmp_path / "d.parquet"))
