"""A bounded sample of a run's entries for the report's trajectory browser, stratified by
outcome: one uniform reservoir per stratum, then the page's budget shared so a rare stratum
(a few `gave_up`, one filter's discards) shows all it has up to an equal share, and the rest
goes to the common ones. Memory and page size stay bounded whatever the run's size, and the
draw is reproducible (seeded). An item can be made only when it is kept (`offer_lazily`): the
report keeps its entries' readable, cut form, never a whole entry whatever its size.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")
SAMPLE_SIZE = 500


def shares(available: dict[str, int], budget: int) -> dict[str, int]:
    """How many of each stratum to show: water-filling `budget` over the strata, smallest
    first, each taking at most an equal share of what is left."""
    taken: dict[str, int] = {}
    left = budget
    ordered = sorted(available.items(), key=lambda item: (item[1], item[0]))
    for position, (name, count) in enumerate(ordered):
        take = min(count, left // (len(ordered) - position))
        taken[name] = take
        left -= take
    return taken


class StratifiedSample(Generic[T]):
    """Up to `size` items per stratum while streaming, `size` in all when drawn."""

    def __init__(self, size: int = SAMPLE_SIZE, seed: int = 0) -> None:
        self.size, self.seed = size, seed
        self.seen: Counter[str] = Counter()
        self._rng = random.Random(seed)
        self._reservoirs: dict[str, list[T]] = {}

    def offer(self, stratum: str, item: T) -> None:
        """Count one item of `stratum`, kept with the reservoir's odds (most are not, at scale)."""
        self.offer_lazily(stratum, lambda: item)

    def offer_lazily(self, stratum: str, make: Callable[[], T]) -> None:
        """`offer` of the item `make()` gives, made only if it is kept: ~size x (1 + ln(seen /
        size)) times per stratum, a few thousand for millions of entries."""
        self.seen[stratum] += 1
        reservoir = self._reservoirs.setdefault(stratum, [])
        if len(reservoir) < self.size:
            reservoir.append(make())
            return
        slot = self._rng.randrange(self.seen[stratum])
        if slot < self.size:
            reservoir[slot] = make()

    def drawn(self) -> list[T]:
        """The sample: each stratum's share, drawn uniformly from its reservoir (the same draw
        every time it is asked)."""
        quota = shares({name: len(items) for name, items in self._reservoirs.items()}, self.size)
        rng = random.Random(self.seed)
        picked: list[T] = []
        for name in sorted(self._reservoirs):
            items = self._reservoirs[name]
            picked += items if quota[name] >= len(items) else rng.sample(items, quota[name])
        return picked
