"""Where schedules live: one record in the store, committed and audited like a card.

Every beat process and every ``skillstate schedule`` command reads the same store, so
that is where the schedules are kept: the record ``skillstate:schedules``, a plain
JSON document (``{"kind": "skillstate.schedules", "schedules": {NAME: {...}}}``)
written with :meth:`~skillstate.store.base.Store.commit`, the store's
compare-and-set. No store needs anything new for it (the LangGraph saver keeps its
documents the same way): two people adding schedules at once both get theirs (the
loser of the compare-and-set reads the record again and retries), and each change
is an event with its JSON Patch and who made it (``skillstate log
skillstate:schedules``). The record has no ``status``: the sweeper and the workers
never take it for a task.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from skillstate._validation import first_error
from skillstate.audit import who
from skillstate.control.schedules import Schedule
from skillstate.errors import (
    Conflict,
    ScheduleNotFound,
    StaleState,
    StateCorrupted,
    TaskNotFound,
    UsageError,
)
from skillstate.events import Event
from skillstate.state.diff import make_patch
from skillstate.store.base import RESERVED, Store

__all__ = ["KIND", "REGISTRY", "Registry", "add_schedule", "load_registry", "remove_schedule"]

REGISTRY = f"{RESERVED}schedules"
"""The id the registry is stored under: reserved, no task is created there (and task
lists leave it out)."""
KIND = "skillstate.schedules"
_ATTEMPTS = 20
"""Commits of one change before giving up on a record others keep changing."""


@dataclass(frozen=True)
class Registry:
    """The schedules as one version of the record holds them."""

    version: int
    """The record's version (0: no schedule was ever registered)."""
    schedules: dict[str, Schedule] = field(default_factory=dict)


def load_registry(store: Store) -> Registry:
    """The stored schedules; an empty registry when none was ever added.

    A record that does not read as schedules is ``StateCorrupted`` (nothing is
    written over it: ``skillstate log skillstate:schedules`` shows its history)."""
    return _parse(*_head(store))


def add_schedule(store: Store, schedule: Schedule) -> int:
    """Register ``schedule``; its name must be new. Returns the record's version."""

    def change(schedules: dict[str, Schedule]) -> dict[str, Any]:
        if schedule.name in schedules:
            raise UsageError(
                f"schedule {schedule.name!r} exists; remove it first "
                f"(skillstate schedule --remove {schedule.name}) or choose another --name"
            )
        schedules[schedule.name] = schedule
        return {"kind": "schedule_add", "name": schedule.name, "by": schedule.created_by}

    return _change(store, change)


def remove_schedule(store: Store, name: str, *, by: str) -> Schedule:
    """Unregister ``name`` (its tasks stay); returns the schedule removed."""
    removed: list[Schedule] = []

    def change(schedules: dict[str, Schedule]) -> dict[str, Any]:
        if name not in schedules:
            raise ScheduleNotFound(name, store.url)
        removed[:] = [schedules.pop(name)]
        return {"kind": "schedule_remove", "name": name, "by": by}

    _change(store, change)
    return removed[0]


def _change(store: Store, change: Callable[[dict[str, Schedule]], dict[str, Any]]) -> int:
    """Commit what ``change`` makes of the schedules, again on a record that moved."""
    for _ in range(_ATTEMPTS):
        version, doc = _head(store)
        schedules = dict(_parse(version, doc).schedules)
        action = change(schedules)
        new = _document(version + 1, schedules)
        event = Event(
            task_id=REGISTRY,
            version=version + 1,
            actor="human",
            action=action,
            patch=make_patch(doc or {}, new),
            **who("human"),
        )
        try:
            return store.commit(REGISTRY, version, new, event)
        except StaleState:
            continue  # someone else changed the schedules: apply this change to theirs
    raise Conflict(
        f"the schedules kept changing under {_ATTEMPTS} attempts to commit; nothing was written"
    )


def _head(store: Store) -> tuple[int, dict[str, Any] | None]:
    try:
        head = store.load(REGISTRY)
    except TaskNotFound:
        return 0, None
    return head.version, head.state


def _parse(version: int, doc: dict[str, Any] | None) -> Registry:
    if doc is None:
        return Registry(0)
    raw = doc.get("schedules")
    if doc.get("kind") != KIND or not isinstance(raw, dict):
        raise StateCorrupted(REGISTRY, version, f"it is not a {KIND} record")
    schedules: dict[str, Schedule] = {}
    for name, body in raw.items():
        try:
            schedule = Schedule.model_validate(body)
        except ValidationError as exc:
            raise StateCorrupted(
                REGISTRY, version, f"schedule {name!r}: {first_error(exc)}"
            ) from None
        if schedule.name != name:
            raise StateCorrupted(
                REGISTRY, version, f"schedule {name!r} names itself {schedule.name!r}"
            )
        schedules[name] = schedule
    return Registry(version, schedules)


def _document(version: int, schedules: dict[str, Schedule]) -> dict[str, Any]:
    return {
        "task_id": REGISTRY,
        "version": version,
        "kind": KIND,
        "schedules": {name: schedules[name].model_dump(mode="json") for name in sorted(schedules)},
    }
