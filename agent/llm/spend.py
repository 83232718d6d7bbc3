"""Tokens per minute, counted where calls start (`--tpm`).

A call's tokens are known only from its reply, after it was sent: counting replies alone let
every call in flight start before the first answer (`--tpm=5000` with 64 in flight let 175,240
tokens through in 33 s). So each call in flight holds a reservation of the tokens a call has
taken so far (a moving mean of answered calls), and a call starts only while the window's
answered tokens plus the reservations leave room for one more. Until the first answer there is
nothing to reserve by: one call at a time. A lone call larger than the whole budget still
starts when the window is empty (else the run would wait forever).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

WINDOW = 60.0  # seconds: tokens per minute
MEAN_WEIGHT = 0.5  # weight of the latest answers in the tokens-per-call mean (calls grow with history)


@dataclass
class TokenWindow:
    """The tokens answered in the last minute, and what a call is expected to take."""

    tpm: float
    entries: deque[tuple[float, int]] = field(default_factory=deque)
    total: int = 0
    per_call: float | None = None  # moving mean of tokens per answered call; None: none yet

    def record(self, now: float, tokens: int, calls: int) -> None:
        """`calls` answered since the last record, `tokens` together."""
        if tokens:
            self.entries.append((now, tokens))
            self.total += tokens
        if calls:
            mean = tokens / calls
            last = mean if self.per_call is None else self.per_call
            self.per_call = last + MEAN_WEIGHT * (mean - last)

    def _expire(self, now: float) -> None:
        while self.entries and self.entries[0][0] < now - WINDOW:
            self.total -= self.entries.popleft()[1]

    def allowance(self, now: float, outstanding: int) -> int:
        """How many more calls may start now, with `outstanding` started and not yet answered."""
        self._expire(now)
        if self.per_call is None:  # nothing measured yet: one call, to measure
            return 0 if outstanding else 1
        if outstanding == 0 and self.total == 0:
            return max(1, int(self.tpm // max(self.per_call, 1.0)))
        free = self.tpm - self.total - outstanding * self.per_call
        return max(0, int(free // max(self.per_call, 1.0)))

    def wait(self, now: float, outstanding: int) -> float:
        """Seconds until answered tokens leave the window enough for one more call; 0 when a
        call may start now or only answers still due can tell (they are waited for)."""
        if self.allowance(now, outstanding) > 0 or self.per_call is None:
            return 0.0
        excess = self.total + (outstanding + 1) * self.per_call - self.tpm
        for at, tokens in self.entries:
            excess -= tokens
            if excess <= 0 or ((at, tokens) == self.entries[-1] and not outstanding):
                return at + WINDOW - now  # (the last: an empty window lets one call through)
        return 0.0  # the reservations alone fill it: their answers free it
