"""What the parent watches while a run goes: prompts finished and tokens (from the answers),
the workers' load (their latest `LimiterPulse` each, summed; a worker's `LimiterReport` at its
end replaces its last pulse, which can be a second old), the run's in-flight limit (as the
latest pulse heard it from the hub: not the workers' shares, which fall to 0 while they idle)
and conversations in flight (from the scheduler), fed to the live progress and, once a tick,
to the run's timeline.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping

from agent.batch.events import (
    Discarded,
    Failed,
    Finished,
    LimiterPulse,
    LimiterReport,
    WorkerEvent,
    WorkerLost,
)
from agent.batch.progress import Load, RunProgress
from agent.config.run_config import RunConfig
from agent.store.jsonl import json_int
from agent.store.timeline import Timeline


def usage_tokens(usage: Mapping[str, float]) -> int:
    """Total tokens of an answer's usage (prompt + completion when no total is given)."""
    total = usage.get("total_tokens")
    if total is None:
        total = usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)
    return int(total)


class RunMonitor:
    """Feeds `progress` and keeps the `timeline` of this invocation."""

    def __init__(
        self,
        progress: RunProgress,
        timeline: Timeline,
        config: RunConfig,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.progress = progress
        self._limit = float(config.max_inflight)  # the run's limit: where it starts
        self.timeline = timeline
        self._clock = clock
        self._start = clock()
        self._pulses: dict[int, LimiterPulse] = {}
        self._gone = (0, 0)  # the 429s and 5xx that lost workers had reported (cumulative counts)
        self._finished = self._failed = 0
        self.tick(0)

    def show(self, event: WorkerEvent, advance: str | None) -> None:
        """The live progress of one event: a worker's load, a failure's line, a prompt answered."""
        if isinstance(event, LimiterPulse):
            self.pulse(event)
        if isinstance(event, WorkerLost):
            self.lost(event.worker)
        if isinstance(event, LimiterReport):
            self.reported(event)
        if isinstance(event, Failed):
            self.progress.log(
                f"prompt {event.prompt_index} failed ({event.error_class}): {event.message[:200]}"
            )
        if advance is not None and isinstance(event, Finished | Discarded | Failed):
            self.advance(advance, event.usage)

    def pulse(self, event: LimiterPulse) -> None:
        self._pulses[event.worker] = event
        if event.run_limit > 0:  # 0: the worker has not heard from the hub yet
            self._limit = event.run_limit

    def advance(self, outcome: str, usage: Mapping[str, float]) -> None:
        """One prompt answered: "done", "partial", "failed" or "discarded"."""
        self._finished += 1
        self._failed += outcome == "failed"
        self.progress.advance(outcome, usage_tokens(usage))

    def lost(self, worker: int) -> None:
        """A worker died: its calls in flight are gone, its counts stay."""
        last = self._pulses.pop(worker, None)
        if last is not None:
            self._gone = (self._gone[0] + last.rate_limited, self._gone[1] + last.server_errors)

    def reported(self, event: LimiterReport) -> None:
        """A worker's goodbye: its final counts, which statistics.json sums. Its last pulse can
        be up to a pulse interval older (pulses go once a second), so the timeline's last point
        takes these instead: the 429s and 5xx of a run's last second would be missing."""
        self._pulses.pop(event.worker, None)
        stats = event.stats
        rate_limited, server_errors = (
            json_int(stats.get("rate_limited")),
            json_int(stats.get("server_errors")),
        )
        self._gone = (self._gone[0] + rate_limited, self._gone[1] + server_errors)

    def finish(self) -> None:
        """The workers are gone: nothing is in flight; the timeline's last point."""
        self._pulses = {w: dataclasses.replace(p, calls_in_flight=0) for w, p in self._pulses.items()}
        self.tick(0)

    def tick(self, conversations: int) -> None:
        """About once a second: the load now, and one timeline point."""
        pulses = self._pulses.values()
        limit = self._limit
        load = Load(conversations, sum(p.calls_in_flight for p in pulses), limit)
        self.progress.set_load(load)
        self.timeline.add(
            (
                self._clock() - self._start,
                self._finished,
                self._failed,
                self.progress.tokens,
                load.conversations,
                load.calls,
                limit,
                self._gone[0] + sum(p.rate_limited for p in pulses),
                self._gone[1] + sum(p.server_errors for p in pulses),
            )
        )
