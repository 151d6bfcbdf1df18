"""Spot-checks (issue 29 point 4): deterministic sampling, marks that survive a resume,
verdicts recorded on every backend without losing one to a concurrent reviewer, and the
report's numbers on a constructed set."""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from skillstate import Runtime
from skillstate.errors import StaleState, UsageError
from skillstate.events import Event, Verdict
from skillstate.ops.review import (
    Review,
    load_reviews,
    record_id,
    record_verdict,
    review_step,
    spot_check_queue,
)
from skillstate.ops.spot_report import spot_check_report
from skillstate.ops.spotchecks import SampledStep, SpotChecks, config_rule, sampled_steps
from skillstate.store.base import Store
from skillstate.store.memory import MemoryStore
from tests import spotcheck_agent
from tests.contract.backends import BACKENDS, drop_postgres_schemas, drop_redis_data


@pytest.fixture(autouse=True)
def _cleanup() -> Iterator[None]:
    yield
    drop_postgres_schemas()
    drop_redis_data()


def _agent_rule(task_id: str, card: dict[str, Any]) -> SpotChecks | None:
    return spotcheck_agent.RULE


def _run(store: Store, task_id: str, **fields: Any) -> None:
    runtime = Runtime(spotcheck_agent.agent, store)
    runtime.start(task_id, **fields)
    assert runtime.run(task_id).stopped == "completed"


class TestSampling:
    """Which steps a rule marks."""

    @pytest.mark.parametrize(("rate", "seed"), [(0.05, 0), (0.05, 11), (0.2, 5), (0.5, 2)])
    def test_the_share_marked_is_the_rate_within_a_binomial_tolerance(
        self, rate: float, seed: int
    ) -> None:
        """Over 20,000 steps of 400 tasks the share marked is the rate within 4.5 sigma."""
        rule = SpotChecks(rate=rate, seed=seed)
        n = 20_000
        marked = sum(rule.marks(f"task-{i // 50}", f"{i % 50:04d}-s", "s") for i in range(n))
        sigma = math.sqrt(n * rate * (1 - rate))
        assert abs(marked - n * rate) < 4.5 * sigma, (marked, n * rate, sigma)

    def test_marks_are_a_pure_function_of_rule_task_and_step(self) -> None:
        """Two rules built apart mark the same steps; another seed marks others; a higher
        rate marks a superset."""
        ids = [(f"t{i}", f"{j:04d}-x") for i in range(50) for j in range(40)]
        first = {k for k in ids if SpotChecks(rate=0.1, seed=1).marks(*k, "x")}
        again = {k for k in ids if SpotChecks(rate=0.1, seed=1).marks(*k, "x")}
        other = {k for k in ids if SpotChecks(rate=0.1, seed=2).marks(*k, "x")}
        wider = {k for k in ids if SpotChecks(rate=0.3, seed=1).marks(*k, "x")}
        assert first == again
        assert first
        assert other != first
        assert first < wider

    def test_skills_limit_the_rule(self) -> None:
        """A rule naming skills marks no other skill's steps, at any rate."""
        rule = SpotChecks(rate=1.0, skills=("refund",))
        assert rule.marks("t", "0001-refund", "refund")
        assert not rule.marks("t", "0002-close", "close")

    @pytest.mark.parametrize(
        ("kwargs", "said"),
        [
            ({"rate": 1.5}, "rate must be a number from 0 to 1"),
            ({"rate": -0.1}, "rate must be a number from 0 to 1"),
            ({"rate": True}, "rate must be a number from 0 to 1"),
            ({"rate": 0.1, "skills": ("",)}, "skills must be skill names"),
            ({"rate": 0.1, "seed": "x"}, "seed must be an integer"),
        ],
    )
    def test_a_bad_rule_is_refused_in_one_line(self, kwargs: dict[str, Any], said: str) -> None:
        with pytest.raises(UsageError, match=said) as caught:
            SpotChecks(**kwargs)
        assert "\n" not in str(caught.value)

    def test_an_agent_with_a_bad_rule_cannot_be_built(self) -> None:
        from dataclasses import replace

        with pytest.raises(UsageError, match="spot_checks must be a SpotChecks rule"):
            replace(spotcheck_agent.agent, spot_checks=0.05)  # type: ignore[arg-type]

    def test_the_project_rule_is_read_from_its_config(self, tmp_path: Path) -> None:
        (tmp_path / ".skillstate.toml").write_text(
            '[spot_checks]\nrate = 0.25\nskills = ["bump"]\nseed = 4\n', encoding="utf-8"
        )
        assert config_rule(tmp_path) == SpotChecks(rate=0.25, skills=("bump",), seed=4)
        (tmp_path / ".skillstate.toml").write_text("[spot_checks]\nrate = 2\n", encoding="utf-8")
        with pytest.raises(UsageError, match="rate must be a number from 0 to 1"):
            config_rule(tmp_path)
        (tmp_path / ".skillstate.toml").write_text("[spot_checks]\nrat = 0.1\n", encoding="utf-8")
        with pytest.raises(UsageError, match="unknown setting"):
            config_rule(tmp_path)


