"""`--export=rl`: one Parquet row per trajectory with its exact token ids, a loss mask on what the
model generated, logprobs aligned to the ids, the turn boundaries, the reward columns and the
drift, from `trajectories.jsonl` and `tokens.jsonl` read in lockstep.

Most runs are written by hand (entries with `metadata.tokens`, sidecar lines made by
`TokenRecord.line()`) and exported by the real command (`batch_runner.py --run_name --export=rl`)
or `export_run`; the expected ids, masks and logprobs are written out literally, not computed
by `TokenRecord.sequence()`, which the export uses. The last tests are real capture runs against
the simulated endpoint over HTTP, their rows checked against its tokenizer."""

from __future__ import annotations

import json
from array import array
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import agent.export.rl_export as rl_export
from agent.cli.command_line import read_command_line
from agent.cli.export_cli import build_export_options
from agent.cli.flags import BATCH
from agent.errors import ConfigError
from agent.export.rl_export import RL_SCHEMA
from agent.export.run_export import export_run
from agent.protocols.tokens import TokenDrift, TokenRecord, TurnTokens, floats, ids
from agent.servers.simulated.server import SimulatedEndpoint
from agent.servers.simulated.tokenizer import decode, render
from agent.store.layout import TOKENS_FILE, TRAJECTORIES_FILE
from bench.rl_export import measure_in_child, write_rl_run
from tests.support.batch import BatchCLI, read_jsonl, tool_then_answer, write_dataset

datasets = pytest.importorskip("datasets")  # a dev dependency: installed wherever the suite runs

# Three turns; the third one's prompt re-rendered the second one's completion from its 3rd id on.
DRIFTED = TokenRecord(
    "a" * 32,
    "key-drifted",
    0,
    (
        TurnTokens(0, ids([101, 102, 103, 104, 105]), ids([201, 202, 203]), floats([-0.1, -0.2, -0.3])),
        TurnTokens(8, ids([301, 302]), ids([401, 402, 403, 404]), floats([-1.1, -1.2, -1.3, -1.4])),
        TurnTokens(12, ids([501, 502, 503]), ids([601, 602]), None),  # no logprobs given
    ),
    TokenDrift(2, 12, (403, 404), (501, 502), "completion of turn 1, token 2"),
)
DRIFTED_ROW = {
    "input_ids": [101, 102, 103, 104, 105, 201, 202, 203, 301, 302, 401, 402, 501, 502, 503, 601, 602],
    "loss_mask": [0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 1, 1],
    "logprobs": [None] * 5 + [-0.1, -0.2, -0.3, None, None, -1.1, -1.2] + [None] * 5,
    "completion_spans": [[5, 8], [10, 12], [15, 17]],
    "prompt_length": 5,
    "num_turns": 3,
    "drift_turn": 2,
    "drift_position": 12,
}
PLAIN = TokenRecord(
    "b" * 32,
    "key-plain",
    1,
    (
        TurnTokens(0, ids([7, 8]), ids([9]), floats([-0.5])),
        TurnTokens(3, ids([10]), ids([11, 12]), floats([-0.25, -0.75])),
    ),
    None,
)
PLAIN_ROW = {
    "input_ids": [7, 8, 9, 10, 11, 12],
    "loss_mask": [0, 0, 1, 0, 1, 1],
    "logprobs": [None, None, -0.5, None, -0.25, -0.75],
    "completion_spans": [[2, 3], [4, 6]],
    "prompt_length": 2,
    "num_turns": 2,
    "drift_turn": None,
    "drift_position": None,
}
VERIFICATION = {"passed": True, "checks": [{"kind": "answer", "passed": True}]}


def entry(record: TokenRecord, rewarded: bool = False, **metadata: Any) -> dict[str, Any]:
    """A merged trajectory entry naming `record` (`rewarded`: with the rollouts' reward columns)."""
    meta: dict[str, Any] = {"prompt_key": record.prompt_key, "outcome": "completed", **metadata}
    meta["tokens"] = {"id": record.tokens_id, "turns": len(record.turns), "drift": None}
    if rewarded:
        meta.update(
            prompt_id=f"pid-{record.prompt_index}", sample_index=1, reward=1.0, verification=VERIFICATION
        )
    text = [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]
    return {"prompt_index": record.prompt_index, "conversations": text, "metadata": meta}


