"""The live progress display of a batch run, counted in prompts.

On an interactive terminal a `rich` progress bar shows done/total, the split by outcome, the
recent rate and the ETA, and `log` lines are printed above it so they never shred it.
Elsewhere (CI logs, files, or when disabled) a plain one-line status is printed at most every
`interval` seconds instead, because a redrawn bar is unreadable in a log file.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, Task, TaskID
from rich.text import Text

OUTCOMES = ("done", "partial", "failed", "discarded")
_SYMBOLS = {"done": "✓", "partial": "◐", "failed": "✗", "discarded": "⌫"}


def _clock_text(seconds: float | None) -> str:
    if seconds is None:
        return "-:--:--"
    whole = int(seconds)
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


class RateWindow:
    """Prompts finished per second over the last `window` seconds (or since the start when
    the run is younger): recent enough to follow the endpoint, long enough to be steady."""

    def __init__(self, clock: Callable[[], float], window: float = 30.0) -> None:
        self._clock = clock
        self._window = window
        self._start = clock()
        self._times: deque[float] = deque()

    def add(self) -> None:
        self._times.append(self._clock())

    def rate(self) -> float:
        now = self._clock()
        while self._times and self._times[0] <= now - self._window:
            self._times.popleft()
        span = min(self._window, now - self._start)
        return len(self._times) / span if span > 0 else 0.0


class _CallableColumn(ProgressColumn):
    """A column whose text comes from the display itself (our counts, rate and ETA)."""

    def __init__(self, text: Callable[[], str], style: str = "") -> None:
        super().__init__()
        self._text = text
        self._style = style

    def render(self, task: Task) -> Text:
        return Text(self._text(), style=self._style)


class RunProgress:
    """Progress of a run in prompts; `already_done` (from a resumed run) counts toward
    completion but not toward the rate. Use as a context manager."""

    def __init__(
        self,
        total: int,
        already_done: int = 0,
        *,
        console: Console | None = None,
        enabled: bool = True,
        interval: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = total
        self.already_done = already_done
        self.console = console or Console(stderr=True)
        self.live = enabled and self.console.is_interactive
        self._interval = interval
        self._clock = clock
        self._start = clock()
        self._last_status = self._start
        self._rate = RateWindow(clock)
        self._counts = dict.fromkeys(OUTCOMES, 0)
        self._lock = threading.Lock()
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    @property
    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    @property
    def finished(self) -> int:
        """Prompts finished, resumed ones included."""
        return self.already_done + sum(self._counts.values())

    def rate(self) -> float:
        return self._rate.rate()

    def eta(self) -> float | None:
        rate, remaining = self.rate(), max(0, self.total - self.finished)
        if remaining == 0:
            return 0.0
        return remaining / rate if rate > 0 else None

    def counts_text(self) -> str:
        counts = self.counts
        return " ".join(f"{_SYMBOLS[key]} {counts[key]}" for key in OUTCOMES)

    def status_line(self) -> str:
        """The plain one-line status printed where no live bar is possible."""
        return (
            f"progress: {self.finished}/{self.total} prompts ({self.counts_text()}) · "
            f"{self.rate():.2f} prompts/s · elapsed {_clock_text(self._clock() - self._start)} · "
            f"ETA {_clock_text(self.eta())}"
        )

    def __enter__(self) -> RunProgress:
        if self.live:
            self._progress = Progress(
                BarColumn(),
                MofNCompleteColumn(),
                _CallableColumn(self.counts_text),
                _CallableColumn(lambda: f"{self.rate():.2f} prompts/s", "progress.data.speed"),
                _CallableColumn(lambda: _clock_text(self._clock() - self._start), "progress.elapsed"),
                _CallableColumn(lambda: f"ETA {_clock_text(self.eta())}", "progress.remaining"),
                console=self.console,
                refresh_per_second=4,
            )
            self._task = self._progress.add_task("prompts", total=self.total, completed=self.already_done)
            self._progress.start()
        else:
            self._print_status()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._progress is not None:
            self._progress.stop()  # leaves the final bar on screen
            self._progress = None
        else:
            self._print_status()

    def advance(self, outcome: str) -> None:
        """One prompt finished: "done", "partial", "failed" or "discarded"."""
        if outcome not in self._counts:
            raise ValueError(f"unknown progress outcome {outcome!r}; expected one of {', '.join(OUTCOMES)}")
        with self._lock:
            self._counts[outcome] += 1
            self._rate.add()
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, completed=self.finished)
        elif self._clock() - self._last_status >= self._interval:
            self._print_status()

    def log(self, message: str) -> None:
        """Print a line above the live bar (or plainly when there is none)."""
        self._print(message)

    def _print_status(self) -> None:
        self._last_status = self._clock()
        self._print(self.status_line())

    def _print(self, line: str) -> None:
        # markup off: prompts and tool output contain brackets; soft_wrap keeps a line whole
        self.console.print(line, markup=False, highlight=False, soft_wrap=True)
