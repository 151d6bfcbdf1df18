"""Deleting tasks for good (a privacy request, retention): every trace, audited.

:func:`plan_deletion` says what a deletion would remove, without writing anything
(what ``skillstate delete`` shows before it asks); :func:`delete_tasks` does it. Per
task, in this order:

1. an entry in the audit record ``skillstate:audit:deletions`` (who, why, when, the
   task id, how many versions, events, messages and artifacts) — never the task's
   content: the record outlives the task;
2. :meth:`Store.delete_task`: head, kept versions, events, inbox and lease in one
   atomic step (each backend's own: a transaction, a ``MULTI``, a folder rename), so a
   ``kill -9`` at any instant leaves the task whole or gone, never half a task that
   loads. Sealed values live inside those records and go with them;
3. the artifacts only this task referenced, each removed with
   ``unused_since=`` the start of the deletion, so one another writer put again
   meanwhile (to reference it) stays (:mod:`skillstate.ops.gc` argues the race).
   Artifacts another task or record references stay.

A crash after step 1 leaves the task whole: running the same delete again finishes
it (and records a second entry). A crash after step 2 leaves at most artifacts nothing
references, which ``skillstate gc`` collects. A task a worker holds (a live lease) is
refused: stop or cancel it first.

Fan-out: a task whose children (tasks whose card's ``parent`` names it) are still in
the store is refused unless ``children`` says what to do: ``"delete"`` deletes the
whole tree (children first), ``"detach"`` commits each child with its ``parent``
link cleared, and deletes only the parent.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Literal

from skillstate.audit import Identity, record
from skillstate.errors import TaskNotFound, UsageError
from skillstate.events import Event
from skillstate.ops.refs import store_index
from skillstate.state.diff import make_patch
from skillstate.store.base import HeadInfo, Store, check_task_id, is_reserved

__all__ = [
    "AUDIT_NAME",
    "Children",
    "Deleted",
    "Deletion",
    "delete_tasks",
    "plan_deletion",
    "select_tasks",
]

AUDIT_NAME = "deletions"
"""The audit record deletions are written to: ``skillstate:audit:deletions``."""

Children = Literal["refuse", "delete", "detach"]


@dataclass(frozen=True)
class Deletion:
    """One task a deletion removes, as planned."""

    task_id: str
    versions: int
    """The head's version: how many versions the task had."""
    status: str | None
    children: tuple[str, ...] = ()
    """Its children still in the store (deleted before it, or detached)."""
    detach: bool = False
    """True when the children are detached rather than deleted."""


@dataclass(frozen=True)
class Deleted:
    """What :func:`delete_tasks` removed for one task."""

    task_id: str
    versions: int
    events: int
    messages: int
    artifacts: list[str] = field(default_factory=list)
    """The artifacts removed with it (referenced by nothing else)."""
    detached: list[str] = field(default_factory=list)
    found: bool = True
    """False when the task was already gone (a re-run after a crash)."""


def select_tasks(
    store: Store,
    *,
    status: str | None = None,
    older_than: timedelta | None = None,
    agent: str | None = None,
    now: datetime | None = None,
) -> list[str]:
    """Tasks matching every filter given: card status, last commit older than
    ``older_than``, agent reference. Reserved records are never selected."""
    if status is None and older_than is None and agent is None:
        raise UsageError("select tasks by --status, --older-than or --agent (or name them)")
    if older_than is not None and older_than <= timedelta(0):
        raise UsageError("--older-than must be a positive duration")
    cutoff = (now or datetime.now(timezone.utc)) - older_than if older_than else None
    chosen = []
    for head in store.heads():
        if is_reserved(head.task_id) or head.problem is not None:
            continue
        if status is not None and head.status != status:
            continue
        if agent is not None and head.agent != agent:
            continue
        if cutoff is not None and (head.updated_at is None or head.updated_at >= cutoff):
            continue
        chosen.append(head.task_id)
    return chosen


