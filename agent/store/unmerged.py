"""statistics.json of an invocation that merged nothing (interrupted): trajectories.jsonl is
as the last merge left it, so the figures that describe it are that merge's, carried from the
statistics.json read at the start (an earlier interrupted invocation carried them on too).
The counts this invocation made of the output were of lines it never wrote there: a 0 entries,
0 tokens and no tools beside a file of 5 entries. Where no earlier document describes an
existing file (statistics.json deleted, an older version's), the figures are null: unknown.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agent.store.layout import TRAJECTORIES_FILE

# the sections of statistics.json counted from the merged output (`RunStatistics.add_entry`)
OUTPUT_SECTIONS = (
    "tool_statistics",
    "tool_statistics_other",
    "reasoning_statistics",
    "trajectories",
    "outcomes",
    "toolsets",
    "verification",
)


def carry_output_figures(doc: dict[str, Any], previous: Any, run_dir: Path, *, merged: bool) -> None:
    """Unless this invocation `merged`, set `doc`'s merged-output figures to `previous`'s
    (None where it has none); no output file at all: its zeros stay, they are true."""
    if merged or not (run_dir / TRAJECTORIES_FILE).is_file():
        return
    before = previous if isinstance(previous, Mapping) else {}
    known = isinstance(before.get("trajectories"), Mapping)  # null: an earlier one did not know
    for key in OUTPUT_SECTIONS:
        if known and key in before:
            doc[key] = before[key]
        elif known:
            doc.pop(key, None)  # absent there too (`verification` of a run that verified nothing)
        else:
            doc[key] = None
    earlier_tokens, earlier_cost = _mapping(before.get("tokens")), _mapping(before.get("cost"))
    doc["tokens"]["merged_output"] = earlier_tokens.get("merged_output") if known else None
    doc["cost"]["merged_output_usd"] = earlier_cost.get("merged_output_usd") if known else None


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
