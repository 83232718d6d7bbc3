"""The live progress display: counts, rate, log lines above the bar, plain mode for logs."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from agent.batch.progress import RateWindow, RunProgress


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
