"""The static tool registry, derived from the families' declarations (`tools.FAMILIES`): every
tool's spec, the toolset table, which toolset each tool belongs to, and which tools a run
offers the model.

`ALL_TOOLS`, `TOOLSETS` and `TOOL_TO_TOOLSET_MAP` are the same on every machine (tools without
a backend are declared too, and simply never offered), so trajectories written anywhere share
one `tool_stats` schema and merge cleanly.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from agent.errors import ConfigError
from agent.protocols import ToolConfig, Toolset, ToolSpec
from tools import FAMILIES

log = logging.getLogger(__name__)

ALL = "all"  # pseudo-toolset: every toolset
DEFAULT_TOOLS = ToolConfig()


def _collect(families: Iterable[Toolset]) -> tuple[dict[str, Toolset], dict[str, ToolSpec]]:
    """Toolsets by name (in family order) and tools by name (sorted), checked for clashes."""
    toolsets: dict[str, Toolset] = {}
    specs: dict[str, ToolSpec] = {}
    for family in families:
        if family.name in toolsets or family.name == ALL:
            raise RuntimeError(f"toolset {family.name!r} is declared twice (or named {ALL!r})")
        toolsets[family.name] = family
        for spec in family.tools:
            if spec.name in specs or spec.schema.get("name") != spec.name:
                raise RuntimeError(f"toolset {family.name}: tool {spec.name!r} is duplicated or misnamed")
            specs[spec.name] = spec
    return toolsets, dict(sorted(specs.items()))


TOOLSETS, ALL_TOOLS = _collect(FAMILIES)
TOOL_TO_TOOLSET_MAP: dict[str, str] = dict(
    sorted((spec.name, toolset.name) for toolset in TOOLSETS.values() for spec in toolset.tools)
)


def add_toolsets(toolsets: Iterable[Toolset]) -> None:
    """Register a run's own toolsets (`--tools_module`, `--mcp_config`) beside the built-in
    ones, in this process: the CLI edge before it checks anything, each worker before its
    first job (`agent.toolbox.extensions.install_extensions`). A name already taken, by a
    toolset or a tool, is a ConfigError; registering the same toolset again is a no-op."""
    new = [toolset for toolset in toolsets if TOOLSETS.get(toolset.name) is not toolset]
    try:
        merged_toolsets, merged_specs = _collect([*TOOLSETS.values(), *new])
    except RuntimeError as exc:
        raise ConfigError(
            f"--tools_module/--mcp_config: {exc}; names of toolsets and tools must be unique"
        ) from None
    TOOLSETS.update(merged_toolsets)  # in place: every importer holds these very dicts
    ALL_TOOLS.clear()
    ALL_TOOLS.update(merged_specs)
    TOOL_TO_TOOLSET_MAP.clear()
    TOOL_TO_TOOLSET_MAP.update(
        sorted((spec.name, toolset.name) for toolset in TOOLSETS.values() for spec in toolset.tools)
    )


@dataclass(frozen=True)
class ResolvedTools:
    specs: tuple[ToolSpec, ...]  # usable tools, by name
    definitions: list[dict[str, Any]]  # API tool definitions of `specs`
    toolsets_used: list[str]  # enabled toolsets with at least one usable tool
    unavailable: dict[str, str]  # enabled tool -> why it is not offered

    @property
    def allowed(self) -> dict[str, ToolSpec]:
        return {spec.name: spec for spec in self.specs}


_reported: set[str] = set()  # tools whose unavailability this process has logged


def unavailable_reason(spec: ToolSpec, config: ToolConfig) -> str | None:
    """Why `spec` cannot run on this machine with these settings, None when it can (also when
    its `available` raises: a user's module's function, said here, not a traceback at start)."""
    try:
        reason = spec.available(config)
    except Exception as exc:  # noqa: BLE001 - its failure is the reason it is not offered
        reason = f"its available() raised {type(exc).__name__}: {exc}"
    if spec.handler is None:
        return reason or "no handler is implemented"
    return reason


def _report(spec: ToolSpec, reason: str) -> None:
    if spec.name in _reported:
        return
    _reported.add(spec.name)
    # INFO: most tools need a key, flag or package, so most machines lack some of them; a batch
    # run whose distribution needs one stops before any token (check_ready) and says how to fix it.
    log.info("tool %s not offered: %s", spec.name, reason)


def resolve_toolset(name: str) -> list[str]:
    """The tools of a toolset (`all`: every tool, toolset by toolset)."""
    if name == ALL:
        return [tool for toolset in TOOLSETS.values() for tool in toolset.tool_names]
    try:
        return list(TOOLSETS[name].tool_names)
    except KeyError:
        valid = ", ".join([*sorted(TOOLSETS), ALL])
        raise ConfigError(
            f"unknown toolset {name!r}; valid: {valid} (a toolset of your own needs its --tools_module "
            "or --mcp_config again, also on --resume)"
        ) from None


def expand_toolsets(names: Iterable[str]) -> list[str]:
    """Toolset names with `all` expanded, de-duplicated; unknown names raise ConfigError."""
    if isinstance(names, str):  # one name, not its characters
        names = [names]
    out: list[str] = []
    for name in names:
        resolve_toolset(name)  # raises ConfigError for an unknown name
        for toolset in TOOLSETS if name == ALL else (name,):
            if toolset not in out:
                out.append(toolset)
    return out


def resolve_tools(
    enabled_toolsets: Iterable[str] | None,
    disabled_toolsets: Iterable[str] | None = None,
    config: ToolConfig = DEFAULT_TOOLS,
) -> ResolvedTools:
    """The tools offered for these toolsets (None: all), minus the disabled ones, with these
    settings."""
    disabled = set(expand_toolsets(disabled_toolsets or ()))
    wanted = [ALL] if enabled_toolsets is None else enabled_toolsets
    enabled = [t for t in expand_toolsets(wanted) if t not in disabled]
    specs: list[ToolSpec] = []
    unavailable: dict[str, str] = {}
    for name in sorted({tool for toolset in enabled for tool in TOOLSETS[toolset].tool_names}):
        spec = ALL_TOOLS[name]
        reason = unavailable_reason(spec, config)
        if reason is None:
            specs.append(spec)
        else:
            unavailable[name] = reason
            _report(spec, reason)
    return ResolvedTools(
        specs=tuple(specs),
        definitions=[{"type": "function", "function": copy.deepcopy(spec.schema)} for spec in specs],
        toolsets_used=[t for t in enabled if any(TOOL_TO_TOOLSET_MAP[spec.name] == t for spec in specs)],
        unavailable=unavailable,
    )


def toolset_availability(config: ToolConfig = DEFAULT_TOOLS) -> dict[str, str | None]:
    """Per toolset: None when at least one of its tools runs here, else why none does."""
    out: dict[str, str | None] = {}
    for name, toolset in TOOLSETS.items():
        reasons = [unavailable_reason(spec, config) for spec in toolset.tools]
        out[name] = None if None in reasons else "; ".join(dict.fromkeys(r for r in reasons if r))
    return out


def toolset_backends(config: ToolConfig = DEFAULT_TOOLS) -> dict[str, str]:
    """Per toolset, what runs its tools with these settings (its own `backend` description),
    or `unavailable: <why, and how to enable it>`."""
    out: dict[str, str] = {}
    for name, why in toolset_availability(config).items():
        describe = TOOLSETS[name].backend
        if why is not None:
            out[name] = f"unavailable: {why}"
        else:
            out[name] = _described(describe, config)
    return out


def _described(describe: Callable[[ToolConfig], str] | None, config: ToolConfig) -> str:
    """A toolset's `backend` text; one that raises (a user's module's function) says so."""
    if describe is None:
        return "available"
    try:
        return describe(config)
    except Exception as exc:  # noqa: BLE001 - shown in the listing instead of a traceback
        return f"its backend() raised {type(exc).__name__}: {exc}"


def unavailable_toolsets(names: Iterable[str], config: ToolConfig = DEFAULT_TOOLS) -> dict[str, str]:
    """The toolsets among `names` that cannot run with these settings, with why."""
    availability = toolset_availability(config)
    return {name: why for name in expand_toolsets(list(names)) if (why := availability[name]) is not None}
