"""The live progress display of a batch run, counted in prompts.

On an interactive terminal a `rich` progress bar shows done/total, the split by outcome, the
recent rate and the ETA, and a second line tokens so far and per second and the load:
conversations and model calls in flight against the limiters' current limit. `log` lines are
printed above it so they never shred it. Elsewhere (CI logs, files, or when disabled) a plain
one-line status is printed instead, because a redrawn bar is unreadable in a log file; and
sparsely: every `interval` seconds at first, then every tenth of the time elapsed, at most every
`max_interval` seconds (a ten-hour run logs about 160 status lines, not 3,600).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from rich.console import Console, RenderableType
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, Task, TaskID
from rich.text import Text

OUTCOMES = ("done", "partial", "failed", "discarded")
_SYMBOLS = {"done": "✓", "partial": "◐", "failed": "✗", "discarded": "⌫"}


def _clock_text(seconds: float | None) -> str:
    if seconds is None:
        return "-:--:--"
    whole = int(seconds)
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


def _count_text(value: float) -> str:
    """12, 12.3k, 4.56M: a count that keeps its width while it grows."""
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= size:
            return f"{value / size:.3g}{suffix}"
    return f"{value:.0f}"


class RateWindow:
    """Amounts (prompts, tokens) per second over the last `window` seconds (or since the start
    when the run is younger): recent enough to follow the endpoint, long enough to be steady."""

    def __init__(self, clock: Callable[[], float], window: float = 30.0) -> None:
        self._clock = clock
        self._window = window
        self._start = clock()
        self._items: deque[tuple[float, float]] = deque()
        self._sum = 0.0

    def add(self, amount: float = 1.0) -> None:
        self._items.append((self._clock(), amount))
        self._sum += amount

    def rate(self) -> float:
        now = self._clock()
        while self._items and self._items[0][0] <= now - self._window:
            self._sum -= self._items.popleft()[1]
        span = min(self._window, now - self._start)
        return max(self._sum, 0.0) / span if span > 0 and self._items else 0.0


@dataclass(frozen=True)
class Load:
    """What is running now: conversations (prompts started, not answered), model calls in
    flight and the sum of the workers' current in-flight limits."""

    conversations: int = 0
    calls: int = 0
    limit: float = 0.0

    def text(self) -> str:
        return f"in flight {self.conversations} prompts, {self.calls} calls (limit {self.limit:g})"


class _CallableColumn(ProgressColumn):
    """A column whose text comes from the display itself (our counts, rate and ETA)."""

    def __init__(self, text: Callable[[], str], style: str = "") -> None:
        super().__init__()
        self._text = text
        self._style = style

    def render(self, task: Task) -> Text:
        return Text(self._text(), style=self._style)


class _TwoLineProgress(Progress):
    """The bar and its counts on one line, tokens and the load on a second (one line would not
    fit a terminal of 120 columns)."""

    def __init__(self, *columns: ProgressColumn, details: Callable[[], str], **options: Any) -> None:
        self._details = details  # first: the parent's constructor renders once
        super().__init__(*columns, **options)

    def get_renderables(self) -> Iterable[RenderableType]:
        yield self.make_tasks_table(self.tasks)
        yield Text(self._details(), style="progress.data.speed", overflow="ellipsis", no_wrap=True)


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
        max_interval: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        unit: str = "prompts",  # what is counted: "attempts" with several samples per prompt
    ) -> None:
        self.total = total
        self.unit = unit
        self.already_done = already_done
        self.console = console or Console(stderr=True, emoji=False)
        self.live = enabled and self.console.is_interactive
        self._interval, self._max_interval = interval, max_interval
        self._clock = clock
        self._start = clock()
        self._last_status = self._start
        self._rate = RateWindow(clock)
        self._token_rate = RateWindow(clock)
        self._counts = dict.fromkeys(OUTCOMES, 0)
        self.tokens = 0
        self.load = Load()
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

    def token_rate(self) -> float:
        return self._token_rate.rate()

    def eta(self) -> float | None:
        rate, remaining = self.rate(), max(0, self.total - self.finished)
        if remaining == 0:
            return 0.0
        return remaining / rate if rate > 0 else None

    def counts_text(self) -> str:
        counts = self.counts
        return " ".join(f"{_SYMBOLS[key]} {counts[key]}" for key in OUTCOMES)

    def tokens_text(self) -> str:
        return f"{_count_text(self.tokens)} tokens ({_count_text(self.token_rate())}/s)"

    def status_line(self) -> str:
        """The plain one-line status printed where no live bar is possible."""
        return (
            f"progress: {self.finished}/{self.total} {self.unit} ({self.counts_text()}) · "
            f"{self.rate():.2f} {self.unit}/s · ETA {_clock_text(self.eta())} · {self.tokens_text()} · "
            f"{self.load.text()} · elapsed {_clock_text(self._clock() - self._start)}"
        )

    def __enter__(self) -> RunProgress:
        if self.live:
            self._progress = _TwoLineProgress(
                BarColumn(),
                MofNCompleteColumn(),
                _CallableColumn(self.counts_text),
                _CallableColumn(lambda: f"{self.rate():.2f} {self.unit}/s", "progress.data.speed"),
                _CallableColumn(lambda: _clock_text(self._clock() - self._start), "progress.elapsed"),
                _CallableColumn(lambda: f"ETA {_clock_text(self.eta())}", "progress.remaining"),
                details=lambda: f"  {self.tokens_text()} · {self.load.text()}",
                console=self.console,
                refresh_per_second=4,
            )
            self._task = self._progress.add_task(self.unit, total=self.total, completed=self.already_done)
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

    def advance(self, outcome: str, tokens: int = 0) -> None:
        """One prompt finished ("done", "partial", "failed" or "discarded"), having used `tokens`."""
        if outcome not in self._counts:
            raise ValueError(f"unknown progress outcome {outcome!r}; expected one of {', '.join(OUTCOMES)}")
        with self._lock:
            self._counts[outcome] += 1
            self._rate.add()
            self.tokens += tokens
            self._token_rate.add(tokens)
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, completed=self.finished)
        else:
            self._maybe_print_status()

    def set_load(self, load: Load) -> None:
        """What runs now (the parent updates it about once a second)."""
        self.load = load
        if self._progress is None:
            self._maybe_print_status()

    def log(self, message: str) -> None:
        """Print a line above the live bar (or plainly when there is none)."""
        self._print(message)

    def _maybe_print_status(self) -> None:
        now = self._clock()
        gap = min(self._max_interval, max(self._interval, (now - self._start) / 10))
        if now - self._last_status >= gap:
            self._print_status()

    def _print_status(self) -> None:
        self._last_status = self._clock()
        self._print(self.status_line())

    def _print(self, line: str) -> None:
        # markup off: prompts and tool output contain brackets; soft_wrap keeps a line whole
        self.console.print(line, markup=False, highlight=False, soft_wrap=True)
