"""Charts as inline SVG text: a report that draws itself needs no script, no font and no network."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from markupsafe import Markup, escape

PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf"]
STATUS_COLORS = {"pass": "#4c78a8", "warn": "#f58518", "fail": "#d62728", "error": "#9d755d", "skipped": "#bab0ac"}

_W, _H = 760, 340
_LEFT, _RIGHT, _TOP, _BOTTOM = 64, 16, 16, 44


@dataclass
class Series:
    """One line: its points, colour, and whether it is a reference (dashed) or a highlighted one."""

    label: str
    points: list[tuple[float, float]]
    color: str
    dashed: bool = False
    width: float = 1.5
    opacity: float = 1.0
    markers: bool = False


@dataclass
class LineChart:
    """A line chart; `log_x` puts x on a log2 scale (message sizes)."""

    title: str
    x_label: str
    y_label: str
    series: list[Series] = field(default_factory=list)
    log_x: bool = False
    x_format: Callable[[float], str] = lambda v: f"{v:g}"
    legend: bool = True
    x_ticks: list[float] | None = None


def _nice_step(span: float, target: int = 5) -> float:
    raw = span / max(target, 1)
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    return next((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), 10 * mag)


def _path(points: list[tuple[float, float]]) -> str:
    return "M" + " L".join(f"{x:.1f},{y:.1f}" for x, y in points)


def render_line_chart(chart: LineChart) -> Markup:
    """The chart as an <svg> element (no xmlns needed inline in HTML5)."""
    pts = [p for s in chart.series for p in s.points if p[1] is not None and (not chart.log_x or p[0] > 0)]
    if not pts:
        return Markup('<p class="empty">no data to plot</p>')
    fx = (lambda v: math.log2(v)) if chart.log_x else (lambda v: v)
    xs = [fx(x) for x, _ in pts]
    x0, x1 = min(xs), max(xs)
    if x0 == x1:
        x0, x1 = x0 - 1, x1 + 1
    y1 = max(y for _, y in pts) * 1.08 or 1.0
    y0 = min(0.0, min(y for _, y in pts))
    plot_w, plot_h = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM

    def sx(v: float) -> float:
        return _LEFT + (fx(v) - x0) / (x1 - x0) * plot_w

    def sy(v: float) -> float:
        return _TOP + plot_h - (v - y0) / (y1 - y0) * plot_h

    out = [f'<svg class="chart" viewBox="0 0 {_W} {_H}" width="{_W}" height="{_H}" role="img" '
           f'aria-label="{escape(chart.title)}">']
    step = _nice_step(y1 - y0)
    tick = y0
    while tick <= y1 + 1e-9:
        y = sy(tick)
        out.append(f'<line class="grid" x1="{_LEFT}" y1="{y:.1f}" x2="{_W - _RIGHT}" y2="{y:.1f}"/>'
                   f'<text class="tick" x="{_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{tick:g}</text>')
        tick += step
    if chart.x_ticks is not None:
        x_ticks = chart.x_ticks
    elif chart.log_x:
        lo, hi = math.ceil(x0), math.floor(x1)
        stride = max(1, math.ceil((hi - lo + 1) / 10))
        x_ticks = [2.0**e for e in range(lo, hi + 1, stride)]
    else:
        x_ticks = sorted({x for x, _ in pts})
        x_ticks = x_ticks[:: max(1, math.ceil(len(x_ticks) / 8))]
    for xv in x_ticks:
        x = sx(xv)
        out.append(f'<line class="grid" x1="{x:.1f}" y1="{_TOP}" x2="{x:.1f}" y2="{_TOP + plot_h}"/>'
                   f'<text class="tick" x="{x:.1f}" y="{_TOP + plot_h + 16}" text-anchor="middle">'
                   f'{escape(chart.x_format(xv))}</text>')
    out.append(f'<rect class="frame" x="{_LEFT}" y="{_TOP}" width="{plot_w}" height="{plot_h}"/>')
    out.append(f'<text class="axis" x="{_LEFT + plot_w / 2:.0f}" y="{_H - 6}" text-anchor="middle">'
               f'{escape(chart.x_label)}</text>')
    out.append(f'<text class="axis" x="14" y="{_TOP + plot_h / 2:.0f}" text-anchor="middle" '
               f'transform="rotate(-90 14 {_TOP + plot_h / 2:.0f})">{escape(chart.y_label)}</text>')
    for s in chart.series:
        scaled = [(sx(x), sy(y)) for x, y in s.points if y is not None and (not chart.log_x or x > 0)]
        if not scaled:
            continue
        dash = ' stroke-dasharray="6 4"' if s.dashed else ""
        out.append(f'<path class="series" d="{_path(scaled)}" stroke="{s.color}" stroke-width="{s.width}" '
                   f'stroke-opacity="{s.opacity}" fill="none"{dash}><title>{escape(s.label)}</title></path>')
        if s.markers:
            out += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{s.color}"/>' for x, y in scaled]
    out.append("</svg>")
    legend = ""
    if chart.legend:
        items = [f'<span class="key"><i style="background:{s.color}"></i>{escape(s.label)}</span>'
                 for s in chart.series if s.label]
        legend = f'<div class="legend">{"".join(items)}</div>'
    return Markup("".join(out) + legend)


def render_bars(title: str, unit: str, bars: list[tuple[str, float, str]]) -> Markup:
    """Horizontal bars, one per (label, value, colour): per-node figures people compare by eye."""
    if not bars:
        return Markup('<p class="empty">no data to plot</p>')
    height = 22 * len(bars) + 24
    label_w, width = 200, _W
    top = max(v for _, v, _ in bars) or 1.0
    out = [f'<svg class="chart bars" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
           f'aria-label="{escape(title)}">']
    for i, (label, value, color) in enumerate(bars):
        y = 8 + 22 * i
        w = (width - label_w - 90) * value / top
        out.append(f'<text class="tick" x="{label_w - 6}" y="{y + 13}" text-anchor="end">{escape(label)}</text>'
                   f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="16" fill="{color}"/>'
                   f'<text class="tick" x="{label_w + w + 6:.1f}" y="{y + 13}">{value:.4g} {escape(unit)}</text>')
    out.append("</svg>")
    return Markup("".join(out))
