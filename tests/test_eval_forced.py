"""Forced mode: teacher-forced decision accuracy along the reference run, its metrics
(Wilson intervals, the drop index) and ``skillstate eval --mode forced``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from skillstate.eval.forced import run_forced_task, score
from skillstate.eval.forced_metrics import (
    drop_index,
    length_bin,
    summarize_forced,
    wilson,
)
from skillstate.eval.results import ForcedDecision
from skillstate.eval.runner import OracleProvider, oracle_factory, run_task
from skillstate.eval.suites import load_suite
from skillstate.eval.tasks import Environment, TaskSpec
from skillstate.eval.variants import VARIANTS, Variant, parse_variants
from skillstate.llm.base import Completion, Message, Provider, Usage
from skillstate.store.base import Store
from tests.test_cli import run_cli

ALL = ",".join(VARIANTS)


@pytest.fixture(scope="module")
def short_task() -> TaskSpec:
    """The shortest task of the long suite (a handful of decisions)."""
    return min(load_suite("long", 0), key=lambda s: s.max_steps)


class _Wrong:
    """Answers like the oracle for the first ``right`` decisions, then finishes too early;
    its decision ``garbage`` (1-based) is not JSON at all."""

    def __init__(self, oracle: Provider, right: int, garbage: int) -> None:
        self.oracle, self.right, self.garbage, self.name = oracle, right, garbage, "fake-wrong"
        self.decisions = 0

    def complete(
        self,
        messages: Sequence[Message],
        *,
        schema: dict[str, Any] | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        if schema is None:
            return self.oracle.complete(messages, schema=schema, max_tokens=max_tokens)
        self.decisions += 1
        if self.decisions <= self.right:
            return self.oracle.complete(messages, schema=schema, max_tokens=max_tokens)
        text = "no idea" if self.decisions == self.garbage else '{"kind": "finish", "summary": "x"}'
        return Completion(text=text, usage=Usage(1, 1), model="fake-wrong")


def _wrong(right: int, garbage: int) -> Any:
    def factory(spec: TaskSpec, variant: Variant, env: Environment, store: Store) -> Provider:
        return _Wrong(oracle_factory(spec, variant, env, store), right, garbage)

    return factory


class TestForcedRun:
    def test_the_oracle_scores_one_for_every_variant_at_every_k(
        self, short_task: TaskSpec, tmp_path: Path
    ) -> None:
        """An oracle answering from the reference is right at every decision of every variant."""
        decisions: list[ForcedDecision] = []
        for variant in parse_variants(ALL, window=3, every=2):
            run = run_forced_task(short_task, variant, seed=0, workdir=tmp_path)
            assert run.reference_ok, run.reference_failure
            env_plan = run.decisions
            assert [d.k for d in env_plan] == list(range(1, len(env_plan) + 1))
            assert all(d.valid and d.skill_ok and d.params_ok for d in env_plan), env_plan
            assert all(d.prompt_tokens and d.prompt_tokens > 0 for d in env_plan)
            decisions += env_plan
        summary = summarize_forced(decisions)
        assert list(summary) == list(VARIANTS)
        for item in summary.values():
            assert item["drop_k"] == {"valid": None, "skill": None, "exact": None}
            for point in item["by_step"]:
                assert point["exact"]["rate"] == 1.0
            assert all(p["exact"]["rate"] == 1.0 for p in item["by_length"])

    @pytest.mark.parametrize("name", ["history", "state", "skillstate", "window", "hybrid"])
    def test_the_prompt_at_k_is_the_live_runs(
        self, name: str, short_task: TaskSpec, tmp_path: Path
    ) -> None:
        """The forced prompt at k has exactly the size the end-to-end run sent at k."""
        variant = parse_variants(name, window=3)[0]
        live = run_task(short_task, variant, seed=0, workdir=tmp_path, recovery=False)
        forced = run_forced_task(short_task, variant, seed=0, workdir=tmp_path)
        assert [d.prompt_tokens for d in forced.decisions] == live.prompt_tokens

    def test_a_wrong_model_scores_lower_and_its_drop_is_found(
        self, short_task: TaskSpec, tmp_path: Path
    ) -> None:
        """Right for 3 decisions, then a premature finish (valid, wrong), once garbage."""
        run = run_forced_task(
            short_task,
            VARIANTS["state"],
            seed=0,
            workdir=tmp_path,
            factory=_wrong(3, 6),
            max_repairs=0,
        )
        assert run.reference_ok  # the reference is played whatever the model says
        got = [(d.valid, d.skill_ok, d.params_ok) for d in run.decisions]
        assert got[:3] == [(True, True, True)] * 3
        assert got[5] == (False, False, False)
        assert run.decisions[5].error is not None
        assert all(g == (True, False, False) for g in got[3:5] + got[6:-1])
        assert got[-1] == (True, True, True)  # the reference's last decision is a finish
        item = summarize_forced(run.decisions)["state"]
        # k <= 5: 3 of 5 exact (0.6); k = 4 is the first below 0.3.
        assert item["early"]["exact"]["rate"] == pytest.approx(0.6)
        assert item["drop_k"] == {"valid": 6, "skill": 4, "exact": 4}
        assert item["overall"]["exact"]["hits"] == 4

    def test_score_normalizes_params_and_compares_kinds(self) -> None:
        """A default spelled out equals one left out; a different value or skill does not."""
        from pydantic import BaseModel

        from skillstate.engine.actions import CallSkill, Finish

        class Params(BaseModel):
            line: str
            note: str = ""

        params = {"tool_append": Params}
        reference = CallSkill(skill="tool_append", params={"line": "a"})
        same = CallSkill(skill="tool_append", params={"line": "a", "note": ""})
        other = CallSkill(skill="tool_append", params={"line": "b"})
        assert score(same, reference, params) == (True, True)
        assert score(other, reference, params) == (True, False)
        assert score(Finish(summary="x"), reference, params) == (False, False)
        assert score(Finish(summary="y"), Finish(summary="x"), params) == (True, True)


class TestMetrics:
    def test_drop_index_from_hand_made_counts(self) -> None:
        """Early accuracy pools k <= 5; the drop is the first k below half of it."""
        counts = [(1, 10, 10), (2, 9, 10), (3, 10, 10), (4, 8, 10), (5, 8, 10)]
        counts += [(6, 6, 10), (7, 4, 10), (8, 5, 10), (9, 0, 10)]
        early, k = drop_index(counts)
        assert early == pytest.approx(0.9)
        assert k == 7  # 0.4 < 0.45; k = 6 (0.6) and k = 8 come before/after it
        assert drop_index([(1, 5, 10), (2, 5, 10), (9, 3, 10)]) == (0.5, None)
        assert drop_index([(1, 0, 4), (7, 0, 4)]) == (0.0, None)  # nothing to drop from
        assert drop_index([(6, 1, 1)]) == (None, None)  # no early decisions
        assert drop_index([(1, 4, 4), (2, 0, 0), (3, 1, 4)]) == (pytest.approx(5 / 8), 3)

    def test_wilson_interval(self) -> None:
        """Known values of the 95% Wilson score interval."""
        rate = wilson(8, 10)
        assert rate["rate"] == 0.8
        assert rate["low"] == pytest.approx(0.4902, abs=1e-4)
        assert rate["high"] == pytest.approx(0.9433, abs=1e-4)
        full = wilson(4, 4)
        assert full["high"] == 1.0
        assert full["low"] == pytest.approx(0.5101, abs=1e-4)
        assert wilson(0, 0) == {"hits": 0, "n": 0, "rate": None, "low": None, "high": None}
        with pytest.raises(ValueError, match="hits"):
            wilson(3, 2)

    def test_length_bins_double_from_512(self) -> None:
        """[0, 512), [512, 1024), [1024, 2048)..., exact powers of two opening a bin."""
        assert length_bin(0) == (0, 512)
        assert length_bin(511) == (0, 512)
        assert length_bin(512) == (512, 1024)
        assert length_bin(1023) == (512, 1024)
        assert length_bin(4096) == (4096, 8192)
        assert length_bin(5000) == (4096, 8192)


class TestCommand:
    def test_forced_mode_writes_its_report(self, tmp_path: Path) -> None:
        """`--mode forced` scores every decision and writes report.json, report.md, both plots."""
        out = tmp_path / "out"
        code, stdout, err = run_cli(
            tmp_path, "eval", "--mode", "forced", "--suite", "long", "--tasks", "1",
            "--groups", "short", "--variants", "state,summary,window", "--window", "3",
            "--summary-every", "2", "--out", str(out),
        )  # fmt: skip
        assert code == 0, stdout + err
        data = json.loads((out / "report.json").read_text())
        assert data["mode"] == "forced"
        assert data["settings"]["window"] == 3
        assert set(data["variants"]) == {"state", "summary", "window"}
        assert all(v["overall"]["exact"]["rate"] == 1.0 for v in data["variants"].values())
        assert "Wilson" in data["interval"]
        assert "Teacher forcing" in (out / "report.md").read_text()
        for png in ("accuracy_by_step.png", "accuracy_by_prompt_length.png"):
            assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (("--mode", "teacher"), "unknown mode 'teacher'"),
            (("--variants", "state,windw"), "unknown variant(s) windw"),
        ],
    )
    def test_bad_input_is_one_line_and_exit_2(
        self, args: tuple[str, ...], message: str, tmp_path: Path
    ) -> None:
        """An unknown mode or variant: exit 2 with one line saying what to choose from."""
        code, stdout, err = run_cli(tmp_path, "eval", *args, "--out", str(tmp_path / "o"))
        assert code == 2, stdout + err
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        assert message in lines[0]
        assert "choose from" in lines[0]


def test_the_oracle_provider_answers_a_summary_call() -> None:
    """A baseline's own call (no schema) gets text, not the plan's next action."""
    from skillstate.engine.actions import Finish
    from skillstate.store.memory import MemoryStore

    oracle = OracleProvider([Finish(summary="done")], MemoryStore(), "task")
    reply = oracle.complete([Message("user", "summarize")], schema=None)
    assert "oracle summary" in reply.text
