"""The plain `KeyBook`: a set of keys, the index hints ignored. The store's default, where no
plan numbers the keys (a merge on its own, a report read from the files); a batch run hands
the store its plan's book (`agent.batch.planned`)."""

from __future__ import annotations

from collections.abc import Iterable

from agent.protocols.store import KnownKeys


class KeySet(set[str]):
    """A set of keys that is a `KeyBook` (it compares equal to a set of the same keys)."""

    def __init__(self, keys: Iterable[str] = ()) -> None:
        super().__init__(keys)

    def note(self, key: str, index: int) -> bool:
        size = len(self)
        self.add(key)
        return len(self) > size

    def has(self, key: str, index: int) -> bool:
        return key in self


class _Every:
    """Every key: a scan told so notes no result key, only tombstones and records."""

    def has(self, key: str, index: int) -> bool:
        return True


EVERY_KEY: KnownKeys = _Every()


def index_hint(number: object) -> int:
    """A line's or record's `prompt_index` as a `KeyBook` hint (-1 when it has none)."""
    return number if isinstance(number, int) and not isinstance(number, bool) and number >= 0 else -1
