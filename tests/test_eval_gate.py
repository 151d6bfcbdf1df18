"""``skillstate eval --compare``: the table of what moved, the gates, the refusals.

One small real evaluation (the oracle, one task, two variants, no recovery runs) is
the baseline; the "new" reports are copies of it with numbers edited, which is how
a regression is injected without running a worse agent.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from skillstate.errors import BaselineMismatch, RegressionDetected, UsageError
from skillstate.eval.cli import run_eval
from skillstate.eval.gate import (
    METRICS,
    compare_reports,
    load_report,
    metrics_help,
    parse_gates,
)
from tests.eval_support import cli

VARIANTS = "state,skillstate"


@pytest.fixture(scope="module")
def baseline_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real, small evaluation: the baseline every test compares against."""
    out = tmp_path_factory.mktemp("base")
    code = run_eval(
        suite="long",
        variants=VARIANTS,
        seeds=1,
        model="oracle",
        base_url=None,
        out=str(out),
        tasks=1,
        context_window=None,
        max_repairs=2,
        recovery=False,
        command="skillstate eval (test baseline)",
    )
    assert code == 0
    return out


def new_report(
    base: Path, where: Path, edit: dict[tuple[str, str], float | None] | None = None, **top: Any
) -> Path:
    """A copy of the baseline's report (and report.md) in ``where``, with edited means."""
    document = json.loads((base / "report.json").read_text())
    for (variant, key), value in (edit or {}).items():
        document["variants"][variant][key]["mean"] = value
    document.update(top)
    where.mkdir(parents=True, exist_ok=True)
    (where / "report.json").write_text(json.dumps(document, indent=2))
    (where / "report.md").write_text((base / "report.md").read_text())
    return where / "report.json"


def mean(base: Path, variant: str, key: str) -> float:
    value = json.loads((base / "report.json").read_text())["variants"][variant][key]["mean"]
    assert isinstance(value, float)
    return value


