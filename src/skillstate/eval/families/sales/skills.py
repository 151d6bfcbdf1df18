"""The skills mode of a sales task: its state, its verified skills and its machine.

``clean_data`` -> ``aggregate`` -> ``find_biggest_drop`` -> ``write_report``, one
applicable at a time, each verified against the files (a recount from the raw CSV
in Python, not the SQL that wrote them); the two that write files remove them
when they fail.
"""

from __future__ import annotations

from pydantic import Field

from skillstate.eval.families.sales.analysis import analyse, cents_of, clean_count
from skillstate.eval.families.sales.chart import chart_problems
from skillstate.eval.families.sales.checks import SalesChecks
from skillstate.eval.families.sales.files import CHART, CLEANED, REPORT, SALES, read_csv
from skillstate.eval.families.sales.report import render_report
from skillstate.events import Verdict
from skillstate.skills.registry import SkillRegistry
from skillstate.skills.skill import NoParams, Outcome, SkillContext
from skillstate.state.machine import StateMachine
from skillstate.state.model import AgentState

__all__ = ["AGGREGATE_QUERY", "CLEAN_QUERY", "MACHINE", "SalesState", "skill_library"]

CLEAN_QUERY = (
    "SELECT DISTINCT order_id, date, channel, revenue FROM sales "
    "WHERE revenue IS NOT NULL AND channel IS NOT NULL AND TRIM(channel) <> '' "
    "ORDER BY order_id"
)
"""What the oracle cleans with: null revenues and blank channels dropped, duplicates once."""
AGGREGATE_QUERY = (
    "SELECT channel, substr(date, 1, 7) AS month, ROUND(SUM(revenue), 2) AS revenue "
    "FROM cleaned GROUP BY channel, month ORDER BY channel, month"
)
"""What the oracle totals cleaned.csv with: revenue by channel and month."""


class SalesState(AgentState):
    """The card of a sales task: what the analysis has established so far."""

    cleaned_rows: int | None = None
    """Rows in cleaned.csv (set once the data is cleaned)."""
    totals: dict[str, dict[str, float]] = Field(default_factory=dict)
    """Channel -> month -> revenue (2 decimals), from the cleaned data."""
    mom_pct: dict[str, float] = Field(default_factory=dict)
    """Channel -> month-over-month change in % (2 decimals)."""
    biggest_drop: str | None = None
    biggest_drop_pct: float | None = None
    report_written: bool = False
    """report.md and chart.png are written and verified."""