def write_run(run_dir: Path, entries: list[dict[str, Any]], records: list[TokenRecord]) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    lines = "".join(json.dumps(e) + "\n" for e in entries)
    (run_dir / TRAJECTORIES_FILE).write_text(lines, encoding="utf-8")
    (run_dir / TOKENS_FILE).write_bytes(b"".join(r.line() for r in records))
    return run_dir


def rows(path: Path) -> list[dict[str, Any]]:
    return pq.read_table(path).to_pylist()


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[BatchCLI, Path]:
    """A run of two trajectories exported by the real command."""
    cli = BatchCLI(tmp_path_factory.mktemp("rl"))
    run_dir = write_run(cli.output_dir / "r", [entry(DRIFTED, rewarded=True), entry(PLAIN)], [DRIFTED, PLAIN])
    run = cli.run("--run_name=r", "--export=rl")
    assert run.returncode == 0, run
    assert f"Exported 2 entries (rl): {run_dir / 'export' / 'rl.parquet'}" in run.stderr
    return cli, run_dir / "export" / "rl.parquet"


def test_a_row_holds_the_ids_the_mask_on_generated_ids_and_aligned_logprobs(
    exported: tuple[BatchCLI, Path],
) -> None:
    drifted, plain = rows(exported[1])
    assert {k: drifted[k] for k in DRIFTED_ROW} == DRIFTED_ROW
    assert {k: plain[k] for k in PLAIN_ROW} == PLAIN_ROW
    assert (drifted["prompt_key"], drifted["prompt_index"], drifted["outcome"]) == (
        "key-drifted",
        0,
        "completed",
    )
    assert (drifted["prompt_id"], drifted["sample_index"], drifted["reward"], drifted["passed"]) == (
        "pid-0",
        1,
        1.0,
        True,
    )
    assert json.loads(drifted["verification"]) == VERIFICATION
    nulls = ("prompt_id", "sample_index", "reward", "passed", "verification")
    assert [plain[k] for k in nulls] == [None] * 5  # no check applied: null, not 0 or false


def test_the_mask_is_one_exactly_inside_the_spans_and_logprobs_null_where_it_is_zero(
    exported: tuple[BatchCLI, Path],
) -> None:
    for row in rows(exported[1]):
        inside = {i for a, b in row["completion_spans"] for i in range(a, b)}
        assert [int(i in inside) for i in range(len(row["input_ids"]))] == row["loss_mask"]
        assert len(row["logprobs"]) == len(row["input_ids"])
        assert all(p is None for p, m in zip(row["logprobs"], row["loss_mask"], strict=True) if m == 0)


def test_the_schema_is_the_same_with_and_without_rewards_and_drift(tmp_path: Path) -> None:
    bare = write_run(tmp_path / "bare", [entry(PLAIN)], [PLAIN])
    full = write_run(tmp_path / "full", [entry(DRIFTED, rewarded=True)], [DRIFTED])
    for run_dir in (bare, full):
        report = export_run(run_dir, ("rl",))
        assert pq.read_schema(report.files["rl"]).remove_metadata() == RL_SCHEMA, run_dir.name


def test_a_run_that_merged_nothing_writes_no_rl_file(tmp_path: Path) -> None:
    """`datasets` loads no Parquet file of 0 rows: one line (exit 2), no file."""
    empty = write_run(tmp_path / "empty", [], [])
    (empty / TOKENS_FILE).unlink()  # no rows, no sidecar needed
    with pytest.raises(ConfigError, match="no entries to export"):
        export_run(empty, ("rl",))
    assert not (empty / "export" / "rl.parquet").exists()


def test_datasets_loads_the_export_in_one_call(exported: tuple[BatchCLI, Path], tmp_path: Path) -> None:
    loaded = datasets.load_dataset(
        "parquet", data_files=str(exported[1]), cache_dir=str(tmp_path), split="train"
    )
    assert list(loaded) == rows(exported[1])
    assert str(loaded.features["loss_mask"].feature.dtype) == "int8"
    assert str(loaded.features["input_ids"].feature.dtype) == "int32"


