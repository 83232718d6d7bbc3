"""Checking a tool call's arguments against its JSON schema, before any handler runs: what is
wrong becomes a message the model reads, never an exception."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


def json_type(value: Any) -> str:
    for name, types in _TYPES.items():
        if isinstance(value, types) and not (isinstance(value, bool) and name in ("integer", "number")):
            return name
    return type(value).__name__


def _check(where: str, value: Any, schema: Mapping[str, Any]) -> str | None:
    """The first problem with `value` against a property schema (type, enum, array items)."""
    expected = schema.get("type")
    if expected is not None:
        allowed = expected if isinstance(expected, list) else [expected]
        actual = json_type(value)
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


def parse_arguments(name: str, raw: str) -> dict[str, Any] | str:
    """The argument object, or the problem with it as a message for the model."""
    if not raw.strip():
        return {}  # some providers send "" for a call without arguments
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        return f"Arguments for '{name}' are not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
    if not isinstance(value, dict):
        return f"Arguments for '{name}' must be a JSON object, got {json_type(value)}"
    return value


def drop_null_optionals(args: dict[str, Any], parameters: Mapping[str, Any]) -> dict[str, Any]:
    """Models often send `null` for an optional field they mean to omit: treat it as omitted."""
    required = set(parameters.get("required") or ())
    return {k: v for k, v in args.items() if v is not None or k in required}