def skill_library(checks: SalesChecks) -> SkillRegistry:
    """The verified skills: the cleaning rules live in clean_data, not in the policy.

    The file-writing skills are not declared ``effects=True``: they overwrite whole
    files, so running one again after a crash writes the same bytes (no probe needed),
    and their rollback removes what a failed attempt left.
    """
    skills = SkillRegistry()
    root = checks.root

    @skills.skill(
        step="cleaning",
        outputs=["cleaned_rows"],
        tools=["export_csv"],
        max_retries=1,
        when=lambda s: s.cleaned_rows is None,
    )
    def clean_data(state: SalesState, params: NoParams, ctx: SkillContext) -> Outcome:
        """Write cleaned.csv: null revenues and blank channels dropped, duplicates once."""
        result = ctx.call("export_csv", query=CLEAN_QUERY, filename=CLEANED)
        rows = int(result["rows"])
        return Outcome(
            writes={"cleaned_rows": rows},
            summary=f"{CLEANED}: {rows} rows",
            evidence=[ctx.evidence(f"{CLEANED} written with {rows} clean rows")],
        )

    @clean_data.verifier
    def _clean(state: SalesState, outcome: Outcome) -> Verdict:
        # Recount from the raw file itself, in Python: not the SQL that wrote cleaned.csv.
        expected = clean_count(read_csv(root / SALES)[1])
        problems = checks.cleaned_problems(expected)
        if state.cleaned_rows != expected:
            problems.append(f"cleaned_rows is {state.cleaned_rows}, the raw data has {expected}")
        return Verdict.failed("; ".join(problems[:3])) if problems else Verdict.passed()

    clean_data.rollbacker(lambda state, outcome, ctx: (root / CLEANED).unlink(missing_ok=True))

    @skills.skill(
        step="aggregating",
        outputs=["totals"],
        reads=["cleaned_rows"],
        tools=["run_sql"],
        when=lambda s: s.cleaned_rows is not None and not s.totals,
    )
    def aggregate(state: SalesState, params: NoParams, ctx: SkillContext) -> Outcome:
        """Total the cleaned revenue by channel and month."""
        result = ctx.call("run_sql", query=AGGREGATE_QUERY)
        totals: dict[str, dict[str, float]] = {}
        for channel, month, revenue in result["rows"]:
            totals.setdefault(str(channel), {})[str(month)] = round(float(revenue), 2)
        return Outcome(
            writes={"totals": totals},
            summary=f"totals of {len(totals)} channels",
            evidence=[ctx.evidence(f"revenue by channel and month: {totals}")],
        )

    @aggregate.verifier
    def _totals(state: SalesState, outcome: Outcome) -> Verdict:
        recomputed, problems = checks.cleaned_analysis()
        if recomputed is None:
            return Verdict.failed("; ".join(problems[:3]))
        if cents_of(state.totals) != recomputed.totals:
            return Verdict.failed(f"totals {state.totals} differ from {CLEANED}'s")
        return Verdict.passed()

    @skills.skill(
        step="analyzing",
        outputs=["mom_pct", "biggest_drop", "biggest_drop_pct"],
        reads=["totals"],
        when=lambda s: bool(s.totals) and s.biggest_drop is None,
    )
    def find_biggest_drop(state: SalesState, params: NoParams, ctx: SkillContext) -> Outcome:
        """Compute each channel's month-over-month change and the channel that fell most."""
        result = analyse(cents_of(state.totals))
        return Outcome(
            writes={
                "mom_pct": result.mom,
                "biggest_drop": result.biggest,
                "biggest_drop_pct": result.pct,
            },
            summary=f"{result.biggest} fell most: {result.pct:+.2f}%",
        )

    @find_biggest_drop.verifier
    def _drop(state: SalesState, outcome: Outcome) -> Verdict:
        recomputed, problems = checks.cleaned_analysis()
        if recomputed is None:
            return Verdict.failed("; ".join(problems[:3]))
        if state.mom_pct.keys() != recomputed.mom.keys() or any(
            abs(state.mom_pct[c] - v) > 0.01 for c, v in recomputed.mom.items()
        ):
            return Verdict.failed(f"mom_pct {state.mom_pct}, recomputed {recomputed.mom}")
        pct = state.biggest_drop_pct
        if state.biggest_drop != recomputed.biggest or pct is None:
            return Verdict.failed(f"{state.biggest_drop} is not the biggest drop")
        if abs(pct - recomputed.pct) > 0.01:
            return Verdict.failed(f"biggest_drop_pct {pct}, recomputed {recomputed.pct}")
        return Verdict.passed()

    @skills.skill(
        step="reporting",
        outputs=["report_written"],
        reads=["totals", "mom_pct", "biggest_drop", "biggest_drop_pct", "cleaned_rows"],
        tools=["plot_channels", "write_report"],
        max_retries=1,
        when=lambda s: s.biggest_drop is not None and not s.report_written,
    )
    def write_report(state: SalesState, params: NoParams, ctx: SkillContext) -> Outcome:
        """Draw chart.png (MoM change per channel) and write report.md."""
        result = analyse(cents_of(state.totals))
        ctx.call("plot_channels", channels=list(result.mom), values=list(result.mom.values()))
        ctx.call("write_report", markdown=render_report(result, state.cleaned_rows or 0))
        return Outcome(
            writes={"report_written": True},
            summary=f"{REPORT} and {CHART} written: {result.biggest} {result.pct:+.2f}%",
            evidence=[ctx.evidence(f"{REPORT} names {result.biggest} ({result.pct:+.2f}%)")],
        )

    @write_report.verifier
    def _report(state: SalesState, outcome: Outcome) -> Verdict:
        recomputed, problems = checks.cleaned_analysis()
        if recomputed is None:
            return Verdict.failed("; ".join(problems[:3]))
        wrong, off, table = checks.report_problems(recomputed)
        problems = [p for p in (wrong, off) if p] + table
        problems += chart_problems(root / CHART, recomputed)
        return Verdict.failed("; ".join(problems[:3])) if problems else Verdict.passed()

    @write_report.rollbacker
    def _unwrite(state: SalesState, outcome: Outcome | None, ctx: SkillContext) -> None:
        for name in (REPORT, CHART):
            (root / name).unlink(missing_ok=True)

    return skills


MACHINE = StateMachine(
    {
        "init": ["cleaning"],
        "cleaning": ["aggregating"],
        "aggregating": ["analyzing"],
        "analyzing": ["reporting"],
        "reporting": ["done"],
        "done": [],
    },
    initial="init",
)
"""init -> cleaning -> aggregating -> analyzing -> reporting -> done: one skill each."""
