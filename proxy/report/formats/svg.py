"""Hand-made SVG charts with real axes: ticks at round numbers, axis titles with units, a value on hover.

Inline SVG keeps the HTML report one offline file. Every mark carries a `<title>`, which a
browser shows on hover; the legend is HTML beside the chart so long names can wrap.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

PALETTE = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#8c6d31", "#999999")
W, H = 1080, 320
LEFT, RIGHT, TOP, BOTTOM = 84, 24, 16, 58

Format = Callable[[float], str]


@dataclass(frozen=True, slots=True)
class Axis:
    title: str  # with its unit, e.g. "cost (USD per day)"
    label: Format  # hover text for a value on this axis
    ticks: Callable[[Sequence[float]], list[str]] | None = None  # all tick labels alike; default: label each

    def tick_labels(self, values: Sequence[float]) -> list[str]:
        return self.ticks(values) if self.ticks is not None else [self.label(v) for v in values]


@dataclass(frozen=True, slots=True)
class Series:
    name: str
    values: Sequence[float]
    color: str


@dataclass(frozen=True, slots=True)
class Line:
    name: str
    points: Sequence[tuple[float, float]]
    color: str
    dash: bool = False
    label_at_start: bool = False  # where the line's name is written, above the line


@dataclass(frozen=True, slots=True)
class Mark:
    """A labelled point, e.g. the break-even."""

    x: float
    y: float
    label: str
    hover: str
    color: str = "#222"


def esc(text: str) -> str:
    return html.escape(text, quote=True)


def nice_ticks(top: float, count: int = 5) -> list[float]:
    """0 and round steps (1, 2, 2.5 or 5 times a power of ten) up to at least `top`."""
    if top <= 0 or not math.isfinite(top):
        return [0.0, 1.0]
    raw = top / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    return [i * step for i in range(math.ceil(top / step - 1e-9) + 1)]


def legend(series: Sequence[tuple[str, str]]) -> str:
    items = "".join(f'<li><span class="swatch" style="background:{c}"></span>{esc(n)}</li>' for n, c in series)
    return f'<ul class="legend">{items}</ul>'


def _frame(name: str, title: str, inner: str, height: int = H) -> str:
    return (f'<svg data-chart="{esc(name)}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {height}" '
            f'width="{W}" height="{height}" role="img" aria-label="{esc(title)}"><title>{esc(title)}</title>'
            f'{inner}</svg>')


def _y_axis(ticks: list[float], axis: Axis, y: Callable[[float], float], height: int) -> str:
    parts = []
    for t, text in zip(ticks, axis.tick_labels(ticks), strict=True):
        parts.append(f'<line class="grid" x1="{LEFT}" x2="{W - RIGHT}" y1="{y(t):.1f}" y2="{y(t):.1f}"/>'
                     f'<text class="tick y-tick" x="{LEFT - 6}" y="{y(t) + 4:.1f}" text-anchor="end">'
                     f'{esc(text)}</text>')
    mid = (TOP + height - BOTTOM) / 2
    parts.append(f'<text class="axis-title y-title" transform="translate(16 {mid:.1f}) rotate(-90)" '
                 f'text-anchor="middle">{esc(axis.title)}</text>')
    parts.append(f'<line class="axis" x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{height - BOTTOM}"/>')
    return "".join(parts)


def _x_title(title: str, height: int) -> str:
    return (f'<line class="axis" x1="{LEFT}" x2="{W - RIGHT}" y1="{height - BOTTOM}" y2="{height - BOTTOM}"/>'
            f'<text class="axis-title x-title" x="{(LEFT + W - RIGHT) / 2:.1f}" y="{height - 12}" '
            f'text-anchor="middle">{esc(title)}</text>')


def bar_chart(name: str, title: str, categories: Sequence[str], series: Sequence[Series], y_axis: Axis,
              x_title: str, hover_names: Sequence[str] | None = None, top: float | None = None) -> str:
    """Stacked bars, one per category; series[k].values[i] is category i's part for series k."""
    totals = [sum(s.values[i] for s in series) for i in range(len(categories))]
    ticks = nice_ticks(top if top is not None else max(totals, default=0.0))
    scale = (H - TOP - BOTTOM) / ticks[-1]

    def y(v: float) -> float:
        return H - BOTTOM - v * scale

    n = max(len(categories), 1)
    band = (W - LEFT - RIGHT) / n
    gap = min(band * 0.2, 8)
    label_every = max(1, math.ceil(n / 32))
    parts = [_y_axis(ticks, y_axis, y, H)]
    for i, category in enumerate(categories):
        x = LEFT + i * band + gap / 2
        full = (hover_names or categories)[i]
        base = 0.0
        for s in series:
            v = s.values[i]
            if v > 0:
                share = f" of {y_axis.label(totals[i])}" if len(series) > 1 else ""
                parts.append(f'<rect class="bar" x="{x:.1f}" y="{y(base + v):.1f}" width="{band - gap:.1f}" '
                             f'height="{v * scale:.1f}" fill="{s.color}"><title>{esc(full)} · {esc(s.name)}: '
                             f'{esc(y_axis.label(v))}{esc(share)}</title></rect>')
            base += v
        if i % label_every == 0:
            parts.append(f'<text class="tick x-tick" x="{x + (band - gap) / 2:.1f}" y="{H - BOTTOM + 16}" '
                         f'text-anchor="middle">{esc(category)}</text>')
    parts.append(_x_title(x_title, H))
    return _frame(name, title, "".join(parts))


