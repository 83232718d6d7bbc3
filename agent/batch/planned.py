"""The run's plan, kept from its start: each unit of work's key and index (`PlannedUnits`), and
the keys the merge writes, numbered by it (`PlannedKeys`).

At a million prompts the merge's keys, a set of strings, were the largest thing the parent held
to the end (~113 bytes a key, issue 26). Each line the merge writes carries its
`prompt_index`, the unit's place in the plan: a byte a unit says whether the plan's key there
was written, and a set holds only the keys the plan does not (another dataset's lines, samples
beyond --samples_per_prompt).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from agent.batch.dataset import keyed_units
from agent.batch.dataset_copies import RowKeys
from agent.store.keys import sample_key, split_key


@dataclass(frozen=True, slots=True)
class Unit:
    """What the split needs of a dataset row, kept from the run's start so the end does not
    read the dataset again."""

    key: str
    index: int
    sample_index: int


class PlannedUnits:
    """The `Unit`s planned at the run's start, in order: the scan's row keys (`RowKeys`, 18
    bytes a row) and the samples per row, from which each unit's key and index follow (issue
    26: no object, and no copy of a key, per unit for the whole run)."""

    def __init__(self, rows: RowKeys, samples_per_prompt: int = 1) -> None:
        self.rows, self.samples = rows, samples_per_prompt

    def __len__(self) -> int:
        return len(self.rows) * self.samples

    def key(self, index: int) -> str:
        """The key of unit `index` (its position in the plan)."""
        row, sample = divmod(index, self.samples)
        return sample_key(self.rows.key(row), sample)

    def index_of(self, key: str) -> int:
        """The position of the unit whose key is `key`, or -1 when the plan has none."""
        row_key, sample = split_key(key)
        row = self.rows.row_of(row_key) if sample < self.samples else -1
        return -1 if row < 0 else row * self.samples + sample

    def __iter__(self) -> Iterator[Unit]:
        return (Unit(*unit) for unit in self.units())

    def units(self) -> Iterator[tuple[str, int, int]]:
        """Each unit as (key, index, sample index), no object made."""
        return keyed_units(self.rows, self.samples)


class PlannedKeys:
    """A `KeyBook` numbered by the plan: a byte a unit, and a set of the keys not planned.

    A key noted or asked for with its unit's index (the line's `prompt_index`) costs building
    the plan's key there (~0.7 µs); one with another index, or none, is looked up in the plan
    by its text (~2 µs, and the first such lookup builds the plan's table: ~1 s a million
    rows). Exact either way: a planned key lives only in its unit's byte."""

    def __init__(self, units: PlannedUnits) -> None:
        self.units = units
        self._written = bytearray(len(units))
        self._count = 0
        self.unplanned: set[str] = set()

    def note(self, key: str, index: int) -> bool:
        at = self._place(key, index)
        if at < 0:
            size = len(self.unplanned)
            self.unplanned.add(key)
            return len(self.unplanned) > size
        if self._written[at]:
            return False
        self._written[at] = 1
        self._count += 1
        return True

    def has(self, key: str, index: int) -> bool:
        at = self._place(key, index)
        return key in self.unplanned if at < 0 else bool(self._written[at])

    def at(self, index: int) -> bool:
        """Whether the plan's key of unit `index` was noted."""
        return bool(self._written[index])

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.has(key, -1)

    def __len__(self) -> int:
        return self._count + len(self.unplanned)

    def __iter__(self) -> Iterator[str]:
        written, key = self._written, self.units.key
        yield from (key(index) for index in range(len(written)) if written[index])
        yield from self.unplanned

    def _place(self, key: str, index: int) -> int:
        units = self.units
        if 0 <= index < len(self._written) and units.key(index) == key:
            return index
        return units.index_of(key)
