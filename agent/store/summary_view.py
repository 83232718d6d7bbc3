"""The summary printed after a run: a `statistics.json` document rendered with rich, then the
closing lines (`render_next_steps`): where the trajectories and the report are, and what to do
next, always: `--resume` after an interrupt, failures or prompts not started; the keeping flag
(`--keep_no_reasoning`, `--keep_malformed`) when a filter discarded most entries; else a look
at the report.

Reads only the document (a `RunStatistics.to_dict` result or a loaded `statistics.json`),
so a summary can be printed again from the file alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.text import Text

from agent.errors import FAILURE_ADVICE
from agent.store.jsonl import json_int
from agent.store.run_history import limit_range
from agent.store.summary_lines import (
    dataset_lines,
    endpoint_label,
    plural,
    replaced_note,
    token_capture_lines,
    unfinished_lines,
    verification_lines,
    whole_run_lines,
    worker_loss_lines,
)
from agent.store.summary_lines import duration as _duration
from agent.store.summary_lines import n as _n
from agent.store.summary_lines import usd as _usd
from agent.store.summary_tools import tool_table as _tool_table


def _token_line(tokens: Mapping[str, Any]) -> str:
    return (
        f"{_n(tokens.get('total'))} (prompt {_n(tokens.get('prompt'))} · completion "
        f"{_n(tokens.get('completion'))} · reasoning {_n(tokens.get('reasoning'))})"
    )


def _counts_line(counts: Mapping[str, Any]) -> str:
    """`a 1 · b 2` for the non-zero numbers of a mapping, or "none"."""
    items = [f"{key} {_n(value)}" for key, value in counts.items() if json_int(value)]
    return " · ".join(items) or "none"


def _unmerged(stats: Mapping[str, Any]) -> bool:
    """An interrupted run: trajectories.jsonl was not rewritten, so nothing was counted from it."""
    return stats.get("merged") is False


def _merged_line(stats: Mapping[str, Any], merged: Mapping[str, Any]) -> str:
    if _unmerged(stats):
        done = stats.get("completion") or {}
        return (
            f"Trajectories in merged file: not rewritten (interrupted); on disk: {_n(done.get('in_output'))} "
            f"results in the batch files and {_n(done.get('discarded'))} discards of "
            f"{_n(done.get('valid_prompts'))} prompts"
        )
    return (
        f"Trajectories in merged file: {_n(merged.get('entries'))} (completed {_n(merged.get('completed'))}, "
        f"partial {_n(merged.get('partial'))})"
    )


def _cost_line(stats: Mapping[str, Any]) -> str:
    cost, budget = stats.get("cost") or {}, stats.get("budget") or {}
    line = f"Cost this run: {_usd(cost.get('this_invocation_usd'))}"
    if not _unmerged(stats):
        line += f" · in merged file: {_usd(cost.get('merged_output_usd'))}"
    if cost.get("this_invocation_usd") is None:
        line += " (no usage.cost from the endpoint; --price_input/--price_output price the tokens)"
    if budget.get("max_cost_usd") is not None:
        reached = (
            "reached: no model call started after it (cut prompts failed as budget)"
            if budget.get("reached")
            else "not reached"
        )
        line += f" · --max_cost={_usd(budget['max_cost_usd'])} {reached}"
    return line


def _summary(stats: Mapping[str, Any]) -> Panel:
    run, merged = stats.get("this_invocation") or {}, stats.get("trajectories") or {}
    tokens = stats.get("tokens") or {}
    unit = "attempts" if json_int(stats.get("samples_per_prompt")) > 1 else "prompts"  # what is counted
    lines = [
        f"{unit.capitalize()} processed this run: {_n(run.get('processed'))} (✓ {_n(run.get('completed'))} "
        f"completed, ◐ {_n(run.get('partial'))} partial, ⌫ {_n(run.get('discarded'))} discarded, "
        f"✗ {_n(run.get('failed'))} failed) · {run.get('prompts_per_second', 0.0):.2f} {unit}/s",
        *whole_run_lines(stats.get("whole_run") or {}, unit),
        _merged_line(stats, merged),
        f"Duration: {_duration(float(run.get('duration_seconds', stats.get('duration_seconds')) or 0.0))}",
        f"Tokens this run: {_token_line(tokens.get('this_invocation') or {})}",
        *(
            []
            if _unmerged(stats)
            else [f"Tokens in merged file: {_token_line(tokens.get('merged_output') or {})}"]
        ),
        _cost_line(stats),
        f"Model: {stats.get('model')} · distribution: {stats.get('distribution')} · "
        f"dataset {plural(stats.get('total_prompts'), 'prompt')} in "
        f"{plural(stats.get('total_batches'), 'batch')} of {_n(stats.get('batch_size'))}{_samples(stats)}",
    ]
    lines += _lost_toolsets(stats.get("toolsets") or {})
    lines += verification_lines(stats.get("verification"))
    lines += token_capture_lines(tokens)
    lines += dataset_lines(stats.get("dataset") or {})
    if any(json_int(value) for value in (stats.get("merge") or {}).values()):
        lines.append(f"Merge: {_counts_line(stats['merge'])}")
    return Panel(
        Text("\n".join(lines)), title=Text(f"Run statistics — {stats.get('run_name')}"), expand=False
    )


def _lost_toolsets(toolsets: Mapping[str, Any]) -> list[str]:
    """The line on prompts whose sampled toolsets could not all run here, if any did not."""
    lost = json_int(toolsets.get("prompts_missing_toolsets"))
    if not lost:
        return []
    per_toolset = _counts_line(toolsets.get("unavailable") or {})
    return [f"Prompts that lost a sampled toolset (unavailable here): {_n(lost)} ({per_toolset})"]


def _reasoning(stats: Mapping[str, Any]) -> Text:
    r = stats.get("reasoning_statistics") or {}
    discarded = r.get("discarded_entries") or {}
    line = (
        f"Reasoning coverage: {r.get('coverage_percent', 0.0):.2f}% of "
        f"{_n(r.get('total_assistant_turns'))} assistant turns in the output "
        f"({_n(r.get('turns_with_reasoning'))} with reasoning, "
        f"{_n(r.get('turns_without_reasoning'))} without); "
        f"{_n(r.get('entries_with_reasoning'))} entries have reasoning"
    )
    forced = json_int(r.get("turns_with_forced_reasoning"))
    if forced:  # the endpoint's grammar wrote it (the embedded model): not the model's choice
        line += (
            f"\n  {_n(forced)} of those turns' reasoning was forced by the endpoint's output grammar: "
            f"{r.get('model_written_coverage_percent', 0.0):.2f}% written by the model"
        )
    if json_int(discarded.get("assistant_turns")):
        line += (
            f"\n  discarded entries (not in the output): {_n(discarded.get('assistant_turns'))} assistant "
            f"turns, {_n(discarded.get('turns_with_reasoning'))} with reasoning"
        )
    return Text(line)


def _problems(stats: Mapping[str, Any]) -> Text:
    lines = [f"Discarded this run: {_counts_line(stats.get('discarded') or {})}"]
    current = stats.get("current_discards") or {}
    if any(json_int(v) for v in current.values()) and current != (stats.get("discarded") or {}):
        lines.append(f"In discarded.jsonl now (the whole run): {_counts_line(current)}")
    lines += _filter_lines(stats)
    failures = stats.get("failures") or {}
    lines.append(f"Failed this run: {_counts_line(failures)}")
    if any(json_int(value) for value in failures.values()):
        lines += [f"  {kind}: {FAILURE_ADVICE[kind]}" for kind in failures if kind in FAILURE_ADVICE]
        lines.append("  rerun with --resume to retry them")
    lines += worker_loss_lines(stats.get("worker_losses") or {})
    done = stats.get("completion") or {}
    lines += unfinished_lines(done)
    return Text("\n".join(lines))


def _filter_lines(stats: Mapping[str, Any]) -> list[str]:
    """Filters that dropped most of the entries, and discards moved back into the output."""
    lines = []
    for warning in stats.get("filter_warnings") or []:
        count, entries = json_int(warning.get("discarded")), json_int(warning.get("entries"))
        line = (
            f"  the {warning.get('reason')} filter discarded {_n(count)} of {_n(entries)} entries "
            f"({100.0 * count / max(entries, 1):.0f}%)"
        )
        if warning.get("kept_by"):
            line += f"; {warning['kept_by']} keeps them (with --resume, from discarded.jsonl, no model call)"
        lines.append(line)
    withdrawn = stats.get("withdrawn_entries") or {}
    if any(json_int(value) for value in withdrawn.values()):  # --keep, or a filter turned back on
        lines.append(f"Moved from the output to discarded.jsonl: {_counts_line(withdrawn)}")
    recovered = stats.get("recovered_discards") or {}
    if any(json_int(value) for value in recovered.values()):
        lines.append(f"Moved from discarded.jsonl into the output (filter off): {_counts_line(recovered)}")
    return lines


def _rate_limiting(stats: Mapping[str, Any]) -> Text:
    r = stats.get("rate_limiting") or {}
    limits = [point[1] for point in r.get("limit_history") or []]
    line = (
        f"{endpoint_label(stats)}: {_n(r.get('calls'))} requests (retries and judge calls included) · "
        f"{_n(r.get('rate_limited'))} rate-limited (429) · "
        f"{_n(r.get('server_errors'))} server errors · {_n(r.get('timeouts'))} timeouts · "
        f"{_n(r.get('connection_errors'))} connection errors\n"
        f"  peak {_n(r.get('peak_inflight'))} in flight "
        f"(sum over {plural(r.get('workers'), 'worker')}{replaced_note(stats)})"
    )
    run_limit = limit_range([r.get("run_limit")])
    if run_limit is not None:  # the run's own, lowest and highest (it adapts to 429s)
        line += f" · in-flight limit {run_limit[0]:g}–{run_limit[1]:g}"
    elif limits:  # an older statistics.json: the workers' shares summed, 0 while they idled
        line += f" · in-flight limit {min(limits):g}–{max(limits):g}, final {limits[-1]:g}"
    if r.get("partial"):
        calls = (stats.get("whole_run") or {}).get("api_calls")
        line += (
            "\n  partial: a worker died before reporting its counters (those above leave out its calls); "
            f"the prompts that finished made {_n(calls)} model calls"
        )
    return Text(line)


def render_statistics(stats: Mapping[str, Any], console: Console) -> None:
    """Print the summary of a `to_dict` document (or a loaded `statistics.json`)."""
    parts: list[Any] = [_summary(stats)]
    if _unmerged(stats):
        parts.append(Text("Tool usage and reasoning: not counted (the merged file was not rewritten)"))
    else:
        tools, other = stats.get("tool_statistics") or {}, stats.get("tool_statistics_other") or {}
        parts += [_tool_table(tools, other), _reasoning(stats)]
    parts += [_problems(stats), _rate_limiting(stats)]
    console.print(Group(*parts))


def _keep_advice(stats: Mapping[str, Any]) -> list[str]:
    """For each filter that dropped most entries and has a flag that keeps them: the command."""
    advice = []
    for warning in stats.get("filter_warnings") or []:
        flag = warning.get("kept_by")
        if flag:
            advice.append(
                f"rerun with --resume {flag} to keep the {_n(warning.get('discarded'))} "
                f"{warning.get('reason')} discards (moved from discarded.jsonl, no model call)"
            )
    return advice


def next_steps(stats: Mapping[str, Any], report: Path | None) -> list[str]:
    """The closing lines: where the report is, the flags that keep heavy discards, and last the
    completion line, which always ends with what to do next."""
    lines = [f"Report: {report} (open it in a browser; one file, works offline)"] if report else []
    advice = _keep_advice(stats)
    done = stats.get("completion") or {}
    final = str(done.get("next_step") or "")
    if "Next:" in final:  # interrupted or unfinished: --resume comes first
        lines += [f"Then: {step}" for step in advice]
    elif advice:
        final += f" Next: {'; '.join(advice)}."
    else:
        final += f" Next: look at the data in {report.name if report else 'trajectories.jsonl'}."
    return [*lines, final]


def render_next_steps(
    stats: Mapping[str, Any], console: Console, *, trajectories: Path | None, report: Path | None
) -> None:
    """Print where the output is and what to do next; the last line is green when the run is done."""
    if trajectories is not None:
        console.print(f"Trajectories: {trajectories}", markup=False, highlight=False, soft_wrap=True)
    *lines, final = next_steps(stats, report)
    for line in lines:
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    ok = json_int((stats.get("completion") or {}).get("exit_code")) == 0
    console.print(Text(final, style="green" if ok else "red"), soft_wrap=True)


def _samples(stats: Mapping[str, Any]) -> str:
    """With several samples per prompt, what the batches hold: attempts, not prompts."""
    per_prompt = stats.get("samples_per_prompt")
    if not isinstance(per_prompt, int) or per_prompt <= 1:
        return ""
    return f" attempts ({_n(stats.get('total_attempts'))} attempts: {per_prompt} samples per prompt)"
