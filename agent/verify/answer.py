"""The `answer` check: the attempt's final answer against the expected one, by a match mode.

Modes (`agent.config.verify_config.MATCH_MODES`):
- `exact`: the same text once the ends' whitespace is stripped;
- `normalized`: the same text once case, whitespace and punctuation are folded ("The answer:
  Paris." matches "the answer paris"; symbols such as $ or + count);
- `number`: the LAST number written in the answer (where a final "so the total is 1,250"
  usually is; thousands commas and a sign are read) within `tolerance`, relative:
  |got - expected| <= tolerance * max(1, |expected|);
- `regex`: the expected text is a pattern searched for anywhere in the answer;
- `contains`: the expected text appears in the answer, case and whitespace folded.

A conversation that ended without a final answer fails the check. The functions are pure;
`check_answer` gives the record.
"""

from __future__ import annotations

import functools
import math
import re
import time
import unicodedata
from typing import TYPE_CHECKING, Any

from agent.config.verify_config import AnswerCheck
from agent.protocols.verification import CheckResult
from agent.verify.pattern_size import expanded_size

if TYPE_CHECKING:
    import regex  # type: ignore[import-untyped]

# A pattern from a dataset may backtrack exponentially ((a+)+$): the search is bounded in time
# (the `regex` engine checks its timeout while it backtracks; `re` cannot be stopped) and in
# input (an answer longer than this is searched in its last MAX_REGEX_INPUT characters, where
# the answer usually is).
REGEX_TIMEOUT_S = 1.0
MAX_REGEX_INPUT = 100_000
# The engine writes out required repeats: a pattern is refused at the run's start past this many
# atoms counted out (`pattern_size`; ~3 MB compiled), and a process keeps 64 compiled.
MAX_REGEX_SIZE = 20_000
SHOWN_CHARS = 300  # how much of the answer the check's details keep

_NUMBER = re.compile(
    r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?\.\d+(?:[eE][-+]?\d+)?"
)
_SPACES = re.compile(r"\s+")


def normalize(text: str) -> str:
    """Case folded, punctuation (every Unicode P* character: .,;:!?'"-()… and their kin) made
    a space, runs of whitespace made one space, ends stripped. Symbols ($, +, ^) are kept:
    "x^2" is no "x2"."""
    kept = "".join(" " if unicodedata.category(ch)[0] == "P" else ch for ch in text.casefold())
    return _SPACES.sub(" ", kept).strip()


def last_number(text: str) -> float | None:
    """The last number written in `text` ("1,234.5" is 1234.5), or None when there is none or
    it is beyond a float ("1e999": no number to compare, and infinity is no JSON for the record)."""
    found = _NUMBER.findall(text)
    if not found:
        return None
    try:
        number = float(found[-1].replace(",", ""))
    except ValueError:  # the pattern admits nothing float() refuses; kept for safety of a bad edit
        return None
    return number if math.isfinite(number) else None


@functools.lru_cache(maxsize=64)
def compiled(pattern: str) -> regex.Pattern[str]:
    """`pattern` compiled once per process (rows of a dataset often share one)."""
    # Imported here: ~15 ms a process, and only rows with a regex check need it. re cannot
    # stop a search; regex has a timeout.
    import regex

    return regex.compile(pattern)


def regex_problem(pattern: str) -> str | None:
    """Why `pattern` is no valid regex (the row's error), or None."""
    import regex  # compiled() imports it first; this one is a lookup

    size = expanded_size(pattern, MAX_REGEX_SIZE)
    if size > MAX_REGEX_SIZE:
        return (
            f"a regex that compiles to over {MAX_REGEX_SIZE:,} atoms once its repeats are written"
            f" out ({size:,} or more); repeat less, or use an optional repeat such as x{{0,n}}"
        )
    try:
        compiled(pattern)
    except regex.error as exc:
        return f"not a valid regex: {exc}"
    except RecursionError:
        return "a regex whose groups nest too deeply to compile"
    return None


def number_problem(expected: str) -> str | None:
    """Why `expected` is no number a `number` match can compare with, or None."""
    if _as_number(expected) is not None:
        return None
    if _NUMBER.fullmatch(expected.strip()):
        return f"{expected!r} is beyond the largest number a check can compare (about 1.8e308)"
    return f"{expected!r} is not a number"


def _as_number(text: str) -> float | None:
    stripped = text.strip()
    return last_number(stripped) if _NUMBER.fullmatch(stripped) else None


def matches(check: AnswerCheck, answer: str) -> tuple[bool, dict[str, Any]]:
    """Whether `answer` passes `check`, and what the check's details add (the number read)."""
    expected, mode = check.expected, check.match
    if mode == "exact":
        return answer.strip() == expected.strip(), {}
    if mode == "normalized":
        return normalize(answer) == normalize(expected), {}
    if mode == "contains":
        return normalize_spaces(expected) in normalize_spaces(answer), {}
    if mode == "regex":
        return _search(expected, answer)
    if mode == "number":
        want, got = _as_number(expected), last_number(answer)
        if want is None or got is None:
            return False, {"number": got}
        return abs(got - want) <= check.tolerance * max(1.0, abs(want)), {"number": got}
    raise ValueError(f"unknown match mode {mode!r}")  # the row parser admits only MATCH_MODES


def normalize_spaces(text: str) -> str:
    return _SPACES.sub(" ", text.casefold()).strip()


def _search(pattern: str, answer: str) -> tuple[bool, dict[str, Any]]:
    try:
        found = compiled(pattern).search(answer[-MAX_REGEX_INPUT:], timeout=REGEX_TIMEOUT_S)
    except TimeoutError:
        return False, {"regex_timeout": True}
    return found is not None, {}


def check_answer(check: AnswerCheck, final_response: str | None) -> CheckResult:
    """The `answer` check's record for an attempt whose final answer is `final_response`."""
    started = time.monotonic()
    details: dict[str, Any] = {"expected": check.expected, "match": check.match}
    if final_response is None:
        passed = False
        details["got"] = None
    else:
        passed, extra = matches(check, final_response)
        details["got"] = final_response[-SHOWN_CHARS:]
        details.update(extra)
    return CheckResult(
        "answer", passed, 1.0 if passed else 0.0, details, duration_s=time.monotonic() - started
    )
