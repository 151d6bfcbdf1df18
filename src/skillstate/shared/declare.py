"""Declaring shared records: ``Agent(shared={"case": Shared(CaseFile, key="{case_id}")})``.

A declaration names a record kind (``case``), its pydantic schema and a key template
filled from the card (``{case_id}``: every task of the same case reads and writes the
same record, ``skillstate:shared:case:<case_id>``). A skill writes only the records it
lists in ``Skill(shares=[...])``. Everything here is checked when the agent is built
(:func:`shared_problems`), one phrase per problem, so a typo never reaches a run.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from skillstate._validation import first_error
from skillstate.errors import UsageError

if TYPE_CHECKING:
    from skillstate.engine.agent import Agent

__all__ = [
    "KEY_CHARS",
    "Shared",
    "check_key",
    "check_name",
    "key_fields",
    "resolve_key",
    "shared_problems",
]

KEY_CHARS = 128
"""The longest key a record may have, once its template is filled."""

_NAME = re.compile(r"[a-z][a-z0-9_]{0,47}")
_KEY = re.compile(rf"[A-Za-z0-9_.@-]{{1,{KEY_CHARS}}}")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_-]+)*)\}")
_KEY_HELP = f"1-{KEY_CHARS} of A-Z a-z 0-9 _ . @ -"


@dataclass(frozen=True)
class Shared:
    """One kind of shared record an agent's tasks read (in their views) and write
    (through skills that list it in ``shares``).

    ``schema``: the pydantic model of its value. ``key``: a template filled from the
    card (``"{case_id}"``, ``"team-{team}"``, or a constant for one record per store);
    a task whose placeholder field is empty has no such record. ``default``: the value
    of a record nobody has written yet (it must validate against ``schema``)."""

    schema: type[BaseModel]
    key: str
    default: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""

    def initial(self) -> BaseModel:
        """The value of a record never written (version 0)."""
        return self.schema.model_validate(dict(self.default))


def check_name(name: object) -> str:
    """``name`` if it can name a shared record kind (``case``); else a ``UsageError``."""
    if isinstance(name, str) and _NAME.fullmatch(name):
        return name
    raise UsageError(
        f"invalid shared record name {name!r}: 1-48 of a-z 0-9 _, starting with a letter"
    )


def check_key(key: object) -> str:
    """``key`` if it can key a record (``C-17``); else a ``UsageError``."""
    if isinstance(key, str) and _KEY.fullmatch(key):
        return key
    raise UsageError(f"invalid shared record key {key!r}: {_KEY_HELP}")


def key_fields(template: str) -> list[str]:
    """The card paths a key template reads (``{case_id}`` reads ``case_id``)."""
    return _PLACEHOLDER.findall(template)


def resolve_key(template: str, state: Any) -> str | None:
    """The key ``template`` gives for the card ``state``; ``None`` when a placeholder's
    field is empty (or the result is no valid key): that task has no such record."""
    missing = False

    def value(match: re.Match[str]) -> str:
        nonlocal missing
        found: Any = state
        for part in match.group(1).split("."):
            found = found.get(part) if isinstance(found, dict) else getattr(found, part, None)
        if isinstance(found, bool) or not isinstance(found, str | int) or found == "":
            missing = True
            return ""
        return str(found)

    filled = _PLACEHOLDER.sub(value, template)
    if missing or not _KEY.fullmatch(filled):
        return None
    return filled


def shared_problems(agent: Agent[Any]) -> list[str]:
    """What is wrong with ``agent``'s shared records and its skills' ``shares``."""
    declared = agent.shared
    if not isinstance(declared, Mapping):
        return [f"shared takes a dict of name -> Shared(...), not {type(declared).__name__}"]
    fields = agent.state_type.model_fields
    problems: list[str] = []
    for name, spec in declared.items():
        problems += _declaration_problems(name, spec, fields)
    for skill in agent.skills:
        shares = getattr(skill, "shares", ())
        unknown = [n for n in shares if n not in declared]
        if unknown:
            problems.append(
                f"skill {skill.name!r} shares undeclared records: {', '.join(unknown)} "
                f"(the agent declares: {', '.join(declared) or 'none'})"
            )
        if shares and skill.effects:
            # A conflict undoes the step that lost: an effect in the world cannot be undone.
            problems.append(
                f"skill {skill.name!r} declares effects and shares: a shared write may be "
                "undone by a conflict, an effect cannot; split it into two skills"
            )
    return problems


def _declaration_problems(name: object, spec: object, fields: Mapping[str, Any]) -> list[str]:
    try:
        check_name(name)
    except UsageError as exc:
        return [str(exc)]
    if not isinstance(spec, Shared):
        return [f"shared {name!r}: expected Shared(Model, key=...), not {type(spec).__name__}"]
    if not (isinstance(spec.schema, type) and issubclass(spec.schema, BaseModel)):
        return [f"shared {name!r}: the schema must be a pydantic model class, not {spec.schema!r}"]
    problems: list[str] = []
    template = spec.key
    if not isinstance(template, str) or not _KEY.fullmatch(_PLACEHOLDER.sub("x", template)):
        problems.append(
            f"shared {name!r}: invalid key template {template!r} ({_KEY_HELP}, "
            "with {field} placeholders from the card)"
        )
    else:
        for path in key_fields(template):
            if path.split(".")[0] not in fields:
                problems.append(
                    f"shared {name!r}: key {template!r} reads {path!r}, but the card has no "
                    f"field {path.split('.')[0]!r}"
                )
    try:
        spec.initial()
    except ValidationError as exc:
        problems.append(
            f"shared {name!r}: its default does not validate against "
            f"{spec.schema.__name__} ({first_error(exc)}); give Shared(..., default={{...}})"
        )
    return problems
