"""The sales seed task: the oracle passes in every variant, every trap changes the
answer, the final checks catch a wrong environment and name the trap, and each
skill's verify refuses a wrong outcome (and its rollback removes what it wrote)."""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from skillstate.engine.actions import CallSkill
from skillstate.engine.runtime import RunResult
from skillstate.eval.families import get_family
from skillstate.eval.families.sales import (
    CHART,
    CLEAN_QUERY,
    CLEANED,
    REPORT,
    SALES,
    SalesState,
    analyse,
    chart_bars,
    make_rows,
    render_report,
    totals_of,
    trap_answers,
)
from skillstate.eval.suites import load_suite
from skillstate.eval.tasks import CheckResult, Environment, TaskSpec, group_of
from tests.eval_support import VARIANT_NAMES, Tools, assert_oracle_passes, run_plan

HAS_MPL = importlib.util.find_spec("matplotlib") is not None
needs_mpl = pytest.mark.skipif(not HAS_MPL, reason="the chart needs the eval extra (matplotlib)")

SPEC = next(s for s in load_suite("seeds") if s.family == "sales")
PLAN = ["clean_data", "aggregate", "find_biggest_drop", "write_report"]


def _build(tmp_path: Path, spec: TaskSpec = SPEC) -> Environment:
    return get_family(spec.family).build(spec, tmp_path / spec.id)


def _run(
    env: Environment, skills: Sequence[str], *, tools: Tools | None = None, **initial: Any
) -> RunResult:
    """Run the named skills in order through the real runtime (with tools swapped in)."""
    actions = [CallSkill(skill=name) for name in skills]
    return run_plan(SPEC, env, actions, tools=tools, **initial)[0]


def _checks(env: Environment) -> dict[str, CheckResult]:
    return {c.name: c for c in env.check(SalesState(task_id="x"))}


def _failures(result: RunResult) -> list[str]:
    return [e.message for e in result.state.errors if e.kind == "verify_failed"]


class TestSpec:
    def test_plans_fit_the_spec(self, tmp_path: Path) -> None:
        """The task is short for the skills plan and its step budget covers the tools plan."""
        env = _build(tmp_path)
        assert SPEC.group == group_of(len(env.plan_skills)) == "short"
        assert len(env.plan_skills) <= 8
        assert SPEC.max_steps >= math.ceil(1.5 * len(env.plan_tools)) + 3
        assert len(env.expected_facts) == len(env.plan_skills)
        assert [a.skill for a in env.plan_skills if isinstance(a, CallSkill)] == PLAN
        effects = [
            a.skill.removeprefix("tool_")
            for a in env.plan_tools
            if isinstance(a, CallSkill) and a.skill.removeprefix("tool_") in env.effect_tools
        ]
        assert effects == ["export_csv", "plot_channels", "write_report"]
        assert "never filled" in SPEC.constraints[0]

    def test_data_is_deterministic_and_noisy(self, tmp_path: Path) -> None:
        """The same params write the same bytes; the CSV has every kind of dirt."""
        first = (_build(tmp_path / "a").root / SALES).read_bytes()
        assert first == (_build(tmp_path / "b").root / SALES).read_bytes()
        rows = make_rows(SPEC.params)
        assert 250 <= len(rows) <= 500
        assert any(not r["revenue"] for r in rows)
        assert any(not r["channel"] for r in rows)
        assert len({tuple(r.items()) for r in rows}) < len(rows)
        assert {"revenue_usd_est", "net_revenue", "notes"} <= set(rows[0])
        assert {r["date"][:7] for r in rows} == set(SPEC.params["months"])


class TestTraps:
    def test_every_shortcut_changes_the_answer(self) -> None:
        """Only the cleaning the constraints ask for finds the channel that fell most."""
        params = SPEC.params
        rows = make_rows(params)
        right = analyse(totals_of(rows))
        assert right.biggest == params["falls_most"]
        answers = trap_answers(rows)
        assert answers["no_dedupe"] == params["duplicated"]
        assert answers["blank_channel"] == ""
        assert answers["filled"] == params["runner_up"]
        assert answers["net_revenue"] != params["falls_most"]
        assert answers["usd_est"] != params["falls_most"]

    @pytest.mark.parametrize("seed", [1, 2, 3, 17, 99])
    def test_traps_hold_for_other_seeds(self, seed: int) -> None:
        params = {**SPEC.params, "seed": seed}
        rows = make_rows(params)
        assert analyse(totals_of(rows)).biggest == params["falls_most"]
        assert trap_answers(rows)["no_dedupe"] == params["duplicated"]