def test_rows_are_written_a_row_group_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_rl_run(tmp_path / "many", 2_500, turns=2, total=60)
    metadata = pq.ParquetFile(export_run(tmp_path / "many", ("rl",)).files["rl"]).metadata
    assert [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)] == [1000, 1000, 500]
    monkeypatch.setattr(rl_export, "GROUP_IDS", 600)  # long trajectories: fewer rows a group
    parquet = pq.ParquetFile(export_run(tmp_path / "many", ("rl",)).files["rl"])
    held = [
        [len(ids) for ids in parquet.read_row_group(i, columns=["input_ids"]).column(0).to_pylist()]
        for i in range(parquet.metadata.num_row_groups)
    ]
    assert sum(map(len, held)) == 2_500 and len(held) > 2_500 // 15
    assert all(sum(group) >= 600 and sum(group[:-1]) < 600 for group in held[:-1])  # full at 600 ids


@pytest.mark.long
def test_a_ten_times_larger_rl_export_takes_no_more_memory(tmp_path: Path) -> None:
    few, many = 1_000, 10_000
    write_rl_run(tmp_path / "few", few, total=800)
    _, size = write_rl_run(tmp_path / "many", many, total=800)
    assert size > 100 * 2**20  # more than an export may grow by (see test_export_memory); held as
    # Python objects its ids would take ~6x that
    small, large = measure_in_child(tmp_path / "few", "rl"), measure_in_child(tmp_path / "many", "rl")
    assert (small["entries"], large["entries"]) == (few, many)
    grew_small = small["peak_rss_mb"] - small["rss_before_mb"]
    grew_large = large["peak_rss_mb"] - large["rss_before_mb"]
    assert grew_large <= grew_small * 1.3 + 10, (small, large)


def _swapped(run_dir: Path) -> None:
    lines = (run_dir / TOKENS_FILE).read_bytes().splitlines(keepends=True)
    (run_dir / TOKENS_FILE).write_bytes(lines[1] + lines[0])


def _cut(run_dir: Path) -> None:
    lines = (run_dir / TOKENS_FILE).read_bytes().splitlines(keepends=True)
    (run_dir / TOKENS_FILE).write_bytes(lines[0])


def _extra(run_dir: Path) -> None:
    with (run_dir / TOKENS_FILE).open("ab") as handle:
        handle.write(PLAIN.line())


def _untokened(run_dir: Path) -> None:
    (run_dir / TRAJECTORIES_FILE).write_text(
        json.dumps(entry(DRIFTED)) + "\n" + json.dumps({"metadata": {}}) + "\n"
    )


def _no_sidecar(run_dir: Path) -> None:
    (run_dir / TOKENS_FILE).unlink()


def _bad_logprobs(run_dir: Path) -> None:
    broken = json.loads(PLAIN.line())
    broken["turns"][1]["logprobs"] = [-0.25]  # one for two ids: every later one would be misplaced
    (run_dir / TOKENS_FILE).write_bytes(DRIFTED.line() + json.dumps(broken).encode() + b"\n")


def _lost(run_dir: Path) -> None:
    """What the merge writes for an entry whose record was lost (counted in tokens.missing)."""
    lost = {**json.loads(PLAIN.line()), "turns": [], "drift": None, "missing": True}
    (run_dir / TOKENS_FILE).write_bytes(DRIFTED.line() + json.dumps(lost).encode() + b"\n")


def _id_spoiled(value: int) -> Any:
    def spoil(run_dir: Path) -> None:
        broken = json.loads(PLAIN.line())
        broken["turns"][0]["completion_ids"][0] = value
        (run_dir / TOKENS_FILE).write_bytes(DRIFTED.line() + json.dumps(broken).encode() + b"\n")

    return spoil


CANNOT = "trajectories.jsonl:{line}: cannot export this entry: "


