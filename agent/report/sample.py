"""A bounded sample of a run's entries for the report's trajectory browser, stratified by
outcome: one uniform bottom-k sample per stratum, then the page's budget shared so a rare stratum
(a few `gave_up`, one filter's discards) shows all it has up to an equal share, and the rest
goes to the common ones. Memory and page size stay bounded whatever the run's size, and the
draw is reproducible (seeded). An item can be made only when it is kept (`offer_lazily`): the
report keeps its entries' readable, cut form, never a whole entry whatever its size.
"""

from __future__ import annotations

import heapq
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
    """Up to `size` items per stratum while streaming, `size` in all when drawn. Each stratum
    keeps its `size` items of lowest rank (a bottom-k sample: uniform when ranks are random).
    An item offered with a rank of its own (a hash of its key) is kept or not whatever the order
    items come in, so the same items give the same sample in any order (a run's report, counted
    as its entries are written, is the one its merged file gives); without one, a seeded random
    rank is drawn."""

    def __init__(self, size: int = SAMPLE_SIZE, seed: int = 0) -> None:
        self.size, self.seed = size, seed
        self.seen: Counter[str] = Counter()
        self._rng = random.Random(seed)
        self._heaps: dict[str, list[tuple[int, int, T]]] = {}  # (-rank, -arrival, item): max-heaps

    def offer(self, stratum: str, item: T, rank: int | None = None) -> None:
        """Count one item of `stratum`, kept if its rank is among the `size` lowest so far."""
        self.offer_lazily(stratum, lambda: item, rank)

    def offer_lazily(self, stratum: str, make: Callable[[], T], rank: int | None = None) -> None:
        """`offer` of the item `make()` gives, made only if it is kept: ~size x (1 + ln(seen /
        size)) times per stratum, a few thousand for millions of entries. `rank`: below 2**64."""
        self.seen[stratum] += 1
        rank = self._rng.getrandbits(64) if rank is None else rank
        heap = self._heaps.setdefault(stratum, [])
        if len(heap) < self.size:
            heapq.heappush(heap, (-rank, -self.seen[stratum], make()))
        elif -rank > heap[0][0]:
            heapq.heapreplace(heap, (-rank, -self.seen[stratum], make()))

    def drawn(self) -> list[T]:
        """The sample: each stratum's share, its items of lowest rank (the same draw every time
        it is asked), by stratum then rank."""
        quota = shares({name: len(items) for name, items in self._heaps.items()}, self.size)
        picked: list[T] = []
        for name in sorted(self._heaps):
            ranked = sorted(self._heaps[name], key=lambda kept: (-kept[0], -kept[1]))
            picked += [item for _rank, _arrival, item in ranked[: quota[name]]]
        return picked
