"""IdentityMemo: computed once for the same objects, again for equal but other objects."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent.common.identity_memo import IdentityMemo


def test_the_same_objects_are_computed_once_and_equal_copies_again() -> None:
    calls: list[Sequence[Any]] = []

    def compute(items: Sequence[Any]) -> int:
        calls.append(items)
        return len(calls)

    memo = IdentityMemo(compute, size=2)
    a, b = {"name": "a"}, {"name": "b"}
    assert memo([a, b]) == memo([a, b]) == 1  # a new list of the same dicts: a hit
    assert memo([b, a]) == 2  # same objects, other order
    assert memo([{"name": "a"}, b]) == 3  # an equal copy is another object
    assert memo([a, b]) == 4  # the memo was full: cleared, so computed again
    assert len(calls) == 4


def test_cached_items_are_kept_alive_so_their_ids_cannot_be_reused() -> None:
    memo = IdentityMemo(lambda items: items[0]["v"])
    assert memo([{"v": 1}]) == 1  # the dict would die here but for the memo's reference
    assert memo([{"v": 2}]) == 2
