"""The numbering rule for the units not yet done (`agent.store.numbering`): recorded numbers
kept, positions where free, the rest the lowest free numbers after every claim; only the
numbers that differ from a unit's position are kept."""

from __future__ import annotations

from agent.store.numbering import Numbering


def numbered(recorded: dict[str, int], pending: list[tuple[str, int]], units: int) -> dict[str, int]:
    numbering = Numbering(recorded, units)
    claimed = {key: numbering.claim(key, position) for key, position in pending}
    housed = list(numbering.house_homeless())
    homeless = [key for key, number in claimed.items() if number is None]
    assert housed == [numbering.number_of(key, -1) for key in homeless]
    return {key: numbering.number_of(key, position) for key, position in pending}


def test_a_fresh_run_numbers_each_unit_by_its_position_and_keeps_no_number() -> None:
    numbering = Numbering({}, 1000)
    assert [numbering.claim(f"k{i}", i) for i in range(1000)] == list(range(1000))
    assert list(numbering.house_homeless()) == [] and numbering.moved == {}


def test_recorded_numbers_are_kept_and_a_taken_position_waits_for_the_lowest_free_number() -> None:
    # done "a" holds 1; failed "b" was written as 4; "c" at position 1 finds it held; "d" at 4 too
    recorded = {"a": 1, "b": 4}
    got = numbered(recorded, [("b", 0), ("c", 1), ("d", 4), ("e", 5)], units=7)
    # b keeps 4; c and d wait: the lowest numbers nobody holds or claims are 0, then 2
    assert got == {"b": 4, "c": 0, "d": 2, "e": 5}


def test_a_recorded_number_another_key_holds_is_not_kept() -> None:
    recorded = {"done": 3, "failed": 3}  # a legacy clash: the first recorded (the result) keeps it
    assert numbered(recorded, [("failed", 0)], units=4) == {"failed": 0}


def test_no_two_units_share_a_number() -> None:
    recorded = {f"r{i}": i * 2 for i in range(50)}  # every even number up to 98 held
    pending = [(f"p{i}", i) for i in range(100)]
    got = numbered(recorded, pending, units=100)
    assert len(set(got.values()) | set(recorded.values())) == len(got) + len(recorded)
    assert all(got[f"p{i}"] == i for i in range(1, 100, 2))  # the odd positions were free
