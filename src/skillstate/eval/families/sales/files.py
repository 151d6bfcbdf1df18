"""The sales task's files: their names, and CSV reading and writing.

Every other module reads and writes the task folder through these, so a CSV file
means the same thing to the tools, the skills' verifiers and the final checks.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "CHART",
    "CLEANED",
    "REPORT",
    "SALES",
    "TABLE_NAME",
    "is_number",
    "read_csv",
    "write_csv",
]

SALES = "sales.csv"
CLEANED = "cleaned.csv"
REPORT = "report.md"
CHART = "chart.png"

TABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""What a CSV file's stem must look like to be a ``run_sql`` table (and a channel name)."""


def read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    """Header and rows of a CSV file (short rows padded with empty cells)."""
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        header = next(reader, [])
        padded = ([*row, *[""] * len(header)] for row in reader if row)
        rows = [dict(zip(header, row, strict=False)) for row in padded]
    return header, rows


def write_csv(path: Path, header: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """Write ``header`` and ``rows`` as CSV (``None`` as an empty cell)."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(header)
        for row in rows:
            writer.writerow(["" if v is None else v for v in row])


def is_number(text: str) -> bool:
    """Whether ``text`` parses as a float."""
    try:
        float(text)
    except ValueError:
        return False
    return True
