"""The report's plots, from a `RunDigest` and the `statistics.json` document: each function
gives an SVG, or None when the run has nothing to plot there (the page says so in words
rather than showing an empty frame).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from agent.report.digest import REPORT_TOOLS, RunDigest
from agent.report.svg import PALETTE, Part, Series, bar_chart, hbar_chart, line_chart, ticks
from agent.store.tool_counts import top_rows

BLUE, ORANGE, GREEN, RED, PURPLE, BROWN, TEAL, GREY = PALETTE
MAX_LINE_POINTS = 120  # rates are averaged over enough ticks to stay under this


def timeline_columns(stats: Mapping[str, Any]) -> dict[str, list[float]]:
    """The `timeline` of statistics.json by column ({} when the run recorded none)."""
    timeline = stats.get("timeline")
    if not isinstance(timeline, dict) or len(timeline.get("points") or []) < 1:
        return {}
    columns = list(timeline.get("columns") or [])
    return {name: [float(p[i]) for p in timeline["points"]] for i, name in enumerate(columns)}


def _rates(seconds: Sequence[float], counts: Sequence[float]) -> list[tuple[float, float]]:
    """Per-second rates of a cumulative count, each over enough ticks to keep the line readable."""
    step = max(1, math.ceil((len(seconds) - 1) / MAX_LINE_POINTS))
    rates = []
    for i in range(step, len(seconds), step):
        span = seconds[i] - seconds[i - step]
        if span > 0:
            rates.append((seconds[i], max(0.0, counts[i] - counts[i - step]) / span))
    return rates


def throughput(stats: Mapping[str, Any], digest: RunDigest) -> str | None:
    """Prompts/s over the run's time (the timeline: every invocation's running time, end to
    end), else over the entries' finish times."""
    columns = timeline_columns(stats)
    if len(columns.get("seconds", [])) >= 2:
        points = _rates(columns["seconds"], columns["finished"])
        x_label = "seconds of running (invocations end to end)"
    else:
        points, x_label = _rates_from_times(sorted(digest.times)), "seconds since the first entry finished"
    if not points:
        return None
    series = [Series("prompts/s", points, BLUE)]
    return line_chart("throughput", series, x_label=x_label, y_label="prompts/s")


def _rates_from_times(times: Sequence[float], bins: int = 60) -> list[tuple[float, float]]:
    if not times:
        return []
    start, width = times[0], max(1.0, (times[-1] - times[0]) / bins)  # at least a second per bin
    bins = min(bins, int((times[-1] - times[0]) / width) + 1)
    counts = [0] * bins
    for when in times:
        counts[min(bins - 1, int((when - start) / width))] += 1
    return [((i + 1) * width, count / width) for i, count in enumerate(counts)]


def in_flight(stats: Mapping[str, Any]) -> str | None:
    """Prompts and model calls in flight against the run's limit (`limit_history`: each change,
    where the timeline has one point a tick)."""
    columns = timeline_columns(stats)
    if not columns:
        return None
    seconds = columns["seconds"]
    series = [
        Series("prompts in flight", list(zip(seconds, columns["in_flight"], strict=True)), BLUE),
        Series("model calls in flight", list(zip(seconds, columns["calls_in_flight"], strict=True)), ORANGE),
        *_run_limit(stats),
    ]
    return line_chart("in_flight", series, x_label="seconds since the start", y_label="in flight")


def _run_limit(stats: Mapping[str, Any]) -> list[Series]:
    """The run's in-flight limit over time as one step series (none when not recorded)."""
    limiting = stats.get("rate_limiting") or {}
    history = [(float(t), float(limit)) for t, limit in limiting.get("limit_history") or []]
    end = float(stats.get("duration_seconds") or 0.0)
    if history and end > history[-1][0]:
        history.append((end, history[-1][1]))  # the last limit held until the run ended
    return [Series("the run's in-flight limit", history, GREY, step=True)] if history else []


def rate_limits(stats: Mapping[str, Any]) -> str | None:
    """The limiter's limit over time, with 429s and 5xx per second when the timeline has them."""
    series = _run_limit(stats)
    columns = timeline_columns(stats)
    if len(columns.get("seconds", [])) >= 2:
        series.append(Series("429 per s", _rates(columns["seconds"], columns["rate_limited"]), RED))
        series.append(Series("5xx per s", _rates(columns["seconds"], columns["server_errors"]), PURPLE))
    if not any(s.points for s in series):
        return None
    return line_chart("rate_limits", series, x_label="seconds since the start", y_label="limit · errors/s")


