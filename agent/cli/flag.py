"""One flag of the command lines (`Flag`), the CLIs and help groups flags belong to, and where a
flag's default comes from (`default_of`: the field of the config it fills)."""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from typing import Any, Literal

Kind = Literal["str", "int", "float", "number", "bool", "list"]

BATCH = "batch_runner.py"
QUERY = "run_agent.py"
CLIS = (BATCH, QUERY)
BOTH = frozenset(CLIS)
BATCH_ONLY = frozenset({BATCH})
QUERY_ONLY = frozenset({QUERY})

GROUPS = (
    "Run",
    "Query",
    "Model endpoint",
    "Conversation",
    "Provider routing (OpenRouter)",
    "Workers and budgets",
    "Sandbox",
    "Tools",
    "Logging",
    "Samples and verification",
    "Export and the Hub",
)


@dataclass(frozen=True)
class Flag:
    """One flag. `shown` replaces the default in `--help` where the value alone says too little
    (None defaults, environment fallbacks). Floats are always positive and finite; a "number"
    is any finite decimal, its range checked by the config it fills (a temperature may be 0)."""

    name: str
    kind: Kind
    default: Any
    help: str
    group: str
    clis: frozenset[str] = BOTH
    required: bool = False
    minimum: float | None = None  # int and float flags
    maximum: float | None = None  # int and float flags: beyond it a value only breaks later
    choices: tuple[str, ...] = ()
    shown: str | None = None

    @property
    def shown_default(self) -> str:
        if self.shown is not None:
            return self.shown
        if self.kind == "bool":
            return "true" if self.default else "false"
        if isinstance(self.default, float) and self.default.is_integer():
            return str(int(self.default))
        return str(self.default)


def default_of(config: type, name: str) -> Any:
    """The default of field `name` of the dataclass `config`."""
    (found,) = (f for f in fields(config) if f.name == name)
    assert found.default is not MISSING, f"{config.__name__}.{name} has no plain default"
    return found.default
