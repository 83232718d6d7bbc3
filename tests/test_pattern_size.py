"""`agent.verify.pattern_size`: a regex's compiled size counted before the engine is asked."""

from __future__ import annotations

import pytest

from agent.verify.pattern_size import expanded_size

LIMIT = 20_000


@pytest.mark.parametrize(
    ("pattern", "size"),
    [
        ("abc", 3),
        ("x{500}", 500),
        ("x{5,}", 5),  # the required part is written out; the rest is a loop
        ("x{0,100000}", 1),  # an optional repeat is not written out
        ("(?:ab){5}", 20),  # `?:` counts as two atoms: an overcount, never an undercount
        ("(a)(b){3}", 4),
        ("[{5}]{3}", 3),  # braces inside a set are members
        (r"\{5}", 3),  # an escaped brace is a literal
        (r"\p{L}{4}", 4),  # a property's braces are its name
        ("[]a]{2}", 2),  # a `]` first in a set is a member
        ("(?:x{100}|y){100}", 10_400),  # the branches add up
    ],
)
def test_the_count_is_the_atoms_written_out(pattern: str, size: int) -> None:
    assert expanded_size(pattern, LIMIT) == size


def test_nested_repeats_multiply_and_the_count_stops_past_the_limit() -> None:
    assert expanded_size("(?:x{10000}){10000}", LIMIT) > LIMIT  # 10^8: what made the engine take 24 GiB
    # 10^8000 if multiplied out: the count stops at the first group past the limit
    assert expanded_size("(?:" * 1000 + "x{99999999}" + "){99999999}" * 1000, LIMIT) > LIMIT
    assert expanded_size("a" * (LIMIT + 1), LIMIT) == LIMIT + 1
