"""A run's figures across invocations: statistics.json describes the whole run, not only the
last process that wrote it.

A run directory can be written by several invocations (a first run, `--resume` after an
interrupt, a resume that finds everything done and only merges). Each invocation's own
figures — prompts processed and their split, model calls, tokens, USD, discards and failures
per class, the endpoint's counters, its duration — are one record of `invocations`; the
`whole_run` section sums them, and the document's `duration_seconds`, `rate_limiting` and
`timeline` are the whole run's (the timeline and limit history of later invocations are
appended after the earlier ones, on one clock that counts only time spent running). The
previous document is read when the run starts; one written by a version without
`invocations` counts as one invocation. An invocation killed before it wrote statistics.json
is missing from these sums (its prompts are in the data, its figures were never written).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agent.store.jsonl import json_int
from agent.store.timeline import TIMELINE_POINTS

_SPLIT = ("processed", "completed", "partial", "discarded", "failed", "api_calls")
_TOKENS = ("prompt", "completion", "reasoning", "total")
ENDPOINT = ("calls", "rate_limited", "server_errors", "timeouts", "connection_errors")
_PEAKS = ("peak_inflight", "workers")
_CUMULATIVE = ("finished", "failed", "tokens", "rate_limited", "server_errors")  # timeline columns


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _seconds(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def invocation_record(doc: Mapping[str, Any], *, ran: bool = True) -> dict[str, Any]:
    """One invocation's figures, from the statistics.json it wrote (before `with_history`)."""
    run, limiting = _mapping(doc.get("this_invocation")), _mapping(doc.get("rate_limiting"))
    cost = _mapping(doc.get("cost")).get("this_invocation_usd")
    return {
        "completed_at": doc.get("completed_at"),
        "duration_seconds": round(_seconds(doc.get("duration_seconds")), 2),
        "ran_prompts": ran,
        **{key: json_int(run.get(key)) for key in _SPLIT},
        "outcomes": dict(_mapping(run.get("outcomes"))),
        "tokens": {
            k: json_int(_mapping(_mapping(doc.get("tokens")).get("this_invocation")).get(k)) for k in _TOKENS
        },
        "cost_usd": cost if isinstance(cost, int | float) and not isinstance(cost, bool) else None,
        "discarded_per_reason": dict(_mapping(doc.get("discarded"))),
        "failures": dict(_mapping(doc.get("failures"))),
        "endpoint": {key: json_int(limiting.get(key)) for key in (*ENDPOINT, *_PEAKS)},
        "endpoint_partial": bool(limiting.get("partial")),
    }


def previous_invocations(previous: Any) -> list[dict[str, Any]]:
    """The invocation records of the statistics.json found when the run started."""
    previous = _mapping(previous)
    listed = previous.get("invocations")
    if isinstance(listed, list):
        return [dict(item) for item in listed if isinstance(item, Mapping)]
    return [invocation_record(previous)] if "this_invocation" in previous else []


