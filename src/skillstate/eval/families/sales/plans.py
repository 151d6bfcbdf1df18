"""The oracle's plans for a sales task: the skills-mode actions with the facts
expected after each, and the same analysis through the raw tools."""

from __future__ import annotations

from typing import Any

from skillstate.engine.actions import Action, CallSkill, Finish
from skillstate.eval.families.sales.analysis import Analysis
from skillstate.eval.families.sales.files import CLEANED
from skillstate.eval.families.sales.report import render_report
from skillstate.eval.families.sales.skills import AGGREGATE_QUERY, CLEAN_QUERY

__all__ = ["skills_plan", "tools_plan"]


def skills_plan(truth: Analysis, clean_count: int) -> tuple[list[Action], list[dict[str, Any]]]:
    """The oracle's skills-mode actions and the facts expected after each of them."""
    finish = Finish(summary=f"{truth.biggest} fell most ({truth.pct:+.2f}%)")
    plan: list[Action] = [
        CallSkill(skill="clean_data", reason="clean before aggregating"),
        CallSkill(skill="aggregate", reason="data is clean"),
        CallSkill(skill="find_biggest_drop", reason="totals are known"),
        CallSkill(skill="write_report", reason="the biggest drop is known"),
        finish,
    ]
    cleaned = {"cleaned_rows": clean_count}
    totals = {f"totals.{c}.{m}": truth.total(c, m) for c in truth.totals for m in truth.totals[c]}
    drop = {
        "biggest_drop": truth.biggest,
        "biggest_drop_pct": truth.pct,
        **{f"mom_pct.{c}": v for c, v in truth.mom.items()},
    }
    done = {**cleaned, **drop, "report_written": True}
    facts: list[dict[str, Any]] = [cleaned, {**cleaned, **totals}, {**totals, **drop}, done, done]
    return plan, facts


def tools_plan(truth: Analysis, clean_count: int) -> list[Action]:
    """The oracle's raw-tools actions: the same analysis through SQL and the raw tools."""
    totals = {c: {m: truth.total(c, m) for m in truth.months} for c in truth.totals}
    return [
        CallSkill(skill="tool_csv_info", params={}, reason="look at the data first"),
        CallSkill(
            skill="tool_export_csv",
            params={"query": CLEAN_QUERY, "filename": CLEANED},
            reason="drop null revenues and blank channels, count duplicates once",
        ),
        CallSkill(
            skill="tool_run_sql", params={"query": AGGREGATE_QUERY}, reason="totals by month"
        ),
        CallSkill(
            skill="remember",
            params={
                "key": "analysis",
                "value": {
                    "totals": totals,
                    "mom_pct": truth.mom,
                    "biggest_drop": truth.biggest,
                    "biggest_drop_pct": truth.pct,
                },
            },
            reason="keep the totals and changes for the report",
        ),
        CallSkill(
            skill="tool_plot_channels",
            params={"channels": list(truth.mom), "values": list(truth.mom.values())},
            reason="chart of the changes",
        ),
        CallSkill(
            skill="tool_write_report",
            params={"markdown": render_report(truth, clean_count)},
            reason="report the biggest drop",
        ),
        Finish(summary=f"{truth.biggest} fell most ({truth.pct:+.2f}%)"),
    ]
