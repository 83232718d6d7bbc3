"""The merged output's figures kept by a run's end for the next resume (`agent.store.output_figures`,
`EndFold.recall` / `remember`): a resume starts from them and counts only the lines after those
they cover, so a resume with little or nothing left to run does not count the run again (issue
26). Figures that no longer describe the batch files are not used, and whatever they count, the
statistics and the report are those of a full recount."""

from __future__ import annotations

import json
import logging
import os
from array import array
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from agent.batch.end_fold import EndFold
from agent.batch.tally import RunTally
from agent.report.digest import OUTPUT_FIELDS as DIGEST_FIELDS
from agent.report.digest import RunDigest
from agent.store.directory import RunDirectory
from agent.store.merge_report import MergeReport
from agent.store.output_figures import FIGURES_FILE
from agent.store.records_file import records_path
from agent.store.state_codec import capture, restore
from agent.store.statistics import OUTPUT_FIELDS, RunStatistics
from agent.toolbox.registry import TOOL_TO_TOOLSET_MAP
from tests.support.run_dirs import opened
from tests.support.scripted_backend import scripted_config
from tests.test_earlier_lines import _names, tombstone
from tests.test_end_of_run import assert_as_recounted, output_sections
from tests.test_saved_records import invocation


def rich_line(key: str, index: int) -> bytes:
    """An entry with every kind of figure: reasoning, tools, toolsets, tokens and cost, a time,
    and on every other entry a verdict and a reward."""
    verified = {"passed": index % 3 == 0, "checks": [{"method": "exact", "passed": index % 3 == 0}]}
    metadata: dict[str, Any] = {
        "prompt_key": key,
        "outcome": "completed" if index % 4 else "max_turns",
        "timestamp": f"2026-11-27T10:{index % 60:02d}:00",
        "usage": {"prompt_tokens": 100 + index, "completion_tokens": 7, "cost_usd": 0.001 * (index + 1)},
        **({"verification": verified, "reward": (index % 5) / 4} if index % 2 else {}),
    }
    entry = {
        "prompt_index": index,
        "api_calls": 2,
        "toolsets_used": ["terminal"] if index % 2 else ["terminal", "web"],
        "conversations": [
            {"from": "system", "value": f"system {index % 2}"},
            {"from": "human", "value": f"task {key}"},
            {"from": "gpt", "value": ("<think>plan</think>" if index % 3 else "") + f"answer {key}"},
        ],
        "tool_stats": {"terminal": {"count": 1 + index % 2, "success": 1, "failure": index % 2}},
        "metadata": metadata,
    }
    return (json.dumps(entry) + "\n").encode()


def rich(keys: str, start: int = 0, batch: int = 0) -> list[tuple[int, bytes]]:
    return [(batch, rich_line(key, start + i)) for i, key in enumerate(keys)]


def end(run: Path, tmp_path: Path, appends: list[tuple[int, bytes]] | None = None) -> int:
    """An invocation that recalls the kept figures, appends `appends`, and ends as a run ends:
    the earlier lines counted, merged, statistics.json and report.html written. How many
    entries it counted (parsed) itself."""
    tally = RunTally(5)
    fold = EndFold(run, tally)
    counted = 0
    real = fold.add_entry

    def counting(entry: dict[str, Any]) -> None:
        nonlocal counted
        counted += 1
        real(entry)

    fold.add_entry = counting  # type: ignore[method-assign]
    with opened(run) as store:
        fold.recall(store)
        for batch, line in appends or ():
            store.append_result(batch, line)
        ended(fold, store, tmp_path, len(appends or ()))
    assert_as_recounted(run, tmp_path)
    return counted


def ended(fold: EndFold, store: RunDirectory, tmp_path: Path, appended: int) -> MergeReport:
    """The end of an invocation that appended `appended` lines, as a run ends: the earlier
    lines counted (with nothing left to run, the merge counts them), merged, statistics.json and
    report.html written. What the merge did."""
    fold.take(store)
    if appended:
        fold.count_earlier(store, answers=appended)
    merged = fold.merge(scripted_config(tmp_path, ["p"], "unused"), store, set())
    stats = fold.tally.stats.to_dict(**_names())
    store.write_json("statistics.json", stats)
    fold.report.output_keys(merged.kept_keys)
    fold.report.write(stats)
    return merged


