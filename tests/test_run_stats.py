"""Run statistics: the statistics.json document and the printed summary."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from datetime import datetime
from typing import Any

from rich.console import Console

from agent.cli.flags import BY_NAME
from agent.errors import FAILURE_ADVICE, FailureClass
from agent.store.statistics import HISTORY_POINTS, RunStatistics, has_reasoning, limit_curve
from agent.store.summary_view import render_statistics
from agent.store.tool_counts import add_tool_stats

EMPTY_THINK = "<think>\n</think>\n"


def entry(
    *gpt_values: str,
    tools: dict[str, tuple[int, int, int]] | None = None,
    outcome: str = "completed",
    usage: dict[str, int] | None = None,
) -> dict[str, Any]:
    turns = [{"from": "system", "value": "sys"}, {"from": "human", "value": "do it"}]
    for value in gpt_values:
        turns += [{"from": "gpt", "value": value}, {"from": "tool", "value": "<think>not gpt</think>"}]
    return {
        "prompt_index": 0,
        "conversations": turns,
        "metadata": {"batch_num": 0, "model": "m", "outcome": outcome, "usage": usage or {}},
        "completed": outcome == "completed",
        "partial": outcome != "completed",
        "api_calls": len(gpt_values),
        "toolsets_used": ["terminal"],
        "tool_stats": {
            name: {"count": c, "success": s, "failure": f} for name, (c, s, f) in (tools or {}).items()
        },
        "tool_error_counts": {},
    }


def document(stats: RunStatistics, **overrides: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "run_name": "run",
        "distribution": "default",
        "model": "m",
        "total_prompts": 10,
        "batch_size": 5,
        "total_batches": 2,
        "duration_seconds": 10.0,
    }
    return stats.to_dict(**(args | overrides))


def rendered(doc: dict[str, Any]) -> str:
    console = Console(record=True, width=120)
    render_statistics(doc, console)
    return console.export_text()


def test_reasoning_needs_non_blank_think_content() -> None:
    assert has_reasoning("<think>\nplan the steps\n</think>\nanswer")
    assert not has_reasoning(EMPTY_THINK + "answer")
    assert not has_reasoning("<think>  \n\t </think>answer")
    assert not has_reasoning("no think block, reasoning in prose")
    assert has_reasoning("<think>\n</think>\n<think>late thought</think>")


def test_tool_statistics_sum_entries_sorted_by_count_then_name() -> None:
    stats = RunStatistics()
    stats.add_entry(entry(EMPTY_THINK, tools={"terminal": (2, 2, 0), "web": (1, 0, 1), "idle": (0, 0, 0)}))
    stats.add_entry(entry(EMPTY_THINK, tools={"terminal": (1, 0, 1), "alpha": (3, 3, 0), "web": (2, 2, 0)}))
    tools = document(stats)["tool_statistics"]
    assert list(tools) == ["alpha", "terminal", "web", "idle"]
    assert tools["terminal"] == {
        "count": 3,
        "success": 2,
        "failure": 1,
        "success_rate": 66.67,
        "failure_rate": 33.33,
    }
    assert tools["idle"]["success_rate"] == 0.0 and tools["idle"]["failure_rate"] == 0.0


def test_non_zero_exits_are_summed_apart_for_the_tools_that_count_them() -> None:
    stats = RunStatistics()
    for exited in (1, 0):
        run = entry(EMPTY_THINK, tools={"terminal": (2, 2, 0), "web": (1, 1, 0)})
        run["tool_stats"]["terminal"]["nonzero_exit"] = exited
        stats.add_entry(run)
    tools = document(stats)["tool_statistics"]
    assert tools["terminal"]["nonzero_exit"] == 1 and tools["terminal"]["success"] == 4
    assert "nonzero_exit" not in tools["web"]


def test_rates_are_over_answered_calls_and_zero_when_none_answered() -> None:
    stats = RunStatistics()
    stats.add_entry(entry(EMPTY_THINK, tools={"slow": (4, 1, 0), "lost": (2, 0, 0)}))
    tools = document(stats)["tool_statistics"]
    assert tools["slow"]["success_rate"] == 100.0  # calls without a result count toward count only
    assert tools["lost"]["success_rate"] == 0.0 and tools["lost"]["failure_rate"] == 0.0


def test_reasoning_statistics_count_gpt_turns_and_entries() -> None:
    stats = RunStatistics()
    forced = entry("<think>a</think>x", EMPTY_THINK + "y", "<think>b</think>z")
    forced["metadata"]["reasoning_forced_turns"] = 1  # the endpoint's grammar wrote one of them
    stats.add_entry(forced)
    stats.add_entry(entry(EMPTY_THINK + "only"))
    stats.add_discarded_entry(entry("<think>c</think>q", "w"))  # counted apart, not in the coverage
    assert document(stats)["reasoning_statistics"] == {
        "total_assistant_turns": 4,
        "turns_with_reasoning": 2,
        "turns_without_reasoning": 2,
        "coverage_percent": 50.0,
        "entries_with_reasoning": 1,
        "turns_with_forced_reasoning": 1,
        "model_written_coverage_percent": 25.0,
        "discarded_entries": {"assistant_turns": 2, "turns_with_reasoning": 1},
    }


def test_merged_output_outcomes_and_tokens() -> None:
    stats = RunStatistics()
    usage = {"prompt_tokens": 100, "completion_tokens": 30, "reasoning_tokens": 7, "total_tokens": 130}
    stats.add_entry(entry(EMPTY_THINK, usage=usage))
    no_total = {"prompt_tokens": 5, "completion_tokens": 1}
    stats.add_entry(entry(EMPTY_THINK, outcome="max_iterations", usage=no_total))
    old = entry(EMPTY_THINK)
    del old["metadata"]["usage"], old["metadata"]["outcome"]  # written before usage was recorded
    stats.add_entry(old)
    doc = document(stats)
    assert doc["tokens"]["merged_output"] == {"prompt": 105, "completion": 31, "reasoning": 7, "total": 136}
    assert doc["outcomes"] == {"completed": 1, "max_iterations": 1, "unknown": 1}
    assert doc["trajectories"] == {"entries": 3, "completed": 2, "partial": 1, "api_calls": 3}


def test_this_invocation_split_tokens_and_rate() -> None:
    stats = RunStatistics()
    outcomes = ("completed", "completed", "max_iterations", "truncated", "timeout", "discarded", "failed")
    for outcome in outcomes:
        stats.add_processed(outcome, {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12})
    doc = document(stats, duration_seconds=3.5)
    run = doc["this_invocation"]
    assert {k: run[k] for k in ("processed", "completed", "partial", "discarded", "failed")} == {
        "processed": 7,
        "completed": 2,
        "partial": 3,
        "discarded": 1,
        "failed": 1,
    }
    assert run["outcomes"]["truncated"] == 1 and run["outcomes"]["completed"] == 2
    assert run["prompts_per_second"] == 2.0
    assert doc["tokens"]["this_invocation"] == {"prompt": 70, "completion": 14, "reasoning": 0, "total": 84}
    assert document(stats, duration_seconds=0.0)["this_invocation"]["prompts_per_second"] == 0.0


def test_discards_and_failures_per_class() -> None:
    stats = RunStatistics()
    for reason in ("no_reasoning", "no_reasoning", "empty"):
        stats.add_discard(reason)
    for error_class in ("rate_limit", "sandbox", "rate_limit", "prompt_timeout"):
        stats.add_failure(error_class)
    doc = document(stats)
    assert doc["discarded"] == {"empty": 1, "no_reasoning": 2}
    assert doc["discarded_no_reasoning"] == 2
    assert doc["failures"] == {"prompt_timeout": 1, "rate_limit": 2, "sandbox": 1}
    assert document(RunStatistics())["discarded_no_reasoning"] == 0


def test_limiter_counts_sum_and_the_limit_history_is_the_runs() -> None:
    stats = RunStatistics()
    stats.add_limiter({"rate_limited": 3, "server_errors": 1, "calls": 50, "peak_inflight": 10})
    stats.add_limiter({"rate_limited": 1, "timeouts": 2, "calls": 40, "peak_inflight": 9})
    stats.limit_history = limit_curve([(100.25, 64.0), (101.5, 32.0)], origin=100.0)
    limiting = document(stats)["rate_limiting"]
    assert limiting["rate_limited"] == 4 and limiting["server_errors"] == 1 and limiting["timeouts"] == 2
    assert limiting["calls"] == 90 and limiting["peak_inflight"] == 19 and limiting["workers"] == 2
    assert limiting["limit_history"] == [[0.25, 64.0], [1.5, 32.0]]


def test_a_workers_later_snapshot_replaces_its_earlier_one() -> None:
    stats = RunStatistics()
    stats.add_limiter({"calls": 5, "peak_inflight": 4}, worker=1)
    stats.add_limiter({"calls": 9, "peak_inflight": 3}, worker=1)
    stats.add_limiter({"calls": 1, "peak_inflight": 1}, worker=2)
    limiting = document(stats)["rate_limiting"]
    assert limiting["calls"] == 10 and limiting["workers"] == 2 and limiting["peak_inflight"] == 4


def test_the_limit_curve_is_on_the_runs_clock_and_thinned_evenly_keeping_both_ends() -> None:
    points = [(50.0 + i * 0.1, float(i % 7 + 1)) for i in range(2000)]
    curve = limit_curve(points, origin=50.5)
    assert len(curve) == HISTORY_POINTS
    # the points before the origin: at 0, the last of them held
    assert curve[0] == [0.0, 6.0] and curve[-1] == [199.4, float(1999 % 7 + 1)]
    times = [t for t, _ in curve]
    assert times == sorted(times) and len(set(times)) == len(times)
    assert limit_curve([], origin=0.0) == []
    assert limit_curve([(1.0, 8.0), (1.0001, 4.0), (2.0, 5.0)], origin=0.0) == [[1.0, 4.0], [2.0, 5.0]]


def test_document_has_reference_fields_and_is_json() -> None:
    stats = RunStatistics()
    stats.add_entry(entry("<think>x</think>", tools={"terminal": (1, 1, 0)}))
    doc = document(stats, duration_seconds=12.3456, merge={"unknown_tool": 2}, dataset={"invalid_lines": 1})
    for key in ("run_name", "distribution", "total_prompts", "total_batches", "batch_size", "model",
                "completed_at", "duration_seconds", "tool_statistics", "reasoning_statistics",
                "discarded_no_reasoning"):  # fmt: skip
        assert key in doc
    assert doc["duration_seconds"] == 12.35
    assert datetime.fromisoformat(doc["completed_at"]).tzinfo is not None
    assert doc["merge"] == {"unknown_tool": 2} and doc["dataset"] == {"invalid_lines": 1}
    assert json.loads(json.dumps(doc)) == doc


def test_summary_shows_used_tools_and_counts_the_unused() -> None:
    stats = RunStatistics()
    tools = {"terminal": (3, 2, 1), "read_file": (0, 0, 0), "web": (0, 0, 0)}
    stats.add_entry(entry("<think>x</think>", tools=tools))
    stats.add_processed("completed", {"prompt_tokens": 1234, "completion_tokens": 56, "total_tokens": 1290})
    text = rendered(document(stats, run_name="[bold]nightly", duration_seconds=3725.5))
    assert "Run statistics — [bold]nightly" in text  # names are printed literally, not as markup
    assert "Prompts processed this run: 1" in text and "Trajectories in merged file: 1" in text
    assert "Duration: 1:02:05 (3725.50 s)" in text
    assert "Tokens this run: 1,290 (prompt 1,234" in text
    row = next(line for line in text.splitlines() if "terminal" in line)
    assert [cell.strip() for cell in row.split("│")[1:6]] == ["terminal", "3", "2", "1", "66.67%"]
    assert "read_file" not in text and "2 tools with no calls not shown" in text
    assert "Reasoning coverage: 100.00% of 1 assistant turns" in text


def test_summary_lists_discards_failures_with_resume_hint_and_throttling() -> None:
    stats = RunStatistics()
    stats.add_discard("no_reasoning")
    stats.add_failure("rate_limit")
    stats.add_failure("sandbox")
    stats.add_limiter({"rate_limited": 7, "calls": 70, "peak_inflight": 32})
    stats.limit_history = [[0, 32], [1, 16]]
    text = rendered(json.loads(json.dumps(document(stats))))  # also renders a loaded statistics.json
    assert "Discarded this run: no_reasoning 1" in text
    assert "Failed this run: rate_limit 1 · sandbox 1" in text
    assert "  rate_limit: throttled (429) after every retry: lower --max_inflight or set" in text
    assert "  sandbox: its sandbox could not be made or used: check the --sandbox backend" in text
    assert "rerun with --resume to retry them" in text
    assert "Endpoint: 70 requests (retries and judge calls included) · 7 rate-limited (429)" in text
    assert "in-flight limit 16–32, final 16" in text  # no run_limit
    assert "No tool calls.\n" in text and "tools available" not in text  # none: no entry in the output


def test_the_summary_shows_the_runs_own_limit_not_the_workers_idle_shares() -> None:
    stats = RunStatistics()  # two workers under a hub: shares 0 while idle, the run's limit 24-64
    stats.add_limiter({"calls": 9, "run_limit_low": 24, "run_limit_high": 64})
    stats.add_limiter({"calls": 9, "run_limit_low": 32, "run_limit_high": 48})
    stats.add_limiter({"calls": 0, "run_limit_low": 0, "run_limit_high": 0})  # never granted
    doc = json.loads(json.dumps(document(stats)))
    assert doc["rate_limiting"]["run_limit"] == [24.0, 64.0]
    text = rendered(doc)
    assert "in-flight limit 24–64\n" in text and "limit 0–" not in text


def test_every_failure_class_has_advice_that_names_a_flag_or_says_whose_it_is() -> None:
    assert set(FAILURE_ADVICE) == set(FailureClass)
    for kind, advice in FAILURE_ADVICE.items():
        flags = [word for word in advice.replace(",", " ").split() if word.startswith("--")]
        assert all(flag.strip("?.:").split("/")[0][2:] in BY_NAME for flag in flags), (kind, flags)
        assert flags or "bug" in advice or "its side" in advice, kind


def test_a_peak_summed_over_replaced_workers_says_it_is_an_upper_bound() -> None:
    stats = RunStatistics()  # two workers, both killed and replaced: four limiters, 32 each
    for _ in range(4):
        stats.add_limiter({"calls": 9, "peak_inflight": 32, "history": [[0, 32]]})
    doc = json.loads(json.dumps(document(stats)))
    assert "peak 128 in flight (sum over 4 workers)" in rendered(doc)
    doc["worker_losses"] = {"losses": 2, "replacements": 2, "exit_codes": {"-9": 2}}
    assert "peak 128 in flight (sum over 4 workers, 2 of them replacements: an upper bound)" in rendered(doc)


def test_with_several_samples_per_prompt_the_summary_counts_attempts() -> None:
    doc = json.loads(json.dumps(document(RunStatistics())))
    assert "Prompts processed this run: 0 " in rendered(doc) and " prompts/s" in rendered(doc)
    doc["samples_per_prompt"] = 3
    doc["whole_run"] = {"invocations": 2, "processed": 6, "completed": 6}
    text = rendered(doc)
    assert "Attempts processed this run: 0 " in text and " attempts/s" in text and "prompts/s" not in text
    assert "Whole run (2 invocations): 6 attempts processed (✓ 6 completed" in text
    doc["whole_run"] = {"invocations": 2, "processed": 7, "completed": 6, "failed": 1}  # then retried
    assert (
        "Whole run (2 invocations): 7 attempts processed (one retried counts in each invocation that ran it) "
        "(✓ 6 completed" in rendered(doc)
    )


def test_summary_without_failures_gives_no_resume_hint() -> None:
    text = rendered(document(RunStatistics()))
    assert "Failed this run: none" in text and "--resume" not in text


def test_cost_is_summed_where_known_and_unknown_is_not_zero() -> None:
    stats = RunStatistics()
    stats.add_processed("completed", {"prompt_tokens": 10, "completion_tokens": 2, "cost_usd": 0.25})
    stats.add_processed("failed", {"prompt_tokens": 10, "completion_tokens": 2})
    stats.add_entry(entry("<think>x</think>"))
    doc = document(stats)
    assert doc["cost"] == {"this_invocation_usd": 0.25, "merged_output_usd": None, "prompts_with_cost": 1}
    assert stats.cost_usd == 0.25 and stats.entries_this_run == 1
    text = rendered(doc)
    assert "Cost this run: $0.250000 · in merged file: unknown" in text
    assert "--price_input" not in text
    assert "Cost this run: unknown · in merged file: unknown (no usage.cost" in rendered(
        document(RunStatistics())
    )


def test_summary_names_heavy_filters_recovered_discards_and_the_budget() -> None:
    extra = {
        "filter_warnings": [
            {"reason": "no_reasoning", "discarded": 9, "entries": 10, "kept_by": "--keep_no_reasoning"}
        ],
        "recovered_discards": {"no_reasoning": 4},
        "budget": {"max_cost_usd": 1.5, "reached": True},
        "completion": {"not_started": 12, "not_started_indices": list(range(10))},
    }
    text = rendered(document(RunStatistics(), extra=extra))
    assert "the no_reasoning filter discarded 9 of 10 entries (90%); --keep_no_reasoning keeps them" in text
    assert "Moved from discarded.jsonl into the output (filter off): no_reasoning 4" in text
    assert (
        "--max_cost=$1.500000 reached: no model call started after it (cut prompts failed as budget)" in text
    )
    assert "Not started: 12 prompts (dataset indices 0, 1, 2, 3, 4, 5, 6, 7, 8, 9 …)" in text


def test_an_unmerged_summary_counts_nothing_from_the_merged_file() -> None:
    extra = {"merged": False, "completion": {"in_output": 3, "discarded": 1, "valid_prompts": 9}}
    text = " ".join(rendered(document(RunStatistics(), extra=extra)).replace("│", " ").split())
    assert "Trajectories in merged file: not rewritten (interrupted); on disk: 3 results" in text
    assert "1 discards of 9 prompts" in text
    assert "Tokens in merged file" not in text and "No tool calls" not in text
    assert "Tool usage and reasoning: not counted (the merged file was not rewritten)" in text


def test_tool_rows_of_tools_not_called_are_counted_as_every_other_row() -> None:
    """`add_tool_stats` skips a row that adds nothing by comparing it whole (most rows of an
    entry: every tool of the registry is listed); the sums are those of adding each field,
    odd values (bools, floats, null) and terminal's `nonzero_exit` kept apart at 0 included."""

    def by_field(tools: dict[str, Counter[str]], stats: dict[str, Any]) -> None:
        for tool, counts in stats.items():
            row = tools.setdefault(tool, Counter())
            if isinstance(counts, dict):
                for key in ("count", "success", "failure"):
                    if type(counts.get(key)) is int and counts[key]:  # zero: no key
                        row[key] += counts[key]
                if type(counts.get("nonzero_exit")) is int:
                    row["nonzero_exit"] += counts["nonzero_exit"]

    values = [0, 1, False, True, 0.0, None]
    rows: list[Any] = [[], "x", {}, {"count": 0}]
    for count, success, failure, exited in itertools.product(values, repeat=4):
        rows.append({"count": count, "success": success, "failure": failure})
        rows.append({"count": count, "success": success, "failure": failure, "nonzero_exit": exited})
    for counts in rows:
        fast: dict[str, Counter[str]] = {}
        reference: dict[str, Counter[str]] = {}
        add_tool_stats(fast, {"t": counts})
        by_field(reference, {"t": counts})
        assert {k: dict(v) for k, v in fast.items()} == {k: dict(v) for k, v in reference.items()}, counts
    zero: dict[str, Counter[str]] = {}
    add_tool_stats(zero, {"terminal": {"count": 0, "success": 0, "failure": 0, "nonzero_exit": 0}})
    assert dict(zero["terminal"]) == {"nonzero_exit": 0}
