"""The seeds' protocol: retries and time per step, and injected provider faults."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from skillstate.errors import ProviderError, UsageError
from skillstate.eval.faults import FaultyProvider, faulty_factory
from skillstate.eval.forced import run_forced_task
from skillstate.eval.metrics import STAT_METRICS, summarize
from skillstate.eval.runner import oracle_factory, run_task
from skillstate.eval.suites import load_suite
from skillstate.eval.tasks import TaskSpec
from skillstate.eval.variants import VARIANTS
from skillstate.llm import Message
from skillstate.llm.replay import ScriptedProvider
from tests.test_cli import run_cli


@pytest.fixture(scope="module")
def spec() -> TaskSpec:
    return min(load_suite("long", 0), key=lambda s: s.max_steps)


class TestStepMetrics:
    def test_retries_and_time_per_step_come_from_the_events(
        self, spec: TaskSpec, tmp_path: Path
    ) -> None:
        """The tool that fails once is retried by the raw-tools run: one retry; steps are timed."""
        result = run_task(spec, VARIANTS["state"], seed=0, workdir=tmp_path, recovery=False)
        assert result.success, result.failure
        assert result.retries == 1
        assert result.step_seconds > 0
        summary = summarize([result])["state"]
        assert {"retries_per_step_mean", "time_per_step_mean"} <= set(STAT_METRICS)
        per_step = summary["time_per_step_mean"]["mean"]
        assert per_step == pytest.approx(result.step_seconds / result.steps)
        retries = summary["retries_per_step_mean"]["mean"]
        assert retries == pytest.approx(result.retries / result.steps)

    def test_no_decisions_means_undefined_not_zero(self, spec: TaskSpec, tmp_path: Path) -> None:
        """A run that made no decision leaves both per-step metrics undefined."""
        result = run_task(
            spec,
            VARIANTS["state"],
            seed=0,
            workdir=tmp_path,
            recovery=False,
            factory=faulty_factory(oracle_factory, 1.0),
        )
        assert result.steps == 0
        summary = summarize([result])["state"]
        assert summary["time_per_step_mean"] == {"mean": None, "std": None}


class TestFaultInjection:
    def test_the_rate_is_seeded_and_roughly_kept(self) -> None:
        """Same seed, same faults; about `rate` of the calls fail."""

        def outcomes(seed: int) -> list[bool]:
            inner = ScriptedProvider(lambda messages, schema: "{}")
            faulty = FaultyProvider(inner, 0.3, random.Random(seed))
            seen, errors = [], []
            for _ in range(400):
                try:
                    faulty.complete([Message("user", "hi")])
                except ProviderError as exc:
                    errors.append(str(exc))
                    seen.append(False)
                else:
                    seen.append(True)
            assert all("injected fault" in text for text in errors)
            return seen

        first = outcomes(1)
        assert first == outcomes(1)
        assert 0.2 < first.count(False) / len(first) < 0.4

    def test_a_fault_is_a_recorded_failure_not_a_crash(
        self, spec: TaskSpec, tmp_path: Path
    ) -> None:
        """End to end, a fault ends the task as a failure that names it."""
        result = run_task(
            spec,
            VARIANTS["skillstate"],
            seed=0,
            workdir=tmp_path,
            factory=faulty_factory(oracle_factory, 1.0),
        )
        assert not result.success
        assert result.failure is not None
        assert "injected fault" in result.failure

    def test_forced_mode_scores_a_fault_invalid_and_goes_on(
        self, spec: TaskSpec, tmp_path: Path
    ) -> None:
        """Forced mode: every faulted decision is invalid, and every k is still asked."""
        run = run_forced_task(
            spec,
            VARIANTS["state"],
            seed=0,
            workdir=tmp_path,
            factory=faulty_factory(oracle_factory, 1.0),
        )
        assert run.reference_ok
        assert run.decisions
        assert all(not d.valid and "injected fault" in (d.error or "") for d in run.decisions)

    def test_a_rate_outside_zero_one_is_refused(self) -> None:
        with pytest.raises(UsageError, match="between 0 and 1"):
            faulty_factory(oracle_factory, 1.5)

    def test_the_command_runs_with_faults_and_reports_them(self, tmp_path: Path) -> None:
        """`--inject-faults 1` : exit 0, every run a recorded failure; default seeds is 3."""
        out = tmp_path / "out"
        code, stdout, err = run_cli(
            tmp_path, "eval", "--suite", "long", "--groups", "short", "--tasks", "1",
            "--variants", "state", "--inject-faults", "1", "--out", str(out),
        )  # fmt: skip
        assert code == 0, stdout + err
        data = json.loads((out / "report.json").read_text(encoding="utf-8"))
        assert data["seeds"] == [0, 1, 2]
        assert data["tasks"]
        assert all("injected fault" in (t["failure"] or "") for t in data["tasks"])
        assert "Retries / step" in (out / "report.md").read_text(encoding="utf-8")
