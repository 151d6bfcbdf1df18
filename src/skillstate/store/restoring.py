"""Restoring a whole task at once, shared by every backend's ``Store.restore``.

:meth:`~skillstate.store.base.Store.restore` writes a task that came from elsewhere
(``skillstate import``, ``skillstate copy``): its kept checkpoints, every event and
its inbox, in one atomic step of the backend, so a crash at any instant leaves the
task whole or absent. Leases are not restored: a task arrives unclaimed.

:func:`plan_restore` does the work that does not depend on the backend: it checks
what it is given as loading would (each state says which task and version it is, a
kept version has its event, versions and inbox numbers have no repeat), and encodes
every body in the form the backends store (:func:`~skillstate.store.chain.dumps`).
A kept version whose previous version is kept too, and whose event's patch turns
that one into it, is stored as a delta (the revlog rule of
:func:`~skillstate.store.chain.take_snapshot` still decides when a snapshot is due);
every other kept version is a snapshot. Every version carries its
:func:`~skillstate.store.chain.sorted_digest`, the head the
:func:`~skillstate.store.chain.digest` of its text: what was restored loads and
verifies like anything committed.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

import jsonpatch

from skillstate.errors import StoreError
from skillstate.events import Event
from skillstate.store.base import Checkpoint, InboxMessage, check_task_id
from skillstate.store.chain import check_head, digest, dumps, sorted_digest
from skillstate.store.inbox import encode_message

__all__ = ["RestoreEvent", "RestoreMessage", "RestorePlan", "RestoreRow", "plan_restore"]


@dataclass(frozen=True)
class RestoreRow:
    """One kept version, ready to write."""

    version: int
    snapshot: str | None
    """The state whole (a snapshot version), else ``None``."""
    patch: str | None
    """The delta (a delta version), or the event's patch kept for the log (a snapshot)."""
    digest: str
    created_at: datetime


@dataclass(frozen=True)
class RestoreEvent:
    """One event as stored: its JSON without the patch (kept versions hold the patch;
    a version that is not kept has none, as after a prune)."""

    version: int
    text: str


@dataclass(frozen=True)
class RestoreMessage:
    """One inbox message as stored."""

    seq: int
    kind: str
    body: str
    """Compact JSON text (:func:`~skillstate.store.inbox.encode_message`)."""
    at: datetime


@dataclass
class RestorePlan:
    """What :func:`plan_restore` decided to write."""

    task_id: str
    version: int
    """The head version."""
    head: str
    head_digest: str
    updated_at: datetime
    chain_len: int = 0
    chain_bytes: int = 0
    rows: list[RestoreRow] = field(default_factory=list)
    events: list[RestoreEvent] = field(default_factory=list)
    inbox: list[RestoreMessage] = field(default_factory=list)

    def kept(self) -> set[int]:
        return {row.version for row in self.rows}


def plan_restore(
    task_id: str,
    checkpoints: Sequence[Checkpoint],
    events: Sequence[Event],
    inbox: Sequence[InboxMessage],
    *,
    max_chain: int,
) -> RestorePlan:
    """Check and encode a task to restore; ``StoreError`` (nothing to write) when it
    does not hold together."""
    check_task_id(task_id)
    if not checkpoints:
        raise StoreError(f"cannot restore task {task_id!r}: it has no checkpoint")
    ordered = sorted(checkpoints, key=lambda c: c.version)
    by_event = {}
    for event in events:
        if event.task_id != task_id:
            raise StoreError(f"cannot restore task {task_id!r}: an event says {event.task_id!r}")
        if event.version in by_event:
            raise StoreError(f"cannot restore task {task_id!r}: two events of {event.version}")
        by_event[event.version] = event
    head = ordered[-1]
    previous: Checkpoint | None = None
    plan: RestorePlan | None = None
    rows: list[RestoreRow] = []
    chain_len = chain_bytes = 0
    for point in ordered:
        _check_point(task_id, point, previous, by_event)
        text = _dumps(task_id, point.state)
        event = by_event[point.version]
        patch = _dumps(task_id, event.patch) if event.patch else None
        delta = (
            previous is not None
            and previous.version == point.version - 1
            and patch is not None
            and chain_len + 1 <= max_chain
            and chain_bytes + len(patch) < len(text)
            and _applies(previous.state, event.patch, point.state)
        )
        if delta:
            chain_len, chain_bytes = chain_len + 1, chain_bytes + len(patch or "")
        else:
            chain_len = chain_bytes = 0
        rows.append(
            RestoreRow(
                point.version,
                None if delta else text,
                patch,
                sorted_digest(point.state),
                point.created_at,
            )
        )
        previous = point
    head_text = _dumps(task_id, head.state)
    plan = RestorePlan(
        task_id=task_id,
        version=head.version,
        head=head_text,
        head_digest=digest(head_text),
        updated_at=head.created_at,
        chain_len=chain_len,
        chain_bytes=chain_bytes,
        rows=rows,
    )
    for number in sorted(by_event):
        event = by_event[number]
        if number > head.version or number < 1:
            raise StoreError(
                f"cannot restore task {task_id!r}: event {number} is past the head {head.version}"
            )
        try:
            text = event.model_dump_json(exclude={"patch"}, exclude_none=True)
        except ValueError as exc:
            raise StoreError(f"cannot restore task {task_id!r}: event {number}: {exc}") from exc
        plan.events.append(RestoreEvent(number, text))
    for seq, message in enumerate(sorted(inbox, key=lambda m: m.seq), 1):
        if message.seq != seq:
            raise StoreError(
                f"cannot restore task {task_id!r}: inbox message {message.seq} where {seq} "
                "was expected (messages are numbered 1, 2, 3... without a gap)"
            )
        body = encode_message(task_id, message.kind, message.body)
        plan.inbox.append(RestoreMessage(seq, message.kind, body, message.at))
    return plan


def _check_point(
    task_id: str, point: Checkpoint, previous: Checkpoint | None, events: dict[int, Event]
) -> None:
    if point.task_id != task_id:
        raise StoreError(f"cannot restore task {task_id!r}: a checkpoint says {point.task_id!r}")
    if previous is not None and previous.version == point.version:
        raise StoreError(f"cannot restore task {task_id!r}: two checkpoints of {point.version}")
    if point.version not in events:
        raise StoreError(
            f"cannot restore task {task_id!r}: version {point.version} is kept but has no event"
        )
    try:
        check_head(task_id, point.version, point.state)
    except Exception as exc:
        raise StoreError(f"cannot restore task {task_id!r}: {exc}") from exc


def _applies(before: object, patch: list[dict[str, object]], after: object) -> bool:
    """Whether ``patch`` rebuilds ``after`` from ``before`` (else: store a snapshot)."""
    try:
        rebuilt = jsonpatch.apply_patch(copy.deepcopy(before), patch)
    except (ValueError, TypeError, jsonpatch.JsonPatchException, jsonpatch.JsonPointerException):
        return False
    return bool(sorted_digest(rebuilt) == sorted_digest(after))


def _dumps(task_id: str, value: object) -> str:
    try:
        return dumps(value)
    except (TypeError, ValueError) as exc:
        raise StoreError(f"cannot restore task {task_id!r}: not JSON ({exc})") from exc
