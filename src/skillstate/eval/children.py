"""Fan-out in the harness: the child agents of a family's parent, built per variant.

A family whose tasks fan out declares its kinds of child task in
:attr:`~skillstate.eval.tasks.Environment.children`. Only the skills variants
(``skills``, ``skillstate``) get them: spawning a declared child agent is part of the
structured library, like the verified skills, so the raw-tools variants (``history``,
``state``) do the same work one item after another in one task. Each child runs the
variant's own context (a ``skillstate`` child sees its state view, a ``skills`` child
its own transcript) and the same model as its parent.

The oracle is aimed at each child task separately: it reads its position in the
child's plan from that child's events, exactly as the parent's oracle does from the
parent's, so a resumed child goes on where it stopped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from skillstate.engine.actions import Action
from skillstate.engine.agent import Agent
from skillstate.engine.policy import Decided, Policy
from skillstate.eval.tasks import ChildTask, Environment
from skillstate.eval.variants import Variant
from skillstate.fanout import Child
from skillstate.llm.base import Provider
from skillstate.state.view import View

__all__ = ["PerTaskPolicy", "attach_children", "child_provider", "with_child_tools"]

ToolWrap = Callable[[str, Callable[..., Any]], Callable[..., Any]]


class PerTaskPolicy:
    """One policy per task id, built on first use: each child of a kind decides with
    its own (the oracle's position is per task; a model's policy holds no task state,
    so sharing one would do too, but this keeps the two alike)."""

    def __init__(self, make: Callable[[str], Policy[Any]]) -> None:
        self._make = make
        self._policies: dict[str, Policy[Any]] = {}

    def _policy(self, task_id: str) -> Policy[Any]:
        if task_id not in self._policies:
            self._policies[task_id] = self._make(task_id)
        return self._policies[task_id]

    def decide(self, view: View[Any]) -> Action | Decided:
        return self._policy(view.state.task_id).decide(view)

    async def adecide(self, view: View[Any]) -> Action | Decided:
        policy = self._policy(view.state.task_id)
        adecide = getattr(policy, "adecide", None)
        if adecide is not None:
            decided: Action | Decided = await adecide(view)
            return decided
        return policy.decide(view)


def child_provider(provider: Provider, task_id: str, plan: Sequence[Action]) -> Provider:
    """The provider a child task decides with: the oracle re-aimed at the child's plan
    and events (through a context-window limit, if any); a model as it is."""
    from skillstate.eval.runner import LimitedProvider, OracleProvider

    if isinstance(provider, LimitedProvider):
        return LimitedProvider(child_provider(provider.inner, task_id, plan), provider.window)
    if isinstance(provider, OracleProvider):
        return OracleProvider(plan, provider.store, task_id)
    return provider


def attach_children(
    agent: Agent[Any],
    env: Environment,
    variant: Variant,
    provider: Provider,
    *,
    max_repairs: int,
) -> Agent[Any]:
    """``agent`` with the environment's child kinds, under a skills variant; as it is
    otherwise (no kinds, or a raw-tools variant: see the module docstring)."""
    if variant.actions != "skills" or not env.children:
        return agent
    kinds = {
        name: Child(
            _child_agent(
                agent.name,
                name,
                kind,
                variant=variant,
                provider=provider,
                max_repairs=max_repairs,
            ),
            outputs=kind.outputs,
            description=kind.goal,
        )
        for name, kind in env.children.items()
    }
    return dataclasses.replace(agent, children=kinds)


def _child_agent(
    parent: str,
    name: str,
    kind: ChildTask,
    *,
    variant: Variant,
    provider: Provider,
    max_repairs: int,
) -> Agent[Any]:
    def make(task_id: str) -> Policy[Any]:
        return variant.policy(child_provider(provider, task_id, kind.plan), max_repairs=max_repairs)

    return Agent(
        name=f"{parent}-{name}",
        description=kind.goal,
        state_type=kind.state_type,
        machine=kind.machine,
        skills=kind.skills,
        policy=PerTaskPolicy(make),
        tools=dict(kind.tools),
        goal=kind.goal,
        constraints=kind.constraints,
        can_ask=False,  # nobody answers during an evaluation
        view_budget=None,  # as the parent's: the variants compare contexts as they are
        bind_params=variant.bind,
    )


def with_child_tools(env: Environment, wrap: ToolWrap) -> Environment:
    """``env`` with each child kind's tools passed through ``wrap``: the cassettes record
    and serve the children's calls as they do the parent's (inline children run one
    after another, so the calls keep one order)."""
    if not env.children:
        return env
    kinds = {
        name: dataclasses.replace(kind, tools={n: wrap(n, fn) for n, fn in kind.tools.items()})
        for name, kind in env.children.items()
    }
    return dataclasses.replace(env, children=kinds)
