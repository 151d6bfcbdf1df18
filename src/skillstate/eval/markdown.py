"""Markdown helpers the eval reports share: table cells, code spans, ``mean ± std``."""

from __future__ import annotations

from collections.abc import Sequence

from skillstate.eval.metrics import Stat

__all__ = ["_cell", "_code", "_fmt", "_table"]


def _cell(text: object) -> str:
    """Text made safe for a Markdown table cell (no pipes, no line breaks)."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _code(text: str) -> str:
    fence = "``" if "`" in text else "`"
    pad = " " if fence == "``" else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _fmt(stat: Stat, digits: int) -> str:
    """``mean ± std`` with ``digits`` decimals, or a dash when no seed had a value."""
    mean, std = stat["mean"], stat["std"]
    if mean is None or std is None:
        return "—"
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_cell(value) for value in row) + " |" for row in rows]
    return [*lines, ""]
