"""Which fields of a card class a write may set cheaply (:meth:`AgentState.with_writes`).

Computed once per class and kept: the answers depend on the class's declaration only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from skillstate.state.model import AgentState

__all__ = ["ATOMIC", "assignable", "plain_fields"]

_ASSIGNABLE: dict[type[AgentState], bool] = {}

ATOMIC = frozenset({int, str, bool, float, type(None)})
"""Immutable values: a write of one needs no copy."""

_PLAIN: dict[type[AgentState], dict[str, Any]] = {}


def plain_fields(cls: type[AgentState]) -> dict[str, Any]:
    """The fields of ``cls`` declared as a bare ``int``, ``str``, ``bool`` or ``float``,
    with no constraint, no validator and no alias: for a value of exactly that type,
    validating it is the identity."""
    found = _PLAIN.get(cls)
    if found is None:
        checked = {
            name
            for decorator in cls.__pydantic_decorators__.field_validators.values()
            for name in decorator.info.fields
        }
        found = {
            name: info.annotation
            for name, info in cls.model_fields.items()
            if info.annotation in (int, str, bool, float)
            and not info.metadata
            and name not in checked
            and "*" not in checked
            and info.alias is None
        }
        _PLAIN[cls] = found
    return found


def assignable(cls: type[AgentState]) -> bool:
    """Whether writes may be validated field by field: no model validators but ours."""
    found = _ASSIGNABLE.get(cls)
    if found is None:
        validators = cls.__pydantic_decorators__.model_validators
        found = set(validators) <= {"_unseal_sensitive"}
        _ASSIGNABLE[cls] = found
    return found
