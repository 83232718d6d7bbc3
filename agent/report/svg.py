"""Plots as inline SVG, drawn in Python: line charts over time, vertical bar charts
(histograms) and horizontal stacked bars (categories). No chart library, no script: a plot is
a string of markup, every label HTML-escaped. Each data mark carries class `mark` and a
`<title>` (the browser shows it on hover), so a plot's data can be checked in the page.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

WIDTH, HEIGHT = 640, 240
LEFT, RIGHT, TOP, BOTTOM = 60, 16, 30, 40  # the top margin holds a line chart's legend
PALETTE = ("#2f6fb3", "#d9822b", "#3a9c5b", "#c23b3b", "#7d5ba6", "#8c6d31", "#4aa3a3", "#777777")
DOTS_UP_TO = 60  # points drawn as dots too (a single point has no line to show)


@dataclass(frozen=True)
class Series:
    name: str
    points: Sequence[tuple[float, float]]
    color: str
    step: bool = False  # a step function (a limit holds until it changes)


@dataclass(frozen=True)
class Part:
    """One segment of a bar: its value, colour and hover text."""

    value: float
    color: str
    title: str


def number(value: float) -> str:
    """A tick or hover number: 1,234, 0.25, 1.2k."""
    if abs(value) >= 10_000:
        return f"{value / 1000:,.0f}k"
    if value == int(value):
        return f"{int(value):,}"
    return f"{value:.3g}"


def ticks(high: float, count: int = 5) -> list[float]:
    """Round tick values from 0 up to at least `high`."""
    if high <= 0:
        return [0.0, 1.0]
    raw = high / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    return [i * step for i in range(math.ceil(high / step - 1e-9) + 1)]


def _text(x: float, y: float, text: str, anchor: str = "middle", kind: str = "tick") -> str:
    """A label; `text` is escaped here."""
    return f'<text class="{kind}" x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}">{escape(text)}</text>'


def _svg(name: str, body: list[str], label: str) -> str:
    return (
        f'<svg class="plot" data-plot="{escape(name)}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="{escape(label)}" xmlns="http://www.w3.org/2000/svg">{"".join(body)}</svg>'
    )


def _y_axis(top: float, y_label: str) -> tuple[list[str], float]:
    """Horizontal grid lines with their labels; returns them and the axis' top value."""
    values = ticks(top)
    span = values[-1]
    body = []
    for value in values:
        y = HEIGHT - BOTTOM - (HEIGHT - TOP - BOTTOM) * value / span
        body.append(f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>')
        body.append(
            f'<text class="tick" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{number(value)}</text>'
        )
    body.append(
        f'<text class="axis" transform="translate(14 {(HEIGHT - BOTTOM + TOP) / 2}) rotate(-90)" '
        f'text-anchor="middle">{escape(y_label)}</text>'
    )
    return body, span


def _x_label(text: str) -> str:
    return _text((LEFT + WIDTH - RIGHT) / 2, HEIGHT - 4, text, kind="axis")


def line_chart(name: str, series: Sequence[Series], *, x_label: str, y_label: str) -> str:
    """Lines of (x, y) points sharing axes from 0; the x axis is labelled in its own units."""
    xs = [x for s in series for x, _ in s.points] or [0.0]
    x_low, x_high = min(xs), max(max(xs), min(xs) + 1.0)
    body, y_top = _y_axis(max((y for s in series for _, y in s.points), default=0.0), y_label)
    width, height = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def at(x: float, y: float) -> tuple[float, float]:
        return LEFT + width * (x - x_low) / (x_high - x_low), HEIGHT - BOTTOM - height * y / y_top

    for value in ticks(x_high - x_low, 6):
        x, _ = at(x_low + value, 0)
        if x <= WIDTH - RIGHT + 0.5:
            body.append(_text(x, HEIGHT - BOTTOM + 16, number(value)))
    for s in series:
        body += _line(s, at)
    body += _legend(series)
    body.append(_x_label(x_label))
    return _svg(name, body, y_label)


def _legend(series: Sequence[Series]) -> list[str]:
    """The series' names with their colours, in a row above the plot."""
    body, x = [], float(LEFT)
    for s in series:
        body.append(f'<rect class="swatch" x="{x:.1f}" y="8" width="12" height="4" fill="{s.color}"/>')
        body.append(_text(x + 16, 14, s.name, "start", kind="legend"))
        x += 28 + 6.5 * len(s.name)
    return body


def _line(series: Series, at: Callable[[float, float], tuple[float, float]]) -> list[str]:
    points = [at(x, y) for x, y in series.points]
    if series.step:
        stepped = []
        for (x, y), nxt in zip(points, [*points[1:], None], strict=True):
            stepped.append((x, y))
            if nxt is not None:
                stepped.append((nxt[0], y))
        points = stepped
    if not points:
        return []
    path = "M" + " L".join(f"{x:.1f},{y:.1f}" for x, y in points)
    title = f"<title>{escape(series.name)}</title>"
    body = [f'<path class="mark line" d="{path}" stroke="{series.color}">{title}</path>']
    if len(series.points) <= DOTS_UP_TO:
        for (x_value, y_value), (x, y) in zip(series.points, (at(*p) for p in series.points), strict=True):
            hover = f"{series.name}: {number(y_value)} at {number(x_value)}"
            body.append(
                f'<circle class="mark dot" cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{series.color}">'
                f"<title>{escape(hover)}</title></circle>"
            )
    return body


def bar_chart(name: str, bars: Sequence[tuple[str, float]], *, x_label: str, y_label: str, color: str) -> str:
    """Vertical bars (a histogram: one per bin, labelled below)."""
    body, y_top = _y_axis(max((v for _, v in bars), default=0.0), y_label)
    slot = (WIDTH - LEFT - RIGHT) / max(len(bars), 1)
    height = HEIGHT - TOP - BOTTOM
    every = math.ceil(len(bars) / 10)  # at most ten labels
    for position, (label, value) in enumerate(bars):
        x, h = LEFT + slot * position, height * value / y_top
        body.append(
            f'<rect class="mark bar" x="{x + slot * 0.1:.1f}" y="{HEIGHT - BOTTOM - h:.1f}" '
            f'width="{slot * 0.8:.1f}" height="{max(h, 0.0):.1f}" fill="{color}">'
            f"<title>{escape(label)}: {number(value)}</title></rect>"
        )
        if position % every == 0:
            body.append(_text(x + slot / 2, HEIGHT - BOTTOM + 16, label.split("–")[0]))  # a bin's start
    body.append(_x_label(x_label))
    return _svg(name, body, y_label)


def hbar_chart(name: str, rows: Sequence[tuple[str, Sequence[Part]]], *, label: str) -> str:
    """Horizontal bars, one row per category, each stacked from its parts."""
    row_height, left = 22, 170
    height = TOP + row_height * len(rows) + 24
    top = max((sum(p.value for p in parts) for _, parts in rows), default=0.0) or 1.0
    width = WIDTH - left - 70
    body = []
    for position, (category, parts) in enumerate(rows):
        y, x = TOP + row_height * position, float(left)
        body.append(
            f'<text class="tick" x="{left - 6}" y="{y + 15}" text-anchor="end">{escape(category[:28])}</text>'
        )
        for part in parts:
            w = width * part.value / top
            body.append(
                f'<rect class="mark bar" x="{x:.1f}" y="{y + 3}" width="{w:.1f}" height="{row_height - 6}" '
                f'fill="{part.color}"><title>{escape(category)}: {escape(part.title)}</title></rect>'
            )
            x += w
        total = number(sum(p.value for p in parts))
        body.append(_text(x + 4, y + 15, total, "start"))
    return (
        f'<svg class="plot" data-plot="{escape(name)}" viewBox="0 0 {WIDTH} {height}" role="img" '
        f'aria-label="{escape(label)}" xmlns="http://www.w3.org/2000/svg">{"".join(body)}</svg>'
    )
