"""The `answer` check's match modes, and a dataset row's `verify` object (agent.batch.row_verify)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from agent.batch.row_fields import FieldError, parse_line
from agent.batch.row_verify import RowVerify, checks_for
from agent.config.verify_config import AnswerCheck, Checks, CommandCheck, JudgeCheck, VerifyOptions
from agent.verify.answer import check_answer, last_number, matches, normalize

# (expected, match, answer, passes)
CASES: list[tuple[str, str, str, bool]] = [
    ("Paris", "exact", "  Paris\n", True),
    ("Paris", "exact", "paris", False),
    ("Paris", "normalized", "PARIS.", True),
    ("the answer: Paris", "normalized", "The   answer — Paris!", True),
    ("Paris", "normalized", "Paris, France", False),
    ("$5", "normalized", "5", False),  # symbols are no punctuation
    ("x^2 + 1", "normalized", "X^2 +1.", False),  # nor is spacing inside a term folded away
    ("42", "number", "I think it is 40, no: 42.", True),
    ("42", "number", "42 or maybe 43", False),  # the LAST number is the answer
    ("1250", "number", "The total is 1,250.", True),
    ("1250.5", "number", "so: 1,250.5", True),
    ("-3", "number", "x = -3", True),
    ("0.001", "number", "1e-3", True),
    ("42", "number", "forty-two", False),
    ("3.14", "number", "pi is 3.14159", False),  # default tolerance 1e-6
    (r"\b4[0-9]\b", "regex", "the result is 45 apples", True),
    (r"^\d+$", "regex", "45 apples", False),
    ("Hello  World", "contains", "I said: hello world, twice", True),
    ("goodbye", "contains", "hello world", False),
]


@pytest.mark.parametrize(("expected", "mode", "answer", "passes"), CASES)
def test_each_match_mode_passes_and_fails_as_documented(
    expected: str, mode: str, answer: str, passes: bool
) -> None:
    passed, _ = matches(AnswerCheck(expected, mode), answer)
    assert passed is passes


def test_number_tolerance_is_relative_to_the_expected_value() -> None:
    assert matches(AnswerCheck("3.14", "number", tolerance=0.01), "about 3.1416")[0]
    assert matches(AnswerCheck("1000", "number", tolerance=0.01), "1009")[0]  # 1% of 1000
    assert not matches(AnswerCheck("1000", "number", tolerance=0.01), "1011")[0]
    assert matches(AnswerCheck("0", "number", tolerance=0.01), "0.005")[0]  # max(1, |0|)


def test_numbers_and_normal_forms() -> None:
    assert last_number("a 1,234,567.5 b") == 1234567.5
    assert last_number("none here") is None
    assert last_number("so 5, or 1e999") is None  # beyond a float: infinity is no number (nor JSON)
    record = check_answer(AnswerCheck("5", "number"), "it is 1e999").record()
    assert record["passed"] is False and record["details"]["number"] is None
    json.dumps(record, allow_nan=False)  # the entry's line can carry it
    assert normalize(" Ça  va?  OUI! ") == "ça va oui"


def test_a_catastrophic_regex_is_stopped_and_fails() -> None:
    started = time.monotonic()
    passed, details = matches(AnswerCheck(r"(a|aa)+$", "regex"), "a" * 60 + "!")
    assert not passed and details == {"regex_timeout": True}
    assert time.monotonic() - started < 10  # bounded (1 s timeout), generous for a loaded machine


def test_the_record_of_an_attempt_without_a_final_answer_is_a_fail() -> None:
    result = check_answer(AnswerCheck("42"), None)
    assert (result.passed, result.score, result.error) == (False, 0.0, None)
    passed = check_answer(AnswerCheck("42", "number"), "It is 42.")
    assert passed.record()["details"] == {
        "expected": "42",
        "match": "number",
        "got": "It is 42.",
        "number": 42.0,
    }
    assert (passed.passed, passed.score) == (True, 1.0)


def _field_error(row: str) -> str:
    with pytest.raises(FieldError) as caught:
        parse_line(row.encode())
    return f"{caught.value.field_name}: {caught.value.reason}"


NESTED = "(" * 5000 + ")" * 5000  # past the compiler's recursion limit

BAD_VERIFY = {  # the row's `verify` value: the error
    '{"anwser": "4"}': "verify.anwser: unknown check kind; one of answer, command, judge, python",
    '"42"': 'verify: must be a JSON object of checks, such as {"answer": "42"}',
    '{"answer": {"expected": "(", "match": "regex"}}': "verify.answer: not a valid regex",
    '{"answer": {"expected": "4", "match": "fuzzy"}}': "verify.answer.match: 'fuzzy' is none of",
    '{"answer": {"expected": "4", "tolerance": "a"}}': "verify.answer.tolerance: must be",
    '{"answer": {"expected": "4", "tolerance": -1}}': "verify.answer.tolerance: must be",
    '{"answer": {"expected": "four", "match": "number"}}': "verify.answer: 'four' is not",
    '{"answer": {"match": "exact"}}': "verify.answer.expected: missing",
    '{"answer": {"expected": "4", "mode": "exact"}}': "verify.answer.mode: unknown key",
    '{"answer": true}': "verify.answer: must be a non-empty string or a number",
    '{"command": 7}': "verify.command: must be a non-empty string",
    '{"command": {"run": ["ls"]}}': "verify.command.run: must be a non-empty string",
    '{"command": {"run": "ls", "timeout": 0}}': "verify.command.timeout: must be a number above 0",
    '{"judge": "yes"}': 'verify.judge: must be true, false or {"rubric": "..."}',
    '{"judge": {"rubric": ""}}': "verify.judge.rubric: must be a non-empty string",
    '{"python": 1}': "verify.python: must be true, false, or an object",
    '{"answer": "\\ud800"}': "verify: holds an unpaired surrogate escape",  # no entry could carry it
    '{"answer": {"expected": "1e999", "match": "number"}}': "verify.answer: '1e999' is beyond the largest",
    '{"answer": {"expected": "4", "match": "exact", "tolerance": 0.1}}': "verify.answer.tolerance: applies",
    # 19 characters that compile to 10^8 nodes: the compiler took 24 GiB and minutes, then was killed
    '{"answer": {"expected": "(?:x{10000}){10000}", "match": "regex"}}': "verify.answer: a regex that",
    f'{{"answer": {{"expected": "{NESTED}", "match": "regex"}}}}': "verify.answer: a regex whose groups",
}


@pytest.mark.parametrize(("verify", "error"), BAD_VERIFY.items())
def test_a_bad_verify_object_names_its_field(verify: str, error: str) -> None:
    assert _field_error(f'{{"prompt": "p", "verify": {verify}}}').startswith(error)


def _row(verify: dict[str, Any]) -> RowVerify | None:
    fields = parse_line(json.dumps({"prompt": "p", "verify": verify}).encode())
    assert fields is not None
    return fields.verify


def _checks(verify: dict[str, Any] | None, **options: Any) -> Checks | None:
    return checks_for(_row(verify) if verify is not None else None, VerifyOptions(**options), FieldError)


def test_the_row_wins_over_the_flags_and_the_flags_fill_in_the_rest() -> None:
    assert _checks(None) is None
    assert _checks({"python": False}, verifier="m:f") is None
    checks = _checks({"answer": 42}, verify_command="true", answer_match="number", verifier="m:f")
    assert checks is not None
    assert checks.answer == AnswerCheck("42", "number")
    assert checks.command == CommandCheck("true", 60.0)
    assert checks.python is True and checks.row == {"answer": 42}
    own = _checks(
        {"command": {"run": "pytest", "timeout": 5}, "answer": {"expected": "x", "match": "exact"}},
        verify_command="true",
        answer_match="number",
        verify_timeout=9,
    )
    assert (
        own is not None
        and own.command == CommandCheck("pytest", 5.0)
        and own.answer == AnswerCheck("x", "exact")
    )
    judged = _checks({"judge": {"rubric": "be right"}}, judge_model="j")
    assert judged is not None and judged.judge == JudgeCheck("be right")


def test_rows_the_flags_cannot_complete_are_errors() -> None:
    with pytest.raises(FieldError, match="no --judge_model"):
        _checks({"judge": True})
    with pytest.raises(FieldError, match="no rubric"):
        _checks({"answer": "x"}, judge_model="j")
    with pytest.raises(FieldError, match="--verifier=module:function"):
        _checks({"python": {"file": "a"}})
    with pytest.raises(FieldError, match="'x' is not a number"):
        _checks({"answer": "x"}, answer_match="number")
    # A tolerance with the run's default mode (normalized) would be ignored: the rewards wrong.
    with pytest.raises(FieldError, match="applies to the \"number\" match only, not 'normalized'"):
        _checks({"answer": {"expected": "4", "tolerance": 0.1}})
    number = _checks({"answer": {"expected": "4", "tolerance": 0.1}}, answer_match="number")
    assert number is not None and number.answer == AnswerCheck("4", "number", 0.1)
