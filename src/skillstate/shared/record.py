"""Where a shared record lives: one reserved record in the store, committed and audited
like a card.

Each record is ``skillstate:shared:<name>:<key>`` (``skillstate log
skillstate:shared:case:C-17`` prints its history), a plain JSON document::

    {"task_id": ..., "version": N, "kind": "skillstate.shared", "name": "case",
     "key": "C-17", "value": {...}}

written only with :meth:`~skillstate.store.base.Store.commit`, the store's
compare-and-set, so every backend keeps it with nothing new: a write names the version
it expects (the one the writing step's decision saw) and fails with ``StaleState`` when
another task wrote first. Each write's event names the task, its version (the
``tag``), the skill and the step: the audit a resumed task probes to learn whether its
write landed before a crash.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from skillstate.errors import StaleState, StateCorrupted, TaskNotFound
from skillstate.events import Event
from skillstate.shared.declare import check_key, check_name
from skillstate.shared.records import SharedWrite
from skillstate.state.diff import make_patch
from skillstate.store.base import RESERVED, Store

__all__ = [
    "KIND",
    "PREFIX",
    "RecordHead",
    "landed",
    "load_record",
    "parse_id",
    "record_id",
    "record_ids",
    "write_record",
]

PREFIX = f"{RESERVED}shared:"
"""The ids shared records are stored under: ``skillstate:shared:<name>:<key>``."""
KIND = "skillstate.shared"
WRITE = "shared_write"
"""The action kind of a write's event in the record's log."""


def record_id(name: str, key: str) -> str:
    """The store id of record ``name`` keyed ``key`` (``skillstate:shared:case:C-17``)."""
    return f"{PREFIX}{check_name(name)}:{check_key(key)}"


def parse_id(rid: str) -> tuple[str, str]:
    """``(name, key)`` of a record id (``skillstate:shared:case:C-17``)."""
    name, _, key = rid[len(PREFIX) :].partition(":")
    return check_name(name), check_key(key)


def record_ids(store: Store) -> list[str]:
    """Every shared record in the store, sorted."""
    return sorted(t for t in store.tasks() if t.startswith(PREFIX))


@dataclass(frozen=True)
class RecordHead:
    """A record's head: its version and value (``None`` at version 0: never written)."""

    name: str
    key: str
    version: int
    value: Any
    writer: str | None
    """``task@version`` whose write made this version."""
    document: dict[str, Any] | None


def load_record(store: Store, name: str, key: str) -> RecordHead:
    """The head of record ``name``/``key`` (version 0 when nobody wrote it yet). A
    document that does not read as a shared record is ``StateCorrupted``; nothing is
    written over it."""
    rid = record_id(name, key)
    try:
        head = store.load(rid)
    except TaskNotFound:
        return RecordHead(name, key, 0, None, None, None)
    doc = head.state
    if doc.get("kind") != KIND or doc.get("name") != name or doc.get("key") != key:
        raise StateCorrupted(rid, head.version, f"it is not a {KIND} record {name}:{key}")
    writer = doc.get("writer")
    return RecordHead(
        name, key, head.version, doc.get("value"), writer if isinstance(writer, str) else None, doc
    )


def write_record(store: Store, write: SharedWrite, *, task: str) -> int:
    """Commit ``write`` as the version after ``write.base``; returns the new version.
    Raises ``StaleState`` when the record moved from ``base`` (another task wrote)."""
    rid = record_id(write.name, write.key)
    head = load_record(store, write.name, write.key)
    if head.version != write.base:
        raise StaleState(rid, write.base, head.version)
    version = write.base + 1
    new = {
        "task_id": rid,
        "version": version,
        "kind": KIND,
        "name": write.name,
        "key": write.key,
        "writer": write.tag,
        "value": write.value,
    }
    action = {
        "kind": WRITE,
        "task": task,
        "tag": write.tag,
        "skill": write.skill,
        "step": write.step,
        "base": write.base,
    }
    event = Event(
        task_id=rid,
        version=version,
        actor="runtime",
        action=action,
        step_id=write.step,
        skill=write.skill,
        patch=make_patch(head.document or {}, new),
    )
    return store.commit(rid, write.base, new, event)


def landed(store: Store, write: SharedWrite) -> int | None:
    """The record version ``write`` made, if it reached the record (its tag is in the
    events after ``base``); ``None`` if it did not."""
    try:
        events = store.events(record_id(write.name, write.key), since=write.base)
    except TaskNotFound:
        return None
    for event in events:
        if event.action.get("kind") == WRITE and event.action.get("tag") == write.tag:
            return event.version
    return None