class TestChecks:
    def test_checks_fail_without_output(self, tmp_path: Path) -> None:
        env = _build(tmp_path)
        checks = _checks(env)
        for name in ("report_biggest_drop", "report_mom_pct", "report_table", "chart_png"):
            assert not checks[name].ok
        assert "missing" in checks["report_biggest_drop"].detail
        assert "missing" in checks["chart_png"].detail
        assert checks["cleaned_csv"].ok  # optional: fine when not written
        assert checks["cleaned_csv"].detail == "not written"

    def test_an_undeduplicated_report_fails_and_names_the_trap(self, tmp_path: Path) -> None:
        env = _build(tmp_path)
        rows = make_rows(SPEC.params)
        wrong = analyse(totals_of(rows, dedupe=False))
        env.tools["write_report"](markdown=render_report(wrong, len(rows)))
        checks = _checks(env)
        assert not checks["report_biggest_drop"].ok
        assert "without removing duplicate rows" in checks["report_biggest_drop"].detail
        assert not checks["report_mom_pct"].ok
        assert not checks["report_table"].ok
        assert SPEC.params["duplicated"] in checks["report_table"].detail

    def test_a_blank_channel_row_fails_the_table(self, tmp_path: Path) -> None:
        env = _build(tmp_path)
        rows = make_rows(SPEC.params)
        kept = totals_of(rows, drop_blank=False)
        kept["(blank)"] = kept.pop("")
        env.tools["write_report"](markdown=render_report(analyse(kept), len(rows)))
        checks = _checks(env)
        assert "a blank channel is not a channel" in checks["report_biggest_drop"].detail
        assert "'(blank)', which is no channel" in checks["report_table"].detail

    def test_the_right_report_passes_its_checks(self, tmp_path: Path) -> None:
        env = _build(tmp_path)
        right = analyse(totals_of(make_rows(SPEC.params)))
        env.tools["write_report"](markdown=render_report(right, 1))
        checks = _checks(env)
        assert checks["report_biggest_drop"].ok
        assert checks["report_mom_pct"].ok
        assert checks["report_table"].ok, checks["report_table"].detail

    def test_the_report_is_read_leniently(self, tmp_path: Path) -> None:
        """Markup, separators, a drop given in words, extra rows: the facts are what count."""
        env = _build(tmp_path)
        right = analyse(totals_of(make_rows(SPEC.params)))
        first, second = right.months
        rows = [
            f"| **{c.title()}** | €{right.total(c, first):,.2f} | {right.total(c, second):,.0f} |"
            for c in right.mom
        ]
        text = "\n".join(
            [
                f"**Biggest drop:** `{right.biggest.title()}`, a fall of {abs(right.pct):.1f}%",
                "",
                "| Sales channel | February | March |",
                "|:--|--:|--:|",
                *rows,
                "| Total | 1 | 2 |",
            ]
        )
        env.tools["write_report"](markdown=text)
        checks = _checks(env)
        for name in ("report_biggest_drop", "report_mom_pct", "report_table"):
            assert checks[name].ok, checks[name].detail
        env.tools["write_report"](markdown="\n".join(rows))  # no biggest-drop line
        checks = _checks(env)
        assert "no 'Biggest drop" in checks["report_biggest_drop"].detail
        assert checks["report_table"].ok  # the table is still read

    @pytest.mark.parametrize(
        ("query", "problem"),
        [
            (CLEAN_QUERY.replace("revenue IS NOT NULL AND ", ""), "a null revenue"),
            (
                CLEAN_QUERY.replace("revenue FROM", "COALESCE(revenue, 0) AS revenue FROM").replace(
                    "revenue IS NOT NULL AND ", ""
                ),
                "revenue 0",
            ),
            (CLEAN_QUERY.replace("DISTINCT ", ""), "a duplicate"),
            (CLEAN_QUERY.replace("AND channel IS NOT NULL AND TRIM(channel) <> '' ", ""), "blank"),
        ],
        ids=["nulls-kept", "nulls-filled-with-0", "duplicates-kept", "blank-channels-kept"],
    )
    def test_wrong_cleaned_data_fails(self, tmp_path: Path, query: str, problem: str) -> None:
        env = _build(tmp_path)
        env.tools["export_csv"](query=query, filename=CLEANED)
        check = _checks(env)["cleaned_csv"]
        assert not check.ok
        assert problem in check.detail
        assert "distinct rows with a revenue and a channel" in check.detail

    @needs_mpl
    def test_a_wrong_chart_fails(self, tmp_path: Path) -> None:
        env = _build(tmp_path)
        right = analyse(totals_of(make_rows(SPEC.params)))
        plot = env.tools["plot_channels"]
        channels = list(right.mom)
        plot(channels=channels, values=list(right.mom.values()))
        assert _checks(env)["chart_png"].ok
        assert len(chart_bars(env.root / CHART)[0]) == len(channels)
        # The channel totals instead of the changes: right count, wrong heights.
        plot(channels=channels, values=[right.total(c, right.months[1]) for c in channels])
        assert "do not match" in _checks(env)["chart_png"].detail
        plot(channels=[*channels, "(blank)"], values=[*right.mom.values(), -85.0])
        assert "6 bars, expected 5" in _checks(env)["chart_png"].detail
        (env.root / CHART).write_text("not a picture")
        assert "not a PNG" in _checks(env)["chart_png"].detail