class TestMarksOfRealRuns:
    """The marks of a task the runtime ran."""

    def test_only_verified_steps_are_marked_at_about_the_rate(self) -> None:
        """Every marked step is a verified ``bump``; at rate 0.5 over 40 tasks of 12 steps
        about half are marked (4.5 sigma)."""
        store = MemoryStore()
        for i in range(40):
            _run(store, f"c{i}")
        marked = sampled_steps(store, _agent_rule)
        assert all(s.skill == "bump" and s.event.verdict and s.event.verdict.ok for s in marked)
        n = 40 * 12
        assert abs(len(marked) - n / 2) < 4.5 * math.sqrt(n / 4), len(marked)

    def test_a_resumed_task_has_the_marks_of_one_run_straight_through(self) -> None:
        """A task stopped after 5 decisions and resumed by a new runtime marks the same steps
        as the same task run without a stop (the marks live in no process)."""
        straight, stopped = MemoryStore(), MemoryStore()
        _run(straight, "same")
        first = Runtime(spotcheck_agent.agent, stopped)
        first.start("same")
        assert first.run("same", max_steps=5).stopped != "completed"
        assert stopped.load("same").state["n"] < 12  # it really stopped midway
        assert Runtime(spotcheck_agent.agent, stopped).run("same").stopped == "completed"
        ids = [s.step_id for s in sampled_steps(straight, _agent_rule)]
        assert ids
        assert ids == [s.step_id for s in sampled_steps(stopped, _agent_rule)]

    def test_no_rule_marks_nothing(self) -> None:
        store = MemoryStore()
        _run(store, "x")
        assert sampled_steps(store, lambda t, c: None) == []
        assert sampled_steps(store, lambda t, c: SpotChecks(rate=0)) == []


def _marked(store: Store) -> SampledStep:
    _run(store, "t1")
    steps = sampled_steps(store, _agent_rule)
    assert steps
    return steps[0]


@pytest.mark.parametrize("backend", sorted(BACKENDS))
class TestRecording:
    """Verdicts on every backend."""

    def test_a_verdict_is_recorded_with_its_reviewer_and_audited(
        self, backend: str, tmp_path: Path
    ) -> None:
        store = BACKENDS[backend](tmp_path)
        try:
            step = _marked(store)
            given = review_step(
                store, _agent_rule, "t1", step.step_id, verdict="incorrect", note="n off", by="ann"
            )
            version, reviews = load_reviews(store, step.scope)
            assert version == 1
            assert reviews == [given]
            assert (given.by, given.verdict, given.step_version) == (
                "ann",
                "incorrect",
                step.version,
            )
            event = store.events(record_id(step.scope))[-1]
            assert event.actor == "human"
            assert event.action["by"] == "ann"
            assert event.action["step"] == step.step_id
            queue = spot_check_queue(store, _agent_rule, pending=True)
            assert step.step_id not in {s.step_id for s, _ in queue}
        finally:
            store.close()

    def test_concurrent_reviewers_of_one_step_are_all_recorded(
        self, backend: str, tmp_path: Path
    ) -> None:
        """Reviewer B commits between A's read and A's commit: A's commit is refused by the
        store's compare-and-set and A's verdict lands on top of B's. Then 4 threads race."""
        store = BACKENDS[backend](tmp_path)
        try:
            step = _marked(store)
            rid = record_id(step.scope)
            stale: list[int] = []
            commit = store.commit

            def interleaved(task_id: str, expected: int, *args: Any, **kwargs: Any) -> int:
                if task_id == rid and not stale:
                    stale.append(expected)
                    _verdict(store, step, "bob", "correct")  # B gets there first
                try:
                    return commit(task_id, expected, *args, **kwargs)
                except StaleState:
                    stale.append(-1)
                    raise

            store.commit = interleaved  # type: ignore[method-assign]
            _verdict(store, step, "ann", "incorrect")
            store.commit = commit  # type: ignore[method-assign]
            assert stale == [0, -1]  # A's first commit really was refused
            barrier = threading.Barrier(4)

            def review(name: str) -> None:
                barrier.wait(timeout=60)
                _verdict(store, step, name, "unsure")

            threads = [threading.Thread(target=review, args=(f"r{i}",)) for i in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=120)
            _, reviews = load_reviews(store, step.scope)
            assert [r.by for r in reviews][:2] == ["bob", "ann"]
            assert sorted(r.by for r in reviews[2:]) == ["r0", "r1", "r2", "r3"]
            assert [r.seq for r in reviews] == [1, 2, 3, 4, 5, 6]
        finally:
            store.close()


def _verdict(store: Store, step: SampledStep, by: str, verdict: str) -> Review:
    return record_verdict(
        store,
        scope=step.scope,
        task=step.task_id,
        step=step.step_id,
        step_version=step.version,
        skill=step.skill,
        verdict=verdict,
        note="",
        by=by,
    )