@pytest.mark.parametrize(
    ("spoil", "expected"),
    [
        (_swapped, CANNOT.format(line=1) + "{run}/tokens.jsonl:1 holds tokens_id bbbb"),
        (_cut, CANNOT.format(line=2) + "{run}/tokens.jsonl ends at line 1: no token line"),
        (_extra, "{run}/tokens.jsonl:3: a token line with no entry (trajectories.jsonl has 2)"),
        (_untokened, CANNOT.format(line=2) + "the entry has no token ids (metadata.tokens.id)"),
        (
            _no_sidecar,
            "--export=rl: {run} has no tokens.jsonl: the run captured no token ids (run it with "
            "--capture_tokens=required",
        ),
        (
            _lost,
            CANNOT.format(line=2) + "{run}/tokens.jsonl:2: entry " + PLAIN.prompt_key + " has no token ids",
        ),
        (
            _id_spoiled(2**40),
            CANNOT.format(line=2)
            + "{run}/tokens.jsonl:2: not a token record (ValueError: an id beyond 32 bits)",
        ),
        (
            _id_spoiled(-5),
            CANNOT.format(line=2) + "{run}/tokens.jsonl:2: not a token record (ValueError: a negative id)",
        ),
        (
            _bad_logprobs,
            CANNOT.format(line=2) + "{run}/tokens.jsonl:2: turn 1: 1 logprobs for 2 completion ids",
        ),
    ],
)
def test_files_out_of_step_stop_the_export_with_one_line(spoil: Any, expected: str, tmp_path: Path) -> None:
    cli = BatchCLI(tmp_path)
    run_dir = write_run(cli.output_dir / "r", [entry(DRIFTED), entry(PLAIN)], [DRIFTED, PLAIN])
    spoil(run_dir)
    run = cli.run("--run_name=r", "--export=parquet,rl")
    assert run.returncode == 2, run
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and expected.format(run=run_dir) in lines[0], run
    assert not (run_dir / "export").exists() or not list(
        (run_dir / "export").iterdir()
    )  # nothing half-written


def test_a_run_asking_for_the_rl_export_without_capture_stops_before_it_starts(tmp_path: Path) -> None:
    cli = BatchCLI(tmp_path)
    dataset = write_dataset(tmp_path / "rows.jsonl", [{"prompt": "q"}])
    run = cli.run(
        f"--dataset_file={dataset}",
        "--run_name=r",
        "--batch_size=1",
        "--export=openai,rl",
        "--base_url=http://127.0.0.1:9/v1",
    )
    assert run.returncode == 2, run
    assert run.stderr.strip() == (
        "error: --export=rl needs the model's token ids: add --capture_tokens=required"
    )
    assert not (cli.output_dir / "r").exists()


def test_push_to_hub_alone_exports_the_text_formats_only(tmp_path: Path) -> None:
    values = read_command_line(BATCH, ["--run_name=r", "--push_to_hub=org/name", f"--output_dir={tmp_path}"])
    assert values is not None
    assert build_export_options(values).export == ("parquet", "openai", "sharegpt")


def test_a_sequence_refuses_an_offset_outside_it_or_logprobs_not_one_per_id() -> None:
    turn0 = TurnTokens(0, ids([1, 2]), ids([3]), floats([-0.5]))
    for bad, message in [
        (TurnTokens(-1, ids([4]), ids([5]), None), "turn 1: prompt_offset -1 is outside the 3 ids"),
        (TurnTokens(4, ids([4]), ids([5]), None), "turn 1: prompt_offset 4 is outside the 3 ids"),
        (TurnTokens(3, ids([4]), ids([5, 6]), floats([-1.0])), "turn 1: 1 logprobs for 2 completion ids"),
    ]:
        with pytest.raises(ValueError, match=message):
            TokenRecord("c" * 32, "k", 0, (turn0, bad), None).sequence()


def test_an_empty_completion_has_no_span_wherever_it_is() -> None:
    first_empty = (TurnTokens(0, ids([1, 2]), array("i"), None), TurnTokens(2, ids([3]), ids([4]), None))
    last_empty = (TurnTokens(0, ids([1]), ids([2]), None), TurnTokens(2, ids([3]), array("i"), None))
    assert TokenRecord("d" * 32, "k", 0, first_empty, None).sequence()[3] == [(3, 4)]
    assert TokenRecord("d" * 32, "k", 0, last_empty, None).sequence()[3] == [(1, 2)]


