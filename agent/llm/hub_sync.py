"""A process's side of the run-wide rate limit: batching its reports to the hub, applying grants.

One exchange at a time, on the process's event loop: when a call waits for a start permit or
for a larger share, and otherwise every `PERIOD` while calls are in flight (to report
successes and tokens, and hear of cuts made elsewhere); at most one per `MIN_GAP`, so calls
blocked on the limit do not turn into a stream of exchanges. A hub that cannot be reached
keeps the calls waiting (the limit fails closed) and is asked again.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import suppress
from typing import Protocol

from agent.llm.shared_limit import Grant, LimitLink, Report

log = logging.getLogger(__name__)
PERIOD = 0.25  # seconds between exchanges while calls are in flight
MIN_GAP = 0.05  # seconds at least between two exchanges


class Member(Protocol):
    """The limiter a HubSync reports for (`agent.llm.rate_limit.AdaptiveLimiter`)."""

    inflight: int
    waiting: int

    @property
    def permits_wanted(self) -> int: ...

    def apply(self, grant: Grant) -> None: ...


class HubSync:
    def __init__(self, limiter: Member, link: LimitLink, member: str) -> None:
        self.limiter, self.link, self.member = limiter, link, member
        self.successes = 0
        self.tokens = 0
        self.cost = 0.0
        self.released = 0
        self._burst: tuple[int, float | None] | None = None
        self._need = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.exchanges = 0
        self._share: int | None = None
        self._ack = False  # the last grant changed our share: say we heard it (the hub keeps
        # counting the old one for us until then, `LimitHub._committed`)

    def need(self) -> None:
        """Exchange soon: a call waits on something only the hub can give."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="limit-hub-sync")
        self._need.set()

    def succeeded(self, tokens: int, cost: float = 0.0) -> None:
        self.successes += 1
        self.tokens += tokens
        self.cost += cost

    def release(self, permits: int = 1) -> None:
        """Start permits given back: their calls ended, or they will not be used."""
        self.released += permits

    def burst(self, generation: int, retry_after: float | None) -> None:
        self._burst = (generation, retry_after)
        self.need()

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def _report(self) -> Report:
        limiter = self.limiter
        burst, self._burst = self._burst, None
        report = Report(
            member=self.member,
            demand=limiter.inflight + limiter.waiting,
            inflight=limiter.inflight,
            want_starts=limiter.permits_wanted,
            successes=self.successes,
            tokens=self.tokens,
            cost=self.cost,
            released=self.released,
            burst_generation=burst[0] if burst else None,
            retry_after=burst[1] if burst else None,
        )
        self.successes = self.tokens = self.released = 0
        self.cost = 0.0
        return report

    def _restore(self, report: Report) -> None:
        """An exchange that failed: what it reported is reported with the next one."""
        self.successes += report.successes
        self.tokens += report.tokens
        self.cost += report.cost
        self.released += report.released
        if report.burst_generation is not None and self._burst is None:
            self._burst = (report.burst_generation, report.retry_after)

    async def _run(self) -> None:
        failing = False
        while True:
            limiter = self.limiter
            active = limiter.inflight or limiter.waiting or self.successes or self.released or self._ack
            # asyncio.timeout, not wait_for: on 3.11 a wait_for whose event was set as aclose
            # cancelled it returned instead of raising, and aclose waited forever (a run hung).
            with suppress(TimeoutError):
                async with asyncio.timeout(PERIOD if active else None):
                    await self._need.wait()
            self._need.clear()
            report = self._report()
            try:
                grant = await self.link.exchange(report)
            except (OSError, EOFError, RuntimeError) as exc:  # the hub is gone or restarting
                if not failing:
                    log.warning("the run's rate-limit hub did not answer (%s): calls wait for it", exc)
                failing = True
                self._restore(report)
                self._need.set()
                await asyncio.sleep(PERIOD)
                continue
            failing = False
            self.exchanges += 1
            self._ack, self._share = grant.share != self._share, grant.share
            self.limiter.apply(grant)
            await asyncio.sleep(MIN_GAP)
