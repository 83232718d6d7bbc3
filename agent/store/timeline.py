"""The run's timeline: a bounded time series of what the parent saw while a run went, written
to `statistics.json` (`timeline`) and plotted by the HTML report.

One point per scheduler tick (about a second): prompts finished and failed so far, tokens so
far, conversations and model calls in flight, the in-flight limit and the endpoint's 429s and
5xx so far. Counters are cumulative, so thinning keeps them right. The series stays under
`TIMELINE_POINTS` points whatever the run's length: when full, every other point goes and the
sampling stride doubles, so the points stay evenly spaced.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

TIMELINE_POINTS = 600
COLUMNS = (
    "seconds",
    "finished",
    "failed",
    "tokens",
    "in_flight",
    "calls_in_flight",
    "limit",
    "rate_limited",
    "server_errors",
)


class Timeline:
    """Points of `COLUMNS`, at most `limit` of them (evenly spaced, the last one always kept)."""

    def __init__(self, limit: int = TIMELINE_POINTS) -> None:
        if limit < 4:
            raise ValueError("a timeline needs room for at least 4 points")
        self._limit = limit
        self._stride = 1
        self._ticks = 0
        self._points: list[list[float]] = []
        self._pending: list[float] | None = None  # the newest tick between strides

    def add(self, point: Sequence[float]) -> None:
        """One tick's values, in `COLUMNS` order."""
        if len(point) != len(COLUMNS):
            raise ValueError(f"a timeline point has {len(COLUMNS)} values, got {len(point)}")
        values = [round(float(value), 3) for value in point]
        self._ticks += 1
        if (self._ticks - 1) % self._stride:
            self._pending = values
            return
        self._pending = None
        self._points.append(values)
        if len(self._points) >= self._limit:
            self._points = self._points[::2]
            self._stride *= 2

    @property
    def points(self) -> list[list[float]]:
        """The kept points, plus the newest tick when it fell between two strides."""
        return self._points + ([self._pending] if self._pending is not None else [])

    def to_dict(self) -> dict[str, Any]:
        """The `timeline` section of statistics.json."""
        return {"columns": list(COLUMNS), "points": self.points}