def test_the_export_fails_cleanly_on_an_unparsable_entry(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path / "r", [entry(DRIFTED)], [DRIFTED])
    with (run_dir / TRAJECTORIES_FILE).open("a") as handle:
        handle.write("{not json\n")
    with pytest.raises(ConfigError, match=r"trajectories\.jsonl:2: not a JSON object"):
        export_run(run_dir, ("rl",))
    assert not (run_dir / "export" / "rl.parquet").exists()


def test_a_lone_surrogate_in_a_text_column_is_replaced_and_counted(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path / "r", [entry(PLAIN, rewarded=True, outcome="done \ud800")], [PLAIN])
    report = export_run(run_dir, ("rl",))
    assert (report.replaced, report.replaced_entries) == (1, 1)
    [row] = rows(report.files["rl"])
    assert row["outcome"] == "done \ufffd" and row["input_ids"] == PLAIN_ROW["input_ids"]


def test_the_text_exports_keep_the_token_binding_out_of_the_rows_own_metadata(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path / "r", [entry(PLAIN, level=3)], [PLAIN])
    [row] = rows(export_run(run_dir, ("parquet",)).files["parquet"])
    assert json.loads(row["metadata"]) == {"level": 3}  # metadata.tokens is ours, as prompt_key is


RL_PROMPTS = ("Export RL one", "Export RL two")


@pytest.mark.parametrize("drift", ["none", "whitespace"])
def test_a_capture_run_exports_rows_that_decode_to_its_last_prompt_and_completion(
    drift: str, tmp_path: Path
) -> None:
    """A real run (`--capture_tokens=required --export=rl`, the simulated endpoint over HTTP):
    each row's ids decode to the conversation's last prompt as the endpoint rendered it plus its
    last completion, and the mask covers exactly the ids the endpoint generated; with drift (the
    endpoint re-renders turn 0 with one more newline) turn 0's span ends where the drift is."""
    with SimulatedEndpoint(token_drift=drift) as endpoint:
        for prompt in RL_PROMPTS:
            endpoint.script(prompt, tool_then_answer())
        cli = BatchCLI(tmp_path, endpoint)
        dataset = write_dataset(tmp_path / "rows.jsonl", [{"prompt": p} for p in RL_PROMPTS])
        flags = ("--batch_size=1", "--model=sim/rl", "--capture_tokens=required", "--export=rl")
        run = cli.run(f"--dataset_file={dataset}", "--run_name=rl", *flags)
        assert run.returncode == 0, run
        bodies = [r.body for r in endpoint.requests]
    run_dir = cli.run_dir("rl")
    entries = read_jsonl(run_dir / TRAJECTORIES_FILE)
    prompts = {e["metadata"]["prompt_key"]: e["conversations"] for e in entries}
    path = str(run_dir / "export" / "rl.parquet")
    loaded = datasets.load_dataset("parquet", data_files=path, cache_dir=str(tmp_path / "c"), split="train")
    assert loaded.num_rows == len(RL_PROMPTS)
    for row in loaded:
        asked = next(t["value"] for t in prompts[row["prompt_key"]] if t["from"] == "human")
        calls = [b for b in bodies if any(m.get("content") == asked for m in b["messages"])]
        last = max(calls, key=lambda b: len(b["messages"]))
        (start, end), ids = row["completion_spans"][-1], row["input_ids"]
        assert decode(ids[:start]) == render(last["messages"], last.get("tools") or (), drift=drift)
        assert decode(ids[start:end]).endswith("All done.<|im_end|>") and end == len(ids)
        assert (row["num_turns"], len(row["completion_spans"])) == (2, 2)
        drifted = (1, row["completion_spans"][0][1]) if drift != "none" else (None, None)
        assert (row["drift_turn"], row["drift_position"]) == drifted
        inside = {i for a, b in row["completion_spans"] for i in range(a, b)}
        assert row["loss_mask"] == [int(i in inside) for i in range(len(ids))]
        assert [p is not None for p in row["logprobs"]] == [bool(m) for m in row["loss_mask"]]
