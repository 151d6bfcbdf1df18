"""``skillstate eval --replay``: recorded runs re-run against the current skills.

Recordings are made by real evaluation runs (the oracle, or a scripted model whose
replies go to a model cassette); a "changed skill" is the records family with one
of its functions monkeypatched, in this process, before the replay.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from skillstate.engine.actions import Action
from skillstate.eval.cassettes import MANIFEST, MODEL_CASSETTE, TOOL_CASSETTE
from skillstate.eval.families import records
from skillstate.eval.replay import replay_run
from skillstate.eval.runner import TASK_ID, run_task
from skillstate.eval.suites import load_suite
from skillstate.eval.tasks import Environment, TaskSpec
from skillstate.eval.variants import VARIANTS, Variant
from skillstate.events import Verdict
from skillstate.llm.base import Message, Provider
from skillstate.llm.replay import ScriptedProvider
from skillstate.store.base import Store
from skillstate.store.sqlite import SQLiteStore
from tests.eval_support import cli


@pytest.fixture(scope="module")
def spec() -> TaskSpec:
    """The shortest task of the long suite (a few records, one of them excluded)."""
    return min(load_suite("long", 0), key=lambda s: s.max_steps)


def record(spec: TaskSpec, variant: str, root: Path, **options: Any) -> Path:
    """Run ``spec`` once (recorded, no recovery runs); the recorded run's directory."""
    result = run_task(spec, VARIANTS[variant], seed=0, workdir=root, recovery=False, **options)
    assert result.success, result.failure
    return root / f"{spec.id}-{variant}-0" / "run"


def events(run_dir: Path) -> list[Any]:
    store = SQLiteStore(run_dir / "state.db", create=False)
    try:
        return list(store.events(TASK_ID))
    finally:
        store.close()


def first_with_tool(run_dir: Path, tool: str) -> tuple[int, int]:
    """(step, decision) of the first recorded step whose tool calls include ``tool``."""
    decision = 0
    for step, event in enumerate(events(run_dir), start=1):
        decision += event.actor == "policy"
        if any(call.tool == tool for call in event.tool_calls):
            return step, decision
    raise AssertionError(f"no {tool} call recorded")


def scripted_factory(spec: TaskSpec, variant: Variant, env: Environment, store: Store) -> Provider:
    """A scripted "model" that replies the reference plan (its position from the store)."""
    plan: Sequence[Action] = env.plan_skills if variant.actions == "skills" else env.plan_tools

    def rule(messages: Sequence[Message], schema: dict[str, Any] | None) -> str:
        done = sum(
            1
            for e in store.events(TASK_ID)
            if e.actor == "policy" and e.action.get("kind") != "invalid" and e.error is None
        )
        return plan[min(done, len(plan) - 1)].model_dump_json()

    return ScriptedProvider(rule, name="scripted-plan")