def line_chart(name: str, title: str, lines: Sequence[Line], marks: Sequence[Mark], x_axis: Axis, y_axis: Axis,
               x_top: float, y_top: float, shade_from: float | None = None, shade_labels: tuple[str, str] = ("", "")
               ) -> str:
    """Lines over numeric x and y axes from 0, with labelled marks; optionally two shaded regions split at
    `shade_from` on the x axis (left: shade_labels[0], right: shade_labels[1])."""
    height = H + 40
    x_ticks, y_ticks = nice_ticks(x_top), nice_ticks(y_top)

    def x(v: float) -> float:
        return LEFT + v * (W - LEFT - RIGHT) / x_ticks[-1]

    def y(v: float) -> float:
        return height - BOTTOM - v * (height - TOP - BOTTOM) / y_ticks[-1]

    parts = []
    if shade_from is not None and 0 < shade_from < x_ticks[-1]:
        split = x(shade_from)
        parts.append(f'<rect class="region-left" x="{LEFT}" y="{TOP}" width="{split - LEFT:.1f}" '
                     f'height="{height - TOP - BOTTOM}"/><rect class="region-right" x="{split:.1f}" y="{TOP}" '
                     f'width="{W - RIGHT - split:.1f}" height="{height - TOP - BOTTOM}"/>'
                     f'<text class="region" x="{LEFT + 8}" y="{TOP + 16}">{esc(shade_labels[0])}</text>'
                     f'<text class="region" x="{W - RIGHT - 8}" y="{TOP + 16}" text-anchor="end">'
                     f'{esc(shade_labels[1])}</text>')
    parts.append(_y_axis(y_ticks, y_axis, y, height))
    for t, text in zip(x_ticks, x_axis.tick_labels(x_ticks), strict=True):
        parts.append(f'<line class="tick-mark" x1="{x(t):.1f}" x2="{x(t):.1f}" y1="{height - BOTTOM}" '
                     f'y2="{height - BOTTOM + 5}"/><text class="tick x-tick" x="{x(t):.1f}" '
                     f'y="{height - BOTTOM + 18}" text-anchor="middle">{esc(text)}</text>')
    parts.append(_x_title(x_axis.title, height))
    for ln in lines:
        path = " ".join(f"{x(px):.1f},{y(py):.1f}" for px, py in ln.points)
        dash = ' stroke-dasharray="6 4"' if ln.dash else ""
        parts.append(f'<polyline class="line" points="{path}" stroke="{ln.color}"{dash}><title>{esc(ln.name)}'
                     f'</title></polyline>')
        (px, py), anchor, dx = (ln.points[0], "start", 8) if ln.label_at_start else (ln.points[-1], "end", -4)
        parts.append(f'<text class="line-label" x="{x(px) + dx:.1f}" y="{y(py) - 8:.1f}" text-anchor="{anchor}" '
                     f'fill="{ln.color}">{esc(ln.name)}</text>')
    for m in marks:
        anchor = "end" if x(m.x) > W * 0.6 else "start"
        dx = -10 if anchor == "end" else 10
        dy = 22 if y(m.y) < height - BOTTOM - 40 else -14  # near the x axis: written above the point
        if shade_from is not None and y(m.y) < TOP + 24:
            dy = 40  # at the top (a point off the chart): below the shaded regions' labels
        parts.append(f'<line class="guide" x1="{x(m.x):.1f}" x2="{x(m.x):.1f}" y1="{y(m.y):.1f}" '
                     f'y2="{height - BOTTOM}"/><circle class="mark" cx="{x(m.x):.1f}" cy="{y(m.y):.1f}" r="6" '
                     f'fill="{m.color}"><title>{esc(m.hover)}</title></circle>'
                     f'<text class="mark-label" x="{x(m.x) + dx:.1f}" y="{y(m.y) + dy:.1f}" '
                     f'text-anchor="{anchor}">{esc(m.label)}</text>')
    return _frame(name, title, "".join(parts), height)
