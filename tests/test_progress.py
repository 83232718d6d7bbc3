"""The live progress display: counts, rate, tokens, the load (the workers' pulses summed), log lines
above the bar, sparse plain lines for logs, and the timeline the monitor records."""

from __future__ import annotations

import asyncio
import io
import itertools
from typing import Any

import pytest
from rich.console import Console

from agent.batch.events import LimiterPulse, LimiterReport, WorkerLost
from agent.batch.monitor import RunMonitor
from agent.batch.progress import Load, RateWindow, RunProgress
from agent.batch.pulse import send_pulses
from agent.config.agent_config import AgentConfig
from agent.config.run_config import RunConfig
from agent.llm.rate_limit import AdaptiveLimiter
from agent.store.timeline import COLUMNS, Timeline


class FakeClock:
    """Time that moves only when the test says so (no timing in tests)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def console(*, terminal: bool) -> Console:
    return Console(record=True, force_terminal=terminal, width=120, file=io.StringIO())


def output(con: Console) -> str:
    file = con.file
    assert isinstance(file, io.StringIO)
    return file.getvalue()


def test_counts_per_outcome_and_unknown_outcome_is_refused() -> None:
    clock = FakeClock()
    with RunProgress(10, console=console(terminal=True), clock=clock) as progress:
        for outcome in ("done", "done", "partial", "failed", "discarded", "done"):
            progress.advance(outcome)
        with pytest.raises(ValueError, match="unknown progress outcome 'completed'"):
            progress.advance("completed")
    assert progress.counts == {"done": 3, "partial": 1, "failed": 1, "discarded": 1}
    assert progress.finished == 6


def test_rate_excludes_prompts_done_by_an_earlier_run() -> None:
    clock = FakeClock()
    with RunProgress(100, already_done=60, console=console(terminal=True), clock=clock) as progress:
        for _ in range(10):
            clock.now += 0.5
            progress.advance("done")
        assert progress.rate() == pytest.approx(2.0)  # 10 prompts in 5 s, not 70
        assert progress.finished == 70
        assert progress.eta() == pytest.approx(15.0)  # 30 left at 2/s


def test_rate_follows_a_recent_window() -> None:
    clock = FakeClock()
    window = RateWindow(clock, window=30.0)
    for _ in range(60):
        clock.now += 0.5
        window.add()
    assert window.rate() == pytest.approx(2.0)
    clock.now += 15.0  # a stall: half the window now holds no finishes
    assert window.rate() == pytest.approx(1.0)
    clock.now += 30.0
    assert window.rate() == 0.0


def test_eta_is_unknown_without_a_rate_and_zero_when_done() -> None:
    clock = FakeClock()
    progress = RunProgress(2, already_done=1, console=console(terminal=False), clock=clock)
    assert progress.eta() is None
    clock.now += 1
    progress.advance("failed")
    assert progress.eta() == 0.0


def test_live_bar_shows_counts_and_log_lines_print_whole_above_it() -> None:
    clock = FakeClock()
    con = console(terminal=True)
    message = "[bold]prompt 7 ✓ " + "x" * 200  # brackets and a line longer than the terminal
    with RunProgress(100, already_done=50, console=con, clock=clock) as progress:
        assert progress.live
        for outcome in ("done", "done", "partial", "failed", "discarded"):
            clock.now += 1.0
            progress.advance(outcome)
        progress.log(message)
    raw = output(con)
    assert f"\x1b[2K{message}\n" in raw  # the bar's line is erased, then the message whole
    final = con.export_text().rsplit(message, 1)[1]
    assert "55/100" in final and "✓ 2 ◐ 1 ✗ 1 ⌫ 1" in final and "1.00 prompts/s" in final


def test_not_a_terminal_prints_plain_status_lines_at_most_every_interval() -> None:
    clock = FakeClock()
    con = console(terminal=False)
    with RunProgress(20, already_done=4, console=con, interval=10.0, clock=clock) as progress:
        assert not progress.live
        for _ in range(12):
            clock.now += 2.0
            progress.advance("done")
        progress.log("prompt 3 [done]")
    lines = output(con).splitlines()
    assert "\x1b" not in output(con)
    status = [line for line in lines if line.startswith("progress: ")]
    # the opening line, one each after 10 s and 20 s of the 24 s run, and the closing line
    assert [line.split(" prompts")[0] for line in status] == [
        "progress: 4/20",
        "progress: 9/20",
        "progress: 14/20",
        "progress: 16/20",
    ]
    assert "(✓ 12 ◐ 0 ✗ 0 ⌫ 0) · 0.50 prompts/s" in status[-1]
    assert "prompt 3 [done]" in lines


def test_disabled_on_a_terminal_is_plain_too() -> None:
    clock = FakeClock()
    con = console(terminal=True)
    with RunProgress(3, console=con, enabled=False, clock=clock) as progress:
        assert not progress.live
        progress.log("hello")
        progress.advance("partial")
    lines = output(con).splitlines()
    assert lines[0].startswith("progress: 0/3") and lines[1] == "hello"
    assert lines[-1].startswith("progress: 1/3 prompts (✓ 0 ◐ 1 ✗ 0 ⌫ 0)")
    assert "━" not in output(con)


def test_status_line_has_tokens_per_second_and_the_load() -> None:
    clock = FakeClock()
    con = console(terminal=False)
    with RunProgress(10, console=con, clock=clock) as progress:
        for tokens in (1200, 800):
            clock.now += 2.0
            progress.advance("done", tokens)
        progress.set_load(Load(conversations=7, calls=5, limit=48))
        line = progress.status_line()
    assert "2/10 prompts (✓ 2 ◐ 0 ✗ 0 ⌫ 0) · 0.50 prompts/s · ETA 0:00:16" in line
    assert "2k tokens (500/s)" in line
    assert "in flight 7 prompts, 5 calls (limit 48)" in line


def test_plain_status_lines_thin_out_as_the_run_gets_longer() -> None:
    clock = FakeClock()
    con = console(terminal=False)
    with RunProgress(100_000, console=con, interval=10.0, max_interval=300.0, clock=clock) as progress:
        for _ in range(36_000):  # ten hours, one prompt a second
            clock.now += 1.0
            progress.advance("done")
    status = [line for line in output(con).splitlines() if line.startswith("progress: ")]
    # every 10 s for the first 100 s, then every tenth of the elapsed time, at most every 5 min
    assert 150 < len(status) < 170  # not the 3,600 lines a fixed 10 s interval would print
    gaps = [int(b.split("/")[0][10:]) - int(a.split("/")[0][10:]) for a, b in itertools.pairwise(status)]
    assert gaps[:9] == [10] * 9 and max(gaps) == 300


def test_live_bar_shows_tokens_and_the_load() -> None:
    clock = FakeClock()
    con = console(terminal=True)
    with RunProgress(4, console=con, clock=clock) as progress:
        clock.now += 1.0
        progress.advance("done", 3000)
        progress.set_load(Load(conversations=3, calls=2, limit=64))
    bar, details = con.export_text().splitlines()[-2:]  # the final frame: the bar, then the details
    assert bar.endswith("1/4 ✓ 1 ◐ 0 ✗ 0 ⌫ 0 1.00 prompts/s 0:00:01 ETA 0:00:03")
    assert details.strip() == "3k tokens (3k/s) · in flight 3 prompts, 2 calls (limit 64)"


def run_config(**changes: Any) -> RunConfig:
    return RunConfig(dataset_file="d.jsonl", batch_size=1, run_name="r", agent=AgentConfig(), **changes)


def test_monitor_sums_the_workers_pulses_and_records_the_timeline() -> None:
    clock = FakeClock()
    progress = RunProgress(10, console=console(terminal=False), clock=clock)
    timeline = Timeline()
    monitor = RunMonitor(progress, timeline, run_config(num_workers=2, max_inflight=64), clock=clock)
    assert progress.load.limit == 64  # before any pulse: --max_inflight
    monitor.pulse(LimiterPulse(0, run_limit=0.0, calls_in_flight=5, rate_limited=3, server_errors=1))
    clock.now += 1.0
    monitor.advance("done", {"prompt_tokens": 100, "completion_tokens": 20})
    monitor.advance("failed", {"total_tokens": 30})
    monitor.tick(conversations=6)
    assert progress.load == Load(conversations=6, calls=5, limit=64.0)  # not heard yet: as it was
    monitor.pulse(LimiterPulse(1, run_limit=32.0, calls_in_flight=4, rate_limited=2, server_errors=0))
    monitor.pulse(LimiterPulse(0, run_limit=33.0, calls_in_flight=1, rate_limited=5, server_errors=1))
    clock.now += 1.0
    monitor.finish()
    assert progress.tokens == 150 and progress.load == Load(0, 0, 33.0)  # the latest heard
    points = [dict(zip(COLUMNS, point, strict=True)) for point in timeline.points]
    assert [p["seconds"] for p in points] == [0.0, 1.0, 2.0]
    assert points[1] == {
        "seconds": 1.0,
        "finished": 2,
        "failed": 1,
        "tokens": 150,
        "in_flight": 6,
        "calls_in_flight": 5,
        "limit": 64.0,
        "rate_limited": 3,
        "server_errors": 1,
    }
    assert points[2]["rate_limited"] == 7 and points[2]["calls_in_flight"] == 0


def test_the_limit_shown_is_the_runs_not_the_workers_idle_shares() -> None:
    # It was the sum of the workers' shares: "(limit 12)", "(limit 3)", "(limit 1)" as they
    # idled between tool calls, while the summary said "in-flight limit 64-64".
    clock = FakeClock()
    progress = RunProgress(10, console=console(terminal=False), clock=clock)
    monitor = RunMonitor(progress, Timeline(), run_config(num_workers=2, max_inflight=64), clock=clock)
    monitor.pulse(LimiterPulse(0, run_limit=64.0, calls_in_flight=0, rate_limited=0, server_errors=0))
    monitor.pulse(LimiterPulse(1, run_limit=64.0, calls_in_flight=1, rate_limited=0, server_errors=0))
    monitor.tick(conversations=2)
    assert progress.load == Load(2, 1, 64.0)


def two_workers_watched() -> tuple[FakeClock, RunProgress, Timeline, RunMonitor]:
    """A monitor of a run of 10 prompts on two workers (--max_inflight=64), on a fake clock."""
    clock = FakeClock()
    progress = RunProgress(10, console=console(terminal=False), clock=clock)
    timeline = Timeline()
    monitor = RunMonitor(progress, timeline, run_config(num_workers=2, max_inflight=64), clock=clock)
    return clock, progress, timeline, monitor


def test_a_lost_workers_load_leaves_the_sums_and_its_counts_stay() -> None:
    # A lost Ray actor's last pulse stayed in the sums to the end (its replacement has a new
    # number); a local replacement reuses the number, and its counts start again from 0.
    clock, progress, timeline, monitor = two_workers_watched()
    monitor.pulse(LimiterPulse(0, run_limit=64.0, calls_in_flight=5, rate_limited=3, server_errors=1))
    monitor.pulse(LimiterPulse(1, run_limit=64.0, calls_in_flight=7, rate_limited=2, server_errors=2))
    monitor.show(WorkerLost(1), None)
    monitor.pulse(LimiterPulse(0, run_limit=64.0, calls_in_flight=6, rate_limited=3, server_errors=1))
    clock.now += 1.0
    monitor.tick(conversations=6)
    assert progress.load.calls == 6
    monitor.pulse(LimiterPulse(1, run_limit=64.0, calls_in_flight=1, rate_limited=0, server_errors=0))
    monitor.pulse(LimiterPulse(0, run_limit=64.0, calls_in_flight=6, rate_limited=3, server_errors=1))
    clock.now += 1.0
    monitor.tick(conversations=7)
    point = dict(zip(COLUMNS, timeline.points[-1], strict=True))
    assert (point["calls_in_flight"], point["limit"]) == (7, 64.0)
    assert (point["rate_limited"], point["server_errors"]) == (5, 3)  # none went back down


def test_the_last_point_counts_what_the_workers_goodbyes_report() -> None:
    # A worker pulses at most once a second, so its last pulse can miss the 5xx of the run's
    # last second: the last point said 0 server errors where statistics.json said 3.
    clock, progress, timeline, monitor = two_workers_watched()
    monitor.pulse(LimiterPulse(0, run_limit=64.0, calls_in_flight=1, rate_limited=0, server_errors=0))
    monitor.pulse(LimiterPulse(1, run_limit=64.0, calls_in_flight=1, rate_limited=1, server_errors=0))
    monitor.show(LimiterReport(0, {"rate_limited": 2, "server_errors": 1, "calls": 3}), None)
    monitor.show(LimiterReport(1, {"rate_limited": 1, "server_errors": 2, "calls": 3}), None)
    monitor.show(WorkerLost(1), None)  # a goodbye, then the process gone: counted once
    clock.now += 0.5
    monitor.finish()
    point = dict(zip(COLUMNS, timeline.points[-1], strict=True))
    assert (point["rate_limited"], point["server_errors"], point["calls_in_flight"]) == (3, 3, 0)
    assert progress.load.calls == 0


def test_a_worker_pulses_at_once_then_only_when_its_load_changes() -> None:
    limiter = AdaptiveLimiter(8)
    sent: list[LimiterPulse] = []

    async def watch() -> None:
        task = asyncio.create_task(send_pulses(3, limiter, sent.append, every=0.01))
        await asyncio.sleep(0.05)
        limiter.stats.rate_limited += 1
        await asyncio.sleep(0.05)
        task.cancel()

    asyncio.run(watch())
    assert sent == [
        LimiterPulse(3, run_limit=8.0, calls_in_flight=0, rate_limited=0, server_errors=0),
        LimiterPulse(3, run_limit=8.0, calls_in_flight=0, rate_limited=1, server_errors=0),
    ]
