"""A skill as a child kind: ``Child(skill)`` is a one-skill agent.

Its task's card is the parent's state class plus ``item`` (the params the spawn
gave, validated against the skill's params model); its policy calls the skill once
with them and finishes with the skill's summary, or fails with the skill's last
error when every attempt failed. So ``Map(skill_kind, over=[params, ...])`` runs one
skill call per item, each an ordinary task (card, checkpoints, audit), joined by the
parent like any child. The agent is built from the parent's definition, so a worker
rebuilds it from ``"<parent ref>#children.<name>"``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import ValidationError, create_model

from skillstate._validation import first_error
from skillstate.engine.actions import Action, CallSkill, Fail, Finish
from skillstate.engine.policy import ScriptedPolicy
from skillstate.errors import ActionRejected
from skillstate.skills.registry import SkillRegistry
from skillstate.state.machine import StateMachine
from skillstate.state.view import View

if TYPE_CHECKING:
    from skillstate.engine.agent import Agent
    from skillstate.skills.skill import Skill

__all__ = ["item_fields", "skill_agent"]

ITEM = "item"
"""The field of a skill child's card holding the params of its one call."""


def skill_agent(skill: Skill[Any, Any], parent: Agent[Any], name: str) -> Agent[Any]:
    """The one-skill agent of child kind ``name`` of ``parent``."""
    from skillstate.engine.agent import Agent

    base = parent.state_type
    state_type = create_model(
        f"{base.__name__}_{name}",
        __base__=base,
        __module__=base.__module__,
        item=(dict[str, Any], {}),
    )
    steps: dict[str, list[str]] = {"start": ["done"], "done": []}
    if skill.step is not None and skill.step not in steps:
        steps = {"start": [skill.step, "done"], skill.step: ["done"], "done": []}

    def rules(view: View[Any]) -> Action:
        state = view.state
        if any(r.skill == skill.name for r in state.completed_steps):
            done = state.completed_steps[-1].summary or f"{skill.name} done"
            return Finish(summary=done[:500], next_step="done")
        failed = [e for e in state.errors if e.skill == skill.name]
        if failed:
            return Fail(reason=failed[-1].message[:200])
        return CallSkill(skill=skill.name, params=dict(getattr(state, ITEM)))

    agent: Agent[Any] = Agent(
        name=f"{parent.name}.{name}",
        state_type=state_type,
        machine=StateMachine(steps, initial="start", final=["done"]),
        skills=SkillRegistry([skill]),
        policy=ScriptedPolicy(rules, name=f"call {skill.name}"),
        tools=parent.tools,
        can_ask=False,
        redaction=parent.redaction,
        limits=parent.limits,
        bind_params=False,
        view_budget=None,
    )
    agent._skill_outputs = frozenset(o.split(".")[0] for o in skill.outputs)  # type: ignore[attr-defined]
    return agent


def item_fields(parent: Agent[Any], name: str, params: dict[str, Any]) -> dict[str, Any]:
    """A spawn's item for skill kind ``name`` as the child's card fields: its params
    (checked against the skill's params model: a bad item refuses the spawn)."""
    from skillstate.fanout.spec import child_spec
    from skillstate.skills.skill import Skill

    skill = child_spec(parent.children[name]).target
    assert isinstance(skill, Skill)
    try:
        skill.params.model_validate(params)
    except ValidationError as exc:
        raise ActionRejected(
            f"invalid params for child {name!r}: {first_error(exc, 'params')}"
        ) from None
    return {ITEM: params}
