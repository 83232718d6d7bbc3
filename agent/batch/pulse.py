"""A worker's pulse: its limiter's load sent to the parent about once a second while it changes.

The parent sums the workers' latest pulses (`agent.batch.monitor`) for the live progress and
the run's timeline, and shows the run's limit as the latest pulse says it. An idle worker
sends nothing, so a quiet run adds no traffic.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from agent.batch.events import LimiterPulse
from agent.llm.rate_limit import AdaptiveLimiter

PULSE_SECONDS = 1.0


def pulse_of(worker: int, limiter: AdaptiveLimiter) -> LimiterPulse:
    stats = limiter.stats
    # the run's limit in whole slots: its additive increase would otherwise change every pulse
    run_limit = float(int(limiter.run_limit))
    return LimiterPulse(worker, run_limit, limiter.inflight, stats.rate_limited, stats.server_errors)


async def send_pulses(
    worker: int, limiter: AdaptiveLimiter, put: Callable[[LimiterPulse], None], every: float = PULSE_SECONDS
) -> None:
    """Put a pulse now, then every `every` seconds when it differs from the last one sent;
    runs until cancelled."""
    last: LimiterPulse | None = None
    while True:
        pulse = pulse_of(worker, limiter)
        if pulse != last:
            put(pulse)
            last = pulse
        await asyncio.sleep(every)
