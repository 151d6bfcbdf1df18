"""Parameters bound from the state: what the runtime fills so the model need not decide it.

A small model asked for ``process_record(i)`` must copy ``next_record`` from the view
into ``i``, and one that copies the wrong number repeats a call ``verify`` refuses.
That number needs no judgment: the state already says it. Declare it bound, and the
decision offers only what does need judgment::

    class RecordParams(BaseModel):
        i: Annotated[int, FromState("next_record")]  # filled by the runtime
        category: Annotated[str, OneOf(lambda s: s.open_categories)]  # one of these

* :class:`FromState` — the runtime fills the parameter from a state field (a dotted
  path). It leaves the decision schema; a decision that spells it out anyway must
  give the same value, or it is refused.
* :class:`OneOf` — the parameter is one of ``choices(state)``: the schema offers
  exactly those values as an ``enum``. A single choice needs no decision, so it is
  filled like a bound value; no choice at all means the skill cannot apply now, so
  it is not offered.

Bound values are filled into the action before it is carried out and recorded, so
the event log, the intent of an effect and a replay show the params the skill ran
with. Validation is the runtime's, whatever the policy (a scripted one included).
:attr:`~skillstate.engine.agent.Agent.bind_params` turns binding off (an ablation:
every parameter is the model's to decide again).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, create_model, model_validator
from pydantic.fields import FieldInfo

from skillstate.errors import ActionRejected, UsageError

__all__ = [
    "Binding",
    "BoundParams",
    "FromState",
    "OneOf",
    "binding_problems",
    "bindings",
    "bound_values",
    "check_bound",
    "decided",
    "fill",
]

_MISSING = object()


@dataclass(frozen=True)
class FromState:
    """The parameter's value is the state's field at ``path`` (``"next_record"``,
    ``"facts.order_id"``): filled by the runtime, never decided by the model."""

    path: str

    def describe(self) -> str:
        return self.path


@dataclass(frozen=True)
class OneOf:
    """The parameter is one of ``choices(state)`` (JSON scalars): offered as an enum;
    one choice is filled, none means the skill does not apply."""

    choices: Callable[[Any], Sequence[Any]]

    def describe(self) -> str:
        return "one of the applicable choices"


Binding = FromState | OneOf


@functools.cache
def bindings(model: type[BaseModel]) -> Mapping[str, Binding]:
    """The bound fields of a params model, by field name (empty for most skills)."""
    found: dict[str, Binding] = {}
    for name, info in model.model_fields.items():
        marks = [m for m in info.metadata if isinstance(m, FromState | OneOf)]
        if len(marks) > 1:
            raise UsageError(f"{model.__name__}.{name}: one binding per parameter, not {marks}")
        if marks:
            found[name] = marks[0]
    return found


def binding_problems(skill: str, model: type[BaseModel], state_type: type[BaseModel]) -> list[str]:
    """What is wrong with the bindings of ``skill``'s params (checked when the agent is
    built): a :class:`FromState` path whose first field the state class lacks."""
    problems = []
    for name, mark in bindings(model).items():
        root = mark.path.split(".")[0] if isinstance(mark, FromState) else None
        if root is not None and root not in state_type.model_fields:
            problems.append(
                f"skill {skill!r} binds param {name!r} to {mark.describe()!r}, "
                f"but {state_type.__name__} has no field {root!r}"
            )
    return problems


@dataclass(frozen=True)
class BoundParams:
    """What is left to decide of a params model in one state."""

    model: type[BaseModel]
    """The params the model decides (bound fields removed, choices as an enum)."""
    values: Mapping[str, Any]
    """The bound values: filled by the runtime."""


def decided(model: type[BaseModel], state: Any) -> BoundParams | None:
    """The decision left for ``model``'s params in ``state``; ``None`` when the skill
    cannot apply: a :class:`OneOf` parameter has no choice, or the state has no value
    (missing or ``None``) at a :class:`FromState` path."""
    marks = bindings(model)
    if not marks:
        return BoundParams(model, {})
    values: dict[str, Any] = {}
    choices: list[tuple[str, tuple[Any, ...]]] = []
    for name, mark in marks.items():
        if isinstance(mark, FromState):
            value = _read(state, mark.path)
            if value is _MISSING or value is None:
                return None  # nothing to fill it with: the skill cannot be called now
            values[name] = value
            continue
        offered = _choices(model, name, mark, state)
        if not offered:
            return None
        if len(offered) == 1:
            values[name] = offered[0]
        else:
            choices.append((name, offered))
    return BoundParams(_decided_model(model, frozenset(values), tuple(choices)), values)


def _read(state: Any, path: str) -> Any:
    """The JSON value at dotted ``path`` of the state (attributes, then keys)."""
    node: Any = state
    for part in path.split("."):
        if isinstance(node, BaseModel):
            node = getattr(node, part, _MISSING)
        elif isinstance(node, Mapping):
            node = node.get(part, _MISSING)
        else:
            return _MISSING
        if node is _MISSING:
            return _MISSING
    return node.model_dump(mode="json") if isinstance(node, BaseModel) else node


def _choices(model: type[BaseModel], name: str, mark: OneOf, state: Any) -> tuple[Any, ...]:
    offered = tuple(dict.fromkeys(mark.choices(state)))  # order kept, repeats dropped
    bad = [v for v in offered if not isinstance(v, str | int | float | bool)]
    if bad:
        raise UsageError(f"{model.__name__}.{name}: choices are JSON scalars, not {bad[0]!r}")
    return offered


@functools.lru_cache(maxsize=512)
def _decided_model(
    model: type[BaseModel],
    bound: frozenset[str],
    choices: tuple[tuple[str, tuple[Any, ...]], ...],
) -> type[BaseModel]:
    """``model`` less its bound fields, with each chosen field an enum of its choices.

    The schema never shows a bound field; a decision that spells one out is let
    through here (its value is checked against the state by :func:`check_bound`).
    """
    if not bound and not choices:
        return model
    fields: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        if name in bound:
            continue
        kept = FieldInfo.merge_field_infos(info)
        kept.metadata = [m for m in info.metadata if not isinstance(m, FromState | OneOf)]
        annotation: Any = info.annotation
        offered = dict(choices).get(name)
        if offered is not None:
            annotation = Literal[offered]
        fields[name] = (annotation, kept)
    names = bindings(model)

    class _Base(BaseModel):
        model_config = ConfigDict(extra="forbid")

        @model_validator(mode="before")
        @classmethod
        def _drop_bound(cls, data: Any) -> Any:
            if isinstance(data, dict):
                return {k: v for k, v in data.items() if k not in names or k in cls.model_fields}
            return data

    made: type[BaseModel] = create_model(
        model.__name__, __base__=_Base, __doc__=model.__doc__, **fields
    )
    return made


def bound_values(model: type[BaseModel], state: Any) -> Mapping[str, Any]:
    """The values the runtime fills into ``model``'s params in ``state``."""
    decision = decided(model, state)
    return decision.values if decision is not None else {}


