"""The re-checks on a sales task's files, shared by the skills' verifiers and the
final checks.

Every check reads the files and recounts in Python
(:mod:`~skillstate.eval.families.sales.analysis`): never the state, never the SQL
that wrote the files. So the final checks hold whatever state class a variant used.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from skillstate.eval.families.sales.analysis import (
    TRAPS,
    Analysis,
    analyse,
    clean_count,
    totals_of,
    trap_answers,
)
from skillstate.eval.families.sales.chart import chart_problems
from skillstate.eval.families.sales.files import (
    CHART,
    CLEANED,
    REPORT,
    SALES,
    is_number,
    read_csv,
)
from skillstate.eval.families.sales.report import finding, is_blank, table_problems
from skillstate.eval.tasks import CheckResult
from skillstate.state.model import AgentState

__all__ = ["SalesChecks"]

_PCT_TOLERANCE = 0.1
"""How far (points) a report's % may be from the true change."""


class SalesChecks:
    """The truth of one task's data, and the checks of its folder against it."""

    def __init__(self, root: Path, rows: Sequence[Mapping[str, str]]) -> None:
        self.root = root
        self.truth = analyse(totals_of(rows))
        self.clean_count = clean_count(rows)
        """Distinct rows of ``sales.csv`` with a revenue and a channel."""
        self.traps = trap_answers(rows)

    def cleaned_analysis(self) -> tuple[Analysis | None, list[str]]:
        """The analysis recomputed from cleaned.csv, after checking it against sales.csv."""
        problems = self.cleaned_problems(clean_count(read_csv(self.root / SALES)[1]))
        if problems:
            return None, problems
        try:
            return analyse(totals_of(read_csv(self.root / CLEANED)[1], dedupe=False)), []
        except ValueError as exc:
            return None, [f"{CLEANED}: {exc}"]

    def cleaned_problems(self, expected_rows: int) -> list[str]:
        """What is wrong with cleaned.csv, given how many clean rows the raw data has."""
        path = self.root / CLEANED
        if not path.exists():
            return [f"{CLEANED} is missing"]
        header, rows = read_csv(path)
        missing = {"channel", "revenue"} - set(header)
        if missing or not ({"date", "month"} & set(header)):
            return [f"{CLEANED} needs channel, revenue and date columns; it has {header}"]
        problems: list[str] = []
        nulls = sum(1 for r in rows if not r["revenue"].strip())
        blanks = sum(1 for r in rows if not r["channel"].strip())
        zeros = sum(1 for r in rows if is_number(r["revenue"]) and float(r["revenue"]) == 0)
        copies = len(rows) - len({tuple(r.values()) for r in rows})
        ids = [r["order_id"] for r in rows if r.get("order_id")]
        copies = max(copies, len(ids) - len(set(ids)))
        for count, what in (
            (nulls, "a null revenue"),
            (zeros, "revenue 0 (a null filled with 0?)"),
            (blanks, "a blank channel"),
            (copies, "a duplicate"),
        ):
            if count:
                problems.append(f"{CLEANED}: {count} rows with {what}")
        if len(rows) != expected_rows:
            problems.append(
                f"{CLEANED} has {len(rows)} rows; {SALES} has {expected_rows} distinct rows "
                "with a revenue and a channel"
            )
        return problems

    def report_problems(self, expected: Analysis) -> tuple[str, str, list[str]]:
        """Problems with report.md: its channel, its %, its table (each ``""``/[] if fine)."""
        try:
            text = (self.root / REPORT).read_text(encoding="utf-8")
        except FileNotFoundError:
            return f"{REPORT} is missing", f"{REPORT} is missing", [f"{REPORT} is missing"]
        table = table_problems(text, expected)
        channel, pct = finding(text)
        if channel is None:
            missing = "no 'Biggest drop: <channel> (<change>%)' line"
            return missing, missing, table
        wrong = ""
        if channel != expected.biggest.lower():
            wrong = f"names {channel!r}, expected {expected.biggest!r}" + self._trap_note(channel)
        off = ""
        if pct is None:
            off = "the biggest-drop line has no %"
        # "a drop of 25.08%" says the sign in words: the size is what must match.
        elif abs(abs(pct) - abs(expected.pct)) > _PCT_TOLERANCE:
            off = f"says {pct:+.2f}%, expected {expected.pct:+.2f}%"
        return wrong, off, table

    def _trap_note(self, channel: str) -> str:
        if is_blank(channel):
            return " (a blank channel is not a channel: those rows are dropped)"
        names = [TRAPS[k] for k, v in self.traps.items() if v.lower() == channel]
        return f" ({'; '.join(names)})" if names else ""

    def check(self, final_state: AgentState) -> list[CheckResult]:
        """The final checks, on the files only: valid whatever state class a variant used."""
        wrong, off, table = self.report_problems(self.truth)
        chart = chart_problems(self.root / CHART, self.truth)
        cleaned = self.cleaned_problems(self.clean_count) if (self.root / CLEANED).exists() else []
        return [
            CheckResult("report_biggest_drop", not wrong, wrong),
            CheckResult("report_mom_pct", not off, off),
            CheckResult("report_table", not table, "; ".join(table[:3])),
            CheckResult("chart_png", not chart, "; ".join(chart)),
            CheckResult(
                "cleaned_csv",
                not cleaned,
                "; ".join(cleaned[:3]) or ("" if (self.root / CLEANED).exists() else "not written"),
            ),
        ]