class TestCompareCommand:
    def test_no_regression_exits_0_with_the_table(
        self, baseline_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """An unchanged report passes every gate; the table and the report say so."""
        new = new_report(baseline_dir, tmp_path / "new")
        code, out, err = cli(
            capsys,
            *("eval", "--compare", str(baseline_dir / "report.json"), "--report", str(new)),
            *("--fail-under", "success=0.05", "--fail-under", "tokens_per_decision=10%"),
        )
        assert code == 0, err
        assert err == ""
        assert "compared with" in out
        assert "success" in out
        assert "tokens_per_decision" in out
        assert "no gate breached" in out
        written = json.loads(new.read_text())["comparison"]
        assert written["breaches"] == []
        assert written["gates"] == ["success=0.05", "tokens_per_decision=10%"]
        assert {row["variant"] for row in written["rows"]} == {"state", "skillstate"}
        assert "## Compared with the baseline" in (new.parent / "report.md").read_text()

    def test_injected_regression_exits_9_naming_the_metric(
        self, baseline_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A success rate edited down past the gate: exit 9, one line naming it."""
        new = new_report(baseline_dir, tmp_path / "new", {("skillstate", "success_rate"): 0.5})
        code, out, err = cli(
            capsys,
            *("eval", "--compare", str(baseline_dir), "--report", str(new)),
            *("--fail-under", "success=0.05"),
        )
        assert code == 9
        assert err.count("\n") == 1
        assert err.startswith("error: regression: 1 gate(s) breached")
        assert "skillstate success 1 -> 0.5" in err
        assert "BREACH" in out
        written = json.loads(new.read_text())["comparison"]
        assert written["breaches"] == [
            "skillstate success 1 -> 0.5 (-0.5; gate 0.05)",
        ]
        markdown = (new.parent / "report.md").read_text()
        assert "**BREACH**" in markdown
        assert "**1 gate(s) breached.**" in markdown

    def test_a_second_comparison_replaces_the_first_section(
        self, baseline_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Comparing the same report twice leaves one comparison section in report.md."""
        new = new_report(baseline_dir, tmp_path / "new")
        for _ in range(2):
            code, _, err = cli(capsys, "eval", "--compare", str(baseline_dir), "--report", str(new))
            assert code == 0, err
        assert (new.parent / "report.md").read_text().count("## Compared with the baseline") == 1

    def test_run_then_compare(
        self, baseline_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The run's own report is compared after it: same tasks, same oracle, no breach."""
        out_dir = tmp_path / "run"
        code, out, err = cli(
            capsys,
            *("eval", "--suite", "long", "--tasks", "1", "--seeds", "1", "--no-recovery"),
            *("--variants", VARIANTS, "--out", str(out_dir)),
            *("--compare", str(baseline_dir), "--fail-under", "success=0,tokens_per_decision=0"),
        )
        assert code == 0, err
        assert "no gate breached" in out
        rows = json.loads((out_dir / "report.json").read_text())["comparison"]["rows"]
        tokens = [r for r in rows if r["metric"] == "tokens_per_decision"]
        assert all(r["delta"] == 0 for r in tokens)  # the oracle's prompts are deterministic

    def test_a_mismatched_baseline_is_refused_before_the_run(
        self, baseline_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Another suite: refused in one line, before anything runs or is written."""
        out_dir = tmp_path / "run"
        code, _, err = cli(
            capsys,
            *("eval", "--suite", "seeds", "--tasks", "1", "--seeds", "1", "--no-recovery"),
            *("--variants", VARIANTS, "--out", str(out_dir), "--compare", str(baseline_dir)),
        )
        assert code == 2
        assert err.count("\n") == 1
        assert "baseline is not comparable: suite 'seeds', baseline 'long'" in err
        assert not out_dir.exists()


class TestMismatch:
    @pytest.mark.parametrize(
        ("top", "phrase"),
        [
            ({"model": "openai:gpt-4o-mini"}, "model 'openai:gpt-4o-mini', baseline 'oracle'"),
            ({"suite": "seeds"}, "suite 'seeds', baseline 'long'"),
            ({"seeds": [0, 1]}, "seeds [0, 1], baseline [0]"),
        ],
    )
    def test_another_experiment_is_refused(
        self,
        baseline_dir: Path,
        tmp_path: Path,
        capsys: pytest.CaptureFixture[str],
        top: dict[str, Any],
        phrase: str,
    ) -> None:
        """Another model, suite or seed list: exit 2, and nothing written into the report."""
        new = new_report(baseline_dir, tmp_path / "new", **top)
        code, out, err = cli(capsys, "eval", "--compare", str(baseline_dir), "--report", str(new))
        assert code == 2
        assert out == ""
        assert err.count("\n") == 1
        assert phrase in err
        assert "comparison" not in json.loads(new.read_text())

    def test_another_variant_set_or_task_list_is_refused(self, baseline_dir: Path) -> None:
        """Fewer variants, or other tasks: BaselineMismatch names the difference."""
        base = load_report(baseline_dir)
        fewer = copy.deepcopy(base)
        del fewer["variants"]["state"]
        with pytest.raises(
            BaselineMismatch, match="variants skillstate, baseline skillstate,state"
        ):
            compare_reports(base, fewer)
        other = copy.deepcopy(base)
        for task in other["tasks"]:
            task["task_id"] = "records-999"
        with pytest.raises(BaselineMismatch, match="task lists differ"):
            compare_reports(base, other)

    def test_allow_mismatch_compares_the_common_variants_loudly(
        self, baseline_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """--allow-mismatch: a warning on stderr and in the report, common variants only."""
        new = new_report(baseline_dir, tmp_path / "new", model="local")
        code, _, err = cli(
            capsys,
            *("eval", "--compare", str(baseline_dir), "--report", str(new), "--allow-mismatch"),
        )
        assert code == 0
        assert "WARNING: baseline differs: model 'local', baseline 'oracle'" in err
        written = json.loads(new.read_text())["comparison"]
        assert written["mismatches"] == ["model 'local', baseline 'oracle'"]
        assert "**Not like for like.**" in (new.parent / "report.md").read_text()


class TestGates:
    def test_relative_delta(self, baseline_dir: Path) -> None:
        """tokens_per_decision=10%: +5% passes, +15% breaches (lower is better)."""
        base = load_report(baseline_dir)
        tokens = mean(baseline_dir, "state", "prompt_tokens_per_decision_mean")
        gates = parse_gates(["tokens_per_decision=10%"])
        for factor, breached in ((1.05, False), (1.15, True)):
            new = copy.deepcopy(base)
            new["variants"]["state"]["prompt_tokens_per_decision_mean"]["mean"] = tokens * factor
            comparison = compare_reports(base, new, gates)
            assert [r.variant for r in comparison.breaches] == (["state"] if breached else [])

    def test_absolute_delta_and_direction(self, baseline_dir: Path) -> None:
        """success=0.05: a drop of 0.04 passes, of 0.06 breaches; a rise never does;
        fewer tokens never breach a tokens gate."""
        base = load_report(baseline_dir)
        tokens = mean(baseline_dir, "skillstate", "prompt_tokens_per_decision_mean")
        gates = parse_gates(["success=0.05", "tokens_per_decision=0"])
        cases = [
            ({"success_rate": 0.96}, []),
            ({"success_rate": 0.94}, ["success"]),
            ({"prompt_tokens_per_decision_mean": tokens / 2}, []),
            ({"prompt_tokens_per_decision_mean": tokens + 1}, ["tokens_per_decision"]),
        ]
        for edits, breached in cases:
            new = copy.deepcopy(base)
            for key, value in edits.items():
                new["variants"]["skillstate"][key]["mean"] = value
            names = [r.metric.name for r in compare_reports(base, new, gates).breaches]
            assert names == breached, edits

    def test_higher_success_is_not_a_regression(self, baseline_dir: Path) -> None:
        """A baseline of 0.5 and a new 1.0 under success=0: better, not breached."""
        base = load_report(baseline_dir)
        worse_base = copy.deepcopy(base)
        worse_base["variants"]["state"]["success_rate"]["mean"] = 0.5
        comparison = compare_reports(worse_base, base, parse_gates(["success=0"]))
        assert comparison.breaches == []
        row = next(
            r for r in comparison.rows if r.variant == "state" and r.metric.name == "success"
        )
        assert row.status == "better"

    def test_a_gated_metric_without_a_new_value_breaches(self, baseline_dir: Path) -> None:
        """The gate cannot be checked when the new report has no value: not a pass."""
        base = load_report(baseline_dir)
        new = copy.deepcopy(base)
        new["variants"]["state"]["success_rate"]["mean"] = None
        comparison = compare_reports(base, new, parse_gates(["success=1"]))
        assert [r.breach_text() for r in comparison.breaches] == [
            "state success 1 -> no value (gate 1)"
        ]
        with pytest.raises(RegressionDetected, match="state success 1 -> no value"):
            comparison.check()

    def test_a_variant_gate_gates_that_variant_only(self, baseline_dir: Path) -> None:
        """skillstate:success=0 ignores the state variant's drop."""
        base = load_report(baseline_dir)
        new = copy.deepcopy(base)
        new["variants"]["state"]["success_rate"]["mean"] = 0.0
        assert compare_reports(base, new, parse_gates(["skillstate:success=0"])).breaches == []
        assert compare_reports(base, new, parse_gates(["success=0"])).breaches != []
        with pytest.raises(UsageError, match=r"variant.*window"):
            compare_reports(base, new, parse_gates(["window:success=0"]))

    def test_parse_gates(self) -> None:
        """Names or report keys, repeated or comma-separated, absolute or relative."""
        gates = parse_gates(["success=0.05,prompt_tokens_per_decision_mean=10%", "faults=1"])
        assert [(g.metric.name, g.delta, g.relative) for g in gates] == [
            ("success", 0.05, False),
            ("tokens_per_decision", 10.0, True),
            ("faults", 1.0, False),
        ]
        assert gates[1].allowed(200.0) == pytest.approx(20.0)

    def test_every_metric_is_in_the_help(self, capsys: pytest.CaptureFixture[str]) -> None:
        """`eval --help` lists --compare, --replay and every gate metric with its direction."""
        code, out, _ = cli(capsys, "eval", "--help")
        assert code == 0
        flat = " ".join(out.split())
        for option in ("--compare", "--fail-under", "--report", "--replay", "--allow-mismatch"):
            assert option in flat
        for metric in METRICS:
            assert metric.name in flat
        assert len({m.name for m in METRICS}) == len(METRICS)
        assert "success (↑)" in metrics_help()
        assert "tokens_per_decision (↓)" in metrics_help()


class TestBadInput:
    @pytest.mark.parametrize(
        ("gate", "phrase"),
        [
            ("sucess=0.05", "unknown metric 'sucess'"),
            ("success", "expected METRIC=DELTA"),
            ("success=", "DELTA must be a number"),
            ("success=abc", "DELTA must be a number"),
            ("success=-0.1", "DELTA must be a number"),
            ("success=nan", "DELTA must be a number"),
            ("tokens_per_decision=inf%", "DELTA must be a number"),
            ("tokens_per_decision=%", "DELTA must be a number"),
        ],
    )
    def test_bad_fail_under(
        self,
        baseline_dir: Path,
        capsys: pytest.CaptureFixture[str],
        gate: str,
        phrase: str,
    ) -> None:
        """An unknown metric or a malformed delta: one line, exit 2."""
        report = str(baseline_dir / "report.json")
        code, out, err = cli(
            capsys, "eval", "--compare", report, "--report", report, "--fail-under", gate
        )
        assert code == 2
        assert out == ""
        assert err.count("\n") == 1
        assert phrase in err

    def test_unreadable_reports(
        self, baseline_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Missing, not JSON, not an eval report: one line each, exit 2."""
        garbage = tmp_path / "garbage.json"
        garbage.write_text("{not json")
        forced = tmp_path / "forced.json"
        forced.write_text(json.dumps({"variants": {"state": {"exact": 1}}}))
        report = str(baseline_dir / "report.json")
        for baseline, phrase in (
            (tmp_path / "missing.json", "cannot read baseline"),
            (garbage, "is not JSON"),
            (forced, "is not an end-to-end eval report.json"),
        ):
            code, _, err = cli(capsys, "eval", "--compare", str(baseline), "--report", report)
            assert code == 2
            assert err.count("\n") == 1, err
            assert phrase in err, err
        code, _, err = cli(capsys, "eval", "--compare", report, "--report", str(garbage))
        assert code == 2
        assert "cannot read" not in err
        assert "is not JSON" in err

    @pytest.mark.parametrize(
        "args",
        [
            ("--fail-under", "success=0.05"),
            ("--report", "x.json"),
            ("--allow-mismatch",),
            ("--replay", ".", "--compare", "x.json"),
            ("--compare", "BASE", "--mode", "forced"),
        ],
    )
    def test_options_that_do_not_go_together(
        self,
        baseline_dir: Path,
        capsys: pytest.CaptureFixture[str],
        args: tuple[str, ...],
    ) -> None:
        """Gate options without --compare, --replay with --compare, --compare of a forced
        run: one line, exit 2, nothing run."""
        args = tuple(str(baseline_dir) if a == "BASE" else a for a in args)
        code, _, err = cli(capsys, "eval", *args)
        assert code == 2
        assert err.count("\n") == 1, err
        assert "Traceback" not in err
