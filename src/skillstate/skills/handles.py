"""Handles: how a decision passes a ``Sensitive`` value to a skill without seeing it.

A model never sees a ``Sensitive`` field's value: its view shows ``"***"``. To use
the value (a card number the user gave with ``skillstate reply T --into card``, an
API token), the decision passes the field's *handle* as a param value::

    {"kind": "call_skill", "skill": "pay", "params": {"card": "<sensitive:card>"}}

The runtime replaces the handle by the field's real value right before the skill
(or its probe, verify, rollback) is given its params, every time: the decision, the
intent an effect is kept as, the event and every rendering keep the handle, never
the value. A handle naming a field that is not ``Sensitive``, or has no value, is
refused like any invalid param.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from skillstate.errors import ActionRejected, StateError, UsageError
from skillstate.state.model import AgentState
from skillstate.state.secrets import sensitive_fields

__all__ = ["HANDLE", "handle", "reply_note", "resolve_handles", "secret_reply"]

HANDLE = re.compile(r"<sensitive:([A-Za-z_][A-Za-z0-9_]*)>")
"""A whole param value that names a ``Sensitive`` field of the card."""


def handle(field: str) -> str:
    """The handle of the ``Sensitive`` field ``field``: ``<sensitive:field>``."""
    return f"<sensitive:{field}>"


def reply_note(field: str) -> str:
    """What a decision sees of a reply routed into the ``Sensitive`` field ``field``."""
    return (
        f"(the user's reply is kept secret in the card's {field!r} field; "
        f'pass "{handle(field)}" as a param value to use it)'
    )


def secret_reply(state: AgentState, field: str, text: str) -> AgentState:
    """``state`` with the reply ``text`` kept in its ``Sensitive`` field ``field``.

    Raises a one-line :class:`UsageError` (which never quotes the reply) when the card
    has no such ``Sensitive`` field or the reply does not fit its type."""
    hidden = sensitive_fields(type(state))
    if field not in hidden:
        known = ", ".join(sorted(hidden)) or "none"
        raise UsageError(
            f"--into {field!r}: not a Sensitive field of {type(state).__name__} "
            f"(its Sensitive fields: {known}); nothing was written"
        )
    try:
        return state.evolve(**{field: text})
    except StateError:
        # The validation message would quote the value: say only where it failed.
        raise UsageError(
            f"--into {field!r}: the reply is not a valid value for that field; nothing was written"
        ) from None


def resolve_handles(params: Mapping[str, Any], state: AgentState) -> dict[str, Any]:
    """``params`` with every handle replaced by its field's value (a copy when one is).

    Raises :class:`ActionRejected` for a handle of a field that is not ``Sensitive``
    or holds nothing.
    """
    out: dict[str, Any] = _walk(dict(params), state)
    return out


def _walk(value: Any, state: AgentState) -> Any:
    if isinstance(value, str):
        m = HANDLE.fullmatch(value)
        return value if m is None else _value(m.group(1), state)
    if isinstance(value, dict):
        return {k: _walk(v, state) for k, v in value.items()}
    if isinstance(value, list):
        return [_walk(v, state) for v in value]
    return value


def _value(field: str, state: AgentState) -> Any:
    if field not in sensitive_fields(type(state)):
        raise ActionRejected(
            f"{handle(field)} names no Sensitive field of the card; handles stand only "
            "for Sensitive fields"
        )
    value = getattr(state, field)
    if value is None:
        raise ActionRejected(f"{handle(field)}: the card's {field!r} field holds no value yet")
    return value
