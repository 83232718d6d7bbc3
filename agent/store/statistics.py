"""Run statistics: the accumulator behind `statistics.json` (`RunStatistics`).

Two scopes are kept apart. The merged output (`add_entry`, called for every entry of
`trajectories.jsonl`, as it is written or merged; `reset_output` to count them again) gives
tool usage, reasoning coverage, outcomes and tokens of the data set as it now stands, resumed
runs included. This invocation (`add_processed`, `add_discard`,
`add_failure`, `add_limiter`) gives what this process did: prompts finished, discards per
filter, failures per class, tokens and USD spent and how the endpoint throttled us. USD is
summed from each usage's `cost_usd` and stays None (unknown, not 0) when none has one.

The summary printed after a run is `agent.store.summary_view`'s; `render_statistics` is
re-exported here for the callers that import it with `RunStatistics`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from agent.errors import FailureClass
from agent.store.figures import EntryFigures
from agent.store.jsonl import json_int
from agent.store.run_history import limit_range
from agent.store.spend import TOKEN_KEYS, Spend, add_tokens
from agent.store.summary_view import render_statistics
from agent.store.tool_counts import add_tool_stats, other_tools, percent, tool_statistics
from agent.store.verification_stats import VerificationTally

__all__ = ["HISTORY_POINTS", "RunStatistics", "has_reasoning", "limit_curve", "render_statistics"]

HISTORY_POINTS = 500  # limit history kept in statistics.json, thinned evenly beyond this
_THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL)
_ENTRY_KEYS = ("entries", "completed", "partial", "api_calls")
_RUN_KEYS = ("processed", "completed", "partial", "discarded", "failed", "api_calls")
_OUTPUT_COUNTS = ("_tools", "_turns", "_entries", "_outcomes", "_toolsets", "_lost", "_tokens")
# what `reset_output` sets: the merged output's figures (kept for a resume: `agent.store.output_figures`)
OUTPUT_FIELDS = (*_OUTPUT_COUNTS, "_cost", "verification")
_LIMITER_COUNTS = ("rate_limited", "server_errors", "timeouts", "connection_errors", "calls", "peak_inflight")


def has_reasoning(value: str) -> bool:
    """Whether a gpt turn's value carries a `<think>` block with non-blank content."""
    return any(block.strip() for block in _THINK.findall(value))


def limit_curve(points: Iterable[tuple[float, float]], origin: float) -> list[list[float]]:
    """The run's in-flight limit over time (`Tally.limit_history`: monotonic clock readings)
    as seconds since `origin`, thinned evenly to `HISTORY_POINTS`, first and last point kept."""
    curve: list[list[float]] = []
    for t, limit in points:
        point = [round(max(0.0, t - origin), 3), float(limit)]
        if curve and curve[-1][0] == point[0]:
            curve[-1] = point  # changed twice within a millisecond: the later value held
        else:
            curve.append(point)
    if len(curve) <= HISTORY_POINTS:
        return curve
    last = len(curve) - 1
    return [curve[round(i * last / (HISTORY_POINTS - 1))] for i in range(HISTORY_POINTS)]


