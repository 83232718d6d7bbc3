"""One rate limit for every process that talks to one endpoint: the hub and what crosses to it.

The `LimitHub` is the single authority of a run (held by the parent process of the local
backend, or by one Ray actor on a cluster). Each process's `AdaptiveLimiter` exchanges a small
`Report` for a `Grant` now and then (`agent.llm.rate_limit.HubSync`): in a report, what its
calls did since the last exchange (successes, tokens, a 429 burst it saw, the Retry-After) and
what it wants (calls in flight or waiting, start permits); in the grant, its share of the
global in-flight limit, start permits for the requests-per-minute pace, the pause every
process keeps after a burst, and how long the tokens-per-minute budget is spent for.

- **rpm**: one pace for the run. Start permits are handed out in order from one clock, each
  60/rpm after the last, to whoever asks; a process gets only those due within `HORIZON`,
  so no process hoards the budget while another waits (split per process, `--rpm=60` over
  two workers gave one busy worker 30 rpm).
- **tpm**: the tokens of every process, counted in one 60 s window; a call in flight reserves
  a call's mean tokens until its answer (`agent.llm.spend`), so the calls in flight cannot
  overrun it before the first answer. Calls start on permits, as for rpm.
- **max_cost**: the USD every process's answered calls cost, summed as they are reported
  (a process reports each answer at once); once it reaches the budget the hub grants no start
  permit and says so, and every process fails its waiting calls as `budget`. What a run spends
  is then at most the budget plus the calls holding permits when it was reached (in flight, or
  answered and not yet reported), and no more of them than the in-flight limit.
- **adaptive in-flight limit**: one AIMD limit; a burst seen by any process halves it (once
  per generation: the other processes' 429s from the same burst carry the old generation)
  and pauses every process for the server's Retry-After; successes from all grow it back.
  It is divided by demand (max-min fair), not blindly: a process with nothing to send holds
  no slots that another could use. The shares never sum past it (a share counts until its
  holder has heard of the next one), so with more processes than slots some hold none and
  wait; one that waited past `TURN` gets the next slot that frees.

The hub also keeps the limit's history (each change, bounded), which `statistics.json` and the
report plot: the workers' own views are shares of it, 0 while idle, on clocks that start when
each worker does, and a lost worker's never arrives.

Times cross as seconds from now, never as clock readings: nodes' clocks differ.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

from agent.llm.spend import TokenWindow

DECREASE = 0.5
HORIZON = 0.5  # seconds ahead for which start permits are granted at once
STALE = 5.0  # seconds after which a silent member's demand no longer counts (it died, or idles)
# Seconds after which a silent member's start permits and calls in flight no longer count. Not
# STALE: a worker whose event loop stalls (a sandbox closing on a loaded machine) still has
# them, answered and unreported; forgetting them at 5 s let 4 workers start 13,680 tokens in a
# minute under --tpm=9000. A dead member's lapse after a token window.
LAPSE = 65.0
# Seconds a member with calls waiting and no slot (more members want one than there are) waits
# before the slots left over by the even split go to it first: a holder yields after its call
# in flight, so every member gets a turn. Not 0: each hand-over idles a slot for an exchange.
TURN = 1.0
HISTORY_LIMIT = 2000  # changes of the limit kept; past it, every other one of the older half goes


@dataclass(frozen=True)
class Report:
    """What one process tells the hub since its previous exchange."""

    member: str
    demand: int  # model calls in flight or waiting to start
    inflight: int = 0  # model calls in flight now
    want_starts: int = 0  # start permits wanted (rpm), beyond those held
    successes: int = 0
    tokens: int = 0
    cost: float = 0.0  # USD of the answered calls
    released: int = 0  # start permits given back: their calls ended, or they went unused
    burst_generation: int | None = None  # the generation under which it saw a 429 burst
    retry_after: float | None = None


@dataclass(frozen=True)
class Grant:
    """What the hub answers: all durations in seconds from now."""

    share: int  # model calls this process may have in flight
    starts: tuple[float, ...] = ()  # start permits (rpm): when each may start
    pause: float = 0.0  # start no call for this long (a burst's Retry-After)
    tpm_wait: float = 0.0  # the tokens-per-minute budget is spent for this long
    generation: int = 0
    limit: float = 0.0  # the global in-flight limit now
    spent: float = 0.0  # USD the run's answered calls cost (counted when max_cost is set)
    budget_reached: bool = False  # max_cost is spent: start no call


class LimitLink(Protocol):
    """How a process reaches the hub: a pipe to the parent, a call to a Ray actor. A hub that
    cannot be reached raises OSError (the caller waits and asks again)."""

    async def exchange(self, report: Report) -> Grant: ...


class LimitHub:
    """The run's one rate limit; `exchange` is its only operation (callers serialize it)."""

    def __init__(
        self,
        maximum: int,
        *,
        rpm: float | None = None,
        tpm: float | None = None,
        max_cost: float | None = None,
    ) -> None:
        self.maximum = max(1, maximum)
        self.limit = float(self.maximum)
        self.rpm, self.max_cost = rpm, max_cost
        self.window = TokenWindow(tpm) if tpm else None
        self.generation = 0
        self.paused_until = 0.0
        self.next_start = 0.0
        self.demand: dict[str, int] = {}
        self.seen: dict[str, float] = {}  # member -> when it last reported
        self.held: dict[str, int] = {}  # member -> start permits granted and not given back
        self.granted: dict[str, int] = {}  # member -> its share in its last grant
        self.previous: dict[str, int] = {}  # member -> the grant before: in use until the last arrives
        self.inflight: dict[str, int] = {}  # member -> calls in flight at its last report
        self.hungry: dict[str, float] = {}  # member -> since when it has asked and held no slot
        self.departures = 0
        self.spent = 0.0
        self.cuts = 0
        self.history: list[tuple[float, float]] = []  # (monotonic clock, limit) at each change
        self._note(time.monotonic())

    @property
    def budget_reached(self) -> bool:
        return self.max_cost is not None and self.spent >= self.max_cost

    def exchange(self, report: Report) -> Grant:
        now = time.monotonic()
        self._forget_silent(now)
        self.demand[report.member] = report.demand
        self.seen[report.member] = now
        self.inflight[report.member] = report.inflight
        self._account(report, now)
        self._note(now)
        self.previous[report.member] = self.granted.get(report.member, 0)
        share = self.granted[report.member] = self._share(report.member, now)
        if report.demand > 0 and share == 0:
            self.hungry.setdefault(report.member, now)
        else:
            self.hungry.pop(report.member, None)
        return Grant(
            share=share,
            starts=self._grant_starts(report, now),
            pause=max(0.0, self.paused_until - now),
            tpm_wait=self._tpm_wait(now),
            generation=self.generation,
            limit=self.limit,
            spent=self.spent,
            budget_reached=self.budget_reached,
        )

    def limit_history(self) -> list[tuple[float, float]]:
        """The run's limit at each change, as (seconds before now, limit): the only clock
        reading that means the same on another node."""
        now = time.monotonic()
        return [(now - at, limit) for at, limit in self.history]

    def _note(self, now: float) -> None:
        limit = round(self.limit, 2)  # to 2 decimals: each success moves it by 1/limit
        if self.history and self.history[-1][1] == limit:
            return
        self.history.append((now, limit))
        if len(self.history) > HISTORY_LIMIT:
            del self.history[1 : len(self.history) // 2 : 2]

    def leave(self, member: str) -> None:
        """`member`'s process is gone (its pipe closed): its calls in flight went with it, so its
        slots are free at once. Its start permits' tokens may have been spent at the endpoint:
        they count until LAPSE, under a name of their own (a replacement process reports under
        the same name, and would never give them back)."""
        for table in (self.demand, self.granted, self.previous, self.inflight, self.hungry):
            table.pop(member, None)
        held, seen = self.held.pop(member, 0), self.seen.pop(member, None)
        if held and seen is not None:
            self.departures += 1
            gone = f"{member} (gone #{self.departures})"
            self.held[gone], self.seen[gone] = held, seen

    def _account(self, report: Report, now: float) -> None:
        if report.burst_generation == self.generation:  # the first report of this burst cuts
            self.generation += 1
            self.cuts += 1
            self.limit = max(1.0, self.limit * DECREASE)
            if report.retry_after:
                self.paused_until = max(self.paused_until, now + report.retry_after)
        for _ in range(min(report.successes, self.maximum)):  # additive increase: ~1 per window
            if self.limit >= self.maximum:
                break
            self.limit = min(float(self.maximum), self.limit + 1.0 / self.limit)
        if self.window is not None:
            self.window.record(now, report.tokens, report.successes)
        self.spent += report.cost
        self.held[report.member] = max(0, self.held.get(report.member, 0) - report.released)

    def _forget_silent(self, now: float) -> None:
        """A member that stopped reporting (its process or node is gone, or it idles) asks for
        no share; what it may still have in flight counts until LAPSE."""
        for member, at in list(self.seen.items()):
            if at < now - STALE:
                self.demand.pop(member, None)
                self.hungry.pop(member, None)
            if at < now - LAPSE:
                del self.seen[member]
                for table in (self.held, self.granted, self.previous, self.inflight):
                    table.pop(member, None)

    def _share(self, member: str, now: float) -> int:
        """Its part of the max-min fair split (`fair_split`), never more than the others leave
        free: until its next report, another member may use the share it was granted, or the
        one before (until the last grant reaches it), or more if a cut came while its calls
        were in flight. So the shares sum to at most the limit (none is handed out beyond a
        member's demand: an idle member would hold it until it spoke again), and a member may
        get 0 until one frees (it asks again while its calls wait)."""
        total = int(self.limit)
        wants = {name: want for name, want in self.demand.items() if want > 0}
        first = sorted(wants, key=lambda name: self._precedence(name, now))
        share = fair_split(total, wants, first).get(member, 0)
        others = sum(self._committed(m) for m in self.seen if m != member)
        return max(0, min(share, total - others))

    def _precedence(self, member: str, now: float) -> tuple[int, float]:
        """Who gets the slots the split leaves over: a member that has waited past TURN with
        none, longest first; then those holding slots (a grant does not move for nothing)."""
        since = self.hungry.get(member)
        if since is not None and now - since >= TURN:
            return (0, since)
        return (1, -self.granted.get(member, 0))

    def _committed(self, member: str) -> int:
        return max(self.granted.get(member, 0), self.previous.get(member, 0), self.inflight.get(member, 0))

    def _grant_starts(self, report: Report, now: float) -> tuple[float, ...]:
        """Start permits for `report.member`: none once the budget is spent, no more than the
        token window has room for, paced by rpm."""
        wanted = report.want_starts
        if self.budget_reached:
            return ()
        if self.window is not None:
            wanted = min(wanted, self.window.allowance(now, sum(self.held.values())))
        starts = self._starts(wanted, now)
        if starts:
            self.held[report.member] = self.held.get(report.member, 0) + len(starts)
        return starts

    def _starts(self, wanted: int, now: float) -> tuple[float, ...]:
        if wanted <= 0:
            return ()
        if not self.rpm:
            return (0.0,) * wanted
        interval = 60.0 / self.rpm
        starts: list[float] = []
        while len(starts) < wanted:
            start = max(now, self.next_start)
            if starts and start - now > HORIZON:
                break  # the rest later, when they are nearly due
            starts.append(start - now)
            self.next_start = start + interval
        return tuple(starts)

    def _tpm_wait(self, now: float) -> float:
        if self.window is None:
            return 0.0
        return self.window.wait(now, sum(self.held.values()))


def dated(ages: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """`LimitHub.limit_history`'s points on this process's monotonic clock."""
    now = time.monotonic()
    return [(now - age, limit) for age, limit in ages]


def fair_split(total: int, wants: dict[str, int], first: list[str]) -> dict[str, int]:
    """Max-min fair split of `total` slots by demand: a member wanting less than an even part
    gets what it wants; the others share the rest evenly, and the slots that do not divide
    evenly go one each in the order of `first` (without it, the member listed last in a dict
    won every tie, and the first starved while the others kept asking)."""
    pending = sorted(wants, key=lambda name: wants[name])
    shares: dict[str, int] = {}
    left = total
    while pending and wants[pending[0]] <= left // len(pending):
        name = pending.pop(0)
        shares[name] = wants[name]
        left -= wants[name]
    if pending:
        level, extra = divmod(left, len(pending))
        order = {name: rank for rank, name in enumerate(first)}
        ranked = sorted(pending, key=order.__getitem__)
        shares.update((name, level + int(rank < extra)) for rank, name in enumerate(ranked))
    return shares
