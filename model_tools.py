"""The static tool registry: every tool's spec, which toolset it belongs to, which tools a run
offers the model, and dispatching one call to its handler.

`ALL_TOOLS` and `TOOL_TO_TOOLSET_MAP` are the same on every machine (tools without a backend
are declared too, and simply never offered), so trajectories written anywhere share one
`tool_stats` schema and merge cleanly. Dispatch never renames a near-miss tool name: an
unknown name is an error the model sees. Argument problems and handler failures also
become tool results (`{"error": ...}`), never exceptions.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import toolsets
from agent.protocols import JSON, Sandbox, ToolSpec
from agent.sandboxes import to_the_end
from agent.unicode_text import encodable
from tools import browser, files, image_gen, moa, terminal, vision, web

log = logging.getLogger(__name__)

_FAMILIES = (web, vision, image_gen, terminal, files, moa, browser)


def _collect() -> dict[str, ToolSpec]:
    """Every declared tool by name (sorted), checked against the toolset table."""
    specs: dict[str, ToolSpec] = {}
    for family in _FAMILIES:
        for spec in family.TOOLS:
            if spec.name in specs or spec.schema.get("name") != spec.name:
                raise RuntimeError(f"{family.__name__}: tool {spec.name!r} is duplicated or misnamed")
            specs[spec.name] = spec
    for name, toolset in toolsets.TOOLSETS.items():
        declared = {spec.name for spec in specs.values() if spec.toolset == name}
        if declared != set(toolset.tools):
            raise RuntimeError(f"toolset {name!r} lists {toolset.tools}, modules declare {sorted(declared)}")
    return dict(sorted(specs.items()))


ALL_TOOLS: dict[str, ToolSpec] = _collect()
TOOL_TO_TOOLSET_MAP: dict[str, str] = {name: spec.toolset for name, spec in ALL_TOOLS.items()}

# ---------------------------------------------------------------- which tools a run offers


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


def unavailable_reason(spec: ToolSpec) -> str | None:
    """Why `spec` cannot run on this machine, None when it can."""
    reason = spec.available()
    if spec.handler is None:
        return reason or "no handler is implemented"
    return reason


def _report(spec: ToolSpec, reason: str) -> None:
    if spec.name in _reported:
        return
    _reported.add(spec.name)
    # A declared-only tool is unavailable by design; a real tool missing its backend is news.
    level = logging.INFO if spec.handler is None else logging.WARNING
    log.log(level, "tool %s not offered: %s", spec.name, reason)


def _expand(names: Iterable[str]) -> list[str]:
    """Toolset names with `all` expanded, de-duplicated; unknown names raise ConfigError."""
    if isinstance(names, str):  # one name, not its characters
        names = [names]
    out: list[str] = []
    for name in names:
        toolsets.resolve_toolset(name)  # raises ConfigError for an unknown name
        for toolset in toolsets.TOOLSETS if name == toolsets.ALL else (name,):
            if toolset not in out:
                out.append(toolset)
    return out


def resolve_tools(
    enabled_toolsets: Iterable[str] | None, disabled_toolsets: Iterable[str] | None = None
) -> ResolvedTools:
    """The tools offered for these toolsets (None: all), minus the disabled ones."""
    disabled = set(_expand(disabled_toolsets or ()))
    wanted = [toolsets.ALL] if enabled_toolsets is None else enabled_toolsets
    enabled = [t for t in _expand(wanted) if t not in disabled]
    specs: list[ToolSpec] = []
    unavailable: dict[str, str] = {}
    for name in sorted({tool for toolset in enabled for tool in toolsets.TOOLSETS[toolset].tools}):
        spec = ALL_TOOLS[name]
        reason = unavailable_reason(spec)
        if reason is None:
            specs.append(spec)
        else:
            unavailable[name] = reason
            _report(spec, reason)
    return ResolvedTools(
        specs=tuple(specs),
        definitions=[{"type": "function", "function": copy.deepcopy(spec.schema)} for spec in specs],
        toolsets_used=[t for t in enabled if any(spec.toolset == t for spec in specs)],
        unavailable=unavailable,
    )


def get_tool_definitions(
    enabled_toolsets: Iterable[str] | None, disabled_toolsets: Iterable[str] | None = None
) -> list[dict[str, Any]]:
    return resolve_tools(enabled_toolsets, disabled_toolsets).definitions


def toolset_availability() -> dict[str, str | None]:
    """Per toolset: None when at least one of its tools runs here, else why none does."""
    out: dict[str, str | None] = {}
    for name, toolset in toolsets.TOOLSETS.items():
        reasons = [unavailable_reason(ALL_TOOLS[tool]) for tool in toolset.tools]
        out[name] = None if None in reasons else "; ".join(dict.fromkeys(r for r in reasons if r))
    return out


# ---------------------------------------------------------------- argument validation

_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


def _json_type(value: Any) -> str:
    for name, types in _TYPES.items():
        if isinstance(value, types) and not (isinstance(value, bool) and name in ("integer", "number")):
            return name
    return type(value).__name__


def _check(where: str, value: Any, schema: Mapping[str, Any]) -> str | None:
    """The first problem with `value` against a property schema (type, enum, array items)."""
    expected = schema.get("type")
    if expected is not None:
        allowed = expected if isinstance(expected, list) else [expected]
        actual = _json_type(value)
        if actual not in allowed and not (actual == "integer" and "number" in allowed):
            return f"field '{where}' must be {' or '.join(allowed)}, got {actual}"
    if "enum" in schema and value not in schema["enum"]:
        choices = ", ".join(map(json.dumps, schema["enum"]))
        return f"field '{where}' must be one of {choices}, got {json.dumps(value)}"
    items = schema.get("items")
    if isinstance(value, list) and isinstance(items, Mapping):
        return next((p for i, v in enumerate(value) if (p := _check(f"{where}[{i}]", v, items))), None)
    return None


def validate_arguments(args: Mapping[str, Any], parameters: Mapping[str, Any]) -> list[str]:
    """Problems with `args` against a function's `parameters` schema: missing required
    fields, wrong types, values outside an enum, unexpected fields when
    `additionalProperties` is false. Top-level fields, plus array item types."""
    properties: Mapping[str, Any] = parameters.get("properties") or {}
    problems = [f"missing required field '{f}'" for f in parameters.get("required") or () if f not in args]
    for key, value in args.items():
        if key in properties:
            problem = _check(key, value, properties[key])
            if problem:
                problems.append(problem)
        elif parameters.get("additionalProperties") is False:
            problems.append(f"unexpected field '{key}' (allowed: {', '.join(properties) or 'none'})")
    return problems


# ---------------------------------------------------------------- dispatch


def _error(message: str) -> str:
    return encodable(json.dumps({"error": message}, ensure_ascii=False))  # may quote what a tool read


def unknown_tool_result(name: str, allowed: Mapping[str, ToolSpec]) -> str:
    """The tool result for a call to a tool that is not offered (no fuzzy renaming)."""
    return _error(f"Unknown tool '{name}'. Available tools: {', '.join(sorted(allowed)) or 'none'}")


def _parse_arguments(name: str, raw: str) -> dict[str, Any] | str:
    """The argument object, or the problem with it as a message for the model."""
    if not raw.strip():
        return {}  # some providers send "" for a call without arguments
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        return f"Arguments for '{name}' are not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
    if not isinstance(value, dict):
        return f"Arguments for '{name}' must be a JSON object, got {_json_type(value)}"
    return value


def _drop_null_optionals(args: dict[str, Any], parameters: Mapping[str, Any]) -> dict[str, Any]:
    """Models often send `null` for an optional field they mean to omit: treat it as omitted."""
    required = set(parameters.get("required") or ())
    return {k: v for k, v in args.items() if v is not None or k in required}


def handle_function_call(
    name: str, raw_arguments: str, sandbox: Sandbox, allowed: Mapping[str, ToolSpec]
) -> str:
    """Run one tool call; returns the tool message content (errors as `{"error": ...}`)."""
    prepared = _prepare(name, raw_arguments, allowed)
    if isinstance(prepared, str):
        return prepared
    spec, args = prepared
    assert spec.handler is not None  # _prepare checked
    try:
        return _content(spec.handler(args, sandbox))
    except Exception as exc:  # any handler failure is a tool result the model reads
        log.debug("tool %s raised", name, exc_info=True)
        return _error(f"Tool '{name}' failed: {type(exc).__name__}: {exc}")


async def ahandle_function_call(
    name: str, raw_arguments: str, sandbox: Sandbox, allowed: Mapping[str, ToolSpec]
) -> str:
    """`handle_function_call` from the event loop: a tool's `async_handler` runs on the loop,
    a tool without one runs in a thread."""
    spec = allowed.get(name)
    if spec is None or spec.async_handler is None:
        # Awaited to the end even when cancelled: the sandbox closes as a cancellation unwinds.
        work = asyncio.to_thread(handle_function_call, name, raw_arguments, sandbox, allowed)
        return await to_the_end(asyncio.ensure_future(work))
    prepared = _prepare(name, raw_arguments, allowed)
    if isinstance(prepared, str):
        return prepared
    try:
        return _content(await spec.async_handler(prepared[1], sandbox))
    except Exception as exc:  # any handler failure is a tool result the model reads
        log.debug("tool %s raised", name, exc_info=True)
        return _error(f"Tool '{name}' failed: {type(exc).__name__}: {exc}")


def _prepare(
    name: str, raw_arguments: str, allowed: Mapping[str, ToolSpec]
) -> tuple[ToolSpec, dict[str, Any]] | str:
    """The tool and its checked arguments, or the tool result that says what is wrong."""
    spec = allowed.get(name)
    if spec is None:
        return unknown_tool_result(name, allowed)
    if spec.handler is None:
        return _error(f"Tool '{name}' is not available: {unavailable_reason(spec)}")
    parsed = _parse_arguments(name, raw_arguments)
    if isinstance(parsed, str):
        return _error(parsed)
    parameters: Mapping[str, Any] = spec.schema.get("parameters") or {}
    args = _drop_null_optionals(parsed, parameters)
    problems = validate_arguments(args, parameters)
    if problems:
        return _error(f"Invalid arguments for '{name}': {'; '.join(problems)}")
    return spec, args


def _content(result: JSON) -> str:
    """The tool message, valid UTF-8 whatever the tool read (a diff of a Latin-1 file holds
    surrogateescape characters)."""
    return encodable(result if isinstance(result, str) else json.dumps(result, ensure_ascii=False))