class RunStatistics:
    """Accumulates the statistics of one run; `to_dict` gives the JSON document."""

    def __init__(self) -> None:
        self.reset_output()
        self._discarded_turns = Counter[
            str
        ]()  # assistant turns, with reasoning, of the entries now discarded
        self._run = Counter[str]()  # this invocation: processed and its split
        self._run_outcomes = Counter[str]()
        self._run_tokens = Counter[str]()
        self._discards = Counter[str]()
        self._failures = Counter[str]()
        self._limiters: dict[object, Mapping[str, Any]] = {}
        self.limit_history: list[list[float]] = []  # the run's limit over time (`limit_curve`)
        self._run_cost = Spend()  # this invocation

    def reset_output(self) -> None:
        """Forget every entry of the merged output counted so far (`add_entry`): the end of a
        run counts them again."""
        self._tools: dict[str, Counter[str]] = {}
        self._turns = Counter[str]()  # assistant turns, with reasoning, entries with any
        self._entries = Counter[str]()  # entries, completed, partial, api_calls
        self._outcomes = Counter[str]()
        self._toolsets = Counter[str]()  # sampled toolsets of the merged output's entries
        self._lost = Counter[str]()  # of those, the ones that could not run here
        self._tokens = Counter[str]()
        self._cost = Spend()  # merged output
        self.verification = VerificationTally()  # merged output and current discards

    def add_entry(self, entry: Mapping[str, Any], figures: EntryFigures | None = None) -> None:
        """Count one entry of the merged output, with its `figures` when the run counted them
        from its event (else read from the entry). Runs once per entry of the output, in the
        parent (as this invocation appends each line, `agent.batch.end_fold`; at the end for an
        earlier invocation's), so it stays lean: entries are parsed JSON (dicts, never other
        mappings), and `type(v) is int` is `json_int` without the bools, zero counts skipped."""
        figures = figures if figures is not None else EntryFigures.of(entry)
        stats = entry.get("tool_stats")
        if isinstance(stats, dict):
            add_tool_stats(self._tools, stats)
        self._add_turns(entry.get("conversations") or ())
        entries = self._entries
        entries["entries"] += 1
        entries["completed"] += figures.completed
        entries["partial"] += figures.partial
        entries["api_calls"] += figures.api_calls
        metadata = entry.get("metadata")
        metadata = metadata if isinstance(metadata, dict) else {}
        self._turns["forced"] += json_int(metadata.get("reasoning_forced_turns"))
        self._outcomes[figures.outcome] += 1
        self._add_toolsets(entry.get("toolsets_used"), metadata.get("toolsets_unavailable"))
        add_tokens(self._tokens, figures.usage)
        self._cost.add(figures.usage)
        self.verification.add(entry, in_output=True)

    def _add_toolsets(self, sampled: Any, unavailable: Any) -> None:
        """Toolsets sampled, and those sampled that could not run here (the prompt lost them)."""
        if isinstance(sampled, list):
            self._toolsets.update(str(t) for t in sampled)
        if isinstance(unavailable, list) and unavailable:
            self._lost.update(str(t) for t in unavailable)
            self._entries["missing_toolsets"] += 1

    def _toolset_statistics(self) -> dict[str, Any]:
        return {
            "sampled": dict(sorted(self._toolsets.items())),
            "unavailable": dict(sorted(self._lost.items())),
            "prompts_missing_toolsets": self._entries["missing_toolsets"],
        }

    def add_discarded_entry(self, entry: Mapping[str, Any]) -> None:
        """One entry of discarded.jsonl whose prompt is not in the output: its turns are
        counted apart, so a run whose filter discarded everything still says what it made."""
        self._add_turns(entry.get("conversations") or (), self._discarded_turns)
        self.verification.add(entry, in_output=False)  # an attempt --keep (or a filter) left out

    def _add_turns(self, conversations: Iterable[Any], counted: Counter[str] | None = None) -> None:
        """Assistant turns, those with reasoning, and whether the entry has any."""
        turns = with_reasoning = 0
        for turn in conversations:
            if isinstance(turn, dict) and turn.get("from") == "gpt":
                turns += 1
                with_reasoning += has_reasoning(str(turn.get("value") or ""))
        counted = self._turns if counted is None else counted
        counted["turns"] += turns
        counted["with_reasoning"] += with_reasoning
        counted["entries"] += with_reasoning > 0

    def add_discard(self, reason: str) -> None:
        self._discards[reason] += 1

    def add_failure(self, error_class: FailureClass) -> None:
        self._failures[error_class] += 1

    def add_processed(self, outcome: str, usage: Mapping[str, float], api_calls: int = 0) -> None:
        """One prompt finished in this invocation, whatever became of it."""
        self._run_outcomes[outcome] += 1
        self._run["api_calls"] += api_calls
        split = outcome if outcome in ("completed", "discarded", "failed") else "partial"
        self._run["processed"] += 1
        self._run[split] += 1
        add_tokens(self._run_tokens, usage)
        self._run_cost.add(usage)

    @property
    def discards(self) -> dict[str, int]:
        """Discards per filter in this invocation."""
        return dict(self._discards)

    @property
    def entries_this_run(self) -> int:
        """Prompts of this invocation that reached an outcome (kept or discarded)."""
        return self._run["processed"] - self._run["failed"]

    @property
    def cost_usd(self) -> float:
        """What this invocation spent, as far as it is known (0 when no cost is known)."""
        return self._run_cost.usd

    def _cost_statistics(self) -> dict[str, Any]:
        """USD spent, None where no call's cost is known (no price table, none reported)."""
        return {
            "this_invocation_usd": self._run_cost.known(),
            "merged_output_usd": self._cost.known(),
            "prompts_with_cost": self._run_cost.costed,
        }

    def add_limiter(self, worker_stats: Mapping[str, Any], *, worker: object = None) -> None:
        """One worker process's limiter statistics. With `worker`, a later call for the same
        worker replaces its earlier snapshot instead of adding to it."""
        self._limiters[worker if worker is not None else ("anonymous", len(self._limiters))] = worker_stats

    def _tool_statistics(self) -> dict[str, Any]:
        """The most called tools by name, and the rest summed (the model may invent any number)."""
        tools = self._tools
        return {"tool_statistics": tool_statistics(tools), "tool_statistics_other": other_tools(tools)}

    def _reasoning_statistics(self) -> dict[str, Any]:
        turns, with_reasoning = self._turns["turns"], self._turns["with_reasoning"]
        return {
            "total_assistant_turns": turns,
            "turns_with_reasoning": with_reasoning,
            "turns_without_reasoning": turns - with_reasoning,
            "coverage_percent": percent(with_reasoning, turns),
            "entries_with_reasoning": self._turns["entries"],
            # The endpoint's grammar forced some (the embedded model's): not the model's choice.
            "turns_with_forced_reasoning": self._turns["forced"],
            "model_written_coverage_percent": percent(with_reasoning - self._turns["forced"], turns),
            "discarded_entries": {  # not in the output, so not in the coverage above
                "assistant_turns": self._discarded_turns["turns"],
                "turns_with_reasoning": self._discarded_turns["with_reasoning"],
            },
        }

    def _rate_limiting(self) -> dict[str, Any]:
        limiters = list(self._limiters.values())
        totals: dict[str, Any] = {key: sum(json_int(s.get(key)) for s in limiters) for key in _LIMITER_COUNTS}
        totals["workers"] = len(limiters)
        totals["limit_history"] = self.limit_history
        totals["run_limit"] = limit_range([s.get("run_limit_low"), s.get("run_limit_high")] for s in limiters)
        return totals

    def _token_statistics(self) -> dict[str, dict[str, int]]:
        return {
            "merged_output": {key: self._tokens[key] for key in TOKEN_KEYS},
            "this_invocation": {key: self._run_tokens[key] for key in TOKEN_KEYS},
        }

    def _toolsets_and_checks(self) -> dict[str, Any]:
        """`toolsets`; `verification` only when an attempt was verified (its scope and rules:
        `agent.store.verification_stats`)."""
        section = self.verification.section()
        checks = {"verification": section} if section is not None else {}
        return {"toolsets": self._toolset_statistics(), **checks}

    def _this_invocation(self, duration_seconds: float) -> dict[str, Any]:
        run: dict[str, Any] = {key: self._run[key] for key in _RUN_KEYS}
        rate = run["processed"] / duration_seconds if duration_seconds > 0 else 0.0
        run["outcomes"] = dict(sorted(self._run_outcomes.items()))
        run["prompts_per_second"] = round(rate, 3)
        return run

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
        extra: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The `statistics.json` document (JSON-serialisable)."""
        return {
            "run_name": run_name,
            "distribution": distribution,
            "total_prompts": total_prompts,
            "total_batches": total_batches,
            "batch_size": batch_size,
            "model": model,
            "completed_at": datetime.now().astimezone().isoformat(),
            "duration_seconds": round(duration_seconds, 2),
            **self._tool_statistics(),
            "reasoning_statistics": self._reasoning_statistics(),
            "discarded_no_reasoning": self._discards["no_reasoning"],
            "discarded": dict(sorted(self._discards.items())),
            "failures": dict(sorted(self._failures.items())),
            "trajectories": {key: self._entries[key] for key in _ENTRY_KEYS},
            "outcomes": dict(sorted(self._outcomes.items())),
            **self._toolsets_and_checks(),
            "tokens": self._token_statistics(),
            "cost": self._cost_statistics(),
            "this_invocation": self._this_invocation(duration_seconds),
            "rate_limiting": self._rate_limiting(),
            "merge": dict(merge or {}),
            "dataset": dict(dataset or {}),
            **(extra or {}),
        }
