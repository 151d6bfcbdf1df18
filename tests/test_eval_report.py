"""Metrics and the report of the evaluation harness, on hand-built results.

The expected numbers below are worked out by hand from the fixtures, seed by seed,
so that a change in a definition (per seed first, sample std, pooled decisions,
which resumed runs count) shows up as a failing number, not a silent drift.
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path
from typing import Any

import pytest

from skillstate.errors import MissingExtra
from skillstate.eval.metrics import percentile, summarize, tokens_by_step
from skillstate.eval.report import write_report
from skillstate.eval.results import RecoveryResult, TaskResult

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SQRT2 = math.sqrt(2)
GROUP_OF = {"t-short": "short", "t-medium": "medium", "t-long": "long"}
HAS_MPL = importlib.util.find_spec("matplotlib") is not None
needs_mpl = pytest.mark.skipif(not HAS_MPL, reason="needs the eval extra (matplotlib)")


def run(task: str, variant: str, seed: int, tokens: list[int], **fields: Any) -> TaskResult:
    """One result with plausible defaults: one call per decision, all steps reached."""
    fields.setdefault("success", True)
    fields.setdefault("step_completion", 1.0)
    fields.setdefault("intermediate_validity", 1.0)
    repairs = fields.setdefault("repairs", 0)
    return TaskResult(
        task_id=task,
        suite="synthetic",
        group=GROUP_OF[task],
        variant=variant,
        seed=seed,
        steps=len(tokens),
        plan_steps=len(tokens),
        model_calls=len(tokens) + repairs,
        prompt_tokens=tokens,
        completion_tokens=20,
        **fields,
    )


def history_runs() -> list[TaskResult]:
    """The transcript baseline: prompts grow, the long task overflows."""
    return [
        run("t-short", "history", 1, [100, 200]),
        run("t-medium", "history", 1, [100, 200, 300]),
        run(
            "t-long",
            "history",
            1,
            [100, 200, 300, 400],
            success=False,
            failure="context overflow",
            first_bad_step=4,
            step_completion=0.5,
        ),
        run("t-short", "history", 2, [110, 210]),
        run(
            "t-medium",
            "history",
            2,
            [110, 210, 310],
            success=False,
            failure="check ledger_balanced failed",
            first_bad_step=2,
            step_completion=0.4,
            repairs=1,
        ),
        run(
            "t-long",
            "history",
            2,
            [110, 210, 310],
            success=False,
            failure="context overflow",
            first_bad_step=3,
            step_completion=0.6,
        ),
    ]


def skillstate_runs() -> list[TaskResult]:
    """Explicit state: flat prompts, all succeed, some interrupted and resumed."""
    return [
        run("t-short", "skillstate", 1, [50, 50], recovery=[RecoveryResult(0.5, True)]),
        run(
            "t-medium",
            "skillstate",
            1,
            [50, 50, 50],
            recovery=[RecoveryResult(0.25, True), RecoveryResult(0.75, False)],
        ),
        run("t-long", "skillstate", 1, [50, 50, 50, 50]),
        run(
            "t-short",
            "skillstate",
            2,
            [50, 50],
            recovery=[RecoveryResult(0.5, True, duplicated_effects=1)],
        ),
        run("t-medium", "skillstate", 2, [50, 50, 50]),
        # Failed uninterrupted: its resumed run is left out of the recovery rate.
        run(
            "t-long",
            "skillstate",
            2,
            [50, 50, 50, 50],
            success=False,
            failure="step budget",
            recovery=[RecoveryResult(0.5, True)],
        ),
    ]


def all_runs() -> list[TaskResult]:
    filler = [
        run(task, variant, seed, [70] * (index + 2))
        for variant in ("skills", "state")  # deliberately out of canonical order
        for seed in (2, 1)
        for index, task in enumerate(GROUP_OF)
    ]
    return [*skillstate_runs(), *filler, *history_runs()]


def approx_stat(mean: float | None, std: float | None) -> dict[str, Any]:
    return {
        "mean": None if mean is None else pytest.approx(mean),
        "std": None if std is None else pytest.approx(std),
    }


# --- metrics -------------------------------------------------------------------------------


def test_variants_come_in_canonical_order() -> None:
    assert list(summarize(all_runs())) == ["history", "state", "skills", "skillstate"]


def test_history_aggregates_are_mean_and_sample_std_over_seeds() -> None:
    history = summarize(all_runs())["history"]

    assert history["runs"] == 6
    assert history["seeds"] == 2
    # seed 1: 2/3 succeed, seed 2: 1/3.
    assert history["success_rate"] == approx_stat(0.5, (1 / 3) / SQRT2)
    # seed 1: (1 + 1 + 0.5) / 3, seed 2: (1 + 0.4 + 0.6) / 3.
    assert history["step_completion"] == approx_stat(0.75, (0.5 / 3) / SQRT2)
    # Calls = decisions + repairs: seed 1 (2+3+4)/3 = 3, seed 2 (2+4+3)/3 = 3.
    assert history["model_calls_mean"] == approx_stat(3.0, 0.0)
    assert history["repairs_mean"] == approx_stat(1 / 6, (1 / 3) / SQRT2)
    # Pooled decisions: seed 1 has 9 summing to 1900, seed 2 has 8 summing to 1580.
    assert history["prompt_tokens_per_decision_mean"] == approx_stat(
        (1900 / 9 + 1580 / 8) / 2, abs(1900 / 9 - 1580 / 8) / SQRT2
    )
    # p95, linear: seed 1 sorted[7.6] = 300 + 0.6 * 100 = 360; seed 2 sorted[6.65] = 310.
    assert history["prompt_tokens_per_decision_p95"] == approx_stat(335.0, 50 / SQRT2)
    assert history["prompt_tokens_total"] == approx_stat(1740.0, 320 / SQRT2)
    assert history["completion_tokens_total"] == approx_stat(60.0, 0.0)
    # No resumed runs: undefined, not zero.
    assert history["recovery_runs"] == 0
    assert history["recovery_rate"] == approx_stat(None, None)
    assert history["duplicated_effects"] == approx_stat(None, None)


def test_history_by_length_group() -> None:
    by_length = summarize(all_runs())["history"]["by_length"]

    assert list(by_length) == ["short", "medium", "long"]
    assert by_length["short"]["success_rate"] == approx_stat(1.0, 0.0)
    assert by_length["medium"]["success_rate"] == approx_stat(0.5, 1 / SQRT2)
    assert by_length["long"]["success_rate"] == approx_stat(0.0, 0.0)
    assert by_length["long"]["step_completion"] == approx_stat(0.55, 0.1 / SQRT2)
    assert by_length["long"]["prompt_tokens_total"] == approx_stat(815.0, 370 / SQRT2)
    assert by_length["medium"]["runs"] == 2


def test_recovery_rate_counts_only_tasks_that_succeed_uninterrupted() -> None:
    skillstate = summarize(all_runs())["skillstate"]

    # seed 1: 2 of 3 resumed runs succeed; seed 2: 1 of 1 (the resumed run of the
    # failed long task is left out).
    assert skillstate["recovery_runs"] == 4
    assert skillstate["recovery_rate"] == approx_stat(5 / 6, (1 / 3) / SQRT2)
    # Duplicates over every resumed run: seed 1 has 0, seed 2 has 1.
    assert skillstate["duplicated_effects"] == approx_stat(0.5, 1 / SQRT2)
    assert skillstate["by_length"]["short"]["recovery_rate"] == approx_stat(1.0, 0.0)
    assert skillstate["by_length"]["long"]["recovery_rate"] == approx_stat(None, None)
    assert skillstate["success_rate"] == approx_stat(5 / 6, (1 / 3) / SQRT2)


def test_one_seed_has_zero_std() -> None:
    history = summarize([r for r in history_runs() if r.seed == 1])["history"]

    assert history["seeds"] == 1
    assert history["success_rate"] == approx_stat(2 / 3, 0.0)
    assert history["prompt_tokens_per_decision_p95"] == approx_stat(360.0, 0.0)


def test_numbers_are_plain_floats() -> None:
    stat = summarize(all_runs())["history"]["success_rate"]

    assert type(stat["mean"]) is float
    assert type(stat["std"]) is float


def test_tokens_by_step_averages_the_runs_that_reached_each_step() -> None:
    curves = tokens_by_step(all_runs())

    assert list(curves) == ["history", "state", "skills", "skillstate"]
    # Step 3 is reached by both medium and both long runs; step 4 by seed 1's long run.
    assert curves["history"] == pytest.approx([105.0, 205.0, 305.0, 400.0])
    assert curves["skillstate"] == pytest.approx([50.0] * 4)
    assert all(type(value) is float for value in curves["history"])
    assert tokens_by_step([]) == {}


def test_percentile_matches_linear_interpolation() -> None:
    assert percentile([5.0], 95) == 5.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == pytest.approx(2.5)
    assert percentile([10.0, 20.0], 95) == pytest.approx(19.5)
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)


def test_summarize_nothing_is_empty() -> None:
    assert summarize([]) == {}


# --- report --------------------------------------------------------------------------------


def report(tmp_path: Path, **overrides: Any) -> Any:
    options: dict[str, Any] = {
        "model": "oracle",
        "suite": "synthetic",
        "seeds": [1, 2],
        "command": ["skillstate", "eval", "--suite", "synthetic", "--seeds", "1,2"],
        "started_at": "2026-01-02T03:04:05+00:00",
        "duration_s": 12.5,
        "machine": {"cpu": "test cpu", "gpu": "none"},
    }
    options.update(overrides)
    return write_report(all_runs(), tmp_path, **options)


def test_report_json_shape(tmp_path: Path) -> None:
    paths = report(tmp_path, plots=False)
    data = json.loads(paths.json.read_text(encoding="utf-8"))

    assert set(data) == {
        "model",
        "suite",
        "seeds",
        "command",
        "machine",
        "started_at",
        "duration_s",
        "variants",
        "prompt_tokens_by_step",
        "tasks",
    }
    assert data["model"] == "oracle"
    assert data["seeds"] == [1, 2]
    assert data["command"] == "skillstate eval --suite synthetic --seeds 1,2"
    assert data["duration_s"] == 12.5
    assert list(data["variants"]) == ["history", "state", "skills", "skillstate"]
    for variant in data["variants"].values():
        for key in (
            "success_rate",
            "step_completion",
            "model_calls_mean",
            "prompt_tokens_per_decision_mean",
            "prompt_tokens_total",
            "recovery_rate",
        ):
            assert set(variant[key]) == {"mean", "std"}
        assert list(variant["by_length"]) == ["short", "medium", "long"]
        assert set(variant["by_length"]["long"]["success_rate"]) == {"mean", "std"}
    history = data["variants"]["history"]
    assert history["success_rate"]["mean"] == pytest.approx(0.5)
    assert history["recovery_rate"] == {"mean": None, "std": None}

    assert len(data["tasks"]) == 24
    assert all("first_bad_step" in task for task in data["tasks"])
    overflow = [
        task
        for task in data["tasks"]
        if task["variant"] == "history" and task["task_id"] == "t-long" and task["seed"] == 1
    ]
    assert overflow[0]["first_bad_step"] == 4
    assert overflow[0]["prompt_tokens_total"] == 1000
    assert paths.tokens_by_step is None


def test_report_markdown_has_the_tables_and_failures(tmp_path: Path) -> None:
    text = report(tmp_path, plots=False).markdown.read_text(encoding="utf-8")

    assert text.startswith("# skillstate evaluation: synthetic")
    assert "- Model: `oracle`" in text
    assert "Scripted model." in text  # the oracle is called what it is
    assert "- Seeds: 1, 2 (n = 2)" in text
    assert "`skillstate eval --suite synthetic --seeds 1,2`" in text
    assert "cpu: test cpu" in text
    assert "12.5 s" in text
    for heading in (
        "## Success and completion",
        "## Success rate by length group",
        "## Prompt tokens",
        "## Recovery",
        "## Failures",
    ):
        assert heading in text
    assert "| history | 6 | 0.50 ± 0.24 |" in text
    assert "| medium | 0.50 ± 0.71 (n=2) |" in text
    recovery = "| skillstate | 4 | 0.83 ± 0.24 | 0 | 0 (0) | — | 0 | — | 0.00 ± 0.00 | 0.5 ± 0.7 |"
    assert recovery in text
    assert "| t-long | long | history | 1 | context overflow | decision 4 |" in text
    assert "| t-medium | medium | history | 2 | check ledger_balanced failed | decision 2 |" in text
    assert "| t-long | long | skillstate | 2 | step budget | — |" in text
    assert "![" not in text  # no plots were drawn, so none are linked


def test_a_real_model_is_not_called_scripted(tmp_path: Path) -> None:
    text = report(tmp_path, model="qwen2.5-7b-instruct", plots=False).markdown.read_text(
        encoding="utf-8"
    )

    assert "- Model: `qwen2.5-7b-instruct`" in text
    assert "Scripted model." not in text


@needs_mpl
def test_report_writes_valid_pngs(tmp_path: Path) -> None:
    paths = report(tmp_path)

    assert set(paths) == {
        tmp_path / "report.json",
        tmp_path / "report.md",
        tmp_path / "tokens_by_step.png",
        tmp_path / "success_by_length.png",
    }
    for png in (paths.tokens_by_step, paths.success_by_length):
        data = png.read_bytes()
        assert data[:8] == PNG_MAGIC
        assert len(data) > 1000
    text = paths.markdown.read_text(encoding="utf-8")
    assert "](tokens_by_step.png)" in text
    assert "](success_by_length.png)" in text


@needs_mpl
def test_plots_are_deterministic(tmp_path: Path) -> None:
    first = report(tmp_path / "a")
    second = report(tmp_path / "b")

    assert first.tokens_by_step.read_bytes() == second.tokens_by_step.read_bytes()
    assert first.success_by_length.read_bytes() == second.success_by_length.read_bytes()


def test_missing_matplotlib_raises_after_writing_the_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_find_spec = importlib.util.find_spec

    def without_matplotlib(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "matplotlib":
            return None
        return real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", without_matplotlib)
    with pytest.raises(MissingExtra, match=r"pip install 'skillstate\[eval\]'"):
        report(tmp_path)
    assert (tmp_path / "report.json").is_file()
    assert (tmp_path / "report.md").is_file()
    assert not (tmp_path / "tokens_by_step.png").exists()


def test_report_has_prompt_tokens_by_step_index(tmp_path: Path) -> None:
    """The curve behind tokens_by_step.png is in the JSON and, sampled, in the Markdown."""
    paths = report(tmp_path, plots=False)
    data = json.loads(paths.json.read_text(encoding="utf-8"))
    curves = data["prompt_tokens_by_step"]
    assert set(curves) == set(data["variants"])
    assert all(isinstance(v, float) for curve in curves.values() for v in curve)
    text = paths.markdown.read_text(encoding="utf-8")
    assert "Mean prompt tokens of the i-th decision" in text
    assert "| Variant | i = 1 |" in text
