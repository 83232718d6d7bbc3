"""Distributions (per-toolset inclusion odds): a static table, the same on every machine
whatever is installed, sampling, and the `--list_distributions` text. The toolsets themselves
are declared by their `tools/` modules (see `agent.toolbox.registry`).

Sampling draws an independent Bernoulli per toolset (probabilities in percent, no
normalisation) from a caller-supplied `random.Random`, so a seeded run is reproducible.
A run's `--distributions_file` (`agent.toolbox.distribution_file`) adds to or overrides the
table: every function here takes those as `extra` (the run's `RunConfig.distributions`).
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from agent.config.distribution_config import Distribution as Distribution  # its home: RunConfig holds them
from agent.errors import ConfigError

Extra = Mapping[str, Distribution] | None  # a run's file distributions, over the built-in ones

__: int | None = None  # toolset not in the distribution
# name: (description, then the percent of each toolset in _COLUMNS order)
_TABLE: dict[str, tuple[str, *tuple[int | None, ...]]] = {
    #                                                                   web  vis  img  term file moa  browser
    "default": ("Every toolset, always",                                100, 100, 100, 100, 100, 100, 100),
    "image_gen": ("Image generation with vision, some web/terminal",    55,  90,  90,  45,  __,  10,  __),
    "research": ("Web research with browsing, vision and reasoning",    90,  50,  __,  10,  __,  40,  70),
    "science": ("Scientific problem solving: web, terminal, files",     94,  65,  15,  94,  94,  10,  50),
    "development": ("Software development: terminal, files, reasoning", 30,  10,  __,  80,  80,  60,  __),
    "safe": ("No terminal or file access",                              80,  60,  60,  __,  __,  50,  70),
    "balanced": ("Every toolset at even odds",                          50,  50,  50,  50,  50,  50,  50),
    "minimal": ("Web only",                                             100, __,  __,  __,  __,  __,  __),
    "terminal_only": ("Terminal and files only",                        __,  __,  __,  100, 100, __,  __),
    "terminal_web": ("Terminal and files plus web",                     100, __,  __,  100, 100, __,  __),
    "creative": ("Image generation and vision",                         30,  90,  90,  __,  __,  __,  __),
    "reasoning": ("Mixture-of-agents heavy reasoning",                  30,  __,  __,  20,  __,  90,  __),
    "browser_use": ("Browser with web and vision",                      80,  70,  __,  __,  __,  __,  100),
    "browser_only": ("Browser only",                                    __,  __,  __,  __,  __,  __,  100),
    "browser_tasks": ("Browser-focused tasks",                          __,  12,  __,  15,  __,  __,  97),
    "terminal_tasks": ("Terminal-focused tasks",                        97,  50,  10,  97,  97,  __,  75),
    "mixed_tasks": ("Mixed browser and terminal tasks",                 35,  15,  15,  92,  92,  __,  92),
}  # fmt: skip
_COLUMNS = ("web", "vision", "image_gen", "terminal", "file", "moa", "browser")

DISTRIBUTIONS: dict[str, Distribution] = {
    name: Distribution(row[0], {ts: p for ts, p in zip(_COLUMNS, row[1:], strict=True) if p is not None})
    for name, row in _TABLE.items()
}


def all_distributions(extra: Extra = None) -> dict[str, Distribution]:
    """The built-in table with `extra`'s entries added or put in place of a built-in one."""
    return {**DISTRIBUTIONS, **(extra or {})}


def get_distribution(name: str, extra: Extra = None) -> Distribution:
    table = all_distributions(extra)
    try:
        return table[name]
    except KeyError:
        valid = ", ".join(sorted(table))
        raise ConfigError(f"unknown distribution {name!r}; valid: {valid}") from None


def sample_toolsets_from_distribution(name: str, rng: random.Random, extra: Extra = None) -> list[str]:
    """Toolsets drawn for one prompt, in the distribution's order; never empty.

    Each toolset is drawn independently with its probability; when none is drawn, the most
    likely one is used (the first on ties)."""
    odds = get_distribution(name, extra).toolsets
    chosen = [toolset for toolset, percent in odds.items() if rng.random() * 100 < percent]
    if not chosen:
        best = max(odds.values())
        chosen = [next(toolset for toolset, percent in odds.items() if percent == best)]
    return chosen


def format_distributions(
    available_toolsets: Mapping[str, str | None],
    backends: Mapping[str, str] | None = None,
    extra: Extra = None,
    source: str | None = None,
) -> str:
    """The `--list_distributions` text: distributions by name, toolsets by probability.

    `available_toolsets` maps a toolset to why it cannot run on this machine (None when it
    can); unavailable toolsets are marked. `extra`'s distributions (from the file `source`) are
    listed among the built-in ones, each marked with its file. At the end, with `backends`
    (toolset -> what runs it, or why it cannot run), every toolset's backend; without, the
    unavailable ones' reasons."""

    def why(toolset: str) -> str | None:
        return available_toolsets.get(toolset, "availability unknown")

    table = all_distributions(extra)
    width = max(len(toolset) for dist in table.values() for toolset in [*dist.toolsets, *(backends or ())])
    lines = []
    for name in sorted(table):
        dist = table[name]
        usable = any(why(toolset) is None for toolset in dist.toolsets)
        lines.append(f"{name}: {dist.description}{_origin(name, extra, source)}")
        lines[-1] += "" if usable else "  [nothing usable here]"
        for toolset, percent in sorted(dist.toolsets.items(), key=lambda item: (-item[1], item[0])):
            mark = "" if why(toolset) is None else "  (unavailable)"
            lines.append(f"  {toolset:<{width}} {percent:>3g}%{mark}")
    if backends is not None:
        lines += ["", "Toolset backends with these settings:"]
        return "\n".join([*lines, *(f"  {t:<{width}} {backend}" for t, backend in backends.items())])
    missing = sorted({t for dist in table.values() for t in dist.toolsets if why(t) is not None})
    if missing:
        lines += ["", "Unavailable on this machine:", *(f"  {t}: {why(t)}" for t in missing)]
    return "\n".join(lines)


def _origin(name: str, extra: Extra, source: str | None) -> str:
    """`  [FILE]`, `  [FILE, in place of the built-in one]` for a file's distribution."""
    if not extra or name not in extra:
        return ""
    return f"  [{source or 'file'}{', in place of the built-in one' if name in DISTRIBUTIONS else ''}]"