class TestRecording:
    def test_a_run_records_its_cassettes_beside_its_store(
        self, spec: TaskSpec, tmp_path: Path
    ) -> None:
        """The manifest and the tool cassette; no model cassette for the oracle."""
        run_dir = record(spec, "skillstate", tmp_path)
        manifest = json.loads((run_dir / MANIFEST).read_text())
        assert manifest["task"]["id"] == spec.id
        assert manifest["variant"]["name"] == "skillstate"
        assert manifest["model"] == "oracle"
        assert manifest["model_cassette"] is None
        assert manifest["stopped"] == "completed"
        calls = json.loads((run_dir / TOOL_CASSETTE).read_text())["calls"]
        recorded = [(c.tool, c.args) for e in events(run_dir) for c in e.tool_calls]
        assert [(c["tool"], c["args"]) for c in calls] == recorded
        assert all(c["served"] for c in calls)
        assert not (run_dir / MODEL_CASSETTE).exists()

    def test_recording_does_not_change_what_is_measured(
        self, spec: TaskSpec, tmp_path: Path
    ) -> None:
        """The same run with and without recording measures the same (timings aside)."""
        timing = {"duration_s", "step_seconds", "replay"}
        results = []
        for on in (True, False):
            result = run_task(
                spec,
                VARIANTS["state"],
                seed=0,
                workdir=tmp_path / str(on),
                recovery=False,
                record=on,
            )
            results.append({k: v for k, v in result.as_json().items() if k not in timing})
        assert results[0] == results[1]
        assert not (tmp_path / "False" / f"{spec.id}-state-0" / "run" / MANIFEST).exists()

    def test_a_model_run_records_its_replies(self, spec: TaskSpec, tmp_path: Path) -> None:
        """A model other than the oracle: one cassette entry per model call."""
        run_dir = record(spec, "skillstate", tmp_path, factory=scripted_factory)
        entries = json.loads((run_dir / MODEL_CASSETTE).read_text())
        decisions = [e for e in events(run_dir) if e.actor == "policy"]
        assert len(entries) == sum(e.usage.calls for e in decisions if e.usage)
        assert json.loads((run_dir / MANIFEST).read_text())["model"] == "scripted-plan"


