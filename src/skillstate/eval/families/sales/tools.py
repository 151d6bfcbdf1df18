"""The raw tools over a sales task's folder: ``csv_info``, ``run_sql``, ``export_csv``,
``plot_channels`` and ``write_report``.

``run_sql`` and ``export_csv`` run one read-only SQLite query over an in-memory
database rebuilt from the folder's CSV files for each call, so the files are the
only truth.
"""

from __future__ import annotations

import math
import re
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

from skillstate.eval.families.sales.chart import draw_chart
from skillstate.eval.families.sales.files import (
    CHART,
    REPORT,
    SALES,
    TABLE_NAME,
    is_number,
    read_csv,
    write_csv,
)

__all__ = ["SalesTools"]

_SQL_ROWS = 30
"""Rows a query shows (the rest is counted, not shown)."""


def _load_tables(root: Path) -> sqlite3.Connection:
    """An in-memory database with one table per CSV file in ``root`` (its stem).

    Empty cells are NULL; a column whose values all parse as numbers is REAL. Built
    for each query, so the files are the only truth.
    """
    conn = sqlite3.connect(":memory:")
    for path in sorted(root.glob("*.csv")):
        if not TABLE_NAME.fullmatch(path.stem):
            continue
        header, rows = read_csv(path)
        if not header:
            continue
        numeric = {
            col: all(is_number(r[col]) for r in rows if r[col] != "") and any(r[col] for r in rows)
            for col in header
        }
        columns = ", ".join(f'"{c}" {"REAL" if numeric[c] else "TEXT"}' for c in header)
        conn.execute(f'CREATE TABLE "{path.stem}" ({columns})')
        values = [
            [None if r[c] == "" else float(r[c]) if numeric[c] else r[c] for c in header]
            for r in rows
        ]
        marks = ", ".join("?" for _ in header)
        conn.executemany(f'INSERT INTO "{path.stem}" VALUES ({marks})', values)
    return conn


_READ_ONLY = frozenset(
    {
        sqlite3.SQLITE_SELECT,
        sqlite3.SQLITE_READ,
        sqlite3.SQLITE_FUNCTION,
        sqlite3.SQLITE_RECURSIVE,
        sqlite3.SQLITE_PRAGMA,
    }
)


def _read_only(
    action: int, arg1: str | None, arg2: str | None, db: str | None, source: str | None
) -> int:
    # Queries only read: no ATTACH or VACUUM INTO writing files beside the task's own.
    return sqlite3.SQLITE_OK if action in _READ_ONLY else sqlite3.SQLITE_DENY


def _query(root: Path, query: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Columns and rows of one read-only query; a ``ValueError`` for a bad one."""
    with closing(_load_tables(root)) as conn:
        conn.set_authorizer(_read_only)
        try:
            cursor = conn.execute(query)
            rows = cursor.fetchall()
        except (sqlite3.Error, sqlite3.Warning) as exc:
            raise ValueError(f"SQL error: {exc}") from None
        columns = [d[0] for d in cursor.description or ()]
    return columns, rows


class SalesTools:
    """The tools of one task, bound to its folder.

    The tools are bound methods, so the harness sees plain keyword signatures and
    every run of the task works on its own directory.
    """

    def __init__(self, root: Path) -> None:
        self.root = root

    def as_dict(self) -> dict[str, Callable[..., Any]]:
        """Tool name -> tool, as an environment lists them."""
        return {
            "csv_info": self.csv_info,
            "run_sql": self.run_sql,
            "export_csv": self.export_csv,
            "plot_channels": self.plot_channels,
            "write_report": self.write_report,
        }

    def csv_info(self) -> str:
        """Describe sales.csv: its columns, row count and first rows."""
        header, rows = read_csv(self.root / SALES)
        lines = [
            f"{SALES}: {len(rows)} rows, {len(header)} columns",
            "columns: " + ", ".join(header),
            "first rows:",
        ]
        lines += [", ".join(f"{k}={v!r}" for k, v in row.items()) for row in rows[:8]]
        lines.append("(every CSV file in the folder is a table for run_sql: sales, ...)")
        return "\n".join(lines)

    def run_sql(self, query: str) -> dict[str, Any]:
        """Run one SQLite query: each CSV file is a table (sales, ...), empty cells are NULL."""
        columns, rows = _query(self.root, query)
        return {
            "columns": columns,
            "row_count": len(rows),
            "rows": [list(r) for r in rows[:_SQL_ROWS]],
            "truncated": len(rows) > _SQL_ROWS,
        }

    def export_csv(self, query: str, filename: str) -> dict[str, Any]:
        """Run one SQLite query and save its rows as a new CSV file (e.g. cleaned.csv)."""
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*\.csv", filename) or filename == SALES:
            raise ValueError(f"{filename!r}: give a new file name like cleaned.csv (not {SALES})")
        columns, rows = _query(self.root, query)
        write_csv(self.root / filename, columns, rows)
        return {"filename": filename, "rows": len(rows), "columns": columns}

    def plot_channels(
        self,
        channels: list[str],
        values: list[float],
        title: str = "Month-over-month change by channel (%)",
    ) -> str:
        """Draw a bar chart, one bar per channel (values in the same order), as chart.png."""
        if not channels or len(channels) != len(values) or len(channels) > 20:
            raise ValueError("give 1 to 20 channels and exactly one value per channel")
        if not all(math.isfinite(v) for v in values):
            raise ValueError("values must be finite numbers")
        draw_chart(self.root / CHART, channels, values, title)
        return f"{CHART} written: {len(channels)} bars"

    def write_report(self, markdown: str) -> str:
        """Write report.md (Markdown)."""
        if not markdown.strip():
            raise ValueError("the report is empty")
        (self.root / REPORT).write_text(markdown, encoding="utf-8")
        return f"{REPORT} written ({len(markdown)} characters)"
