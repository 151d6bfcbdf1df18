"""A counting agent whose every step is verified, for the spot-check tests.

``bump`` adds one to ``n`` (verified against the state before the step) until ``n``
reaches ``goal_n``; the agent marks half of its verified steps (``spot_checks``).
"""

from __future__ import annotations

from typing import Any

from skillstate import (
    Agent,
    AgentState,
    CallSkill,
    Finish,
    NoParams,
    Outcome,
    ScriptedPolicy,
    SkillContext,
    SkillRegistry,
    StateMachine,
    View,
)
from skillstate.engine.actions import Action
from skillstate.ops.spotchecks import SpotChecks


class CountState(AgentState):
    n: int = 0
    goal_n: int = 12


skills = SkillRegistry()


@skills.skill(outputs=["n"])
def bump(state: CountState, params: NoParams, ctx: SkillContext) -> Outcome:
    """Add one to n."""
    return Outcome(writes={"n": state.n + 1}, summary=f"n={state.n + 1}", value=state.n + 1)


@bump.verifier
def _(state: CountState, outcome: Outcome) -> bool:
    return bool(state.n == outcome.value)


def decide(view: View[CountState]) -> Action:
    if view.state.n < view.state.goal_n:
        return CallSkill(skill="bump")
    return Finish(summary=f"counted to {view.state.n}")


RULE = SpotChecks(rate=0.5, seed=3)

agent: Agent[Any] = Agent(
    name="counter",
    state_type=CountState,
    machine=StateMachine({"init": []}),
    skills=skills,
    policy=ScriptedPolicy(decide),
    spot_checks=RULE,
)
