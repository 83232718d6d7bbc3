"""The run's tool counts: each entry's `tool_stats` summed per tool (`statistics.json`'s
`tool_statistics`), with success and failure rates over the answered calls.

A tool whose entries count `nonzero_exit` (terminal: the command ran and exited non-zero, a
success of the tool) keeps the sum apart, also when it is 0; other tools have no such key.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

ToolRows = dict[str, Counter[str]]


def percent(part: int, whole: int) -> float:
    return round(100.0 * part / whole, 2) if whole else 0.0


def add_tool_stats(tools: ToolRows, stats: dict[Any, Any]) -> None:
    """Add one entry's `tool_stats` (parsed JSON: `type(v) is int` excludes bools)."""
    for tool, counts in stats.items():
        row = tools.get(tool)
        if row is None:
            row = tools[str(tool)] = Counter()
        if isinstance(counts, dict):
            for key in ("count", "success", "failure"):
                value = counts.get(key)
                if type(value) is int and value:
                    row[key] += value
            exited = counts.get("nonzero_exit")
            if type(exited) is int:
                row["nonzero_exit"] += exited


def tool_statistics(tools: ToolRows) -> dict[str, dict[str, int | float]]:
    """Per tool, most called first: counts, rates and (terminal) `nonzero_exit`."""
    rows = sorted(tools.items(), key=lambda item: (-item[1]["count"], item[0]))
    return {
        tool: {
            "count": c["count"],
            "success": c["success"],
            "failure": c["failure"],
            "success_rate": percent(c["success"], c["success"] + c["failure"]),
            "failure_rate": percent(c["failure"], c["success"] + c["failure"]),
            **({"nonzero_exit": c["nonzero_exit"]} if "nonzero_exit" in c else {}),
        }
        for tool, c in rows
    }
