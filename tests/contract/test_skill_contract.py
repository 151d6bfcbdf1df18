"""The skill contract, run over every way to declare a skill.

A skill declared in Python, in YAML or in an executable ``SKILL.md`` is the same
:class:`~skillstate.skills.skill.Skill` to the runtime: ``when`` gates it, its params
are validated, ``run`` proposes writes, only its declared outputs may be written,
only a passing ``verify`` is committed, and a failed attempt is rolled back. A
model-facing ``SKILL.md`` (instructions, no code) keeps the part of the contract
that applies to it: ``when``, run, a verify that can fail, nothing committed when
it does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from skillstate import (
    Agent,
    CallSkill,
    Finish,
    Runtime,
    ScriptedPolicy,
    Skill,
    SkillRegistry,
    StateMachine,
    View,
)
from skillstate.store.memory import MemoryStore
from tests.contract import skill_impl
from tests.contract.skill_impl import Ledger

Build = Callable[[Path], Skill[Any, Any]]
BUILDS: dict[str, Build] = {
    "python": skill_impl.python_skill,
    "yaml": skill_impl.yaml_skill,
    "skill_md": skill_impl.skill_md_skill,
}
MACHINE = StateMachine({"init": ["init"]}, initial="init")


@pytest.fixture(params=sorted(BUILDS))
def skill(request: pytest.FixtureRequest, tmp_path: Path) -> Skill[Any, Any]:
    """The ``add_up`` skill, declared one way."""
    built: Skill[Any, Any] = BUILDS[request.param](tmp_path)
    return built


@pytest.fixture(autouse=True)
def _clean_undone() -> Iterator[None]:
    skill_impl.UNDONE.clear()
    yield
    skill_impl.UNDONE.clear()


def run_once(skill: Skill[Any, Any], params: dict[str, Any] | None = None, **fields: Any) -> Any:
    """Start a task with ``fields``, call the skill once, finish; the final state and events."""
    seen: list[View[Any]] = []

    def decide(view: View[Any]) -> Any:
        seen.append(view)
        if len(seen) == 1:
            return CallSkill(skill=skill.name, params=params or {})
        return Finish(summary="done")

    agent = Agent(
        name="contract",
        state_type=Ledger,
        machine=MACHINE,
        skills=SkillRegistry([skill]),
        policy=ScriptedPolicy(decide),
    )
    store = MemoryStore()
    runtime = Runtime(agent, store)
    runtime.start("t", **fields)
    result = runtime.run("t", max_steps=2)
    return result.state, store.events("t"), seen


class TestDeclaration:
    def test_it_is_a_skill_with_a_verify_outputs_and_params(self, skill: Skill[Any, Any]) -> None:
        """Name, description, version, outputs, params schema and hooks, whatever the source."""
        assert (skill.name, skill.version, skill.outputs) == ("add_up", "3", ("total",))
        assert skill.description == "Sum the items of the ledger"
        assert skill.has_verify
        assert skill.has_rollback
        schema = skill.params_schema()
        assert schema["properties"]["factor"]["minimum"] == 1
        assert schema["additionalProperties"] is False

    def test_when_gates_it(self, skill: Skill[Any, Any]) -> None:
        """``when`` is false with no items: not offered, and a call is refused."""
        assert not skill.when(Ledger(task_id="t"))
        assert skill.when(Ledger(task_id="t", items=[1]))
        state, events, views = run_once(skill)
        assert views[0].skills == ()
        assert state.total is None
        assert events[1].error is not None
        assert "does not apply now" in events[1].error


class TestRun:
    def test_a_verified_result_is_committed(self, skill: Skill[Any, Any]) -> None:
        """The writes reach the card; the event names the skill, its version and the verdict."""
        state, events, views = run_once(skill, items=[1, 2, 3])
        assert "add_up" in views[0].skills
        assert state.total == 6
        event = events[1]
        assert (event.skill, event.skill_version, event.attempts) == ("add_up", "3", 1)
        assert event.verdict is not None
        assert event.verdict.ok
        assert skill_impl.UNDONE == []

    def test_params_are_validated(self, skill: Skill[Any, Any]) -> None:
        """A param out of range, or one the skill does not take, is refused before it runs."""
        for bad in ({"factor": 0}, {"factor": 2, "extra": 1}):
            state, events, _ = run_once(skill, bad, items=[1, 2, 3])
            assert state.total is None
            assert events[1].error is not None
            assert "invalid params" in events[1].error

    def test_params_reach_run(self, skill: Skill[Any, Any]) -> None:
        """The validated params are what ``run`` gets (``factor`` 2 doubles the total)."""
        state, _, _ = run_once(skill, {"factor": 2}, items=[1, 2])
        assert state.total == 6

    def test_run_does_not_change_the_state_it_is_given(self, skill: Skill[Any, Any]) -> None:
        """``run`` proposes writes; the state it was given is untouched."""
        state = Ledger(task_id="t", items=[1, 2, 3])
        before = state.model_dump()
        outcome = skill.run(state, skill.params(), None)  # type: ignore[arg-type]
        assert dict(outcome.writes) == {"total": 6}
        assert state.model_dump() == before


class TestFailures:
    def test_a_failing_verify_commits_nothing_and_rolls_back(self, skill: Skill[Any, Any]) -> None:
        """A wrong result fails verify: no write reaches the card, the rollback runs."""
        state, events, _ = run_once(skill, items=[1, 2, 3], mode="wrong")
        assert state.total is None
        assert events[1].verdict is not None
        assert not events[1].verdict.ok
        assert [e.kind for e in state.errors][:2] == ["verify_failed", "step_failed"]
        assert skill_impl.UNDONE == ["t"]

    def test_writing_outside_the_outputs_is_refused(self, skill: Skill[Any, Any]) -> None:
        """Least privilege: a write to an undeclared key fails the attempt, nothing is written."""
        state, _, _ = run_once(skill, items=[1, 2, 3], mode="undeclared")
        assert (state.total, state.mode) == (None, "undeclared")
        assert state.errors[0].kind == "output_not_declared"
        assert skill_impl.UNDONE == ["t"]

    def test_an_exception_is_a_failed_attempt(self, skill: Skill[Any, Any]) -> None:
        """``run`` raising is recorded as a skill error and rolled back."""
        state, _, _ = run_once(skill, items=[1, 2, 3], mode="raise")
        assert state.total is None
        assert state.errors[0].kind == "skill_error"
        assert "the ledger backend is down" in state.errors[0].message
        assert skill_impl.UNDONE == ["t"]


def write_skill_md(root: Path, name: str, body: str, *, extra: str = "") -> Path:
    path = root / name / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    front = f"name: {name}\ndescription: How to handle {name}\n{extra}"
    path.write_text(f"---\n{front}---\n{body}\n", encoding="utf-8")
    return path


class TestInstructionsSkill:
    """A model-facing ``SKILL.md``: its run loads instructions, its verify checks them."""

    def _skill(self, tmp_path: Path, body: str = "1. Add up the ledger.\n2. Finish.") -> Any:
        from skillstate.library import load_skill_md

        return load_skill_md(write_skill_md(tmp_path, "ledger-howto", body))

    def test_declaration(self, tmp_path: Path) -> None:
        """No params, one output (the card's instructions), a verify, no rollback."""
        skill = self._skill(tmp_path)
        assert (skill.name, skill.version, skill.outputs) == (
            "ledger-howto",
            "1",
            ("skill_instructions",),
        )
        assert skill.params_schema()["properties"] == {}
        assert skill.has_verify
        assert not skill.has_rollback

    def test_calling_it_loads_the_instructions_into_later_views(self, tmp_path: Path) -> None:
        """The card holds the text and its digest; the next view shows it; ``when`` turns false."""
        skill = self._skill(tmp_path)
        state, events, views = run_once(skill, items=[1])
        assert "ledger-howto" in views[0].skills
        [loaded] = state.skill_instructions
        assert loaded.text == "1. Add up the ledger.\n2. Finish."
        assert loaded.digest.startswith("sha256:")
        assert "Instructions loaded by ledger-howto (follow them):\n1. Add up" in views[1].text
        assert "ledger-howto" not in views[1].skills
        assert not skill.when(state)
        assert events[1].verdict is not None
        assert events[1].verdict.ok

    def test_verify_fails_when_the_file_changed_since_run(self, tmp_path: Path) -> None:
        """The check is real: instructions that are not the file's current text fail."""
        skill = self._skill(tmp_path)
        state = Ledger(task_id="t")
        outcome = skill.run(state, skill.params(), None)
        candidate = state.with_writes(outcome.writes)
        assert skill.verify(candidate, outcome).ok
        (tmp_path / "ledger-howto" / "SKILL.md").write_text(
            "---\nname: ledger-howto\ndescription: d\n---\nsomething else\n", encoding="utf-8"
        )
        verdict = skill.verify(candidate, outcome)
        assert not verdict.ok
        assert "changed while it was loaded" in verdict.reason
        assert not skill.verify(state, outcome).ok  # nothing loaded: fails too

    def test_a_removed_file_fails_the_step_and_commits_nothing(self, tmp_path: Path) -> None:
        skill = self._skill(tmp_path)
        (tmp_path / "ledger-howto" / "SKILL.md").unlink()
        state, _, _ = run_once(skill, items=[1])
        assert state.skill_instructions == ()
        assert state.errors[0].kind == "skill_error"
        assert "cannot read" in state.errors[0].message

    def test_long_instructions_are_cut_and_kept_whole_as_an_artifact(self, tmp_path: Path) -> None:
        from skillstate.library.markdown import INSTRUCTION_CHARS

        body = "\n".join(f"{i}. step number {i} of a long procedure" for i in range(400))
        skill = self._skill(tmp_path, body)
        store = MemoryStore()
        agent = Agent(
            name="long",
            state_type=Ledger,
            machine=MACHINE,
            skills=SkillRegistry([skill]),
            policy=ScriptedPolicy(lambda view: CallSkill(skill=skill.name)),
        )
        runtime = Runtime(agent, store)
        runtime.start("t")
        state = runtime.step("t").after
        [loaded] = state.skill_instructions
        assert len(loaded.text) == INSTRUCTION_CHARS
        assert loaded.ref is not None
        assert loaded.ref in loaded.text
        assert store.get_artifact(loaded.ref).decode() == body

    def test_the_card_keeps_the_latest_two(self, tmp_path: Path) -> None:
        from skillstate.library import load_skill_md
        from skillstate.library.markdown import MAX_LOADED

        skills = [
            load_skill_md(write_skill_md(tmp_path, f"howto-{i}", f"do {i}")) for i in range(3)
        ]
        state = Ledger(task_id="t")
        for skill in skills:
            outcome = skill.run(state, skill.params(), None)
            state = state.with_writes(outcome.writes)
        assert [i.skill for i in state.skill_instructions] == ["howto-1", "howto-2"]
        assert MAX_LOADED == 2
