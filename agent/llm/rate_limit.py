"""Adaptive concurrency against one endpoint: AIMD on the in-flight limit, plus budgets.

Each model call holds a slot. A burst of rate-limit answers cuts the limit multiplicatively and
pauses new calls for the server's Retry-After, at most once per window (calls already in flight
when the cut happened were sent under the old limit, so their 429s say nothing new). A burst is
most recent answers being 429s (a moving share) and most of the calls sent up to the throttled
one being answered 429: a 429 comes back at once while a success takes the endpoint's latency,
so with many calls in flight the first answers are the throttled ones, in a row, while the
calls still in flight were accepted. A scattering of 429s does not cut: under random
throttling, AIMD would otherwise collapse to its minimum; each throttled call still waits its
own Retry-After before its retry (the client's backoff).
Successes grow the limit back by about one slot per window. Server errors and timeouts are
retried by the client with backoff but never collapse the limit. Optional requests-per-minute
and tokens-per-minute budgets pace calls on top (tokens reserved per call in flight:
`agent.llm.spend`).

With a hub (`agent.llm.shared_limit`) the limiter is one member of a run-wide limit: its limit
is its share of the hub's; with rpm, tpm or a cost budget every call starts on a permit from
the hub (its pace, its token window, `--max_cost`), and once the hub says the budget is spent
a call waiting to start fails as `budget`; a burst it detects cuts everyone's
(`agent.llm.hub_sync` makes the exchanges).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass

from agent.errors import FailureClass, ModelAPIError
from agent.llm.hub_sync import HubSync
from agent.llm.shared_limit import Grant, LimitLink
from agent.llm.spend import TokenWindow
from agent.protocols.model import Prices, Usage

DECREASE = 0.5
BURST_WEIGHT = 0.1  # weight of the latest call in the moving share of 429s (memory ~10 calls)
BURST_SHARE = 0.6  # a burst: 9+ consecutive 429s; random 20 % throttling crosses it on ~0.01 % of calls
SENT_WINDOW = 32  # calls sent up to a 429'd one, of which BURST_SHARE must have been answered 429


@dataclass
class Ticket:
    limiter: AdaptiveLimiter
    generation: int
    done: bool = False
    limited: bool = False  # answered 429

    def succeeded(self, tokens: int = 0, cost: float | None = None) -> None:
        self.done = True
        self.limiter._on_success(tokens, cost)

    def answered(self, usage: Usage) -> None:
        """Succeeded, with the reply's usage: its tokens, and its cost at the run's prices."""
        self.succeeded(usage.total_tokens, usage.priced(self.limiter.prices).cost_usd)

    def failed(self, error_class: FailureClass, retry_after: float | None) -> None:
        self.done = True
        self.limiter._on_failure(self, error_class, retry_after)


@dataclass
class LimiterStats:
    rate_limited: int = 0
    server_errors: int = 0
    timeouts: int = 0
    connection_errors: int = 0
    calls: int = 0
    peak_inflight: int = 0
    # The run's own limit, lowest and highest seen (0: none yet): under a hub its limit (each
    # grant carries it), not this process's share of it (0 while idle). The hub keeps its history.
    run_limit_low: float = 0.0
    run_limit_high: float = 0.0

    def saw_run_limit(self, limit: float) -> None:
        if limit > 0:
            self.run_limit_low = min(self.run_limit_low or limit, limit)
            self.run_limit_high = max(self.run_limit_high, limit)


class AdaptiveLimiter:
    """An in-flight limit that adapts to the endpoint (one per process)."""

    def __init__(
        self,
        maximum: int,
        *,
        initial: int | None = None,
        minimum: int = 1,
        rpm: float | None = None,
        tpm: float | None = None,
        hub: LimitLink | None = None,
        member: str = "",
        max_cost: float | None = None,
        prices: Prices | None = None,
    ) -> None:
        """`max_cost` (USD, counted by the hub: only with one) and `prices` (what an answer
        costs when the endpoint does not say) make every call start on the hub's permit."""
        self.maximum = max(1, maximum)
        self.minimum = max(1, min(minimum, self.maximum))
        # Under a hub, no call starts before its first grant: the shares sum to the run's limit.
        self.limit = 0.0 if hub is not None else float(initial or self.maximum)
        self.inflight = 0
        self.generation = 0
        self.paused_until = 0.0
        self.limited_share = 0.0  # moving share of recent calls answered 429
        self.rpm, self.tpm = rpm, tpm
        self.stats = LimiterStats()
        self._next_start = 0.0
        self.prices = prices
        self.window = TokenWindow(tpm) if tpm and hub is None else None
        # The calls sent last, in order: enough to reach back past every call in flight.
        self._sent: deque[Ticket] = deque(maxlen=self.maximum + SENT_WINDOW)
        self._changed = asyncio.Event()
        self.waiting = 0  # calls waiting for a slot
        self.sync = HubSync(self, hub, member) if hub is not None else None
        self.permitted = hub is not None and bool(rpm or tpm or max_cost is not None)
        self.budgeted = max_cost is not None
        self._permits: deque[float] = deque()  # start times granted by the hub
        self._tpm_until = 0.0  # the hub's tokens-per-minute budget is spent until then
        self.budget_spent: float | None = None  # set when the hub says --max_cost is reached
        self._heard = 0.0  # the run's limit in the last grant
        self._note()

    def _note(self) -> None:
        """The limit changed: without a hub it is the run's (a grant says the run's otherwise)."""
        if self.sync is None:  # no hub: this limit is the run's
            self.stats.saw_run_limit(round(self.limit, 2))

    @property
    def run_limit(self) -> float:
        """The run's limit as this process last heard it: the hub's (0 before its first grant),
        else its own."""
        return self._heard if self.sync is not None else self.limit

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _wait_seconds(self, now: float) -> float:
        """How long before a new call may start (0 = now); inf = wait for a slot to free."""
        if now < self.paused_until:
            return self.paused_until - now
        if self.sync is not None:
            return self._shared_wait(now)
        if self.rpm and now < self._next_start:
            return self._next_start - now
        if self.window is not None and not self.window.allowance(now, self.inflight):
            return self.window.wait(now, self.inflight) or float("inf")  # else answers free it
        return 0.0 if self.inflight < int(self.limit) else float("inf")

    def _shared_wait(self, now: float) -> float:
        """`_wait_seconds` under a hub: our share, its start permits, its tpm verdict."""
        assert self.sync is not None
        if self.inflight >= int(self.limit):
            self.sync.need()  # our share may grow: others may need less than they hold
            return float("inf")
        if not self.permitted:
            return 0.0
        while self._permits and self._permits[0] < now - 1.0:
            self._permits.popleft()  # its caller gave up long ago: spent, not hoarded
            self.sync.release()
        if self._permits:  # granted within the token window: the wait below is for the next ones
            return max(0.0, self._permits[0] - now)
        if now < self._tpm_until:  # no room in the token window before then: no use asking
            return self._tpm_until - now
        self.sync.need()
        return float("inf")

    def apply(self, grant: Grant) -> None:
        """A hub's answer: our share of its limit, its pause, tpm verdict and start permits."""
        now = time.monotonic()
        self.limit = float(max(0, min(self.maximum, grant.share)))
        self.generation = max(self.generation, grant.generation)
        self.paused_until = max(self.paused_until, now + grant.pause)
        self._tpm_until = now + grant.tpm_wait
        self._permits.extend(now + start for start in grant.starts)
        self.stats.saw_run_limit(round(grant.limit, 2))
        self._heard = grant.limit
        if grant.budget_reached and self.sync is not None:
            self.budget_spent = grant.spent
            self.sync.release(len(self._permits))  # granted before it was reached: unused
            self._permits.clear()
        self._note()
        self._wake()

    @property
    def permits_wanted(self) -> int:
        """Permits for the calls that wait and could start now (not those a full share holds)."""
        if not self.permitted:
            return 0
        startable = min(self.waiting, max(0, int(self.limit) - self.inflight))
        return max(0, startable - len(self._permits))

    async def _wait_turn(self) -> None:
        while (wait := self._wait_seconds(time.monotonic())) > 0 and self.budget_spent is None:
            changed = self._changed
            timeout = None if wait == float("inf") else wait
            with suppress(TimeoutError):  # asyncio.timeout: wait_for can swallow a cancel (3.11)
                async with asyncio.timeout(timeout):
                    await changed.wait()
        if self.budget_spent is not None:
            raise ModelAPIError(
                FailureClass.BUDGET,
                f"--max_cost reached (${self.budget_spent:.6f} spent by the run's model calls): "
                "no model call starts after it",
            )
        if self.permitted:
            self._permits.popleft()

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[Ticket]:
        self.waiting += 1
        try:
            await self._wait_turn()
        finally:
            self.waiting -= 1
        self.inflight += 1
        self.stats.calls += 1
        self.stats.peak_inflight = max(self.stats.peak_inflight, self.inflight)
        if self.rpm and self.sync is None:
            self._next_start = max(time.monotonic(), self._next_start) + 60.0 / self.rpm
        ticket = Ticket(self, self.generation)
        self._sent.append(ticket)
        try:
            yield ticket
        finally:
            self.inflight -= 1
            if self.sync is not None and self.permitted:
                self.sync.release()
            self._wake()

    def _observe(self, limited: bool) -> None:
        self.limited_share += BURST_WEIGHT * (float(limited) - self.limited_share)

    def _on_success(self, tokens: int, cost: float | None) -> None:
        self._observe(False)
        if self.sync is not None:  # the hub counts tokens and cost, and grows the limit
            self.sync.succeeded(tokens, cost or 0.0)
            if self.budgeted:  # at once: the budget is counted as answers arrive
                self.sync.need()
            return
        if self.window is not None:
            self.window.record(time.monotonic(), tokens, 1)
        if self.limit < self.maximum:
            self.limit = min(self.maximum, self.limit + 1.0 / max(self.limit, 1.0))
            if int(self.limit) != int(self.limit - 1.0 / max(self.limit, 1.0)):
                self._note()

    def _burst(self, ticket: Ticket) -> bool:
        """Most recent answers were 429s, and so were most of the SENT_WINDOW calls sent up to
        this one (those still in flight count as accepted; calls sent after it say nothing
        about it, and with a backlog they are all still in flight). Near the start, or for a
        call older than the history, the window is the oldest SENT_WINDOW sends we know."""
        sent = list(self._sent)
        end = next((i + 1 for i, earlier in enumerate(sent) if earlier is ticket), 0)
        window = sent[end - SENT_WINDOW : end] if end >= SENT_WINDOW else sent[:SENT_WINDOW]
        limited = sum(earlier.limited for earlier in window)
        return self.limited_share >= BURST_SHARE and limited >= BURST_SHARE * len(window)

    def _on_failure(self, ticket: Ticket, error_class: FailureClass, retry_after: float | None) -> None:
        self._observe(error_class == FailureClass.RATE_LIMIT)
        if error_class == FailureClass.RATE_LIMIT:
            self.stats.rate_limited += 1
            ticket.limited = True
            if ticket.generation == self.generation and self._burst(ticket):
                if self.sync is not None:  # everyone's limit is cut, once for this burst
                    self.sync.burst(self.generation, retry_after)
                self.generation += 1
                self._sent.clear()  # the next window starts at the cut
                self.limit = min(self.limit, max(float(self.minimum), self.limit * DECREASE))
                if retry_after:
                    self.paused_until = max(self.paused_until, time.monotonic() + retry_after)
                self._note()
        elif error_class == FailureClass.SERVER_ERROR:
            self.stats.server_errors += 1
        elif error_class == FailureClass.TIMEOUT:
            self.stats.timeouts += 1
        elif error_class == FailureClass.CONNECTION:
            self.stats.connection_errors += 1
        self._wake()
