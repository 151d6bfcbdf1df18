"""An :class:`Agent` bundles what drives a task: state class, machine, skills, tools, policy.

It is a plain definition with no I/O: the :class:`~skillstate.engine.runtime.Runtime`
runs it against a store. ``skillstate run module:attr`` imports one by name, and the
name is kept in the state card so ``resume`` can find it again in a new process.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from skillstate._validation import first_error
from skillstate.engine.policy import Policy
from skillstate.errors import AgentImportError, UsageError
from skillstate.skills.registry import SkillRegistry
from skillstate.state.machine import StateMachine
from skillstate.state.migrate import chain_problems, validate_state
from skillstate.state.model import AgentState, TaskStatus
from skillstate.state.view import VALUE_CHARS, View, render_view

__all__ = ["Agent", "load_agent"]


@dataclass
class Agent:
    """The definition of an agent. Validated when built.

    ``goal``, ``constraints`` and ``plan`` seed every new task's card;
    ``sample_inputs`` are the canned user replies ``skillstate demo`` uses.
    """

    name: str
    state_type: type[AgentState]
    machine: StateMachine
    skills: SkillRegistry
    policy: Policy
    tools: Mapping[str, Callable[..., Any]] = field(default_factory=dict)
    goal: str = ""
    constraints: Sequence[str] = ()
    plan: Sequence[str] = ()
    description: str = ""
    sample_inputs: Sequence[str] = ()
    ref: str | None = None
    """``module:attr`` this agent is importable as (filled in by :func:`load_agent`)."""
    view_budget: int | None = None
    """Token budget for the prompt view; ``None`` renders it whole."""
    view_value_chars: int = VALUE_CHARS
    """How much of each field's value the view shows. The default keeps the card
    compact; an agent whose state holds raw tool output (the harness's ``state``
    variant) raises it so the model can read what its last call returned."""
    can_ask: bool = True
    """Whether the policy may ask the user. Off for unattended runs (an evaluation,
    a batch job): the action is then not offered at all, so a model cannot stall
    the task on a question nobody will answer."""

    def __post_init__(self) -> None:
        problems: list[str] = []
        for skill in self.skills:
            if not skill.has_verify:
                problems.append(f"skill {skill.name!r} has no verify")
            if skill.effects and not skill.has_probe:
                # After a crash mid-effect only the skill can tell whether it happened.
                problems.append(f"skill {skill.name!r} declares effects but no probe")
            missing = set(skill.tools) - set(self.tools)
            if missing:
                problems.append(
                    f"skill {skill.name!r} declares unknown tools: {', '.join(sorted(missing))}"
                )
            if skill.step is not None and skill.step not in self.machine.steps:
                problems.append(f"skill {skill.name!r} enters undeclared step {skill.step!r}")
            for output in skill.outputs:
                top = output.split(".")[0]
                if top not in self.state_type.model_fields:
                    problems.append(
                        f"skill {skill.name!r} declares output {output!r}, "
                        f"but {self.state_type.__name__} has no field {top!r}"
                    )
        problems += chain_problems(self.state_type)
        if problems:
            raise UsageError(f"agent {self.name!r} is invalid: " + "; ".join(problems))

    def new_state(self, task_id: str, **fields: Any) -> AgentState:
        """Version 0 of a task's card (the runtime commits it as version 1)."""
        base: dict[str, Any] = {
            "task_id": task_id,
            "status": TaskStatus.CREATED,
            "goal": self.goal,
            "constraints": tuple(self.constraints),
            "pending_steps": tuple(self.plan),
            "current_step": self.machine.initial,
            "agent": self.ref,
        }
        base.update(fields)
        try:
            return self.state_type.model_validate(base)
        except ValidationError as exc:
            raise UsageError(
                f"invalid initial state for task {task_id!r}: {first_error(exc, 'state')}"
            ) from exc

    def parse_state(self, data: Mapping[str, Any], *, task_id: str | None = None) -> AgentState:
        """A stored document as the agent's state class: migrated, then validated.

        A broken record is :class:`~skillstate.errors.StateCorrupted` naming the
        field, so the task stops before anything is written over it; one from a
        newer schema is :class:`~skillstate.errors.SchemaTooNew`. ``task_id`` names
        the task in errors when the record's own id is unusable.
        """
        return validate_state(self.state_type, data, task_id=task_id)

    def view(self, state: AgentState) -> View:
        return render_view(
            state,
            machine=self.machine,
            skills=list(self.skills),
            budget=self.view_budget,
            agent_name=self.name,
            agent_description=self.description,
            can_ask=self.can_ask,
            value_chars=self.view_value_chars,
        )


def load_agent(ref: str) -> Agent:
    """Import ``module:attr`` and return the :class:`Agent` it names.

    ``attr`` may also be a zero-argument callable returning an Agent.
    """
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise AgentImportError(f"expected MODULE:ATTR, got {ref!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise AgentImportError(f"cannot import {module_name!r}: {exc}") from exc
    target: Any = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise AgentImportError(f"{module_name!r} has no attribute {attr!r}") from None
    if not isinstance(target, Agent) and callable(target):
        target = target()
    if not isinstance(target, Agent):
        raise AgentImportError(f"{ref!r} is a {type(target).__name__}, not a skillstate Agent")
    target.ref = ref
    return target
