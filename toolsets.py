"""The reference's toolset API for scripts: toolsets (declared by the `tools/` families) and
distributions, re-exported from `agent.toolbox` (where they live, so `agent/` never imports
this file)."""

from __future__ import annotations

from agent.protocols import Toolset
from agent.toolbox.distributions import (
    DISTRIBUTIONS,
    Distribution,
    format_distributions,
    get_distribution,
    sample_toolsets_from_distribution,
)
from agent.toolbox.registry import ALL, TOOLSETS, resolve_toolset

__all__ = [
    "ALL",
    "DISTRIBUTIONS",
    "TOOLSETS",
    "Distribution",
    "Toolset",
    "format_distributions",
    "get_distribution",
    "resolve_toolset",
    "sample_toolsets_from_distribution",
]
