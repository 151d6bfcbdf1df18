"""A line chart as inline SVG, drawn on the server: no chart library, no script.

Used for the token curve of a task (prompt tokens per decision, state view against
full history). Every text in the SVG is XML-escaped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from xml.sax.saxutils import escape

__all__ = ["line_chart"]

COLORS = ("#1f77b4", "#7f7f7f", "#ff7f0e", "#2ca02c", "#9467bd")
_W, _H = 720, 300
_LEFT, _RIGHT, _TOP, _BOTTOM = 64, 16, 28, 44
_MAX_POINTS = 1200
"""A longer line is thinned to this many points (the chart is 720 pixels wide)."""


def line_chart(
    series: Mapping[str, Sequence[tuple[float, float]]],
    *,
    title: str,
    x_label: str,
    y_label: str,
) -> str:
    """An ``<svg>`` element with one polyline per series, axes, ticks and a legend."""
    points = [p for line in series.values() for p in line]
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" '
        f'viewBox="0 0 {_W} {_H}" width="{_W}" height="{_H}" '
        f'aria-label="{escape(title, {chr(34): "&quot;"})}">',
        f"<title>{escape(title)}</title>",
        f'<text x="{_W / 2}" y="16" text-anchor="middle" class="chart-title">'
        f"{escape(title)}</text>",
    ]
    if not points:
        parts.append(
            f'<text x="{_W / 2}" y="{_H / 2}" text-anchor="middle">no decisions yet</text></svg>'
        )
        return "".join(parts)
    x_max = max(*(x for x, _ in points), 1.0)
    y_max = _nice(max(*(y for _, y in points), 1.0))
    plot_w, plot_h = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM

    def sx(x: float) -> float:
        return _LEFT + (x - 1) / max(x_max - 1, 1) * plot_w if x_max > 1 else _LEFT + plot_w / 2

    def sy(y: float) -> float:
        return _TOP + plot_h - y / y_max * plot_h

    parts += _axes(x_max, y_max, sx, sy, x_label=x_label, y_label=y_label)
    for index, (name, line) in enumerate(series.items()):
        color = COLORS[index % len(COLORS)]
        shown = _thin(list(line))
        coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in shown)
        parts.append(
            f'<polyline class="series" data-series="{escape(name)}" fill="none" '
            f'stroke="{color}" stroke-width="2" points="{coords}"/>'
        )
        if len(shown) <= 60:
            parts += [
                f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.5" fill="{color}">'
                f"<title>{escape(name)}: decision {x:g}, {y:g} tokens</title></circle>"
                for x, y in shown
            ]
        ly = _TOP + 4 + 16 * index
        parts.append(
            f'<rect x="{_LEFT + 10}" y="{ly}" width="12" height="3" fill="{color}"/>'
            f'<text x="{_LEFT + 28}" y="{ly + 5}" class="legend">{escape(name)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _axes(
    x_max: float,
    y_max: float,
    sx: Callable[[float], float],
    sy: Callable[[float], float],
    *,
    x_label: str,
    y_label: str,
) -> list[str]:
    bottom, top = _H - _BOTTOM, _TOP
    out = [
        f'<line x1="{_LEFT}" y1="{bottom}" x2="{_W - _RIGHT}" y2="{bottom}" stroke="#888"/>',
        f'<line x1="{_LEFT}" y1="{top}" x2="{_LEFT}" y2="{bottom}" stroke="#888"/>',
        f'<text x="{(_LEFT + _W - _RIGHT) / 2}" y="{_H - 8}" text-anchor="middle">'
        f"{escape(x_label)}</text>",
        f'<text x="14" y="{(top + bottom) / 2}" text-anchor="middle" '
        f'transform="rotate(-90 14 {(top + bottom) / 2})">{escape(y_label)}</text>',
    ]
    for i in range(5):
        value = y_max * i / 4
        y = sy(value)
        out.append(
            f'<line x1="{_LEFT}" y1="{y:.1f}" x2="{_W - _RIGHT}" y2="{y:.1f}" stroke="#ddd"/>'
            f'<text x="{_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{value:g}</text>'
        )
    step = _nice(x_max / 6) if x_max > 6 else 1.0
    tick = 1.0
    while tick <= x_max:
        out.append(
            f'<text x="{sx(tick):.1f}" y="{bottom + 16}" text-anchor="middle">{tick:g}</text>'
        )
        tick += step
    return out


def _nice(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 times a power of ten that is at least ``value``."""
    power = 10 ** math.floor(math.log10(value))
    for factor in (1, 2, 2.5, 5, 10):
        if factor * power >= value:
            return float(factor * power)
    return float(10 * power)


def _thin(line: list[tuple[float, float]]) -> list[tuple[float, float]]:
    if len(line) <= _MAX_POINTS:
        return line
    stride = math.ceil(len(line) / _MAX_POINTS)
    return line[::stride] + ([line[-1]] if (len(line) - 1) % stride else [])
