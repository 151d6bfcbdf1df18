"""Which artifacts a task (or the whole store) references: what delete and gc keep.

An artifact is referenced by its ``sha256:<hex>`` ref appearing anywhere in a
record's JSON: the card (evidence, tool results, extracted files), its events, its
inbox, and the reserved records (memory scopes, shared records, schedules) that are
stored as tasks too. The scan is by shape, not by field name, so a ref kept in a
field added later still counts; a string that only looks like a ref (a definition
hash) keeps an artifact that might have been collected: the safe side.

Every *kept version* is covered, not only the head, since a rollback restores it:
a version is a snapshot plus the deltas after it, the deltas are the kept versions'
event patches (:meth:`Store.events` returns them), so reading the head, the events
and each kept snapshot sees every ref any kept version holds.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from skillstate.errors import TaskNotFound
from skillstate.store.base import Store

__all__ = ["REF", "refs_in", "store_index", "store_refs", "task_refs"]

REF = re.compile(r"sha256:[0-9a-f]{64}")
"""The shape of an artifact ref (:func:`skillstate.store.base.artifact_ref`)."""


def refs_in(value: Any) -> Iterator[str]:
    """Every artifact ref in a JSON value's strings (keys included)."""
    if isinstance(value, str):
        yield from REF.findall(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from refs_in(key)
            yield from refs_in(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from refs_in(item)


def task_refs(store: Store, task_id: str) -> set[str]:
    """The refs ``task_id`` holds in any kept version, event or inbox message.

    A task deleted meanwhile references nothing (``set()``)."""
    found: set[str] = set()
    try:
        found.update(refs_in(store.load(task_id, verify=False).state))
        for event in store.events(task_id):
            found.update(refs_in(event.model_dump(mode="json")))
        for info in store.checkpoints(task_id):
            if info.snapshot:
                found.update(refs_in(store.checkpoint(task_id, info.version).state))
        for message in store.inbox(task_id):
            found.update(refs_in(message.body))
    except TaskNotFound:
        return set()
    return found


def store_index(store: Store) -> dict[str, set[str]]:
    """The refs of every task and reserved record, by record id."""
    return {task_id: task_refs(store, task_id) for task_id in _every_record(store)}


def store_refs(store: Store, *, skip: Iterable[str] = ()) -> set[str]:
    """The refs every task and reserved record of the store holds, but those in ``skip``."""
    left_out = set(skip)
    found: set[str] = set()
    for task_id in _every_record(store):
        if task_id not in left_out:
            found |= task_refs(store, task_id)
    return found


def _every_record(store: Store) -> list[str]:
    """Task ids and reserved records alike: ``tasks()`` leaves the reserved ones out on
    some paths, ``heads()`` lists what is stored."""
    return sorted({h.task_id for h in store.heads()} | set(store.tasks()))