def plan_deletion(
    store: Store, task_ids: Iterable[str], *, children: Children = "refuse"
) -> list[Deletion]:
    """What deleting ``task_ids`` removes, in the order it would (children first).

    Raises ``TaskNotFound`` for an id that is not in the store, ``UsageError`` for a
    reserved record, a task a worker holds, or one with children and
    ``children="refuse"``. Writes nothing."""
    heads = {h.task_id: h for h in store.heads()}
    kids: dict[str, list[str]] = {}
    for head in heads.values():
        if head.parent is not None:
            kids.setdefault(head.parent, []).append(head.task_id)
    plans: list[Deletion] = []
    seen: set[str] = set()

    def add(task_id: str) -> None:
        if task_id in seen:
            return
        seen.add(task_id)
        head = _head(heads, task_id)
        mine = tuple(sorted(kids.get(task_id, ())))
        if mine and children == "refuse":
            raise UsageError(
                f"task {task_id!r} has {len(mine)} child task(s) in the store "
                f"({', '.join(mine[:3])}{'...' if len(mine) > 3 else ''}): "
                "pass --children delete (the whole tree) or --children detach"
            )
        if children == "delete":
            for child in mine:
                add(child)
        plans.append(
            Deletion(task_id, head.version or 0, head.status, mine, detach=children == "detach")
        )

    for task_id in task_ids:
        add(task_id)
    return plans


def _head(heads: dict[str, HeadInfo], task_id: str) -> HeadInfo:
    check_task_id(task_id)
    if is_reserved(task_id):
        raise UsageError(f"{task_id!r} is one of skillstate's own records, not a task")
    head = heads.get(task_id)
    if head is None:
        raise TaskNotFound(task_id)
    if head.lease is not None and head.lease.live():
        raise UsageError(
            f"task {task_id!r} is held by worker {head.lease.worker!r}: "
            "cancel it or wait for the lease to end, then delete"
        )
    return head


def delete_tasks(store: Store, plans: Sequence[Deletion], *, identity: Identity) -> list[Deleted]:
    """Carry out ``plans`` (from :func:`plan_deletion`), one task after another.

    ``identity.reason`` is required: a deletion cannot be undone, and its audit entry
    says why."""
    if not identity.reason:
        raise UsageError("deleting a task needs a reason (--reason), for the audit record")
    started = datetime.now(timezone.utc)
    # Who references what, read once: a ref is an orphan when the last record holding
    # it is deleted. A writer that references an artifact after this read puts it
    # first, which unused_since=started respects.
    index = store_index(store)
    holders = Counter(ref for refs in index.values() for ref in refs)
    done = []
    for plan in plans:
        mine = index.pop(plan.task_id, set())
        holders.subtract(mine)
        orphans = sorted(ref for ref in mine if holders[ref] <= 0)
        done.append(_delete_one(store, plan, identity, started, orphans))
    return done


def _delete_one(
    store: Store, plan: Deletion, identity: Identity, started: datetime, orphans: list[str]
) -> Deleted:
    task_id = plan.task_id
    try:
        events = len(store.events(task_id))
        messages = len(store.inbox(task_id))
    except TaskNotFound:
        return Deleted(task_id, plan.versions, 0, 0, found=False)
    detached = [_detach(store, c, task_id, identity) for c in plan.children if plan.detach]
    record(
        store,
        AUDIT_NAME,
        {
            "kind": "delete",
            "task": task_id,
            "versions": plan.versions,
            "events": events,
            "messages": messages,
            "artifacts": len(orphans),
            "status": plan.status,
            **({"detached": detached} if detached else {}),
        },
        identity,
    )
    found = store.delete_task(task_id)
    removed = [ref for ref in orphans if store.delete_artifact(ref, unused_since=started)]
    return Deleted(task_id, plan.versions, events, messages, removed, detached, found=found)


def _detach(store: Store, child: str, parent: str, identity: Identity) -> str:
    """Commit ``child`` with its ``parent`` link cleared (compare-and-set on its head)."""
    head = store.load(child)
    state = dict(head.state)
    link = state.get("parent")
    if not isinstance(link, dict) or link.get("task_id") != parent:
        return child
    state["parent"] = None
    state["version"] = head.version + 1
    event = Event(
        task_id=child,
        version=head.version + 1,
        actor="human",
        action={"kind": "detach", "parent": parent},
        patch=make_patch(head.state, state),
        by=identity.by,
        reason=identity.reason,
    )
    store.commit(child, head.version, state, event)
    return child
