"""Declaring child kinds: ``Agent(children={"channel": Child(agent, outputs=Report)})``.

A parent agent names the kinds of child task it may spawn. Each kind is a
:class:`Child`: an agent (an :class:`~skillstate.engine.agent.Agent`, or its
``module:attr`` reference), or a skill (one call, then finish; see
:mod:`skillstate.fanout.skillchild`), with the pydantic model the join validates the
child's outputs against. This module holds only the declaration and its checks: it
imports nothing of the engine at import time, because ``engine.agent`` imports it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel

from skillstate.errors import AgentImportError, UsageError

if TYPE_CHECKING:
    from skillstate.engine.agent import Agent
    from skillstate.skills.skill import Skill

__all__ = [
    "CHILD_REF",
    "KEY_PATTERN",
    "MAX_DEPTH",
    "MAX_WIDTH",
    "TOTAL_FACTOR",
    "Child",
    "ChildMode",
    "SpawnRequest",
    "check_children",
    "check_mode",
    "child_agent",
    "child_ref",
    "child_spec",
    "child_specs",
    "resolve_child_ref",
]

KEY_PATTERN = r"^[A-Za-z0-9_-]{1,48}$"
"""A child's key among its siblings: it ends the child's task id, so no dots or spaces."""
_KEY = re.compile(KEY_PATTERN)
MAX_WIDTH = 128
"""Default ``Agent(max_children=...)``: the most children one ``Spawn``/``Map`` makes."""
MAX_DEPTH = 4
"""Default ``Agent(max_depth=...)``: how deep a tree of tasks may grow under a root."""
TOTAL_FACTOR = 4
"""A task may spawn at most ``TOTAL_FACTOR * max_children`` children over its life
(retries included): every one is a record in its card, shown in its views."""
CHILD_REF = "#children."
"""How a child kind with no importable reference of its own is named: the parent's
reference, this, and the kind (``app.agents:parent#children.channel``)."""

ChildMode = Literal["inline", "dispatch"]
"""``Runtime(children=...)``: ``inline`` runs a parent's children in the same call of
``run``; ``dispatch`` returns ``stopped="waiting_children"`` and leaves them to workers."""


@dataclass(frozen=True)
class SpawnRequest:
    """One child to spawn: its kind, key, the fields of its card, its goal
    (``ctx.spawn`` in a skill records these; a ``Spawn``/``Map`` decision makes them)."""

    child: str
    key: str
    fields: Mapping[str, Any] = field(default_factory=dict)
    goal: str | None = None


@dataclass(frozen=True, eq=False)
class Child:
    """One kind of child task a parent may spawn.

    ``target`` is an Agent, its ``module:attr`` reference, or a Skill (the child's task
    calls it once with the item's params and finishes). ``outputs`` is the pydantic model
    the join validates the child's outputs against (``None``: the child's fields as they
    are); ``description`` tells a model what the kind is for.
    """

    target: Agent[Any] | Skill[Any, Any] | str
    outputs: type[BaseModel] | None = None
    description: str = ""
    _built: dict[str, Agent[Any]] = field(default_factory=dict, repr=False, compare=False)

    def agent(self, parent: Agent[Any], name: str) -> Agent[Any]:
        """The child kind's agent (built or imported once per parent)."""
        key = f"{id(parent)}:{name}"
        found = self._built.get(key)
        if found is None:
            found = _build(self.target, parent, name)
            self._built[key] = found
        return found


def child_spec(value: object) -> Child:
    """``value`` as a :class:`Child`: an Agent, a reference or a Skill is shorthand."""
    return value if isinstance(value, Child) else Child(value)  # type: ignore[arg-type]


def child_specs(agent: Agent[Any]) -> dict[str, Child]:
    """The agent's declared child kinds, each a :class:`Child`."""
    return {name: child_spec(value) for name, value in agent.children.items()}


def child_agent(parent: Agent[Any], name: str) -> Agent[Any]:
    """The agent of the parent's child kind ``name``; ``UsageError`` if undeclared."""
    value = parent.children.get(name)
    if value is None:
        known = ", ".join(parent.children) or "none"
        raise UsageError(f"agent {parent.name!r} declares no child kind {name!r}; kinds: {known}")
    return child_spec(value).agent(parent, name)


def child_ref(parent: Agent[Any], name: str) -> str | None:
    """The reference a child task of kind ``name`` records for workers to import: a
    string target as given, the child agent's own reference, else the parent's
    reference with ``#children.<name>``; ``None`` when the parent has none either."""
    spec = child_spec(parent.children[name])
    if isinstance(spec.target, str):
        return spec.target
    from skillstate.engine.agent import Agent

    if isinstance(spec.target, Agent) and spec.target.reference() is not None:
        return spec.target.reference()
    base = parent.reference()
    return f"{base}{CHILD_REF}{name}" if base is not None else None


def resolve_child_ref(ref: str, *, search_cwd: bool = False) -> Agent[Any]:
    """``load_agent`` of ``"<parent ref>#children.<name>"``: the parent loaded (its base
    reference is what allow-lists check), then its child kind."""
    from skillstate.engine.agent import load_agent

    base, sep, name = ref.rpartition(CHILD_REF)
    if not sep or not base or not name:
        raise AgentImportError(f"expected MODULE:ATTR{CHILD_REF}NAME, got {ref!r}")
    parent = load_agent(base, search_cwd=search_cwd)
    try:
        found = child_agent(parent, name)
    except UsageError as exc:
        raise AgentImportError(str(exc)) from None
    if found.reference() is None:
        found.ref = ref
    return found


def check_mode(mode: object) -> ChildMode:
    """``Runtime(children=...)`` checked: ``inline`` or ``dispatch``."""
    if mode not in ("inline", "dispatch"):
        raise UsageError(f"children must be 'inline' or 'dispatch', not {mode!r}")
    return "inline" if mode == "inline" else "dispatch"


def check_children(agent: Agent[Any]) -> list[str]:
    """What is wrong with an agent's ``children``, ``max_children`` and ``max_depth``;
    each valid kind is made a :class:`Child` in place (so it is built only once)."""
    problems: list[str] = []
    for label, limit in (("max_children", agent.max_children), ("max_depth", agent.max_depth)):
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            problems.append(f"{label} must be an integer >= 1, not {limit!r}")
    if not isinstance(agent.children, Mapping):
        return [*problems, f"children must be a mapping of names to kinds, not {agent.children!r}"]
    for name, value in agent.children.items():
        problems += _kind_problems(name, value)
    if not problems:
        agent.children = {name: child_spec(value) for name, value in agent.children.items()}
    return problems


def _kind_problems(name: object, value: object) -> list[str]:
    from skillstate.engine.agent import Agent
    from skillstate.skills.skill import Skill

    if not isinstance(name, str) or not _KEY.match(name):
        return [f"child kind name {name!r} must match {KEY_PATTERN}"]
    spec = child_spec(value)
    problems = []
    target = spec.target
    if isinstance(target, str):
        if ":" not in target:
            problems.append(f"child kind {name!r}: reference {target!r} is not MODULE:ATTR")
    elif not isinstance(target, Agent | Skill):
        problems.append(
            f"child kind {name!r} must be an Agent, a Skill or a 'module:attr' reference, "
            f"not {type(target).__name__}"
        )
    outputs = spec.outputs
    if outputs is not None and not (isinstance(outputs, type) and issubclass(outputs, BaseModel)):
        problems.append(f"child kind {name!r}: outputs must be a pydantic model class")
    return problems


def _build(target: object, parent: Agent[Any], name: str) -> Agent[Any]:
    from skillstate.engine.agent import Agent, load_agent
    from skillstate.skills.skill import Skill

    if isinstance(target, Agent):
        return target
    if isinstance(target, Skill):
        from skillstate.fanout.skillchild import skill_agent

        return skill_agent(target, parent, name)
    if isinstance(target, str):
        return load_agent(target)
    raise UsageError(f"child kind {name!r} is not an Agent, a Skill or a reference")