class TestReplay:
    def test_an_unchanged_recording_replays_the_same(
        self, spec: TaskSpec, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """eval --replay of an eval --out directory: every run same, exit 0, the files."""
        out = tmp_path / "eval"
        code, _, err = cli(
            capsys,
            *("eval", "--suite", "long", "--tasks", "1", "--seeds", "1", "--no-recovery"),
            *("--variants", "state,skillstate", "--out", str(out)),
        )
        assert code == 0, err
        code, stdout, err = cli(capsys, "eval", "--replay", str(out))
        assert code == 0, err
        assert "2/2 run(s) same as recorded" in stdout
        report = json.loads((out / "replay" / "replay.json").read_text())
        assert [r["verdict"] for r in report["results"]] == ["same", "same"]
        assert all(r["steps_recorded"] == r["steps_replayed"] > 2 for r in report["results"])
        assert "| same |" in (out / "replay" / "replay.md").read_text()

    def test_a_scripted_model_replays_from_its_cassette(
        self, spec: TaskSpec, tmp_path: Path
    ) -> None:
        """Replies come from the cassette (the scripted model is not called): same."""
        run_dir = record(spec, "skillstate", tmp_path, factory=scripted_factory)
        result = replay_run(run_dir, tmp_path / "replay")
        assert result.same, result.divergence
        assert result.notes == []

    def test_a_changed_tool_call_is_the_first_difference(
        self,
        spec: TaskSpec,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        """A skill that now writes its ledger line differently: the step of the first
        append_ledger call differs, with the call named; exit 9."""
        run_dir = record(spec, "skillstate", tmp_path / "eval" / "runs")
        step, decision = first_with_tool(run_dir, "append_ledger")
        original = records.ledger_line
        monkeypatch.setattr(records, "ledger_line", lambda i, amount: original(i, amount) + " ")
        code, stdout, err = cli(capsys, "eval", "--replay", str(tmp_path / "eval"))
        assert code == 9
        assert err.count("\n") == 1
        assert err.startswith("error: replay: 1 of 1 run(s) differ from their recording")
        assert f"at step {step} (effect:process_record, decision {decision})" in err
        result = json.loads((tmp_path / "eval" / "replay" / "replay.json").read_text())
        divergence = result["results"][0]["divergence"]
        assert divergence["step"] == step
        assert divergence["decision"] == decision
        assert divergence["aspects"][0] == "tool call"
        assert 'append_ledger(line="rec-000 ' in divergence["replayed"]
        assert "differs" in stdout

    def test_a_changed_verify_is_the_first_difference(
        self, spec: TaskSpec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A verifier that now refuses record 1: that record's step differs in its verdict."""
        run_dir = record(spec, "skillstate", tmp_path)
        original = records._Task.verify_processed

        def stricter(self: Any, state: Any, outcome: Any) -> Verdict:
            if state.next_record == 2:  # record 1 was just processed
                return Verdict.failed("the changed verify refuses record 1")
            return original(self, state, outcome)

        monkeypatch.setattr(records._Task, "verify_processed", stricter)
        result = replay_run(run_dir, tmp_path / "replay")
        expected = next(
            (step, e)
            for step, e in enumerate(events(run_dir), start=1)
            if e.action.get("kind") == "effect" and e.action.get("params") == {"i": 1}
        )
        assert result.divergence is not None
        assert result.divergence.step == expected[0]
        assert result.divergence.label == expected[1].label
        assert "verdict" in result.divergence.aspects
        assert "the changed verify refuses record 1" in result.divergence.replayed
        assert "verdict ok" in result.divergence.recorded

    def test_a_changed_state_write_is_the_first_difference(
        self, spec: TaskSpec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """An outcome that writes another value (same tool calls): the state differs."""
        run_dir = record(spec, "skillstate", tmp_path)
        original = records._Task.record_outcome

        def noted(self: Any, state: Any, i: int, record: Any, ctx: Any) -> Any:
            outcome = original(self, state, i, record, ctx)
            return dataclasses.replace(outcome, summary=f"{outcome.summary} (changed)")

        monkeypatch.setattr(records._Task, "record_outcome", noted)
        result = replay_run(run_dir, tmp_path / "replay")
        first_effect = next(
            step
            for step, e in enumerate(events(run_dir), start=1)
            if e.action.get("kind") == "effect"
        )
        assert result.divergence is not None
        assert result.divergence.step == first_effect
        assert result.divergence.aspects == ("state",)
        assert "(changed)" in result.divergence.replayed

    def test_a_drifted_model_request_is_reported_not_raised(
        self, spec: TaskSpec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A reworded skill description changes the prompt: the replay provider refuses
        the first decision's request, reported as that step's divergence."""
        run_dir = record(spec, "skillstate", tmp_path, factory=scripted_factory)
        original = records._skill_library

        def reworded(task: Any) -> Any:
            skills = original(task)
            skills["process_record"].description = "Process the next record (reworded)."
            return skills

        monkeypatch.setattr(records, "_skill_library", reworded)
        result = replay_run(run_dir, tmp_path / "replay")
        assert result.divergence is not None
        assert result.divergence.aspects == ("model request",)
        assert result.divergence.step == 2
        assert result.divergence.decision == 1
        assert "does not match the request" in result.divergence.replayed
        assert result.steps_replayed == 1  # only the task's creation was committed

    def test_the_oracle_replay_follows_the_current_plan(
        self, spec: TaskSpec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The same change under a raw-tools variant: the oracle's decision itself now
        differs (it follows the current family's plan), and so does the call."""
        run_dir = record(spec, "state", tmp_path)
        step, decision = first_with_tool(run_dir, "append_ledger")
        original = records.ledger_line
        monkeypatch.setattr(records, "ledger_line", lambda i, amount: original(i, amount) + " ")
        result = replay_run(run_dir, tmp_path / "replay")
        assert result.divergence is not None
        assert (result.divergence.step, result.divergence.decision) == (step, decision)
        assert result.divergence.aspects[:2] == ("tool call", "action")

    def test_bad_replay_targets(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """No recordings, a missing directory, a broken manifest: one line, exit 2."""
        (tmp_path / "empty").mkdir()
        broken = tmp_path / "broken" / "runs" / "x-state-0" / "run"
        broken.mkdir(parents=True)
        (broken / MANIFEST).write_text("{}")
        for target, phrase in (
            (tmp_path / "empty", "no recorded runs"),
            (tmp_path / "missing", "is not a directory"),
            (tmp_path / "broken", "is malformed"),
        ):
            code, _, err = cli(capsys, "eval", "--replay", str(target))
            assert code == 2, err
            assert err.count("\n") == 1, err
            assert phrase in err, err
