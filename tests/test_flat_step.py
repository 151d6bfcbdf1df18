"""A step costs the same at step 10 and at step 10,000 (issue 13).

Not timed (benchmarks/runtime_step.py measures that, side by side with LangGraph and
Burr): these count what makes a step grow with the task. The card stays bounded (a
window of recent steps; the event log keeps every one), a step validates the card
once (when it loads the head) plus the fields it writes, and it serializes only
the fields it changed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from skillstate import (
    Agent,
    AgentState,
    CallSkill,
    Outcome,
    Runtime,
    ScriptedPolicy,
    SkillContext,
    SkillRegistry,
    StateMachine,
    Verdict,
    VerifyContext,
)
from skillstate.engine.history import find_step, step_records
from skillstate.state.view import View
from skillstate.store import open_store


class Counter(AgentState):
    counter: int = 0
    path: str = ""


class NoParams(BaseModel):
    pass


def counting_agent(*, fingerprint_every: int = 0) -> Agent[Counter]:
    skills: SkillRegistry = SkillRegistry()

    @skills.skill(step="work", outputs=["counter"])
    def tick(state: Counter, params: NoParams, ctx: SkillContext) -> Outcome:
        """Add one."""
        if fingerprint_every and (state.counter + 1) % fingerprint_every == 0:
            ctx.fingerprint(state.path)
        return Outcome(writes={"counter": state.counter + 1}, summary=f"to {state.counter + 1}")

    @tick.verifier
    def _one_more(state: Counter, outcome: Outcome, ctx: VerifyContext[Any]) -> Verdict:
        return Verdict(ok=state.counter == ctx.before.counter + 1)

    return Agent(
        name="counter",
        state_type=Counter,
        machine=StateMachine({"init": ["work"], "work": ["work"]}),
        skills=skills,
        policy=ScriptedPolicy(lambda view: CallSkill(skill="tick")),
    )


def runtime(agent: Agent[Counter], url: str = "memory://") -> Runtime[Counter]:
    # The task never finishes: no stall guard, a budget per run() call.
    return Runtime(agent, open_store(url), max_stalled=None, max_repeats=None)


def test_the_card_stays_bounded_and_the_log_keeps_every_step(tmp_path: Path) -> None:
    rt = runtime(counting_agent(), f"sqlite:///{tmp_path / 's.db'}")
    window = Counter.MAX_STEPS
    rt.run("t", max_steps=3 * window, create=True)
    early = rt.store.load("t").state
    rt.run("t", max_steps=6 * window)
    late = rt.load("t")
    assert late.counter == late.steps_taken == 9 * window
    assert len(late.completed_steps) == window
    assert [r.id for r in late.completed_steps][-1] == f"{late.version:04d}-tick"
    # Sizes: only counters' digits may grow (3 -> 4 digits), never a record per step.
    assert len(str(rt.store.load("t").state)) - len(str(early)) < 200
    # Each step's patch drops the oldest record and appends one: no whole-list rewrite.
    last = rt.store.events("t")[-1]
    ops = [op for op in last.patch if op["path"].startswith("/completed_steps")]
    assert [op["op"] for op in ops] == ["remove", "add"]
    # The event log has every record, in order; any one is found by id.
    records = list(step_records(rt.store.events("t")))
    assert [r.summary for r in records] == [f"to {n}" for n in range(1, 9 * window + 1)]
    first = records[0]
    assert find_step(rt.store, "t", first.id) == first
    assert find_step(rt.store, "t", "9999-nothing") is None


def test_a_view_finds_an_old_step_in_the_log() -> None:
    seen: list[Any] = []

    def policy(view: View[Counter]) -> CallSkill:
        if view.state.counter == 3 * Counter.MAX_STEPS:
            seen.append(view.step("0002-tick"))
        return CallSkill(skill="tick")

    agent = counting_agent()
    agent.policy = ScriptedPolicy(policy)
    rt = runtime(agent)
    rt.run("t", max_steps=3 * Counter.MAX_STEPS + 1, create=True)
    assert not rt.load("t").has_step("0002-tick")  # out of the card's window
    assert len(seen) == 1
    assert seen[0] is not None
    assert seen[0].summary == "to 1"


def test_fingerprinted_steps_outlive_the_window(tmp_path: Path) -> None:
    """A step a resume must re-check stays in the card longer than the others."""
    watched = tmp_path / "watched.txt"
    watched.write_text("v1")
    rt = runtime(counting_agent(fingerprint_every=7))
    rt.start("t", path=str(watched))
    rt.run("t", max_steps=3 * Counter.MAX_STEPS)
    kept = rt.load("t").completed_steps
    assert len(kept) == Counter.MAX_STEPS
    fingerprinted = [r for r in kept if r.fingerprints]
    assert len(fingerprinted) == (3 * Counter.MAX_STEPS) // 7  # every one of them
    assert kept[-1].summary == f"to {3 * Counter.MAX_STEPS}"  # and the latest steps


def test_a_step_validates_and_serializes_what_it_touched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Per step: one full validation (the head it loads), one field validated for the
    write, and no whole-card serialization, at any depth."""
    rt = runtime(counting_agent())
    rt.run("t", max_steps=2 * Counter.MAX_STEPS, create=True)
    full: list[int] = []
    whole_dumps: list[int] = []
    validate = Counter.model_validate.__func__  # type: ignore[attr-defined]
    to_json = Counter.to_json

    def counting_validate(cls: type[Counter], obj: Any, *args: Any, **kwargs: Any) -> Any:
        full.append(1)
        return validate(cls, obj, *args, **kwargs)

    def counting_to_json(self: Counter, fields: Any = None) -> dict[str, Any]:
        if fields is None:
            whole_dumps.append(1)
        return to_json(self, fields)

    monkeypatch.setattr(Counter, "model_validate", classmethod(counting_validate))
    monkeypatch.setattr(Counter, "to_json", counting_to_json)
    for steps in (1, 50):
        full.clear()
        whole_dumps.clear()
        before = rt.load("t").steps_taken
        result = rt.run("t", max_steps=steps)
        assert result.state.steps_taken == before + steps
        # run(): one load before the loop and one per step (plus the first lap's).
        assert len(full) <= steps + 3, (steps, len(full))
        assert whole_dumps == []