def check_bound(skill: str, model: type[BaseModel], state: Any, params: Mapping[str, Any]) -> None:
    """Refuse params that contradict a binding: a bound value spelled out differently,
    or a value that is not among the choices (``ActionRejected``, for the model)."""
    marks = bindings(model)
    if not marks:
        return
    decision = decided(model, state)
    if decision is None:
        raise ActionRejected(f"skill {skill!r} does not apply now (no choice left for it)")
    for name, value in decision.values.items():
        given = params.get(name, value)
        if given != value:
            mark = marks[name]
            raise ActionRejected(
                f"param {name!r} of {skill!r} is bound to {mark.describe()} ({value!r}), "
                f"not {given!r}: leave it out"
            )
    for name, mark in marks.items():
        if isinstance(mark, OneOf) and name not in decision.values and name in params:
            offered = decision.model.model_fields[name].annotation
            allowed = getattr(offered, "__args__", ())
            if params[name] not in allowed:
                raise ActionRejected(
                    f"param {name!r} of {skill!r} must be one of {list(allowed)}, "
                    f"not {params[name]!r}"
                )


def fill(model: type[BaseModel], state: Any, params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` with the bound values added where the decision left them out."""
    values = bound_values(model, state)
    return {**params, **{k: v for k, v in values.items() if k not in params}}
