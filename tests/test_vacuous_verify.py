"""A verify that cannot fail is refused when the agent is built (seed 004 §5.3), and no
real verifier is mistaken for one."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import skillstate
from skillstate import (
    Agent,
    AgentState,
    Finish,
    NoParams,
    Outcome,
    ScriptedPolicy,
    SkillContext,
    SkillRegistry,
    StateMachine,
    Verdict,
)
from skillstate.errors import UsageError
from skillstate.eval.families import build_environment
from skillstate.eval.suites import load_suite
from skillstate.skills.vacuous import vacuous_verify


class Note(AgentState):
    note: str | None = None


def agent_with(verify: Callable[..., Any]) -> Agent[Note]:
    skills = SkillRegistry()

    @skills.skill(outputs=["note"], verify=verify)
    def write(state: Note, params: NoParams, ctx: SkillContext) -> Outcome:
        """Write a note."""
        return Outcome(writes={"note": "hello"})

    return Agent(
        name="notes",
        state_type=Note,
        machine=StateMachine({"init": []}, initial="init"),
        skills=skills,
        policy=ScriptedPolicy(lambda view: Finish()),
    )


def _returns_true(state: Note, outcome: Outcome) -> bool:
    return True


def _documented(state: Note, outcome: Outcome) -> Verdict:
    """A docstring does not make it a check."""
    return Verdict.passed("looks fine")


async def _async_ok(state: Note, outcome: Outcome) -> bool:
    return True


def _with_context(state: Note, outcome: Outcome, ctx: Any) -> Verdict:
    return skillstate.Verdict(ok=True, reason="always")


class _Checker:
    def verify(self, state: Note, outcome: Outcome) -> str:
        return "ok"


VACUOUS: dict[str, Callable[..., Any]] = {
    "lambda True": lambda s, o: True,
    "lambda *_": lambda *_: 1,
    "Verdict.passed()": lambda s, o: Verdict.passed(),
    "def returning True": _returns_true,
    "docstring and Verdict.passed(reason)": _documented,
    "async def": _async_ok,
    "three arguments, skillstate.Verdict(ok=True)": _with_context,
    "a method": _Checker().verify,
}


@pytest.mark.parametrize("verify", VACUOUS.values(), ids=VACUOUS.keys())
def test_a_verify_that_cannot_fail_is_refused(verify: Callable[..., Any]) -> None:
    """The agent is refused with one message naming the skill and what it always returns."""
    with pytest.raises(UsageError, match=r"skill 'write' has a verify that cannot fail \(it "):
        agent_with(verify)


def _helper_check(note: str | None) -> bool:
    return bool(note)


def _weak_but_real(state: Note, outcome: Outcome) -> bool:
    return state.note is not None


def _closure(expected: str) -> Callable[[Note, Outcome], bool]:
    return lambda s, o: s.note == expected


def _branches(state: Note, outcome: Outcome) -> Verdict:
    if outcome.writes:
        return Verdict.passed()
    return Verdict.failed("nothing written")


def _ignores_args_but_asks_the_world(state: Note, outcome: Outcome) -> bool:
    return _helper_check("x")  # a global function: it may answer otherwise next time


REAL: dict[str, Callable[..., Any]] = {
    "reads the state": _weak_but_real,
    "reads the outcome": lambda s, o: bool(o.writes),
    "a closure": _closure("hello"),
    "branches": _branches,
    "calls a helper": _ignores_args_but_asks_the_world,
    "a builtin": bool,
    "never passes": lambda s, o: Verdict.failed("no"),
    "returns False": lambda s, o: False,
    "returns None": lambda s, o: None,
}


@pytest.mark.parametrize("verify", REAL.values(), ids=REAL.keys())
def test_a_verify_that_can_fail_is_accepted(verify: Callable[..., Any]) -> None:
    """Weak checks are still checks; a verify that can never pass is another bug."""
    assert vacuous_verify(verify) is None
    agent_with(verify)


def test_the_shipped_examples_have_real_verifiers() -> None:
    """No false positive on the bundled example agents (they are built at import)."""
    checked = 0
    for name in ("ticket", "orders", "ledger"):
        module = importlib.import_module(f"skillstate.examples.{name}")
        agents = [v for v in vars(module).values() if isinstance(v, Agent)]
        assert agents, name
        for agent in agents:
            for skill in agent.skills:
                assert skill.has_verify
                assert vacuous_verify(skill.verify_function) is None, (name, skill.name)
                checked += 1
    assert checked >= 6


def test_the_eval_families_have_real_verifiers(tmp_path: Path) -> None:
    """No false positive on any skill library of the evaluation's task families."""
    specs = [*load_suite("long", 0), *load_suite("seeds", 0)]
    seen: set[str] = set()
    for spec in specs:
        if spec.family in seen:
            continue
        seen.add(spec.family)
        env = build_environment(spec, tmp_path / spec.family)
        for skill in env.skills:
            assert vacuous_verify(skill.verify_function) is None, (spec.family, skill.name)
    assert seen >= {"records", "ticket", "orders", "fix_syntax", "sales"}
