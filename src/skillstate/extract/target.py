"""What a proposal may fill in: the card of one agent (or the base card, for a new one).

A :class:`Target` answers the questions every extracted item is checked against: is
this key a typed field of the state class or a free ``facts`` entry, does this value
fit the field's type, is this a skill (or step) the agent knows. Sensitive fields are
never filled from a transcript: what a transcript held is masked before anything
reads it, and a secret belongs in ``skillstate reply --into``, not in a proposal.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import TypeAdapter, ValidationError

from skillstate._validation import first_error
from skillstate.state.model import AgentState
from skillstate.state.secrets import sensitive_fields

if TYPE_CHECKING:
    from skillstate.engine.agent import Agent

__all__ = ["FACT_KEY", "Rejected", "Target", "describe_type"]

FACT_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")
"""A free fact's key (``facts.KEY``): a name that a dotted path can hold."""


class Rejected(Exception):
    """An extracted item that cannot be kept; the message says why (one line)."""


@dataclass(frozen=True)
class Typed:
    """One typed field of the state class a fact may fill."""

    name: str
    adapter: TypeAdapter[Any]
    kind: str
    """Its type in words, for the model's prompt and the review table."""


@dataclass(frozen=True)
class Target:
    """The card a proposal is for."""

    state_type: type[AgentState]
    agent: str | None = None
    """``module:attr`` of the agent (``None``: a new agent, the base card)."""
    typed: Mapping[str, Typed] = field(default_factory=dict)
    sensitive: frozenset[str] = frozenset()
    skills: Mapping[str, str] = field(default_factory=dict)
    """Skill name -> description."""
    steps: tuple[str, ...] = ()
    """The state machine's steps (a plan may name a step as well as a skill)."""
    max_evidence: int = AgentState.MAX_EVIDENCE

    @classmethod
    def of(cls, agent: Agent[Any] | None, state_type: type[AgentState] | None = None) -> Target:
        """The target of ``agent`` (its state class, skills and steps), or of a bare state
        class (``state_type``, default :class:`AgentState`) when there is no agent yet."""
        if agent is not None:
            state_type = agent.state_type
        state_type = state_type or AgentState
        hidden = sensitive_fields(state_type)
        typed = {}
        for name in state_type.custom_fields():
            if name in hidden:
                continue
            info = state_type.model_fields[name]
            annotation: Any = info.annotation
            if info.metadata:  # constraints (Field(ge=0), max_length=...) validate too
                annotated: Any = Annotated
                args = (annotation, *info.metadata)
                annotation = annotated[args]
            adapter: TypeAdapter[Any] = TypeAdapter(annotation)
            typed[name] = Typed(name, adapter, describe_type(adapter.json_schema()))
        if agent is None:
            return cls(state_type, None, typed, hidden, max_evidence=state_type.MAX_EVIDENCE)
        skills = {s.name: s.description or s.name for s in agent.skills}
        return cls(
            state_type,
            agent.reference(),
            typed,
            hidden,
            skills,
            tuple(agent.machine.steps),
            state_type.MAX_EVIDENCE,
        )

    def fact_path(self, key: str) -> str:
        """The card path a fact's ``key`` fills: a typed field's name, or ``facts.KEY``.

        Raises :class:`Rejected` for a key the card cannot hold: a field of the base
        card (``status``, ``goal``...), a sensitive field, or a free key that is not a
        plain name.
        """
        name = key.strip()
        free = name.startswith("facts.")
        if free:
            name = name[len("facts.") :]
        elif name in self.typed:
            return name
        if name in self.sensitive:
            raise Rejected(f"{name!r} is a sensitive field: it is never taken from a transcript")
        if not free and name in self.state_type.model_fields:
            raise Rejected(f"{name!r} is a field of the base card, not a fact")
        if not FACT_KEY.match(name):
            raise Rejected(f"{key[:60]!r} is not a fact key (a name of letters, digits, _ or -)")
        return f"facts.{name}"

    def fact_value(self, path: str, value: Any) -> Any:
        """``value`` as the field at ``path`` holds it (JSON), or :class:`Rejected`."""
        typed = self.typed.get(path)
        if typed is None:
            return value
        try:
            return typed.adapter.dump_python(typed.adapter.validate_python(value), mode="json")
        except ValidationError as exc:
            raise Rejected(first_error(exc, path)) from None

    def knows_step(self, name: str, *, plan: bool) -> bool:
        """Whether ``name`` is a skill of the agent (or, in a plan, one of its steps)."""
        return name in self.skills or (plan and name in self.steps)


def describe_type(schema: Mapping[str, Any]) -> str:
    """A JSON schema in a few words: ``one of P1, P2``, ``integer``, ``string or null``."""
    if "enum" in schema:
        return "one of " + ", ".join(str(v) for v in schema["enum"])
    if "const" in schema:
        return f"exactly {schema['const']}"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            kinds = [describe_type(branch) for branch in schema[key]]
            real = [k for k in kinds if k != "null"]
            return " or ".join(dict.fromkeys(real or kinds))
    kind = schema.get("type")
    if kind == "array":
        items = schema.get("items")
        return f"list of {describe_type(items)}" if isinstance(items, Mapping) else "list"
    if isinstance(kind, str):
        return kind
    return "any JSON value"
