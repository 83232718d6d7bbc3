"""A toolset distribution as a run carries it: the built-in table (`agent.toolbox.distributions`)
and `--distributions_file`'s entries, which `RunConfig.distributions` holds as loaded (and
`run_config.json` records, so a resume samples the same without the file)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Distribution:
    description: str
    toolsets: Mapping[str, float]  # toolset -> inclusion probability in percent, in drawing order
