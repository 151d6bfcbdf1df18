"""The report: ``report.md`` as the oracle writes it, and any report read back.

Reading is lenient about form ("retail (-27.43%)", "retail, -27.4%", a table with
extra rows or currency signs) and strict about facts: the channel, its change and
every real channel's totals.
"""

from __future__ import annotations

import re

from skillstate.eval.families.sales.analysis import Analysis
from skillstate.eval.families.sales.files import CHART

__all__ = ["finding", "is_blank", "render_report", "table_problems"]

_TOTAL_TOLERANCE = 1.0
"""How far (currency units) a tabulated total may be from the true one: whole-unit rounding."""
_BLANK_NAMES = frozenset(
    {"", "blank", "empty", "missing", "unknown", "other", "none", "null", "nan", "n/a", "0"}
)
"""What a blank channel gets called once it is (wrongly) kept as a channel."""
_NUMBER = re.compile(r"[+-]?\d+(?:\.\d+)?")


def render_report(analysis: Analysis, cleaned_rows: int) -> str:
    """The report the oracle writes (any report with the same facts passes the checks)."""
    first, second = analysis.months
    lines = [
        f"# Revenue by channel: {first} vs {second}",
        "",
        f"Biggest drop: {analysis.biggest} ({analysis.pct:+.2f}%)",
        "",
        f"| channel | {first} | {second} | MoM change |",
        "|---|---:|---:|---:|",
    ]
    for channel, change in analysis.mom.items():
        lines.append(
            f"| {channel} | {analysis.total(channel, first):.2f} | "
            f"{analysis.total(channel, second):.2f} | {change:+.2f}% |"
        )
    lines += [
        "",
        f"Cleaned data: {cleaned_rows} orders (null revenues and blank channels dropped, "
        "exact duplicate rows counted once).",
        "",
        f"![Month-over-month change by channel]({CHART})",
        "",
    ]
    return "\n".join(lines)


def finding(text: str) -> tuple[str | None, float | None]:
    """The channel and % of the report's ``Biggest drop: <channel> (<pct>%)`` line."""
    for line in text.splitlines():
        head, colon, rest = line.partition(":")
        if not colon or "biggest drop" not in head.lower():
            continue
        rest = rest.replace("\u2212", "-").replace("*", "").replace("`", "").strip()
        found = re.match(r"(.*?)\s*[(,:]\s*([+-]?\d+(?:\.\d+)?)", rest)
        if found is not None:  # "retail (-27.43%)", "(blank) (-85%)", "retail, -27.4%"
            return found.group(1).strip().lower(), float(found.group(2))
        # "retail -27.4%", "retail (MoM -27.4%)": the first word, then the first number.
        word = re.match(r"[^\s(,:]+", rest)
        if word is None:
            return None, None
        number = _NUMBER.search(rest, word.end())
        return word.group().lower(), float(number.group()) if number else None
    return None, None


def _table_rows(text: str) -> dict[str, list[float]]:
    """Markdown table rows by first cell (lower case): the numbers in the other cells."""
    rows: dict[str, list[float]] = {}
    for line in text.splitlines():
        if not line.strip().startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if all(re.fullmatch(r":?-+:?", c) for c in cells if c):
            continue
        numbers: list[float] = []
        for cell in cells[1:]:
            cleaned = re.sub(r"[\s,$€%*`]", "", cell.replace("\u2212", "-"))
            if _NUMBER.fullmatch(cleaned):
                numbers.append(float(cleaned))
        if numbers:  # a header or a label row carries no totals
            rows.setdefault(cells[0].strip("*`_ ").lower(), []).extend(numbers)
    return rows


def table_problems(text: str, expected: Analysis) -> list[str]:
    """What the report's table lacks: both months' totals of every real channel."""
    rows = _table_rows(text)
    first, second = expected.months
    problems: list[str] = []
    for channel in sorted(expected.totals):
        numbers = rows.get(channel.lower())
        if numbers is None:
            problems.append(f"the table has no row for {channel}")
            continue
        for month in (first, second):
            total = expected.total(channel, month)
            if not any(abs(n - total) <= _TOTAL_TOLERANCE for n in numbers):
                problems.append(f"{channel} {month}: the table lacks its total {total:.2f}")
    # Other rows (a total, a second table) are fine; a row for blank channels is the trap.
    blank = [name for name in rows if is_blank(name)]
    problems += [f"the table has a row {name!r}, which is no channel" for name in blank]
    return problems


def is_blank(name: str) -> bool:
    """Whether ``name`` is what a blank channel gets called when kept as a channel."""
    return name.strip("()[]<>- ") in _BLANK_NAMES