class TestTools:
    def test_sql_reads_every_csv_and_writes_nothing(self, tmp_path: Path) -> None:
        env = _build(tmp_path)
        sql = env.tools["run_sql"]
        blank = sql(query="SELECT COUNT(*) FROM sales WHERE channel IS NULL")
        assert blank["rows"][0][0] > 0
        wide = sql(query="SELECT * FROM sales")
        assert wide["truncated"]
        assert len(wide["rows"]) < wide["row_count"]
        for write in ("DELETE FROM sales", f"ATTACH DATABASE '{tmp_path}/x.db' AS x"):
            with pytest.raises(ValueError, match="not authorized"):
                sql(query=write)
        assert not (tmp_path / "x.db").exists()
        env.tools["export_csv"](query=CLEAN_QUERY, filename=CLEANED)
        assert sql(query="SELECT COUNT(*) FROM cleaned")["rows"][0][0] < wide["row_count"]
        with pytest.raises(ValueError, match="SQL error"):
            sql(query="SELECT nope FROM sales")
        with pytest.raises(ValueError, match=r"not sales\.csv"):
            env.tools["export_csv"](query=CLEAN_QUERY, filename=SALES)
        assert "13 columns" in env.tools["csv_info"]()


class TestSkills:
    def test_preconditions_offer_one_skill_at_a_time(self, tmp_path: Path) -> None:
        env = _build(tmp_path)
        state = SalesState(task_id="x")
        assert [s.name for s in env.skills.applicable(state)] == ["clean_data"]
        state = state.evolve(cleaned_rows=10)
        assert [s.name for s in env.skills.applicable(state)] == ["aggregate"]
        state = state.evolve(totals={"a": {"2026-02": 1.0}})
        assert [s.name for s in env.skills.applicable(state)] == ["find_biggest_drop"]
        state = state.evolve(biggest_drop="a", biggest_drop_pct=-1.0)
        assert [s.name for s in env.skills.applicable(state)] == ["write_report"]
        assert env.skills.applicable(state.evolve(report_written=True)) == []

    def test_clean_data_refuses_undeduplicated_data_and_rolls_back(self, tmp_path: Path) -> None:
        env = _build(tmp_path)
        export = env.tools["export_csv"]

        def sloppy_export(query: str, filename: str) -> Any:
            return export(query=query.replace("DISTINCT ", ""), filename=filename)

        result = _run(env, ["clean_data"], tools={"export_csv": sloppy_export})
        assert any("duplicate" in m for m in _failures(result))
        assert "step_failed" in [e.kind for e in result.state.errors]
        assert isinstance(result.state, SalesState)
        assert result.state.cleaned_rows is None
        assert not (env.root / CLEANED).exists()

    def test_aggregate_refuses_totals_of_the_raw_data(self, tmp_path: Path) -> None:
        env = _build(tmp_path)
        sql = env.tools["run_sql"]

        def raw_sql(query: str) -> Any:  # aggregates sales.csv instead of cleaned.csv
            return sql(query=query.replace("FROM cleaned", "FROM sales WHERE channel <> ''"))

        result = _run(env, ["clean_data", "aggregate"], tools={"run_sql": raw_sql})
        assert any("differ from cleaned.csv" in m for m in _failures(result))
        assert isinstance(result.state, SalesState)
        assert result.state.cleaned_rows is not None
        assert result.state.totals == {}

    def test_find_biggest_drop_refuses_wrong_totals(self, tmp_path: Path) -> None:
        env = _build(tmp_path)
        cleaned = env.tools["export_csv"](query=CLEAN_QUERY, filename=CLEANED)
        undeduplicated = totals_of(make_rows(SPEC.params), dedupe=False)
        totals = {c: {m: v / 100 for m, v in per.items()} for c, per in undeduplicated.items()}
        result = _run(
            env,
            ["find_biggest_drop"],
            cleaned_rows=cleaned["rows"],
            totals=totals,
            current_step="aggregating",
        )
        assert any("mom_pct" in m for m in _failures(result))
        assert isinstance(result.state, SalesState)
        assert result.state.biggest_drop is None

    @needs_mpl
    def test_write_report_refuses_a_wrong_report_and_removes_both_files(
        self, tmp_path: Path
    ) -> None:
        env = _build(tmp_path)
        write = env.tools["write_report"]

        def wrong_report(markdown: str) -> str:
            return write(markdown=markdown.replace(SPEC.params["falls_most"], "partners", 1))

        result = _run(env, PLAN, tools={"write_report": wrong_report})
        failures = _failures(result)
        assert any("names 'partners'" in m for m in failures)
        assert "without removing duplicate rows" in failures[0]
        assert isinstance(result.state, SalesState)
        assert not result.state.report_written
        assert not (env.root / REPORT).exists()
        assert not (env.root / CHART).exists()
        assert (env.root / CLEANED).exists()  # earlier, verified steps keep their files


@needs_mpl
@pytest.mark.parametrize("variant", VARIANT_NAMES)
def test_oracle_passes_in_every_variant(variant: str, tmp_path: Path) -> None:
    """The reference plan succeeds, recovers from every interruption, repeats nothing."""
    result = assert_oracle_passes(SPEC, variant, tmp_path)
    assert all(result.checks.values())
