"""The JSON Lines exports load with `datasets` however late a column gets its first value.

`load_dataset("json")` types each column from the file's first 10 MB block; a run whose first
~3,000 entries had no check (reward, passed and verification null), no price, no discard and no
command-running tool, then a verified one with all of these, failed its cast ("Couldn't cast …
to null"). Now the first row to fill a column past the file's first MiB leads the file; the
others keep the run's order. The file is the export's own (`export_run` on a run directory of
entries as the runner writes them), large enough to span blocks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent.export.run_export import export_run
from agent.export.typed_head import HEAD
from bench.export import synthetic_entry

datasets = pytest.importorskip("datasets")

PLAIN, LATE = 2_600, 3  # entries with nothing checked, then the checked ones
BLOCK = 10 << 20  # what datasets' JSON builder reads to type the columns (JsonConfig.chunksize)


def checked(index: int) -> dict[str, Any]:
    """An entry with every late column filled: a check's record, a price, a discard, an exit."""
    entry = synthetic_entry(index)
    record = {"passed": True, "reward": 1.0, "checks": [{"type": "answer", "passed": True}]}
    entry["metadata"].update(reward=1.0, verification=record, discard_reasons=["flawed"])
    entry["metadata"]["usage"]["cost_usd"] = 0.25
    entry["tool_stats"]["terminal"]["nonzero_exit"] = 1
    return entry


def write_run(run_dir: Path) -> list[dict[str, Any]]:
    entries = [synthetic_entry(i) for i in range(PLAIN)] + [checked(PLAIN + i) for i in range(LATE)]
    run_dir.mkdir()
    lines = (json.dumps(entry, ensure_ascii=False) + "\n" for entry in entries)
    (run_dir / "trajectories.jsonl").write_text("".join(lines), encoding="utf-8")
    return entries


@pytest.mark.parametrize("name", ["openai", "sharegpt"])
def test_a_column_first_filled_past_the_first_block_loads(name: str, tmp_path: Path) -> None:
    entries = write_run(tmp_path / "run")
    path = export_run(tmp_path / "run", (name,)).files[name]
    assert path.stat().st_size > 1.2 * BLOCK  # the checked rows come after the first block
    cache = str(tmp_path / "hf")
    loaded = datasets.load_dataset("json", data_files=str(path), cache_dir=cache, split="train")
    assert loaded.num_rows == len(entries)
    order = loaded["prompt_index"]
    assert order[0] == PLAIN  # the first checked row leads: it types every late column
    assert order[1:] == [i for i in range(len(entries)) if i != PLAIN]  # the rest in the run's order
    first = loaded[0]
    assert (first["reward"], first["passed"], first["discard_reasons"]) == (1.0, True, ["flawed"])
    assert json.loads(first["verification"])["checks"] == [{"type": "answer", "passed": True}]
    assert (first["usage"]["cost_usd"], first["tool_stats"][0]["nonzero_exit"]) == (0.25, 1)
    assert loaded[1]["reward"] is None and loaded[1]["passed"] is None and loaded[1]["verification"] is None


def test_rows_that_type_every_column_early_keep_the_runs_order(tmp_path: Path) -> None:
    """No row moves (and the file is not rewritten) when the first MiB types every column."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    entries = [checked(0)] + [synthetic_entry(i) for i in range(1, 400)] + [checked(400)]
    text = "".join(json.dumps(entry) + "\n" for entry in entries)
    (run_dir / "trajectories.jsonl").write_text(text, encoding="utf-8")
    path = export_run(run_dir, ("openai",)).files["openai"]
    assert path.stat().st_size > HEAD
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert [row["prompt_index"] for row in rows] == list(range(401))
