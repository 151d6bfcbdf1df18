"""Moving whole tasks between stores: read one out, write one in (export, import, copy).

A task leaves a store as a :class:`TaskRecords`: its kept checkpoints, every event
(with its JSON Patch and every field the event model has, carried through
``model_dump``/``model_validate`` so fields added later survive the trip), its inbox,
and the bytes of every artifact it references. Leases stay behind: a task arrives
unclaimed. Nothing is unsealed on the way: sealed (``enc:v1:``) values and sealed
artifacts travel as the bytes the source store holds.

It goes in by :func:`write_task`: artifacts first, by content address
(:meth:`~skillstate.store.base.Store.put_artifact`), then the task in one atomic
:meth:`~skillstate.store.base.Store.restore`. A crash in between leaves at worst
artifacts nothing references yet (a garbage collection removes them); the task itself
is whole or absent.

:func:`copy_tasks` runs that path between two stores for many tasks;
:mod:`skillstate.ops.archive` writes and reads it as a file.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from skillstate.errors import ArtifactNotFound, SkillstateError, TaskExists, TaskNotFound
from skillstate.events import Event
from skillstate.store.base import Checkpoint, InboxMessage, Store, check_task_id

__all__ = [
    "CopyOutcome",
    "CopyResult",
    "TaskRecords",
    "copy_tasks",
    "read_task",
    "referenced_refs",
    "renamed",
    "same_task",
    "write_task",
]

_REF = re.compile(r"sha256:[0-9a-f]{64}")


@dataclass(frozen=True)
class TaskRecords:
    """Everything of one task that moves between stores."""

    task_id: str
    checkpoints: list[Checkpoint]
    """Its kept versions, oldest first; the last is the head."""
    events: list[Event]
    """Every event, oldest first (a pruned version's without its patch)."""
    inbox: list[InboxMessage]
    artifacts: dict[str, bytes] = field(default_factory=dict)
    """The bytes of each artifact it references that the source store holds, by ref."""
    missing: list[str] = field(default_factory=list)
    """Refs it mentions that the source store has no artifact under (left as they are)."""

    @property
    def version(self) -> int:
        return self.checkpoints[-1].version


def read_task(store: Store, task_id: str) -> TaskRecords:
    """Read ``task_id`` out of ``store`` whole (``TaskNotFound`` when it is not there).

    Every kept checkpoint is rebuilt and checked against its checksum as it is read,
    so a damaged task is ``StateCorrupted`` here rather than a damaged copy elsewhere.
    """
    check_task_id(task_id)
    head = store.load(task_id)
    points = [
        head if info.version == head.version else store.checkpoint(task_id, info.version)
        for info in store.checkpoints(task_id)
        if info.version <= head.version
    ]
    if not points or points[-1].version != head.version:
        points.append(head)
    events = store.events(task_id)
    inbox = store.inbox(task_id)
    artifacts: dict[str, bytes] = {}
    missing: list[str] = []
    for ref in sorted(referenced_refs(points, events, inbox)):
        try:
            artifacts[ref] = store.get_artifact(ref)
        except ArtifactNotFound:
            missing.append(ref)
    return TaskRecords(task_id, points, events, inbox, artifacts, missing)


def referenced_refs(
    checkpoints: Iterable[Checkpoint], events: Iterable[Event], inbox: Iterable[InboxMessage]
) -> set[str]:
    """Every artifact ref (``sha256:<hex>``) named anywhere in the task's records."""
    found: set[str] = set()
    for point in checkpoints:
        _collect(point.state, found)
    for event in events:
        _collect(event.model_dump(mode="json"), found)
    for message in inbox:
        _collect(message.body, found)
    return found


def _collect(value: Any, found: set[str]) -> None:
    if isinstance(value, str):
        if "sha256:" in value:
            found.update(_REF.findall(value))
    elif isinstance(value, dict):
        for item in value.values():
            _collect(item, found)
    elif isinstance(value, list | tuple):
        for item in value:
            _collect(item, found)


def renamed(records: TaskRecords, new_id: str) -> TaskRecords:
    """The same task under ``new_id``: each state's ``task_id`` and each event's.

    Other mentions of the old id (a child's ``parent``, text in the card) are data
    and stay as they are.
    """
    check_task_id(new_id)
    points = [
        replace(point, task_id=new_id, state={**point.state, "task_id": new_id})
        for point in records.checkpoints
    ]
    events = [event.model_copy(update={"task_id": new_id}) for event in records.events]
    return replace(records, task_id=new_id, checkpoints=points, events=events)


def write_task(store: Store, records: TaskRecords, *, overwrite: bool = False) -> int:
    """Artifacts by content address, then the task in one atomic restore; the head version.

    ``TaskExists`` (nothing written, not even artifacts) when the task is there and
    not ``overwrite``. An artifact whose bytes hash to another ref than its name (one
    re-sealed after a key rotation) is stored under its hash, which is all a store can
    do; the task then names a ref the target does not hold, as ``doctor`` reports.
    """
    if not overwrite and _exists(store, records.task_id):
        raise TaskExists(
            f"task {records.task_id!r} already exists in {store.url}; nothing was written "
            "(import it --as another id, or --overwrite it)"
        )
    for data in records.artifacts.values():
        store.put_artifact(data)
    return store.restore(
        records.task_id, records.checkpoints, records.events, records.inbox, overwrite=overwrite
    )


def _exists(store: Store, task_id: str) -> bool:
    try:
        store.load(task_id, verify=False)
    except TaskNotFound:
        return False
    return True


def same_task(store: Store, records: TaskRecords) -> bool:
    """Whether ``store`` holds ``records``' task at the same head, byte for byte."""
    try:
        head = store.load(records.task_id)
    except TaskNotFound:
        return False
    return head.version == records.version and head.state == records.checkpoints[-1].state


CopyOutcome = Literal["copied", "skipped", "failed"]


@dataclass
class CopyResult:
    """What :func:`copy_tasks` did, task by task."""

    copied: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    """Already in the target at the same head (a re-run after a crash skips them)."""
    failed: dict[str, str] = field(default_factory=dict)
    """Task id -> why, in one line."""


def copy_tasks(
    source: Store,
    target: Store,
    task_ids: Iterable[str],
    *,
    overwrite: bool = False,
    progress: Callable[[str, CopyOutcome], None] | None = None,
) -> CopyResult:
    """Copy each task from ``source`` to ``target`` (:func:`read_task`, :func:`write_task`).

    Idempotent: a task already in the target at the same head is skipped, so running
    it again after a crash finishes the job without duplicating anything (each task is
    whole or absent in the target). A task in the target at another head fails (one
    line) unless ``overwrite``. One task failing does not stop the others.
    """
    result = CopyResult()
    for task_id in task_ids:
        outcome: CopyOutcome
        try:
            records = read_task(source, task_id)
            if same_task(target, records):
                outcome = "skipped"
                result.skipped.append(task_id)
            else:
                write_task(target, records, overwrite=overwrite)
                outcome = "copied"
                result.copied.append(task_id)
        except SkillstateError as exc:
            outcome = "failed"
            result.failed[task_id] = " ".join(str(exc).split())
        if progress is not None:
            progress(task_id, outcome)
    return result


def select_tasks(store: Store, *, status: str | None = None) -> Iterator[str]:
    """Ids of the store's tasks, those whose card's status is ``status`` when given."""
    for head in store.heads():
        if status is None or head.status == status:
            yield head.task_id