class TestReviewInput:
    """What a verdict may not be."""

    def test_the_same_verdict_sent_twice_is_recorded_once(self) -> None:
        store = MemoryStore()
        step = _marked(store)
        first = _verdict(store, step, "ann", "correct")
        assert _verdict(store, step, "ann", "correct") == first
        assert load_reviews(store, step.scope)[0] == 1

    @pytest.mark.parametrize(
        ("task", "step", "verdict", "note", "said"),
        [
            ("t1", None, "maybe", "", "verdict must be one of correct, incorrect, unsure"),
            ("t1", "0001-nope", "correct", "", "is not marked for a spot check"),
            ("t1", None, "correct", "x" * 2001, "a note must be at most 2000 characters"),
            ("t1", None, "correct", "a\x1bb", "control characters"),
            ("ghost", "0001-bump", "correct", "", "ghost"),
        ],
    )
    def test_bad_input_is_refused_and_nothing_is_written(
        self, task: str, step: str | None, verdict: str, note: str, said: str
    ) -> None:
        from skillstate.errors import SkillstateError

        store = MemoryStore()
        marked = _marked(store)
        with pytest.raises(SkillstateError, match=said):
            review_step(
                store, _agent_rule, task, step or marked.step_id, verdict=verdict, note=note, by="a"
            )
        assert load_reviews(store, marked.scope) == (0, [])

    def test_a_note_is_masked_before_it_is_stored(self) -> None:
        store = MemoryStore()
        step = _marked(store)
        secret = "sk-" + "a1b2c3d4" * 5
        record_verdict(
            store,
            scope=step.scope,
            task="t1",
            step=step.step_id,
            step_version=step.version,
            skill="bump",
            verdict="incorrect",
            note=f"the key {secret} leaked",
            by="ann",
        )
        assert secret not in str(store.load(record_id(step.scope)).state)


def _step(task: str, n: int, skill: str, scope: str = "a:x") -> SampledStep:
    event = Event(
        task_id=task,
        version=n + 1,
        actor="policy",
        action={"kind": "call_skill", "skill": skill, "params": {}},
        step_id=f"{n:04d}-{skill}",
        skill=skill,
        verdict=Verdict.passed(),
    )
    return SampledStep(task, f"{n:04d}-{skill}", skill, n + 1, scope, event)


def _said(step: SampledStep, seq: int, verdict: str, by: str = "ann") -> Review:
    return Review(
        seq=seq,
        task=step.task_id,
        step=step.step_id,
        step_version=step.version,
        skill=step.skill,
        verdict=verdict,  # type: ignore[arg-type]
        by=by,
        at=datetime(2026, 12, 3, tzinfo=timezone.utc),
    )


class TestReport:
    """The report's numbers on a set built by hand."""

    def test_counts_precision_and_wilson_interval(self) -> None:
        """10 sampled, 8 reviewed: 6 correct, 1 incorrect, 1 unsure (latest verdicts); one
        step's reviewers disagree. Precision 6/7 with the Wilson interval (0.487, 0.974)."""
        steps = [_step("t1", i, "refund" if i < 6 else "close") for i in range(8)]
        steps += [_step("t2", i, "close", scope="a:y") for i in range(2)]
        verdicts = ["correct"] * 5 + ["incorrect", "unsure"]
        rows: list[tuple[SampledStep, list[Review]]] = [
            (s, [_said(s, i + 1, v)])
            for i, (s, v) in enumerate(zip(steps[:7], verdicts, strict=True))
        ]
        # step 7: first judged incorrect by bob, then correct by ann: the latest counts.
        rows.append(
            (steps[7], [_said(steps[7], 8, "incorrect", "bob"), _said(steps[7], 9, "correct")])
        )
        rows += [(s, []) for s in steps[8:]]
        found = spot_check_report(rows)
        overall = found["overall"]
        assert (overall["sampled"], overall["reviewed"]) == (10, 8)
        assert (overall["correct"], overall["incorrect"], overall["unsure"]) == (6, 1, 1)
        assert overall["disagreements"] == 1
        precision = overall["verify_precision"]
        assert (precision["hits"], precision["n"]) == (6, 7)
        assert precision["rate"] == pytest.approx(6 / 7)
        assert precision["low"] == pytest.approx(0.48687, abs=1e-4)
        assert precision["high"] == pytest.approx(0.97432, abs=1e-4)
        assert overall["review_coverage"]["rate"] == pytest.approx(0.8)
        refund = found["by_skill"]["refund"]
        assert (refund["sampled"], refund["correct"], refund["incorrect"]) == (6, 5, 1)
        assert found["by_skill"]["close"]["verify_precision"]["n"] == 1  # one unsure left out
        assert found["by_agent"]["a:y"]["reviewed"] == 0
        assert found["by_agent"]["a:y"]["verify_precision"]["rate"] is None

    def test_an_empty_store_reports_zeros(self) -> None:
        found = spot_check_report([])
        assert found["overall"]["sampled"] == 0
        assert found["overall"]["verify_precision"]["rate"] is None
