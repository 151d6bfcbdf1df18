"""Signals: named, typed events from the world that a waiting task consumes.

An agent declares the signals it may wait for, each with the pydantic schema of its
payload (and optionally a default timeout and where a timeout goes)::

    Agent(..., signals={"payment_received": PaymentReceived})
    Agent(..., signals={"payment_received": Signal(PaymentReceived, timeout=3600,
                                                   on_timeout="escalated")})

A signal is delivered by posting it to the task's inbox
(:meth:`~skillstate.store.base.Store.post`, kind ``"signal"``): never by writing the
card, which the worker holding the task commits under its lease. The payload is
validated against the declared schema *before* anything is posted, so a bad
payload is one line and nothing is written. A wait for the signal
(:mod:`skillstate.control.waits`) consumes the oldest such message it has not
consumed yet, whether it came before or after the wait began.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from skillstate._validation import first_error
from skillstate.errors import UsageError
from skillstate.limits import Limits, problem

__all__ = ["KIND", "NAME", "Signal", "check_payload", "signal_problems", "signal_specs"]

KIND = "signal"
"""The inbox kind signals are posted under."""

NAME = re.compile(r"[a-z][a-z0-9_.-]{0,63}")
"""A signal name: lower-case letters, digits, ``_``, ``.``, ``-``; at most 64 characters."""


@dataclass(frozen=True)
class Signal:
    """A signal an agent declares: its payload's schema, and what its timeout does."""

    schema: type[BaseModel]
    """The payload's pydantic model; a delivered payload must validate against it."""
    timeout: float | None = None
    """Seconds a ``WaitFor`` that names no timeout waits (``None``: no timeout)."""
    on_timeout: str | None = None
    """The machine step a timed-out wait goes to (``None``: the task fails with the reason)."""


def signal_specs(declared: Mapping[str, type[BaseModel] | Signal]) -> dict[str, Signal]:
    """``Agent(signals=...)`` normalised: every value a :class:`Signal`."""
    return {
        name: value if isinstance(value, Signal) else Signal(value)
        for name, value in declared.items()
    }


def signal_problems(declared: Mapping[str, Any], steps: tuple[str, ...]) -> list[str]:
    """What is wrong with an agent's declared signals (checked when it is built)."""
    problems: list[str] = []
    for name, value in declared.items():
        if not isinstance(name, str) or NAME.fullmatch(name) is None:
            problems.append(
                f"signal name {name!r} must be lower-case letters, digits, '_', '.' or '-' "
                "(at most 64 characters)"
            )
            continue
        spec = value if isinstance(value, Signal) else Signal(value)
        if not (isinstance(spec.schema, type) and issubclass(spec.schema, BaseModel)):
            problems.append(f"signal {name!r} needs a pydantic model as its schema")
        if spec.timeout is not None and not (math.isfinite(spec.timeout) and spec.timeout > 0):
            problems.append(f"signal {name!r} has a timeout that is not a positive number")
        if spec.on_timeout is not None and spec.on_timeout not in steps:
            problems.append(f"signal {name!r} times out to undeclared step {spec.on_timeout!r}")
    return problems


def check_payload(
    specs: Mapping[str, Signal], name: str, data: Any, limits: Limits
) -> dict[str, Any]:
    """``data`` validated as signal ``name``'s payload, as the JSON the card will hold.

    Raises :class:`~skillstate.errors.UsageError` (one line, naming the field, never
    echoing the value) for an undeclared signal or a payload that does not fit.
    """
    spec = specs.get(name)
    if spec is None:
        known = ", ".join(sorted(specs)) or "none"
        raise UsageError(f"unknown signal {name!r}; the agent declares: {known}")
    found = problem(data, chars=limits.value_chars, depth=limits.depth)
    if found is not None:
        raise UsageError(f"signal {name!r} refused: {found}; nothing was delivered")
    try:
        payload = spec.schema.model_validate(data)
    except ValidationError as exc:
        raise UsageError(
            f"signal {name!r} refused: {first_error(exc, 'data')}; nothing was delivered"
        ) from None
    dumped: dict[str, Any] = payload.model_dump(mode="json")
    return dumped
