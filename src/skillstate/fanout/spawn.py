"""Spawning: a ``Spawn``/``Map`` decision (or ``ctx.spawn``) as one parent commit.

The commit appends one ``pending`` :class:`~skillstate.state.model.ChildRecord` per
child (with the fields it will be created with) and sets the parent
``waiting_children``; nothing else is written. The children themselves are created
after that commit, by the join hook (:mod:`skillstate.fanout.join`), under ids
derived from the parent's version that recorded the spawn: a re-run after a crash
finds the same ids and creates only what is missing.

Everything a child will be created with is checked here, before the commit: the
kind is declared, keys are valid and distinct, the fields validate against the
child's state class, and the width, total and depth limits hold. A refusal is one
:class:`~skillstate.errors.ActionRejected` line and nothing is spawned.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from skillstate.engine.actions import Map, Spawn
from skillstate.engine.draft import Draft, decision
from skillstate.errors import ActionRejected, UsageError
from skillstate.fanout.spec import (
    KEY_PATTERN,
    TOTAL_FACTOR,
    SpawnRequest,
    child_agent,
    child_spec,
)
from skillstate.state.model import AgentState, ChildRecord, StepRecord, TaskStatus

if TYPE_CHECKING:
    from skillstate.engine.agent import Agent
    from skillstate.skills.skill import Skill

__all__ = [
    "check_spawns",
    "child_id",
    "requests_of",
    "spawn_draft",
    "spawn_problem",
    "spawned",
    "spawned_by",
]

_KEY = re.compile(KEY_PATTERN)
_PROBE_ID = "skillstate-spawn-check"
"""The task id a child's fields are validated under (nothing is stored)."""


def child_id(parent_id: str, version: int, key: str) -> str:
    """The id of the child keyed ``key`` that the parent's version ``version`` spawned."""
    return f"{parent_id}.{version}.{key}"


def requests_of(action: Spawn | Map) -> list[SpawnRequest]:
    """The children a decision asks for (a ``Map`` item's key field, else its index)."""
    if isinstance(action, Spawn):
        return [SpawnRequest(action.child, action.key, dict(action.set), action.goal)]
    found = []
    for index, item in enumerate(action.over):
        key: object = index
        if action.key is not None:
            if action.key not in item:
                raise ActionRejected(f"map item {index} has no key field {action.key!r}")
            key = item[action.key]
        if isinstance(key, bool) or not isinstance(key, str | int):
            raise ActionRejected(f"map item {index}: key {key!r} is not a string or an integer")
        found.append(SpawnRequest(action.child, str(key), dict(item)))
    return found


def check_spawns(
    agent: Agent[Any], state: AgentState, requests: Sequence[SpawnRequest]
) -> tuple[ChildRecord, ...]:
    """The pending records of ``requests`` spawned by ``state``'s next version; raises
    :class:`ActionRejected` (one line, nothing spawned) when one cannot be."""
    if not requests:
        raise ActionRejected("nothing to spawn: give at least one child")
    if len(requests) > agent.max_children:
        raise ActionRejected(
            f"{len(requests)} children in one spawn: at most {agent.max_children} (max_children)"
        )
    total = len(state.children) + len(requests)
    if total > TOTAL_FACTOR * agent.max_children:
        raise ActionRejected(
            f"task would have {total} children: at most {TOTAL_FACTOR * agent.max_children} "
            f"({TOTAL_FACTOR} x max_children)"
        )
    depth = (state.parent.depth if state.parent is not None else 0) + 1
    if depth > agent.max_depth:
        raise ActionRejected(f"children at depth {depth}: the tree is at most {agent.max_depth}")
    version = state.version + 1
    seen: set[str] = set()
    records = []
    for request in requests:
        if not _KEY.match(request.key):
            raise ActionRejected(f"child key {request.key!r} must match {KEY_PATTERN}")
        if request.key in seen:
            raise ActionRejected(f"child key {request.key!r} given twice in one spawn")
        seen.add(request.key)
        fields = _checked_fields(agent, request)
        records.append(
            ChildRecord(
                task_id=child_id(state.task_id, version, request.key),
                name=request.child,
                key=request.key,
                version=version,
                fields=fields,
                goal=request.goal,
            )
        )
    return tuple(records)


def _checked_fields(agent: Agent[Any], request: SpawnRequest) -> dict[str, Any]:
    """The request's card fields, checked by building the child's first card in memory."""
    if request.child not in agent.children:
        known = ", ".join(agent.children) or "none (the agent declares no children)"
        raise ActionRejected(f"cannot spawn child kind {request.child!r}; kinds: {known}")
    fields = dict(request.fields)
    from skillstate.skills.skill import Skill

    if isinstance(child_spec(agent.children[request.child]).target, Skill):
        from skillstate.fanout.skillchild import item_fields

        fields = item_fields(agent, request.child, fields)
    child = child_agent(agent, request.child)
    extra = {"goal": request.goal} if request.goal is not None else {}
    try:
        child.new_state(_PROBE_ID, **fields, **extra)
    except UsageError as exc:
        message = str(exc).replace(f"invalid initial state for task {_PROBE_ID!r}: ", "")
        raise ActionRejected(f"child {request.child!r} key {request.key!r}: {message}") from None
    return fields


def spawned(state: AgentState, records: Sequence[ChildRecord]) -> AgentState:
    """``state`` with ``records`` appended to its children, waiting for them."""
    return state.replace(children=(*state.children, *records), status=TaskStatus.WAITING_CHILDREN)


def spawn_draft(agent: Agent[Any], state: AgentState, action: Spawn | Map, step_id: str) -> Draft:
    """The draft of a ``Spawn``/``Map`` decision: one commit, the children pending."""
    records = check_spawns(agent, state, requests_of(action))
    keys = ", ".join(r.key for r in records)
    record = StepRecord(
        id=f"{step_id}-{action.kind}",
        step=state.current_step,
        action=action.kind,
        summary=f"spawned {len(records)} {action.child} child(ren): {keys}"[:500],
    )
    after = (
        spawned(state, records)
        .replace(last_decision=decision(action, action.child), inputs=(), question=None)
        .with_step(record)
        # A spawn completes no plan entry: the join, and what follows it, do.
        .replace(pending_steps=state.pending_steps)
    )
    return Draft(after=after, step_id=record.id)


def spawn_problem(
    agent: Agent[Any], state: AgentState, skill: Skill[Any, Any], requests: Sequence[SpawnRequest]
) -> str | None:
    """Why a skill's ``ctx.spawn`` calls cannot be committed with its step (``None``:
    they can, or there are none): the attempt then fails like an invalid output."""
    if not requests:
        return None
    if skill.effects:
        # Its outcome is committed after its intent: the spawn's version (and so the
        # children's ids) would not be the one the attempt saw.
        return f"skill {skill.name!r} has effects: it cannot spawn children (ctx.spawn)"
    try:
        check_spawns(agent, state, requests)
    except ActionRejected as exc:
        return f"ctx.spawn refused: {exc}"
    return None


def spawned_by(
    agent: Agent[Any], state: AgentState, after: AgentState, requests: Sequence[SpawnRequest]
) -> AgentState:
    """``after`` (a verified step's state) with the children its skill spawned
    (``ctx.spawn``), keyed by the version this step commits as; ``after`` if none."""
    if not requests:
        return after
    return spawned(after, check_spawns(agent, state, requests))
