"""Flag text to typed values, checked against the flag table (agent.cli.flags).

Every value arrives as the text the operator typed (the Fire edge asks Fire for no type
inference), so `--run_name=2024` stays "2024" and `--query=yes, no` stays a sentence. Each
problem is one ConfigError naming the flag: an unknown name (with the nearest valid one), a
value of the wrong type, a choice or minimum not met, a required flag missing.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from agent.cli.flags import BY_NAME, FLAGS, Flag, flags_of
from agent.config.agent_config import check_choice
from agent.errors import ConfigError

TRUE = frozenset({"true", "1", "yes"})
FALSE = frozenset({"false", "0", "no"})


def unknown_flag_message(cli: str, spelled: str, name: str) -> str:
    """One line for a flag `cli` does not accept, naming the nearest one it does."""
    valid = [flag.name for flag in flags_of(cli)]
    other = BY_NAME.get(name)
    if other is not None:
        owners = " and ".join(sorted(other.clis))
        return f"{spelled} is a flag of {owners}, not of {cli} (--help lists this command's flags)"
    close = difflib.get_close_matches(name, valid, n=1)
    if close:
        return f"unknown flag {spelled}: did you mean --{close[0]}?"
    # nothing alike: naming the least unlike one (--bogus: "the nearest is --web_corpus") misled
    return f"unknown flag {spelled} (--help lists every flag)"


def check_names(cli: str, names: Iterable[str], spelled: Mapping[str, str]) -> None:
    """Every name must be a flag of `cli`; `spelled` gives a name as it was typed."""
    accepted = {flag.name for flag in flags_of(cli)}
    for name in names:
        if name not in accepted:
            raise ConfigError(unknown_flag_message(cli, spelled.get(name, f"--{name}"), name))


# As typed: ASCII digits only (Python's int() and float() also take "1_0", " 3", other scripts'
# digits, and a float's "nan"/"inf"); at most 18 digits, far beyond any count or budget.
_INTEGER = re.compile(r"[+-]?[0-9]{1,18}")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]{1,18}(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,3})?")


def _integer(flag: Flag, text: str) -> int:
    if not _INTEGER.fullmatch(text):
        raise ConfigError(f"--{flag.name} must be an integer, got {text!r}")
    number = int(text)
    if flag.minimum is not None and number < flag.minimum:
        raise ConfigError(f"--{flag.name} must be at least {flag.minimum}, got {number}")
    _check_maximum(flag, number, text)
    return number


def _check_maximum(flag: Flag, number: float, text: str) -> None:
    if flag.maximum is not None and number > flag.maximum:
        raise ConfigError(f"--{flag.name} must be at most {flag.maximum:g}, got {text}")


def _positive(flag: Flag, text: str) -> float:
    number = _number(flag, text)
    if number <= 0:
        raise ConfigError(f"--{flag.name} must be positive, got {text}")
    if flag.minimum is not None and number < flag.minimum:
        raise ConfigError(f"--{flag.name} must be at least {flag.minimum:g}, got {text}")
    _check_maximum(flag, number, text)
    return number


def _number(flag: Flag, text: str) -> float:
    """Any finite decimal: a "number" flag's range is its config's to check (0 is a temperature)."""
    if not _DECIMAL.fullmatch(text):
        raise ConfigError(f"--{flag.name} must be a number, got {text!r}")
    number = float(text)
    if not math.isfinite(number):  # "1e400" reads as infinity
        raise ConfigError(f"--{flag.name} is beyond the range of a number (±1.8e308), got {text}")
    return number


def _boolean(flag: Flag, text: str) -> bool:
    word = text.strip().lower()
    if word in TRUE or word in FALSE:
        return word in TRUE
    raise ConfigError(f"--{flag.name}={text}: must be true or false (yes/no and 1/0 work too)")


def convert(flag: Flag, text: str) -> Any:
    """The typed value of `flag` from its text; an empty value is an error (leave the flag out
    for its default)."""
    if flag.kind == "bool":
        return _boolean(flag, text)
    if text == "":
        raise ConfigError(f"--{flag.name} needs a value (leave the flag out for its default)")
    if flag.kind == "int":
        return _integer(flag, text)
    if flag.kind == "float":
        return _positive(flag, text)
    if flag.kind == "number":
        return _number(flag, text)
    if flag.kind == "list":
        items = tuple(item.strip() for item in text.split(",") if item.strip())
        if not items:  # ",,": no more a value than ""
            raise ConfigError(f"--{flag.name}={text}: names nothing (leave the flag out for its default)")
        return items
    if flag.choices:
        check_choice(flag.name, text, flag.choices)
    return text


def parse_flags(
    cli: str,
    given: Mapping[str, str],
    *,
    bare: Collection[str] = (),
    spelled: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Every flag of the table by name (defaults for those not given, or not `cli`'s), typed.
    `bare` names flags typed without a value (`--resume`): true for a boolean, an error else."""
    check_names(cli, given, spelled or {})
    values = {flag.name: flag.default for flag in FLAGS}
    for name, text in given.items():
        flag = BY_NAME[name]
        if name in bare and flag.kind != "bool":
            raise ConfigError(f"--{name} needs a value (--{name}=...)")
        values[name] = convert(flag, text)
    return values


def check_required(cli: str, values: Mapping[str, Any]) -> None:
    """Every required flag of `cli` was given (not part of `parse_flags`: --list_distributions
    needs none)."""
    for flag in flags_of(cli):
        if flag.required and values[flag.name] is None:
            raise ConfigError(f"--{flag.name} is required (see --help)")
