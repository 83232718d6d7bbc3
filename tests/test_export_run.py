"""`--export` end to end: a real run (batch_runner.py subprocess, simulated endpoint over HTTP
through the openai SDK) with mixed toolsets and outcomes exports every format at its end; each
file loads with `datasets` with no schema error, the Parquet file has the declared schema, the
OpenAI rows give back the run's ShareGPT conversations, and the post-process mode re-exports an
existing run without calling the model. Operator errors are one line and exit 2."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from agent.cli.command_line import read_command_line
from agent.cli.export_cli import is_post_process, post_process
from agent.cli.flags import BATCH
from agent.errors import ConfigError
from agent.export.columns import ENTRY_SCHEMA
from agent.export.openai_messages import Conversation, to_sharegpt
from agent.servers.simulated.server import SimulatedEndpoint, Turn
from agent.store import run_lock
from tests.support.batch import (
    API_KEY,
    BatchCLI,
    read_json,
    read_jsonl,
    requested_prompts,
    tool_then_answer,
    write_dataset,
)

datasets = pytest.importorskip("datasets")  # a dev dependency: installed wherever the suite runs

PARALLEL, ERROR, CUT = "Export parallel calls", "Export a failing tool", "Export cut short"
PLAIN = "Export plain"
ROWS: list[dict[str, Any]] = [
    {"prompt": PARALLEL, "metadata": {"level": 3, "source": "unit"}},
    {"prompt": ERROR, "metadata": {"level": "hard"}},  # the same key, another type
    {"prompt": CUT},
    {"prompt": "Export without reasoning", "metadata": {"tags": ["a", "b"]}},
    {"prompt": f"{PLAIN} Ünïcødé ✓"},
    {"prompt": f"{PLAIN} two"},
    {"prompt": f"{PLAIN} three"},
]
FLAGS = (
    "--batch_size=3",
    "--distribution=balanced",  # each prompt its own toolsets, every toolset backed:
    f"--web_corpus={Path(__file__).resolve().parent.parent / 'data' / 'corpus'}",
    "--moa_models=sim/reference",
    "--allow_hosts=127.0.0.1",
    "--seed=5",
    "--num_workers=2",
    "--model=sim/export-model",
    "--keep_no_reasoning",
    "--keep_malformed",  # a scripted call to a tool the prompt was not offered stays in
)
FILES = {"parquet": "trajectories.parquet", "openai": "openai.jsonl", "sharegpt": "sharegpt.jsonl"}


@dataclass
class ExportedRun:
    cli: BatchCLI
    endpoint: SimulatedEndpoint
    run_dir: Path
    entries: list[dict[str, Any]]
    stderr: str


def script(endpoint: SimulatedEndpoint) -> None:
    think = "Two commands at once."
    calls = tuple(("terminal", json.dumps({"command": f"echo {x}"})) for x in "ab")
    answer = Turn(content="a and b", reasoning=think)
    endpoint.script(PARALLEL, [Turn(reasoning=think, tool_calls=calls), answer])
    endpoint.script(ERROR, tool_then_answer(command="cat /definitely/not/here"))
    endpoint.script(CUT, [Turn(content="The answer is", reasoning="Thinking…", finish_reason="length")])
    endpoint.script("Export without reasoning", tool_then_answer(reasoning=False))


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExportedRun]:
    with SimulatedEndpoint() as endpoint:
        script(endpoint)
        cli = BatchCLI(tmp_path_factory.mktemp("export"), endpoint)
        dataset = write_dataset(cli.workdir / "rows.jsonl", ROWS)
        export = "--export=parquet,openai,sharegpt"
        run = cli.run(f"--dataset_file={dataset}", "--run_name=ex", export, *FLAGS)
        assert run.returncode == 0, run
        run_dir = cli.run_dir("ex")
        yield ExportedRun(cli, endpoint, run_dir, read_jsonl(run_dir / "trajectories.jsonl"), run.stderr)


def load(path: Path, cache: Path) -> Any:
    kind = "parquet" if path.suffix == ".parquet" else "json"
    return datasets.load_dataset(kind, data_files=str(path), cache_dir=str(cache), split="train")


def test_the_run_writes_every_export_at_its_end(exported: ExportedRun) -> None:
    assert len(exported.entries) == len(ROWS)
    for name, file in FILES.items():
        path = exported.run_dir / "export" / file
        assert path.is_file() and path.stat().st_size > 0, name
        assert f"Exported {len(ROWS)} entries ({name}): {path}" in exported.stderr
    assert sorted(p.name for p in (exported.run_dir / "export").iterdir()) == sorted(FILES.values())
    assert read_json(exported.run_dir / "run_config.json")["export"]["export"] == list(FILES)
    toolsets = {tuple(e["toolsets_used"]) for e in exported.entries}
    outcomes = {e["metadata"]["outcome"] for e in exported.entries}
    assert len(toolsets) > 1 and {"completed", "truncated"} <= outcomes  # the mix the exports must hold


@pytest.mark.parametrize("name", list(FILES))
def test_datasets_loads_every_export_with_one_schema(
    exported: ExportedRun, name: str, tmp_path: Path
) -> None:
    loaded = load(exported.run_dir / "export" / FILES[name], tmp_path)
    assert loaded.num_rows == len(ROWS)
    rows = {row["prompt_index"]: row for row in loaded}
    for entry in exported.entries:
        row = rows[entry["prompt_index"]]
        ours = ("batch_num", "timestamp", "model", "prompt_key", "outcome", "usage", "discard_reasons")
        ours += ("prompt_id", "sample_index")  # columns of their own
        assert json.loads(row["metadata"]) == {k: v for k, v in entry["metadata"].items() if k not in ours}
        if name != "openai":  # a kept flawed entry's label has its own column
            assert row["discard_reasons"] == entry["metadata"].get("discard_reasons", [])
        assert (row["outcome"], row["model"]) == (entry["metadata"]["outcome"], "sim/export-model")
        assert row["usage"]["total_tokens"] == entry["metadata"]["usage"]["total_tokens"]
        stats = {s["name"]: [s["count"], s["success"], s["failure"]] for s in row["tool_stats"]}
        assert stats == {k: [v["count"], v["success"], v["failure"]] for k, v in entry["tool_stats"].items()}
        assert row["toolsets_used"] == entry["toolsets_used"]
        if name != "openai":
            assert row["conversations"] == entry["conversations"]


def test_the_parquet_export_has_the_declared_schema(exported: ExportedRun) -> None:
    path = exported.run_dir / "export" / FILES["parquet"]
    assert pq.read_schema(path).remove_metadata() == ENTRY_SCHEMA
    table = pq.read_table(path)
    assert sorted(table.column("prompt_index").to_pylist()) == list(range(len(ROWS)))


def test_the_openai_rows_give_back_the_runs_conversations(exported: ExportedRun, tmp_path: Path) -> None:
    loaded = load(exported.run_dir / "export" / FILES["openai"], tmp_path)
    by_index = {e["prompt_index"]: e for e in exported.entries}
    for row in loaded:
        conversation = Conversation(row["messages"], json.loads(row["tools"]))
        assert to_sharegpt(conversation) == by_index[row["prompt_index"]]["conversations"]
        offered = bool(by_index[row["prompt_index"]]["toolsets_used"])
        assert bool(conversation.tools) == offered  # the schemas of the prompt's own toolsets
        assert all(isinstance(t["function"]["parameters"], dict) for t in conversation.tools)
        assert {m["role"] for m in row["messages"]} <= {"user", "assistant", "tool"}
    parallel = next(r for r in loaded if r["messages"][0]["content"] == PARALLEL)
    calls = parallel["messages"][1]["tool_calls"]
    results = [m for m in parallel["messages"] if m["role"] == "tool"]
    assert [c["function"]["arguments"] for c in calls] == ['{"command": "echo a"}', '{"command": "echo b"}']
    assert [c["id"] for c in calls] == [m["tool_call_id"] for m in results]
    assert len({c["id"] for c in calls}) == 2
    assert parallel["messages"][1]["reasoning_content"] == "Two commands at once."


def test_post_processing_an_existing_run_calls_no_model(exported: ExportedRun) -> None:
    asked = sum(requested_prompts(exported.endpoint).values())
    openai = exported.run_dir / "export" / FILES["openai"]
    before = {p.name: p.read_bytes() for p in exported.run_dir.iterdir() if p.is_file()}
    run = exported.cli.run("--run_name=ex", "--export=openai", "--export_reasoning=inline")
    assert run.returncode == 0, run
    assert sum(requested_prompts(exported.endpoint).values()) == asked
    assert {p.name: p.read_bytes() for p in exported.run_dir.iterdir() if p.is_file()} == before
    rows = read_jsonl(openai)
    cut = next(r for r in rows if r["messages"][0]["content"] == CUT)
    assert cut["messages"][1]["content"] == "<think>\nThinking…\n</think>\nThe answer is"
    assert all(m["reasoning_content"] is None for r in rows for m in r["messages"])
    assert not list((exported.run_dir / "export").glob(".*"))  # no temp file left behind


def test_exporting_a_run_a_runner_is_writing_is_refused(exported: ExportedRun) -> None:
    """Once exported the stale output while a resume was writing it, exit 0."""
    fd = run_lock.take(exported.run_dir)  # as a runner holds it
    try:
        run = exported.cli.run("--run_name=ex", "--export=openai")
    finally:
        run_lock.release(fd)
    assert run.returncode == 3, run
    assert run.stderr.rstrip().splitlines()[-1] == (
        f"error: {exported.run_dir} is in use by another runner (pid {os.getpid()}); "
        "wait for it or pick another --run_name"
    )
    assert exported.cli.run("--run_name=ex", "--export=openai").returncode == 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--run_name=ex", "--export=parquet,csv"], "error: --export: unknown format 'csv'; valid: parquet,"),
        (["--run_name=nosuchrun", "--export=openai"], "error: --run_name=nosuchrun: no run directory"),
        (["--run_name=empty", "--export=openai"], "error: "),
    ],
)
def test_a_bad_export_request_is_one_line_and_exit_2(
    exported: ExportedRun, argv: list[str], message: str
) -> None:
    (exported.cli.output_dir / "empty").mkdir(exist_ok=True)
    run = exported.cli.run(*argv)
    assert run.returncode == 2, run
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), run
    assert API_KEY not in run.stderr


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--export=openai"],
            "--export/--push_to_hub without --dataset_file post-process a run: pass --run_name",
        ),
        (["--run_name=ex", "--export=openai", "--export_reasoning=folded"], "--export_reasoning"),
        (["--run_name=ex", "--push_to_hub=not-a-repo-id"], "--push_to_hub='not-a-repo-id': expected a Hub"),
        (
            ["--run_name=ex", "--push_to_hub=org/x", "--hub_license=Not A License"],
            "--hub_license='Not A License'",
        ),
        (["--run_name=../escape", "--export=openai"], "--run_name='../escape': use letters"),
    ],
)
def test_the_command_line_refuses_a_bad_post_process_request_before_reading_anything(
    argv: list[str], message: str, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError) as refused:
        values = read_command_line(BATCH, [*argv, f"--output_dir={tmp_path}"])
        assert values is not None and is_post_process(values)
        post_process(values, print)
    assert str(refused.value).startswith(message)
