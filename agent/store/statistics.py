"""Run statistics: what `statistics.json` holds and the summary printed after a run.

Two scopes are kept apart. The merged output (`add_entry`, called for every entry of
`trajectories.jsonl`) gives tool usage, reasoning coverage, outcomes and tokens of the data set
as it now stands, resumed runs included. This invocation (`add_processed`, `add_discard`,
`add_failure`, `add_limiter`) gives what this process did: prompts finished, discards per
filter, failures per class, tokens spent and how the endpoint throttled us.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

HISTORY_POINTS = 500  # limit history kept in statistics.json, thinned evenly beyond this
_THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL)
_TOKEN_KEYS = ("prompt", "completion", "reasoning", "total")
_ENTRY_KEYS = ("entries", "completed", "partial", "api_calls")
_LIMITER_COUNTS = ("rate_limited", "server_errors", "timeouts", "connection_errors", "calls", "peak_inflight")


def _int(value: Any) -> int:
    """An int field of an entry read from JSON; anything else (absent, null, bool) counts 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _add_tokens(total: Counter[str], usage: Any) -> None:
    """Add `{prompt, completion, reasoning, total}` from an OpenAI-style usage mapping."""
    usage = usage if isinstance(usage, Mapping) else {}
    prompt, completion = _int(usage.get("prompt_tokens")), _int(usage.get("completion_tokens"))
    total["prompt"] += prompt
    total["completion"] += completion
    total["reasoning"] += _int(usage.get("reasoning_tokens"))
    total["total"] += _int(usage.get("total_tokens")) if "total_tokens" in usage else prompt + completion


def _percent(part: int, whole: int) -> float:
    return round(100.0 * part / whole, 2) if whole else 0.0


def has_reasoning(value: str) -> bool:
    """Whether a gpt turn's value carries a `<think>` block with non-blank content."""
    return any(block.strip() for block in _THINK.findall(value))


def merge_histories(histories: Iterable[Sequence[Sequence[float]]]) -> list[list[float]]:
    """The total in-flight limit over time: each worker's limit is a step function of its own
    clock (every worker starts at 0), so the total at each change is the sum of the latest
    limits; thinned evenly to `HISTORY_POINTS`, first and last point kept."""
    events = sorted(
        (float(point[0]), worker, float(point[1]))
        for worker, history in enumerate(histories)
        for point in history
    )
    current: dict[int, float] = {}
    merged: list[list[float]] = []
    for t, worker, limit in events:
        current[worker] = limit
        point = [round(t, 3), round(sum(current.values()), 2)]
        if merged and merged[-1][0] == point[0]:
            merged[-1] = point  # several workers changed at once: keep the settled total
        else:
            merged.append(point)
    if len(merged) <= HISTORY_POINTS:
        return merged
    last = len(merged) - 1
    return [merged[round(i * last / (HISTORY_POINTS - 1))] for i in range(HISTORY_POINTS)]