def tools(digest: RunDigest) -> str | None:
    """The REPORT_TOOLS most called tools and one bar for the rest (the model may invent any
    number of names)."""
    rows, other = top_rows(digest.tools, REPORT_TOOLS)
    if other["tools"]:
        rows.append((f"{other['tools']:,} other tools", other))
    bars = [
        (
            name,
            [
                Part(row["success"], GREEN, f"{row['success']:,} succeeded"),
                Part(row["failure"], RED, f"{row['failure']:,} failed"),
            ],
        )
        for name, row in rows
    ]
    return hbar_chart("tools", bars, label="tool calls per tool") if bars else None


def histogram(values: Sequence[int], bins: int = 24) -> list[tuple[str, float]]:
    """Counts per bin: one bin per value when they are few, else round-width ranges."""
    if not values:
        return []
    low, high = min(values), max(values)
    if high - low < bins:
        counts = [0] * (high - low + 1)
        for value in values:
            counts[value - low] += 1
        return [(str(low + i), float(c)) for i, c in enumerate(counts)]
    width = int(ticks(high - low, bins)[1])
    start = low // width * width
    counts = [0] * ((high - start) // width + 1)
    for value in values:
        counts[(value - start) // width] += 1
    return [
        (f"{start + i * width:,}–{start + (i + 1) * width - 1:,}", float(c)) for i, c in enumerate(counts)
    ]


def turns(digest: RunDigest) -> str | None:
    bars = histogram(digest.turns)
    return (
        bar_chart("turns", bars, x_label="assistant turns per entry", y_label="entries", color=BLUE)
        if bars
        else None
    )


def tokens(digest: RunDigest) -> str | None:
    bars = histogram(digest.tokens)
    label = "tokens per entry (all calls)"
    return bar_chart("tokens", bars, x_label=label, y_label="entries", color=TEAL) if bars else None


def reasoning(digest: RunDigest) -> str | None:
    r = digest.reasoning
    rows = [
        ("entries: every turn", [Part(r["entries_all"], GREEN, f"{r['entries_all']:,} entries")]),
        ("entries: some turns", [Part(r["entries_some"], ORANGE, f"{r['entries_some']:,} entries")]),
        ("entries: no turn", [Part(r["entries_none"], RED, f"{r['entries_none']:,} entries")]),
    ]
    return hbar_chart("reasoning", rows, label="entries by reasoning coverage") if digest.entries else None


def outcomes(digest: RunDigest) -> str | None:
    colors = {"completed": GREEN, "truncated": ORANGE, "max_iterations": BROWN, "gave_up": PURPLE}
    rows = [
        (name, [Part(n, colors.get(name, BLUE), f"{n:,} in the output")])
        for name, n in digest.outcomes.most_common()
    ]
    rows += [
        (f"discarded: {r}", [Part(n, GREY, f"{n:,} discarded")]) for r, n in digest.discards.most_common()
    ]
    rows += [
        (f"failed: {c}", [Part(n, RED, f"{n:,} not done since (failures.jsonl)")])
        for c, n in digest.still_failed().most_common()
    ]
    return hbar_chart("outcomes", rows, label="prompts by outcome") if rows else None


def _verification(stats: Mapping[str, Any]) -> Mapping[str, Any]:
    section = stats.get("verification")
    return section if isinstance(section, Mapping) else {}


def rewards(stats: Mapping[str, Any]) -> str | None:
    """The attempts' rewards in statistics.json's bins (output and discarded alike)."""
    histogram = _verification(stats).get("reward_histogram") or {}
    counts = [float(c) for c in histogram.get("counts") or []]
    if not any(counts):
        return None
    width = 1.0 / len(counts)
    bars = [(f"{i * width:.1f}–{(i + 1) * width:.1f}", c) for i, c in enumerate(counts)]
    return bar_chart("rewards", bars, x_label="reward", y_label="attempts", color=GREEN)


def pass_at_k(stats: Mapping[str, Any]) -> str | None:
    """pass@k for each k of statistics.json (the unbiased estimator), in percent."""
    rates = _verification(stats).get("pass_at_k") or {}
    points = sorted((float(k), 100.0 * float(v)) for k, v in rates.items())
    if not points:
        return None
    series = [Series("pass@k", points, GREEN)]
    return line_chart("pass_at_k", series, x_label="k (samples drawn per prompt)", y_label="% of prompts")