def test_a_resume_counts_only_the_lines_after_those_the_kept_figures_cover(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert end(run, tmp_path, rich("abcdefg") + rich("hij", start=10, batch=2)) == 10
    assert (run / FIGURES_FILE).exists()
    assert end(run, tmp_path) == 0  # nothing left to run: nothing counted, as a recount says
    assert end(run, tmp_path, rich("k", start=7, batch=1) + rich("l", start=13, batch=2)) == 2
    stats = json.loads((run / "statistics.json").read_text())
    assert stats["trajectories"]["entries"] == 12 and stats["verification"]["attempts"]["verified"] == 6


def test_the_lines_a_killed_invocation_added_after_the_kept_figures_are_counted_once(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    end(run, tmp_path, rich("abc"))
    invocation(run, rich("de", start=3) + rich("f", start=5, batch=1), checkpoint_after=1)  # killed
    assert end(run, tmp_path) == 3  # d, e after the 3 lines of batch_0 counted; batch_1 whole


def test_a_tombstone_after_the_kept_figures_leaves_them_unused_and_gone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A later invocation withdrew b (a filter turned on), then was killed: the figures count b."""
    run = tmp_path / "run"
    end(run, tmp_path, rich("abc"))
    invocation(run, [(0, tombstone("b", 1))], checkpoint_after=1)
    assert end(run, tmp_path) == 3  # every line from the files, none counted twice
    assert not (run / FIGURES_FILE).exists()  # this end merged a tombstone: it keeps none, and drops them
    assert end(run, tmp_path) == 3
    assert not [r.message for r in caplog.records if r.levelno >= logging.WARNING]  # nothing changed
    assert records_path(run / "batch_0.jsonl").exists()  # the records kept: the next resume loads them


def _rewrite_line(run: Path) -> None:
    shard = run / "batch_0.jsonl"
    shard.write_bytes(shard.read_bytes().replace(b"answer b", b"answer B"))


def _drop_shard(run: Path) -> None:
    (run / "batch_1.jsonl").unlink()


def _damage(run: Path) -> None:
    document = json.loads((run / FIGURES_FILE).read_text())
    document["statistics/_entries"] = [1, 2]  # a list where a Counter was
    (run / FIGURES_FILE).write_text(json.dumps(document))


def _edit_a_figure(run: Path) -> None:
    document = json.loads((run / FIGURES_FILE).read_text())
    document["statistics/_entries"]["values"][0] += 1  # one more entry: still a Counter of ints
    (run / FIGURES_FILE).write_text(json.dumps(document))


def _truncate(run: Path) -> None:
    path = run / FIGURES_FILE
    os.truncate(path, path.stat().st_size // 2)


@pytest.mark.parametrize("change", [_rewrite_line, _drop_shard, _damage, _edit_a_figure, _truncate])
def test_figures_that_no_longer_describe_the_files_are_not_used(tmp_path: Path, change: Any) -> None:
    run = tmp_path / "run"
    end(run, tmp_path, rich("abc") + rich("de", start=5, batch=1))
    change(run)
    counted = end(run, tmp_path)  # every line, from the files
    assert (
        counted
        == len((run / "trajectories.jsonl").read_bytes().splitlines())
        == (3 if change is _drop_shard else 5)
    )


def test_figures_kept_under_another_tool_registry_are_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "run"
    end(run, tmp_path, rich("abc"))
    monkeypatch.setitem(TOOL_TO_TOOLSET_MAP, "a_new_tool", "terminal")
    assert end(run, tmp_path) == 3


def test_a_merge_that_leaves_lines_out_keeps_no_figures(tmp_path: Path) -> None:
    run = tmp_path / "run"
    end(run, tmp_path, rich("abc") + rich("b", start=1))  # b twice: the merge keeps its first
    assert not (run / FIGURES_FILE).exists()
    assert end(run, tmp_path) == 3


def test_the_counts_come_back_as_they_were_kept() -> None:
    stats, digest = RunStatistics(), RunDigest(sample_size=3, keyed=False)
    for index, key in enumerate("abcdefghij"):
        entry = json.loads(rich_line(key, index))
        stats.add_entry(entry)
        digest.add_entry(entry)
    kept = json.loads(json.dumps({"s": capture(stats, OUTPUT_FIELDS), "d": capture(digest, DIGEST_FIELDS)}))
    again, digest_again = RunStatistics(), RunDigest(sample_size=3, keyed=False)
    restore(again, kept["s"], OUTPUT_FIELDS)
    restore(digest_again, kept["d"], DIGEST_FIELDS)
    assert output_sections(again.to_dict(**_names())) == output_sections(stats.to_dict(**_names()))
    assert digest_again.page_sample() == digest.page_sample() and digest_again.turns == array("l", [1] * 10)
    assert isinstance(digest_again.outcomes, Counter) and digest_again.outcomes == digest.outcomes
    for more in ("k", "l"):  # and count on as the original does
        entry = json.loads(rich_line(more, 20))
        for tallied in (stats, again):
            tallied.add_entry(entry)
        for sampled in (digest, digest_again):
            sampled.add_entry(entry)
    assert output_sections(again.to_dict(**_names())) == output_sections(stats.to_dict(**_names()))
    assert digest_again.page_sample() == digest.page_sample()


def test_a_state_that_does_not_fit_is_refused() -> None:
    kept = capture(RunStatistics(), OUTPUT_FIELDS)
    with pytest.raises(ValueError, match="other fields"):
        restore(RunStatistics(), {**kept, "_extra": 1}, OUTPUT_FIELDS)
    with pytest.raises(ValueError, match="a list where a Counter was"):
        restore(RunStatistics(), {**kept, "_turns": [1]}, OUTPUT_FIELDS)
    digest = RunDigest(keyed=False)
    digest.turns = array("q", [1, 2])
    with pytest.raises(ValueError, match="an array of 'q', not 'l'"):
        restore(RunDigest(keyed=False), capture(digest, DIGEST_FIELDS), DIGEST_FIELDS)
    with pytest.raises(TypeError, match="no encoding"):
        capture(type("Holder", (), {"x": {1, 2}})(), ["x"])