def whole_run(invocations: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The sums of the invocations' records (duration: those that ran prompts)."""
    total: dict[str, Any] = {"invocations": len(invocations)}
    total.update({key: sum(json_int(i.get(key)) for i in invocations) for key in _SPLIT})
    duration = sum(_seconds(i.get("duration_seconds")) for i in invocations if i.get("ran_prompts", True))
    total["duration_seconds"] = round(duration, 2)
    total["prompts_per_second"] = round(total["processed"] / duration, 3) if duration > 0 else 0.0
    total["outcomes"] = _sum_counts(i.get("outcomes") for i in invocations)
    total["tokens"] = {
        k: sum(json_int(_mapping(i.get("tokens")).get(k)) for i in invocations) for k in _TOKENS
    }
    costs = [i["cost_usd"] for i in invocations if isinstance(i.get("cost_usd"), int | float)]
    total["cost_usd"] = round(sum(costs), 6) if costs else None
    total["discarded_per_reason"] = _sum_counts(i.get("discarded_per_reason") for i in invocations)
    total["failures"] = _sum_counts(i.get("failures") for i in invocations)
    endpoints = [_mapping(i.get("endpoint")) for i in invocations]
    total["endpoint"] = {key: sum(json_int(e.get(key)) for e in endpoints) for key in ENDPOINT}
    for key in _PEAKS:  # the largest of any invocation, not a sum
        total["endpoint"][key] = max((json_int(e.get(key)) for e in endpoints), default=0)
    total["endpoint_partial"] = any(i.get("endpoint_partial") for i in invocations)
    return total


def _sum_counts(counts: Any) -> dict[str, int]:
    total: Counter[str] = Counter()
    for mapping in counts:
        total.update({str(k): json_int(v) for k, v in _mapping(mapping).items()})
    return dict(sorted(total.items()))


def with_history(doc: dict[str, Any], previous: Any, *, ran: bool) -> dict[str, Any]:
    """`doc` (this invocation's document) made the whole run's: `invocations`, `whole_run`,
    and duration, endpoint counters, limit history and timeline over every invocation."""
    earlier = previous_invocations(previous)
    invocations = [*earlier, invocation_record(doc, ran=ran)]
    total = whole_run(invocations)
    offset = whole_run(earlier)["duration_seconds"]
    before = _mapping(previous)
    doc["invocations"] = invocations
    doc["whole_run"] = total
    doc["this_invocation"] = {
        **_mapping(doc.get("this_invocation")),
        "duration_seconds": doc["duration_seconds"],
    }
    doc["duration_seconds"] = total["duration_seconds"]
    doc["tokens"] = {**_mapping(doc.get("tokens")), "whole_run": total["tokens"]}
    doc["cost"] = {**_mapping(doc.get("cost")), "whole_run_usd": total["cost_usd"]}
    limiting, limited_before = dict(_mapping(doc.get("rate_limiting"))), _mapping(before.get("rate_limiting"))
    history = _shifted(limited_before.get("limit_history"), limiting.get("limit_history"), offset)
    run_limit = limit_range([limited_before.get("run_limit"), limiting.get("run_limit")])
    doc["rate_limiting"] = {**limiting, **total["endpoint"], "limit_history": history, "run_limit": run_limit}
    doc["rate_limiting"]["partial"] = total["endpoint_partial"]
    doc["timeline"] = join_timelines(before.get("timeline"), _mapping(doc.get("timeline")), offset)
    return doc


def limit_range(ranges: Iterable[Any]) -> list[float] | None:
    """The lowest and highest of the run's in-flight limit over `[low, high]` pairs (workers'
    or invocations'; anything else, or a 0 that saw no limit, is left out), None when none is
    left."""
    seen = [
        (float(pair[0]), float(pair[1]))
        for pair in ranges
        if isinstance(pair, list | tuple)
        and len(pair) == 2
        and all(isinstance(v, int | float) and not isinstance(v, bool) and v > 0 for v in pair)
    ]
    return [min(low for low, _ in seen), max(high for _, high in seen)] if seen else None


def _shifted(earlier: Any, later: Any, offset: float) -> list[Any]:
    """Two `[seconds, value]` series on one clock: the later shifted by `offset`."""
    first = [p for p in earlier or [] if isinstance(p, list) and len(p) == 2]
    second = [
        [round(_seconds(p[0]) + offset, 3), p[1]] for p in later or [] if isinstance(p, list) and len(p) == 2
    ]
    return first + second


def join_timelines(earlier: Any, later: Mapping[str, Any], offset: float) -> dict[str, Any]:
    """The earlier invocations' timeline, then this one's: seconds shifted by `offset`, the
    cumulative columns by the earlier last values; thinned evenly to `TIMELINE_POINTS`."""
    earlier = _mapping(earlier)
    columns = list(later.get("columns") or earlier.get("columns") or [])
    old = [p for p in earlier.get("points") or [] if isinstance(p, list) and len(p) == len(columns)]
    if list(earlier.get("columns") or columns) != columns:
        old = []  # another version's columns: not on this clock
    base = {name: (old[-1][i] if old else 0.0) for i, name in enumerate(columns) if name in _CUMULATIVE}
    base["seconds"] = offset
    new = [
        [round(value + base.get(name, 0.0), 3) for name, value in zip(columns, p, strict=True)]
        for p in later.get("points") or []
    ]
    points = old + new
    while len(points) > TIMELINE_POINTS:
        points = points[::2] + ([points[-1]] if len(points) % 2 == 0 else [])
    return {"columns": columns, "points": points}
