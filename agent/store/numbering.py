"""The `prompt_index` of each unit of work not yet done: its recorded one (a failure's) if no
other prompt holds that number, else its position in the plan if no prompt holds that, else the
lowest number no prompt holds or claims, given after every claim so that a gap filled is never a
later row's own position. Written numbers never change; no two prompts share one.

Only the numbers that differ from a unit's position are kept (`moved`): on a fresh run none do,
so a million-prompt run keeps no number per prompt (issue 26: a dict of them held ~100 bytes a
prompt for the whole run); the positions claimed take a byte each.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from itertools import count


class Numbering:
    """`claim` each unit not done, in plan order, then `house_homeless` (which frees all but
    the numbers kept); `number_of` after."""

    def __init__(self, recorded: Mapping[str, int], units: int) -> None:
        """`recorded`: each key's number as written (`RunIndex.indices`); `units`: the plan's size."""
        self.recorded = recorded
        self.holder: dict[int, str] = {}
        for key, number in recorded.items():  # results first: a legacy clash keeps the result's
            self.holder.setdefault(number, key)
        self.claimed = bytearray(units)  # positions taken by the unit at that position
        self.moved: dict[str, int] = {}  # key -> its number, where that is not its position
        self.homeless: list[str] = []

    def claim(self, key: str, position: int) -> int | None:
        """The unit's number, or None when it gets one only after every claim (`house_homeless`)."""
        kept = self.recorded.get(key)
        if kept is not None and self.holder[kept] == key:
            if kept != position:
                self.moved[key] = kept
            return kept
        if position not in self.holder:
            self.claimed[position] = 1
            return position
        self.homeless.append(key)
        return None

    def house_homeless(self) -> Iterator[int]:
        """The numbers given to the units left without one, in the order they were met."""
        claimed, units = self.claimed, len(self.claimed)
        free = (n for n in count() if n not in self.holder and not (n < units and claimed[n]))
        for key, number in zip(self.homeless, free, strict=False):
            self.moved[key] = number
            yield number
        # every unit is numbered: only `moved` is read from now on (the rest, a number per
        # prompt done, would be kept for the whole run)
        self.recorded, self.holder, self.claimed, self.homeless = {}, {}, bytearray(), []

    def number_of(self, key: str, position: int) -> int:
        return self.moved.get(key, position)