class RunStatistics:
    """Accumulates the statistics of one run; `to_dict` gives the JSON document."""

    def __init__(self) -> None:
        self._tools: dict[str, Counter[str]] = {}
        self._turns = Counter[str]()  # assistant turns, with reasoning, entries with any
        self._entries = Counter[str]()  # entries, completed, partial, api_calls
        self._outcomes = Counter[str]()
        self._tokens = Counter[str]()
        self._run = Counter[str]()  # this invocation: processed and its split
        self._run_outcomes = Counter[str]()
        self._run_tokens = Counter[str]()
        self._discards = Counter[str]()
        self._failures = Counter[str]()
        self._limiters: dict[object, Mapping[str, Any]] = {}

    def add_entry(self, entry: Mapping[str, Any]) -> None:
        """Count one entry of the merged output. Runs once per entry at the end of every run,
        in the parent, so it stays lean: entries are parsed JSON (dicts, never other
        mappings), and `type(v) is int` is `_int` without the bools, zero counts skipped."""
        tools = self._tools
        stats = entry.get("tool_stats")
        for tool, counts in stats.items() if isinstance(stats, dict) else ():
            row = tools.get(tool)
            if row is None:
                row = tools[str(tool)] = Counter()
            if isinstance(counts, dict):
                for key in ("count", "success", "failure"):
                    value = counts.get(key)
                    if type(value) is int and value:
                        row[key] += value
        turns = with_reasoning = 0
        for turn in entry.get("conversations") or ():
            if isinstance(turn, dict) and turn.get("from") == "gpt":
                turns += 1
                with_reasoning += has_reasoning(str(turn.get("value") or ""))
        counted = self._turns
        counted["turns"] += turns
        counted["with_reasoning"] += with_reasoning
        counted["entries"] += with_reasoning > 0
        entries = self._entries
        entries["entries"] += 1
        entries["completed"] += entry.get("completed") is True
        entries["partial"] += entry.get("partial") is True
        entries["api_calls"] += _int(entry.get("api_calls"))
        metadata = entry.get("metadata")
        metadata = metadata if isinstance(metadata, dict) else {}
        self._outcomes[str(metadata.get("outcome") or "unknown")] += 1
        _add_tokens(self._tokens, metadata.get("usage"))

    def add_discard(self, reason: str) -> None:
        self._discards[reason] += 1

    def add_failure(self, error_class: str) -> None:
        self._failures[error_class] += 1

    def add_processed(self, outcome: str, usage: Mapping[str, int]) -> None:
        """One prompt finished in this invocation, whatever became of it."""
        self._run_outcomes[outcome] += 1
        split = outcome if outcome in ("completed", "discarded", "failed") else "partial"
        self._run["processed"] += 1
        self._run[split] += 1
        _add_tokens(self._run_tokens, usage)

    def add_limiter(self, worker_stats: Mapping[str, Any], *, worker: object = None) -> None:
        """One worker process's limiter statistics. With `worker`, a later call for the same
        worker replaces its earlier snapshot instead of adding to it."""
        self._limiters[worker if worker is not None else ("anonymous", len(self._limiters))] = worker_stats

    def _tool_statistics(self) -> dict[str, dict[str, int | float]]:
        rows = sorted(self._tools.items(), key=lambda item: (-item[1]["count"], item[0]))
        return {
            tool: {
                "count": c["count"],
                "success": c["success"],
                "failure": c["failure"],
                "success_rate": _percent(c["success"], c["success"] + c["failure"]),
                "failure_rate": _percent(c["failure"], c["success"] + c["failure"]),
            }
            for tool, c in rows
        }

    def _reasoning_statistics(self) -> dict[str, int | float]:
        turns, with_reasoning = self._turns["turns"], self._turns["with_reasoning"]
        return {
            "total_assistant_turns": turns,
            "turns_with_reasoning": with_reasoning,
            "turns_without_reasoning": turns - with_reasoning,
            "coverage_percent": _percent(with_reasoning, turns),
            "entries_with_reasoning": self._turns["entries"],
        }

    def _rate_limiting(self) -> dict[str, Any]:
        limiters = list(self._limiters.values())
        totals: dict[str, Any] = {key: sum(_int(s.get(key)) for s in limiters) for key in _LIMITER_COUNTS}
        totals["workers"] = len(limiters)
        totals["limit_history"] = merge_histories(s.get("history") or [] for s in limiters)
        return totals

    def to_dict(
        self,
        *,
        run_name: str,
        distribution: str,
        model: str,
        total_prompts: int,
        batch_size: int,
        total_batches: int,
        duration_seconds: float,
        merge: Mapping[str, Any] | None = None,
        dataset: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The `statistics.json` document (JSON-serialisable)."""
        run = {key: self._run[key] for key in ("processed", "completed", "partial", "discarded", "failed")}
        rate = run["processed"] / duration_seconds if duration_seconds > 0 else 0.0
        return {
            "run_name": run_name,
            "distribution": distribution,
            "total_prompts": total_prompts,
            "total_batches": total_batches,
            "batch_size": batch_size,
            "model": model,
            "completed_at": datetime.now().astimezone().isoformat(),
            "duration_seconds": round(duration_seconds, 2),
            "tool_statistics": self._tool_statistics(),
            "reasoning_statistics": self._reasoning_statistics(),
            "discarded_no_reasoning": self._discards["no_reasoning"],
            "discarded": dict(sorted(self._discards.items())),
            "failures": dict(sorted(self._failures.items())),
            "trajectories": {
                key: self._entries[key] for key in ("entries", "completed", "partial", "api_calls")
            },
            "outcomes": dict(sorted(self._outcomes.items())),
            "tokens": {
                "merged_output": {key: self._tokens[key] for key in _TOKEN_KEYS},
                "this_invocation": {key: self._run_tokens[key] for key in _TOKEN_KEYS},
            },
            "this_invocation": {
                **run,
                "outcomes": dict(sorted(self._run_outcomes.items())),
                "prompts_per_second": round(rate, 3),
            },
            "rate_limiting": self._rate_limiting(),
            "merge": dict(merge or {}),
            "dataset": dict(dataset or {}),
        }


# ---------------------------------------------------------------- the printed summary


def _n(value: Any) -> str:
    return f"{_int(value):,}"


def _duration(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d} ({seconds:.2f} s)"


def _token_line(tokens: Mapping[str, Any]) -> str:
    return (
        f"{_n(tokens.get('total'))} (prompt {_n(tokens.get('prompt'))} · completion "
        f"{_n(tokens.get('completion'))} · reasoning {_n(tokens.get('reasoning'))})"
    )


def _counts_line(counts: Mapping[str, Any]) -> str:
    """`a 1 · b 2` for the non-zero numbers of a mapping, or "none"."""
    items = [f"{key} {_n(value)}" for key, value in counts.items() if _int(value)]
    return " · ".join(items) or "none"


def _summary(stats: Mapping[str, Any]) -> Panel:
    run, merged = stats.get("this_invocation") or {}, stats.get("trajectories") or {}
    tokens = stats.get("tokens") or {}
    lines = [
        f"Prompts processed this run: {_n(run.get('processed'))} (✓ {_n(run.get('completed'))} completed, "
        f"◐ {_n(run.get('partial'))} partial, ⌫ {_n(run.get('discarded'))} discarded, "
        f"✗ {_n(run.get('failed'))} failed) · {run.get('prompts_per_second', 0.0):.2f} prompts/s",
        f"Trajectories in merged file: {_n(merged.get('entries'))} (completed {_n(merged.get('completed'))}, "
        f"partial {_n(merged.get('partial'))})",
        f"Duration: {_duration(float(stats.get('duration_seconds') or 0.0))}",
        f"Tokens this run: {_token_line(tokens.get('this_invocation') or {})}",
        f"Tokens in merged file: {_token_line(tokens.get('merged_output') or {})}",
        f"Model: {stats.get('model')} · distribution: {stats.get('distribution')} · "
        f"{_n(stats.get('total_prompts'))} prompts, {_n(stats.get('total_batches'))} batches of "
        f"{_n(stats.get('batch_size'))} this run",
    ]
    for label in ("dataset", "merge"):
        if any(_int(value) for value in (stats.get(label) or {}).values()):
            lines.append(f"{label.capitalize()}: {_counts_line(stats[label])}")
    return Panel(
        Text("\n".join(lines)), title=Text(f"Run statistics — {stats.get('run_name')}"), expand=False
    )


def _tool_table(tools: Mapping[str, Mapping[str, Any]]) -> Table | Text:
    used = {name: row for name, row in tools.items() if _int(row.get("count"))}
    if not used:
        return Text(f"No tool calls ({len(tools)} tools available).")
    table = Table(title="Tool usage", title_justify="left")
    table.add_column("Tool")
    for heading in ("Calls", "Success", "Failure", "Success rate"):
        table.add_column(heading, justify="right")
    for name, row in used.items():
        table.add_row(
            Text(name),
            _n(row.get("count")),
            _n(row.get("success")),
            _n(row.get("failure")),
            f"{row.get('success_rate', 0.0):.2f}%",
        )
    if len(tools) > len(used):
        unused = len(tools) - len(used)
        table.caption = f"{unused} tool{'s' if unused > 1 else ''} with no calls not shown"
    return table


def _reasoning(stats: Mapping[str, Any]) -> Text:
    r = stats.get("reasoning_statistics") or {}
    return Text(
        f"Reasoning coverage: {r.get('coverage_percent', 0.0):.2f}% of "
        f"{_n(r.get('total_assistant_turns'))} assistant turns "
        f"({_n(r.get('turns_with_reasoning'))} with reasoning, "
        f"{_n(r.get('turns_without_reasoning'))} without); "
        f"{_n(r.get('entries_with_reasoning'))} entries have reasoning"
    )


def _problems(stats: Mapping[str, Any]) -> Text:
    lines = [f"Discarded this run: {_counts_line(stats.get('discarded') or {})}"]
    failures = stats.get("failures") or {}
    lines.append(f"Failed this run: {_counts_line(failures)}")
    if any(_int(value) for value in failures.values()):
        lines.append("  rerun with --resume to retry them")
    return Text("\n".join(lines))


def _rate_limiting(stats: Mapping[str, Any]) -> Text:
    r = stats.get("rate_limiting") or {}
    limits = [point[1] for point in r.get("limit_history") or []]
    line = (
        f"Endpoint: {_n(r.get('calls'))} calls · {_n(r.get('rate_limited'))} rate-limited (429) · "
        f"{_n(r.get('server_errors'))} server errors · {_n(r.get('timeouts'))} timeouts · "
        f"{_n(r.get('connection_errors'))} connection errors\n"
        f"  peak {_n(r.get('peak_inflight'))} in flight (sum over {_n(r.get('workers'))} workers)"
    )
    if limits:
        line += f" · in-flight limit {min(limits):g}–{max(limits):g}, final {limits[-1]:g}"
    return Text(line)


def render_statistics(stats: Mapping[str, Any], console: Console) -> None:
    """Print the summary of a `to_dict` document (or a loaded `statistics.json`)."""
    parts: list[Any] = [_summary(stats), _tool_table(stats.get("tool_statistics") or {}), _reasoning(stats)]
    parts += [_problems(stats), _rate_limiting(stats)]
    console.print(Group(*parts))
