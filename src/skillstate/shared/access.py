"""A running skill's side of shared records: ``ctx.shared(name)`` and ``ctx.write_shared``.

Reads return the record as the step's decision saw it (the card's snapshot), so a skill
computes its new value from exactly the version its write will be compared against.
Writes are only collected here: the attempt's verify (and the agent's invariants) must
pass for one to be kept, and the commit then writes it (:mod:`skillstate.shared.runtime`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from skillstate._validation import first_error
from skillstate.errors import SharedNotDeclared, UsageError
from skillstate.shared.declare import Shared, resolve_key
from skillstate.shared.record import load_record

if TYPE_CHECKING:
    from skillstate.store.base import Store

__all__ = ["VALUE_CHARS", "SharedChange", "Sharing"]

VALUE_CHARS = 16_000
"""The largest value a shared record may hold, as JSON text: every task that reads it
loads it at each decision and its views show it. Keep bulky data in artifacts."""


@dataclass(frozen=True)
class SharedChange:
    """A write a skill asked for (``ctx.write_shared``): kept only if its attempt verifies."""

    name: str
    key: str
    base: int
    """The record version the skill read (the one its decision saw)."""
    value: dict[str, Any]
    """The new value as JSON, validated against the declared schema."""


class Sharing:
    """The shared records one attempt of one skill may read and write."""

    def __init__(
        self,
        skill: str,
        declared: Mapping[str, Shared],
        shares: tuple[str, ...],
        state: Any,
        store: Store,
    ) -> None:
        self._skill = skill
        self._declared = declared
        self._shares = shares
        self._state = state
        self._store = store
        self._changes: dict[str, SharedChange] = {}

    def read(self, name: str) -> Any:
        """The record's value (a model of its schema): this attempt's own write if it made
        one, else the version the decision saw."""
        spec = self._spec(name, writing=False)
        change = self._changes.get(name)
        if change is not None:
            return spec.schema.model_validate(change.value)
        _, _, value = self._seen(name, spec)
        return spec.schema.model_validate(value) if value is not None else spec.initial()

    def write(self, name: str, value: BaseModel | Mapping[str, Any] | Callable[[Any], Any]) -> None:
        """Ask to replace the record with ``value``: a model of its schema, a dict, or a
        function given the current value (a model it may change in place) that returns
        the new one (or ``None``: the one it was given, changed)."""
        spec = self._spec(name, writing=True)
        if self._changes and name not in self._changes:
            raise UsageError(
                f"skill {self._skill!r} writes shared records {next(iter(self._changes))!r} "
                f"and {name!r} in one step: a step writes one record (one compare-and-set)"
            )
        if callable(value) and not isinstance(value, BaseModel):
            current = self.read(name)
            returned = value(current)
            value = current if returned is None else returned
        data = value.model_dump(mode="json") if isinstance(value, BaseModel) else value
        try:
            checked = spec.schema.model_validate(data).model_dump(mode="json")
        except ValidationError as exc:
            raise UsageError(
                f"shared {name!r} refused: {first_error(exc)} ({spec.schema.__name__})"
            ) from None
        size = len(json.dumps(checked, ensure_ascii=False))
        if size > VALUE_CHARS:
            raise UsageError(
                f"shared {name!r} refused: {size} characters as JSON, over {VALUE_CHARS}; "
                "keep bulky data in an artifact (ctx.attach) and share its ref"
            )
        key, base, _ = self._seen(name, spec)
        self._changes[name] = SharedChange(name, key, base, checked)

    def changes(self) -> tuple[SharedChange, ...]:
        """The writes this attempt asked for (one at most)."""
        return tuple(self._changes.values())

    def _spec(self, name: str, *, writing: bool) -> Shared:
        spec = self._declared.get(name)
        if spec is None or (writing and name not in self._shares):
            raise SharedNotDeclared(self._skill, name, self._shares, writing=writing)
        return spec

    def _seen(self, name: str, spec: Shared) -> tuple[str, int, Any]:
        """``(key, version, value)`` of the record as the decision saw it: the card's
        snapshot, or the store's head when the card has none for this key (a call
        settled outside a decision)."""
        key = resolve_key(spec.key, self._state)
        if key is None:
            task = getattr(self._state, "task_id", "?")
            raise UsageError(
                f"shared {name!r} names no record in task {task!r}: the card field its key "
                f"{spec.key!r} reads is empty"
            )
        for snap in getattr(self._state, "shared_snapshots", ()):
            if snap.name == name and snap.key == key:
                return key, snap.version, snap.value
        head = load_record(self._store, name, key)
        return key, head.version, head.value
