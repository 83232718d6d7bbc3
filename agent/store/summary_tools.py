"""The summary's tool table: the most called tools by name, then one row summing the rest,
so a run whose model invents thousands of tool names still prints a table of bounded length
whose rows add up to every call."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.table import Table
from rich.text import Text

from agent.store.jsonl import json_int
from agent.store.summary_lines import n as _n

SUMMARY_TOOLS = 30  # tools named in the summary's table; the model may invent any number


def tool_table(tools: Mapping[str, Mapping[str, Any]], other: Mapping[str, Any]) -> Table | Text:
    """The most called tools, then one row summing the rest (those statistics.json already
    summed in `tool_statistics_other` included), so the rows add up to every call."""
    used = [(name, row) for name, row in tools.items() if json_int(row.get("count"))]
    if not used and not json_int(other.get("count")):
        # no count of tools: with no entry in the output there are none, else those rows list
        # every tool of the registry, offered to the entries or not
        return Text("No tool calls.")
    table = Table(title="Tool usage", title_justify="left")
    table.add_column("Tool")
    for heading in ("Calls", "Success", "Failure", "Success rate"):
        table.add_column(heading, justify="right")
    for name, row in used[:SUMMARY_TOOLS]:
        table.add_row(Text(name), *_tool_cells(row))
    rest = {key: json_int(other.get(key)) for key in ("tools", "count", "success", "failure")}
    for _, row in used[SUMMARY_TOOLS:]:
        rest["tools"] += 1
        for key in ("count", "success", "failure"):
            rest[key] += json_int(row.get(key))
    if rest["count"]:
        answered = rest["success"] + rest["failure"]
        rest_row = {**rest, "success_rate": 100.0 * rest["success"] / answered if answered else 0.0}
        table.add_row(Text(f"{_n(rest['tools'])} other tools"), *_tool_cells(rest_row))
    if len(tools) > len(used):
        unused = len(tools) - len(used)
        table.caption = f"{unused} tool{'s' if unused > 1 else ''} with no calls not shown"
    return table


def _tool_cells(row: Mapping[str, Any]) -> tuple[str, ...]:
    return (
        _n(row.get("count")),
        _n(row.get("success")),
        _n(row.get("failure")),
        f"{float(row.get('success_rate') or 0.0):.2f}%",
    )
