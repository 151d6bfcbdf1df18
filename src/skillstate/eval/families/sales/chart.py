"""The chart: ``chart.png`` drawn with one flat bar colour, and read back by it.

Drawing and reading both need matplotlib (``pip install 'skillstate[eval]'``),
imported only when a chart is drawn or read.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

from skillstate.errors import MissingExtra
from skillstate.eval.families.sales.analysis import Analysis

__all__ = ["BAR_COLOR", "chart_bars", "chart_problems", "draw_chart"]

BAR_COLOR = "#4c72b0"
"""The one colour ``plot_channels`` fills bars with: how the chart is read back."""
_BAR_RGB = (0x4C / 255, 0x72 / 255, 0xB0 / 255)
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_MIN_SIZE = (200, 150)
"""Width and height (px) below which a PNG is not a chart."""


def draw_chart(path: Path, channels: Sequence[str], values: Sequence[float], title: str) -> None:
    """Draw a bar chart, one bar per channel (values in the same order), as a PNG."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise MissingExtra("plot_channels needs: pip install 'skillstate[eval]'") from exc
    # The Agg canvas, no pyplot: no global figure state, no display needed.
    figure = Figure(figsize=(6.4, 4.0), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    positions = list(range(len(channels)))
    # One flat colour without edges or antialiasing: chart_bars reads bars back by it.
    axes.bar(positions, values, width=0.6, color=BAR_COLOR, linewidth=0, antialiased=False)
    axes.axhline(0, color="black", linewidth=0.8)
    axes.set_xticks(positions, labels=[str(c) for c in channels])
    axes.set_title(title)
    figure.tight_layout()
    figure.savefig(path, format="png", metadata={"Software": None})


def chart_bars(path: Path) -> tuple[list[int], str]:
    """The heights (px) of the bars in a chart ``plot_channels`` drew, left to right;
    or, when the file is no such chart, why (``""`` when it is).

    Bars are found by their fill colour, column by column, in the decoded pixels:
    the PNG's own content is read, not what whoever drew it said about it.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return [], f"{path.name} is missing"
    if not data.startswith(_PNG_MAGIC):
        return [], f"{path.name} is not a PNG (bad magic bytes)"
    try:
        from matplotlib import image
    except ImportError:
        return [], f"reading {path.name} needs matplotlib: pip install 'skillstate[eval]'"
    try:
        pixels = image.imread(io.BytesIO(data), format="png")
    except Exception as exc:
        return [], f"{path.name} does not decode as a PNG ({type(exc).__name__})"
    if pixels.ndim != 3 or pixels.shape[2] < 3:
        return [], f"{path.name} has no colour channels"
    height, width = pixels.shape[:2]
    if width < _MIN_SIZE[0] or height < _MIN_SIZE[1]:
        return [], f"{path.name} is {width}x{height} px: too small for a chart"
    import numpy as np  # matplotlib's own dependency

    rgb = pixels[..., :3].astype(float) / (255.0 if pixels.dtype.kind in "ui" else 1.0)
    # A pixel is a bar's when it has the bar colour (antialiasing is off for bars).
    mask = np.asarray(np.all(np.abs(rgb - np.array(_BAR_RGB)) <= 0.02, axis=2), dtype=bool)
    columns = [bool(v) for v in np.any(mask, axis=0)]
    heights: list[int] = []
    start: int | None = None
    for x, filled in enumerate([*columns, False]):
        if filled and start is None:
            start = x
        elif not filled and start is not None:
            if x - start >= 3:  # thinner than that is no bar
                heights.append(int(mask[:, (start + x) // 2].sum()))
            start = None
    return heights, ""


def chart_problems(path: Path, expected: Analysis) -> list[str]:
    """What is wrong with the chart at ``path``: its bars must be the changes' sizes."""
    heights, unreadable = chart_bars(path)
    if unreadable:
        return [unreadable]
    want = sorted(abs(v) for v in expected.mom.values())
    if len(heights) != len(want):
        return [f"{path.name} has {len(heights)} bars, expected {len(want)} (one per channel)"]
    got = sorted(heights)
    tolerance = 0.03 + 2 / max(got[-1], 1)
    if any(abs(g / got[-1] - w / want[-1]) > tolerance for g, w in zip(got, want, strict=True)):
        return [f"the bars of {path.name} do not match the month-over-month changes"]
    return []
