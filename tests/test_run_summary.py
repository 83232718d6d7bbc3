"""The closing lines of a run's summary: where the output and the report are, and what to do
next, always — `--resume` after an interrupt, failures or prompts not started; the flag that
keeps a filter's discards when it dropped most entries; else a look at the report."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from rich.console import Console

from agent.batch.completion import Completion
from agent.batch.dataset import DatasetRow
from agent.store.index import RunIndex
from agent.store.key_book import KeySet
from agent.store.summary_view import next_steps, render_next_steps

REPORT = Path("data/run/report.html")
DONE = "Done: all 10 valid prompts are in trajectories.jsonl or discarded.jsonl."
UNFINISHED = "Not done: 2 failed of 10 prompts. Next: rerun with --resume to run them."
INTERRUPTED = (
    "Interrupted: 4 of 10 prompts are done and on disk; trajectories.jsonl was not rewritten. "
    "Next: rerun with --resume to finish and merge."
)
MOST_DISCARDED = [
    {"reason": "no_reasoning", "discarded": 8, "entries": 10, "kept_by": "--keep_no_reasoning"},
    {"reason": "leaked_tool_call", "discarded": 6, "entries": 10, "kept_by": "--keep_malformed"},
]


def stats(next_step: str, exit_code: int, warnings: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"completion": {"next_step": next_step, "exit_code": exit_code}, "filter_warnings": warnings or []}


def test_a_finished_run_points_at_the_report() -> None:
    assert next_steps(stats(DONE, 0), REPORT) == [
        f"Report: {REPORT} (open it in a browser; one file, works offline)",
        f"{DONE} Next: look at the data in report.html.",
    ]


def test_a_finished_run_whose_filters_dropped_most_names_the_flags_that_keep_them() -> None:
    *_, final = next_steps(stats(DONE, 0, MOST_DISCARDED), REPORT)
    assert final == (
        f"{DONE} Next: rerun with --resume --keep_no_reasoning to keep the 8 no_reasoning discards "
        "(moved from discarded.jsonl, no model call); rerun with --resume --keep_malformed to keep "
        "the 6 leaked_tool_call discards (moved from discarded.jsonl, no model call)."
    )


def test_failures_and_interrupts_end_with_resume_and_the_keep_flag_comes_before() -> None:
    lines = next_steps(stats(UNFINISHED, 1, MOST_DISCARDED[:1]), REPORT)
    assert lines[-1] == UNFINISHED
    assert lines[-2].startswith("Then: rerun with --resume --keep_no_reasoning to keep the 8")
    assert next_steps(stats(INTERRUPTED, 130), None) == [INTERRUPTED]


def test_without_a_report_the_done_line_still_says_what_next() -> None:
    assert next_steps(stats(DONE, 0), None) == [f"{DONE} Next: look at the data in trajectories.jsonl."]


def test_rendered_lines_are_whole_and_the_last_is_coloured_by_the_exit() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=60, color_system="standard")
    trajectories = Path("data/a-run-with-a-long-name/trajectories.jsonl")
    render_next_steps(stats(UNFINISHED, 1), console, trajectories=trajectories, report=REPORT)
    text = out.getvalue()
    assert f"Trajectories: {trajectories}\n" in text  # never wrapped at the console's width
    assert f"\x1b[31m{UNFINISHED}" in text  # red: not done
    out.truncate(0)
    render_next_steps(stats(DONE, 0), console, trajectories=None, report=REPORT)
    assert "\x1b[32mDone: all 10" in out.getvalue()


def test_a_done_prompt_missing_from_the_merged_output_is_never_exit_0() -> None:
    """The exit code comes from the run directory, and a prompt whose result line the merge
    did not write into trajectories.jsonl is missing, named, and exits 1."""
    rows = [DatasetRow(i, i + 1, f"p{i}", f"k{i}", 0, None, None, {}) for i in range(3)]
    stored = RunIndex(done={"k0", "k1"}, discarded={"k2"})
    honest = Completion.of(rows, stored, set(), merged=KeySet({"k0", "k1"}))
    assert (honest.in_output, honest.discarded, honest.exit_code) == (2, 1, 0)
    dropped = Completion.of(rows, stored, set(), merged=KeySet({"k0"}))
    assert (dropped.in_output, dropped.lost, dropped.exit_code) == (1, [1], 1)
    assert dropped.as_dict()["missing_from_output_indices"] == [1]
    assert dropped.next_step().startswith("Not done: 1 done but missing from trajectories.jsonl of 3")
    # Written by this run, then gone from its batch file (edited during the run): missing, not
    # "not started".
    counted = {("k1", 1)}
    edited = Completion.of(
        rows, RunIndex(done={"k0"}, discarded={"k2"}), set(), merged=KeySet({"k0"}),
        counted=lambda key, index: (key, index) in counted,
    )  # fmt: skip
    assert (edited.lost, edited.not_started, edited.exit_code) == ([1], [], 1)
    assert edited.as_dict()["missing_from_output_indices"] == [1]
    cancelled = Completion.of(rows, RunIndex(done={"k0"}), set(), cancelled={"k1"}, interrupted=True)
    assert (cancelled.in_flight, cancelled.not_started, cancelled.exit_code) == ([1], [2], 130)
    assert "(1 interrupted in flight, 1 not started, 0 failed)" in cancelled.next_step()


def test_the_done_line_of_one_prompt_speaks_of_one() -> None:
    one = Completion(valid=1, prompts=1, in_output=1)
    assert one.next_step() == "Done: the 1 valid prompt is in trajectories.jsonl or discarded.jsonl."
    three = Completion(valid=3, prompts=3, in_output=2, discarded=1)
    assert three.next_step() == "Done: all 3 valid prompts are in trajectories.jsonl or discarded.jsonl."
