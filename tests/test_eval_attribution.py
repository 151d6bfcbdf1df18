"""Failure attribution: every failed run names its first bad step, in every variant,
and `skillstate replay --expect` names the same one."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from skillstate.engine.actions import Action, CallSkill, Finish, decision_schema, validate_decision
from skillstate.errors import ActionRejected
from skillstate.eval.runner import TASK_ID, OracleProvider, run_task
from skillstate.eval.suites import long_suite
from skillstate.eval.tasks import Environment, TaskSpec
from skillstate.eval.variants import VARIANTS, Variant
from skillstate.llm.base import Provider
from skillstate.store.base import Store
from tests.test_cli import run_cli

SPEC = min(long_suite(seed=0), key=lambda s: s.params["n"])


def _deviating(change: dict[int, Action], *, stop_at: int | None = None) -> Any:
    """A factory for an oracle that follows the plan except at the given decisions."""

    def factory(spec: TaskSpec, variant: Variant, env: Environment, store: Store) -> Provider:
        plan = list(env.plan_skills if variant.actions == "skills" else env.plan_tools)
        for index, action in change.items():
            plan[index] = action
        if stop_at is not None:
            plan = [*plan[:stop_at], Finish(summary="done (it is not)")]
        return OracleProvider(plan, store, TASK_ID)

    return factory


def _first_effect(plan: Sequence[Action]) -> int:
    return next(
        i
        for i, a in enumerate(plan)
        if isinstance(a, CallSkill) and a.skill == "tool_append_ledger"
    )


def test_a_wrong_effect_in_a_raw_tools_run_is_the_first_bad_step(tmp_path: Path) -> None:
    """history/state: the first ledger line with the wrong amount is named, by decision."""
    from skillstate.eval.families import get_family

    env = get_family("records").build(SPEC, tmp_path / "probe")
    k = _first_effect(env.plan_tools)
    wrong = CallSkill(skill="tool_append_ledger", params={"line": "rec-000 1.00"})
    for name in ("history", "state"):
        result = run_task(
            SPEC,
            VARIANTS[name],
            seed=0,
            factory=_deviating({k: wrong}),
            workdir=tmp_path,
            recovery=False,
        )
        assert not result.success
        assert result.first_bad_step == k + 1, result.first_bad_reason
        assert result.first_bad_reason is not None
        assert "where the plan does tool_append_ledger" in result.first_bad_reason


def test_a_wrong_skill_call_is_caught_by_verify_or_facts(tmp_path: Path) -> None:
    """skills/skillstate: processing a record out of turn fails verify at that decision."""
    wrong = CallSkill(skill="process_record", params={"i": 2})
    for name in ("skills", "skillstate"):
        result = run_task(
            SPEC,
            VARIANTS[name],
            seed=0,
            factory=_deviating({1: wrong}),
            workdir=tmp_path,
            recovery=False,
        )
        assert result.first_bad_step == 2, result.first_bad_reason
        assert result.first_bad_reason is not None


def test_stopping_early_names_the_last_decision_and_the_missing_effect(tmp_path: Path) -> None:
    """Nothing diverged, but the run finished too soon: the finish is the bad step."""
    result = run_task(
        SPEC,
        VARIANTS["history"],
        seed=0,
        factory=_deviating({}, stop_at=3),
        workdir=tmp_path,
        recovery=False,
    )
    assert not result.success
    assert result.first_bad_step == 4
    assert result.first_bad_reason is not None
    assert "never came" in result.first_bad_reason


def test_a_context_overflow_is_attributed_to_the_decision_it_stopped(tmp_path: Path) -> None:
    result = run_task(
        SPEC, VARIANTS["history"], seed=0, workdir=tmp_path, context_window=1500, recovery=False
    )
    assert result.failure is not None
    assert result.failure.startswith("context overflow")
    assert result.first_bad_step == result.steps + 1


def test_replay_with_expectations_names_the_same_step(tmp_path: Path) -> None:
    """The command stored in the result reproduces the attribution from the store."""
    from skillstate.eval.families import get_family

    env = get_family("records").build(SPEC, tmp_path / "probe")
    k = _first_effect(env.plan_tools)
    wrong = CallSkill(skill="tool_append_ledger", params={"line": "rec-000 1.00"})
    result = run_task(
        SPEC,
        VARIANTS["state"],
        seed=0,
        factory=_deviating({k: wrong}),
        workdir=tmp_path,
        recovery=False,
    )
    assert result.replay is not None
    args = result.replay.split()[1:]  # drop "skillstate"
    code, out, err = run_cli(tmp_path, *args, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["first_bad"]["decision"] == result.first_bad_step
    assert data["first_bad"]["reason"] == result.first_bad_reason
    code, out, _ = run_cli(tmp_path, *args)
    assert code == 0
    assert f"(decision {k + 1})" in out
    # Without the expectations only errors and failed verifies count: none here.
    no_expect = args[: args.index("--expect")]
    code, out, _ = run_cli(tmp_path, *no_expect, "--json")
    assert json.loads(out)["first_bad"] is None


@pytest.mark.parametrize("text", ["{not json", "[" * 100_000 + "]" * 100_000])
def test_replay_rejects_an_unreadable_expectations_file(tmp_path: Path, text: str) -> None:
    bad = tmp_path / "expected.json"
    bad.write_text(text, encoding="utf-8")
    code, out, err = run_cli(
        tmp_path, "replay", "x", "--store", f"sqlite:///{tmp_path / 's.db'}", "--expect", str(bad)
    )
    assert code != 0
    assert "Traceback" not in out + err
    assert "unexpected" not in out + err  # a one-line refusal, not an unexpected error


def test_unattended_agents_are_not_offered_ask_user() -> None:
    """An evaluation has nobody to answer: ask_user is neither in the schema nor accepted."""
    schema = decision_schema({}, ["done"], can_ask=False)
    kinds = [b["properties"]["kind"]["const"] for b in schema["anyOf"]]
    assert kinds == ["finish"]
    with pytest.raises(ActionRejected, match="ask_user"):
        validate_decision(
            '{"kind": "ask_user", "question": "?", "reason": "r"}', {}, ["done"], can_ask=False
        )
    assert "ask_user" in [
        b["properties"]["kind"]["const"] for b in decision_schema({}, ["done"])["anyOf"]
    ]


@pytest.mark.parametrize(
    ("max_invalid", "steps", "failure"),
    [
        (2, 2, "stopped: 2 invalid decisions in a row"),
        # The same invalid reply three times: the stall guard stops the task first.
        (5, 3, "stalled: the same decision failed 3 times: invalid reply"),
    ],
)
def test_a_model_that_never_replies_validly_is_stopped_early(
    tmp_path: Path, max_invalid: int, steps: int, failure: str
) -> None:
    """--max-invalid, or the stall guard: invalid decisions in a row end the task, recorded."""
    from skillstate.llm.replay import ScriptedProvider

    def factory(spec: TaskSpec, variant: Variant, env: Environment, store: Store) -> Provider:
        return ScriptedProvider(lambda messages, schema: '{"kind": "call_skill", "skill": "nope"')

    result = run_task(
        SPEC,
        VARIANTS["skillstate"],
        seed=0,
        factory=factory,
        workdir=tmp_path,
        max_repairs=0,
        max_invalid=max_invalid,
        recovery=False,
    )
    assert not result.success
    assert result.steps == steps
    assert result.failure is not None
    assert result.failure.startswith(failure)
    assert result.first_bad_step == 1
    assert result.first_bad_reason is not None
    assert "not JSON" in result.first_bad_reason


def test_an_unattended_agent_refuses_ask_user_from_any_policy(tmp_path: Path) -> None:
    """Not only the model's schema: the runtime itself refuses the question."""
    from skillstate.engine.actions import AskUser
    from skillstate.engine.runtime import Runtime
    from skillstate.eval.families import build_environment
    from skillstate.eval.variants import build_agent
    from skillstate.store.memory import MemoryStore
    from tests.eval_support import scripted_agent

    env = build_environment(SPEC, tmp_path / "env")
    asked = scripted_agent(SPEC, env, [AskUser(question="which record?")])
    agent = build_agent(SPEC, env, VARIANTS["skillstate"], asked.policy)
    runtime = Runtime(agent, MemoryStore(), max_steps=1)
    runtime.start("t", **env.initial)
    result = runtime.run("t")
    assert result.stopped == "max_steps"
    assert result.state.status.value != "waiting_user"
    assert result.state.errors[-1].kind == "action_rejected"
    assert "unattended" in result.state.errors[-1].message
