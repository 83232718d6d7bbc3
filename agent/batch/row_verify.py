"""A dataset row's `verify` object, and a prompt's `Checks`: the row's choices over the run's flags.

    {"prompt": "...", "verify": {"answer": "42"}}
    {"answer": {"expected": "3.14", "match": "number", "tolerance": 0.01}}
    {"command": "pytest -q tests/"} or {"command": {"run": "pytest -q", "timeout": 120}}
    {"judge": true} or {"judge": {"rubric": "..."}} or {"judge": false}
    {"python": false} or {"python": true} or {"python": {...keys the verifier reads...}}

Kinds: `answer` (a string or number, or an object with `expected`, optional `match` — one of
MATCH_MODES — and `tolerance`, a number >= 0 for `number`), `command` (a non-blank string, or
an object with `run` and optional `timeout`, seconds > 0), `judge`, `python`. Any other key is
an error (a misspelt kind would silently check nothing); a verifier's own settings go in the
`python` object (`Attempt.verify["python"]`). A key set to JSON `null` counts as absent.

The flags fill in the rest (`checks_for`): --verify_command for rows without a `command`,
--answer_match for answers naming no match mode, --verifier for rows not saying `"python":
false`, --judge_model for rows not saying `"judge": false`, its rubric the row's or
--judge_rubric's file. A bad value is the row's error, named `verify.<kind>[.<key>]`
(`agent.batch.row_fields` reports it with the file and line).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agent.common.config_text import read_config_text, unreadable
from agent.config.verify_config import (
    MATCH_MODES,
    AnswerCheck,
    Checks,
    CommandCheck,
    JudgeCheck,
    VerifyOptions,
)
from agent.errors import ConfigError
from agent.verify.answer import number_problem, regex_problem

KINDS = ("answer", "command", "judge", "python")
Error = Callable[[str, str], Exception]


@dataclass(frozen=True)
class RowVerify:
    """What a row's `verify` object asks; None: the run's flags decide."""

    raw: Mapping[str, Any] = field(default_factory=dict)  # the object as written
    answer: str | None = None
    match: str | None = None
    tolerance: float | None = None
    command: str | None = None
    timeout_s: float | None = None
    judge: bool | None = None
    rubric: str | None = None
    python: bool | None = None


def _number(value: Any, name: str, error: Error, *, positive: bool) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (positive and value == 0):
        raise error(name, f"must be a number {'above' if positive else 'at least'} 0, got {value!r}")
    return float(value)


def _text(value: Any, name: str, error: Error) -> str:
    if not isinstance(value, str) or not value.strip():
        raise error(name, f"must be a non-empty string, got {value!r}"[:200])
    return value


def _object(value: Any, name: str, keys: tuple[str, ...], error: Error) -> dict[str, Any]:
    chosen = {key: item for key, item in value.items() if item is not None}
    for key in chosen:
        if key not in keys:
            raise error(f"{name}.{key}", f"unknown key; {name} takes {', '.join(keys)}")
    return chosen


def _expected(value: Any, name: str, error: Error) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str) or not value.strip():
        raise error(name, f"must be a non-empty string or a number, got {value!r}"[:200])
    return value


def _answer(value: Any, error: Error) -> dict[str, Any]:
    if not isinstance(value, dict):
        return {"answer": _expected(value, "verify.answer", error)}
    chosen = _object(value, "verify.answer", ("expected", "match", "tolerance"), error)
    if "expected" not in chosen:
        raise error("verify.answer.expected", "missing")
    parsed: dict[str, Any] = {"answer": _expected(chosen["expected"], "verify.answer.expected", error)}
    if "match" in chosen:
        if chosen["match"] not in MATCH_MODES:
            raise error(
                "verify.answer.match", f"{chosen['match']!r} is none of {', '.join(MATCH_MODES)}"[:200]
            )
        parsed["match"] = chosen["match"]
    if "tolerance" in chosen:
        parsed["tolerance"] = _number(chosen["tolerance"], "verify.answer.tolerance", error, positive=False)
    return parsed


def _command_line(value: Any, name: str, error: Error) -> str:
    text = _text(value, name, error)
    if "\0" in text:  # no process can be given it: refused here, not after the conversation ran
        raise error(name, "holds a NUL character, which no command line can")
    return text


def _command(value: Any, error: Error) -> dict[str, Any]:
    if not isinstance(value, dict):
        return {"command": _command_line(value, "verify.command", error)}
    chosen = _object(value, "verify.command", ("run", "timeout"), error)
    parsed: dict[str, Any] = {"command": _command_line(chosen.get("run"), "verify.command.run", error)}
    if "timeout" in chosen:
        parsed["timeout_s"] = _number(chosen["timeout"], "verify.command.timeout", error, positive=True)
    return parsed


def _judge(value: Any, error: Error) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"judge": value}
    if not isinstance(value, dict):
        raise error("verify.judge", 'must be true, false or {"rubric": "..."}')
    chosen = _object(value, "verify.judge", ("rubric",), error)
    rubric = _text(chosen["rubric"], "verify.judge.rubric", error) if "rubric" in chosen else None
    return {"judge": True, "rubric": rubric}


def _python(value: Any, error: Error) -> dict[str, Any]:
    if not isinstance(value, bool | dict):
        raise error("verify.python", "must be true, false, or an object of the verifier's own settings")
    return {"python": value is not False}


_PARSERS = {"answer": _answer, "command": _command, "judge": _judge, "python": _python}


def parse_verify(value: Any, error: Error) -> RowVerify | None:
    """The row's `verify` value as its choices (None when absent or null); raises
    `error(field, reason)` (the row parser's own error type) when it is no valid one."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise error("verify", 'must be a JSON object of checks, such as {"answer": "42"}')
    parsed: dict[str, Any] = {}
    for kind, item in value.items():
        if kind not in _PARSERS:
            raise error(f"verify.{kind}", f"unknown check kind; one of {', '.join(KINDS)}")
        if item is not None:
            parsed.update(_PARSERS[kind](item, error))
    row = RowVerify(raw=value, **parsed)
    if row.answer is not None and row.match is not None:
        _check_answer(row, row.match, error)
    return row


def _check_answer(row: RowVerify, match: str, error: Error) -> None:
    """The row's answer check as `match` (the row's or the run's) reads it."""
    assert row.answer is not None
    problem = regex_problem(row.answer) if match == "regex" else None
    problem = number_problem(row.answer) if match == "number" else problem
    if problem is not None:
        raise error("verify.answer", problem)
    if row.tolerance is not None and match != "number":  # it would be ignored: wrong rewards
        raise error("verify.answer.tolerance", f'applies to the "number" match only, not {match!r}')


@functools.cache
def read_rubric(path: str | None) -> str | None:
    """--judge_rubric's text (read once per process); ConfigError naming the flag when it cannot be."""
    if path is None:
        return None
    try:
        text = read_config_text(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--judge_rubric={path}: cannot read the rubric file ({unreadable(exc)})") from None
    if not text.strip():
        raise ConfigError(f"--judge_rubric={path}: the rubric file is empty")
    return text


def checks_for(row: RowVerify | None, options: VerifyOptions, error: Error) -> Checks | None:
    """The prompt's checks: the row's over the run's flags; None when nothing applies. A row
    the flags cannot complete (a judge with no model or rubric) raises `error(field, reason)`."""
    row = row if row is not None else RowVerify()
    answer = None
    if row.answer is not None:
        match = row.match or options.answer_match
        _check_answer(row, match, error)
        answer = AnswerCheck(row.answer, match, *([row.tolerance] if row.tolerance is not None else []))
    command_line = row.command or options.verify_command
    timeout_s = row.timeout_s if row.timeout_s is not None else options.verify_timeout
    command = CommandCheck(command_line, timeout_s) if command_line else None
    python = row.python if row.python is not None else options.verifier is not None
    if python and options.verifier is None:
        raise error("verify.python", "asks for the run's verifier; give --verifier=module:function")
    checks = Checks(answer, command, _judge_check(row, options, error), python, row.raw)
    return None if checks.empty else checks


def _config_error(name: str, reason: str) -> Exception:
    return ConfigError(f"{name}: {reason}")


def job_checks(row: RowVerify | None, options: VerifyOptions) -> Checks | None:
    """`checks_for` a row the run's start already checked (`agent.cli.verify_cli`)."""
    return checks_for(row, options, _config_error)


def _judge_check(row: RowVerify, options: VerifyOptions, error: Error) -> JudgeCheck | None:
    if not (row.judge if row.judge is not None else options.judge_model is not None):
        return None
    if options.judge_model is None:
        raise error("verify.judge", "asks for a judge, and there is no --judge_model")
    rubric = row.rubric or read_rubric(options.judge_rubric)
    if rubric is None:
        raise error("verify.judge", "no rubric: give verify.judge.rubric, or --judge_rubric=FILE")
    return JudgeCheck(rubric)
