"""The run's tool counts: each entry's `tool_stats` summed per tool (`statistics.json`'s
`tool_statistics`), with success and failure rates over the answered calls.

A tool whose entries count `nonzero_exit` (terminal: the command ran and exited non-zero, a
success of the tool) keeps the sum apart, also when it is 0; other tools have no such key.

The model chooses tool names (an invented one counts too, `tool_not_offered`), so what is
keyed by them is bounded: a name is cut at NAME_CAP characters when counted, and a document
lists the TOOL_ROWS most called by name, the rest summed in one `other` row (`top_rows`).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

ToolRows = dict[str, Counter[str]]
NAME_CAP = 200  # characters kept of a tool name: the model chooses it, any length
TOOL_ROWS = 50  # tools listed by name in statistics.json (the registry has fewer)


def cut_name(value: Any) -> str:
    """A model-chosen name as stored: cut at NAME_CAP, with a marker of what was cut."""
    text = str(value)
    return text if len(text) <= NAME_CAP else f"{text[:NAME_CAP]}… [{len(text) - NAME_CAP:,} characters cut]"


def top_rows(rows: ToolRows, limit: int) -> tuple[list[tuple[str, Counter[str]]], Counter[str]]:
    """The `limit` most called tools (name breaks ties) and the sum of the rest, whose
    `tools` says how many they are (an empty Counter when none is left)."""
    ordered = sorted(rows.items(), key=lambda item: (-item[1]["count"], item[0]))
    other: Counter[str] = Counter()
    for _, row in ordered[limit:]:
        other.update(row)
        other["tools"] += 1
    return ordered[:limit], other


def percent(part: int, whole: int) -> float:
    return round(100.0 * part / whole, 2) if whole else 0.0


# The row of a tool the entry did not call, as entries hold it (`tool_stats` lists every tool
# of the registry, ~20 rows of which one or two are called): compared whole, in C, and skipped.
NOT_CALLED: dict[str, int] = {"count": 0, "success": 0, "failure": 0}
NOT_CALLED_EXIT: dict[str, int] = {**NOT_CALLED, "nonzero_exit": 0}  # terminal's


def not_called(counts: Any) -> bool:
    """Whether `counts` adds nothing (every count 0, `False` or `0.0` included, as both counts
    skip those) but, for terminal, the `nonzero_exit` key."""
    return counts in (NOT_CALLED, NOT_CALLED_EXIT)


def add_tool_stats(tools: ToolRows, stats: dict[Any, Any]) -> None:
    """Add one entry's `tool_stats` (parsed JSON: `type(v) is int` excludes bools)."""
    for tool, counts in stats.items():
        row = tools.get(tool)
        if row is None:
            row = tools.setdefault(cut_name(tool), Counter())
        if not_called(counts):
            if type(counts.get("nonzero_exit")) is int and "nonzero_exit" not in row:
                row["nonzero_exit"] = 0  # kept apart also when it is 0
            continue
        if isinstance(counts, dict):
            for key in ("count", "success", "failure"):
                value = counts.get(key)
                if type(value) is int and value:
                    row[key] += value
            exited = counts.get("nonzero_exit")
            if type(exited) is int:
                row["nonzero_exit"] += exited


def _row(c: Counter[str]) -> dict[str, int | float]:
    return {
        "count": c["count"],
        "success": c["success"],
        "failure": c["failure"],
        "success_rate": percent(c["success"], c["success"] + c["failure"]),
        "failure_rate": percent(c["failure"], c["success"] + c["failure"]),
        **({"nonzero_exit": c["nonzero_exit"]} if "nonzero_exit" in c else {}),
    }


def tool_statistics(tools: ToolRows, limit: int = TOOL_ROWS) -> dict[str, dict[str, int | float]]:
    """Per tool, most called first, the `limit` most called: counts, rates and (terminal)
    `nonzero_exit`."""
    return {tool: _row(c) for tool, c in top_rows(tools, limit)[0]}


def other_tools(tools: ToolRows, limit: int = TOOL_ROWS) -> dict[str, int | float]:
    """The tools `tool_statistics` leaves out, summed: `tools` (how many), counts and rates;
    so the rows and this one add up to every call of the run."""
    other = top_rows(tools, limit)[1]
    return {"tools": other["tools"], **_row(other)}
