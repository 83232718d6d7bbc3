"""The trajectory formats, by name, and rendering one conversation through one of them.

Inside a worker the conversation's typed turns (`agent.protocols.turns`) are the canonical
form; a format renders them as the fields it contributes to a trajectory entry (ShareGPT: its
`conversations`), the output edge. `render` analyses the turns once (`agent.export.analysis`)
and hands the analysis to the format, so reasoning and tool statistics are never computed twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from agent.errors import ConfigError
from agent.export import openai_messages, sharegpt
from agent.export.analysis import Analysis, analyse, tool_names
from agent.protocols.turns import Turn

DEFAULT_FORMAT = "sharegpt"


class TrajectoryFormat(Protocol):
    """A trajectory format: the entry fields it renders from a conversation's analysed turns."""

    @property
    def name(self) -> str: ...

    def render(
        self, turns: Sequence[Turn], tool_schemas: Sequence[Mapping[str, Any]], analysis: Analysis
    ) -> Mapping[str, object]: ...


FORMATS: dict[str, TrajectoryFormat] = {fmt.name: fmt for fmt in (sharegpt.FORMAT, openai_messages.FORMAT)}


def get_format(name: str) -> TrajectoryFormat:
    try:
        return FORMATS[name]
    except KeyError:
        raise ConfigError(
            f"unknown trajectory format {name!r}; valid: {', '.join(sorted(FORMATS))}"
        ) from None


@dataclass(frozen=True)
class Rendered:
    """A conversation in one format (`fields`), with the analysis its entry's statistics come from."""

    fields: Mapping[str, object]  # the entry's fields, as JSON values
    analysis: Analysis


def render(
    turns: Sequence[Turn],
    tool_schemas: Sequence[Mapping[str, Any]],
    *,
    all_tools: Iterable[str] = (),
    format_name: str = DEFAULT_FORMAT,
) -> Rendered:
    """`turns` in the format named `format_name`; `all_tools` as for `count_tools`. The
    analysis checks every call against the tools of `tool_schemas` (what was offered)."""
    fmt = get_format(format_name)
    analysis = analyse(turns, all_tools, offered=tool_names(tool_schemas))
    return Rendered(fmt.render(turns, tool_schemas, analysis), analysis)
