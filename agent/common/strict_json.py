"""JSON as the standard defines it: Python's reader also takes NaN, Infinity and numbers that
overflow to infinity, which strict readers (and our own writers, `allow_nan=False`) refuse, so a
value read that way fails only later, when it is written or sent."""

from __future__ import annotations

import json
import math
from typing import Any


class NonStandardJSON(ValueError):
    """The text holds a value standard JSON has not: its message names it."""


def _reject_constant(name: str) -> Any:
    raise NonStandardJSON(name)


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise NonStandardJSON(f"{text} (out of range)")
    return value


_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite)


def strict_loads(text: str) -> Any:
    """`json.loads`, refusing NaN, Infinity and floats out of range (NonStandardJSON)."""
    return _DECODER.decode(text)
