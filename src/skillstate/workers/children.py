"""Child tasks on the workers: which messages a fan-out needs, and when (issue 28).

A parent that spawns children (:mod:`skillstate.fanout`) is run by a worker with
``Runtime(children="dispatch")``: its slice stops ``waiting_children`` and the children
are ordinary tasks, each advanced by any worker from its own messages. The store stays
the only truth; these messages keep every task somebody's:

* **dispatch**: the parent's slice, while it still holds its lease, sends one message
  to each child it waits on that exists, has not ended and has no live lease (a
  redelivered parent message sends again those nobody holds: a duplicate is dropped).
* **the wake**: a message that leaves a child ended (completed, failed, cancelled),
  or finds it ended (its worker was killed between the child's last commit and the
  wake), sends the parent a message, once every sibling the parent waits on has
  ended. Each child looks *after* its own terminal commit, so whichever ends last
  sees the others ended: at least one wake is sent, and rarely more (duplicates find
  the parent joined, or held, and are dropped).
* **the join**: a message for a ``waiting_children`` parent whose children all ended
  is not stale, whatever version it names; its slice runs the join in the run loop
  (``Children.settle``: one commit, fenced by the lease, compare-and-set: once) and
  goes on.
* **a cancelled parent**: the commit that took its cancel posted one to each child it
  waited on; the children nobody holds are sent a message so they take it now.
* **after releasing**: a parent slice that ended ``waiting_children`` looks again once
  it has released its lease: a child that ended meanwhile sent its wake while the
  parent was held, and that wake was dropped.

The sweeper (:mod:`skillstate.workers.sweep`) covers a lost message: a
``waiting_children`` parent with no live lease whose children have all ended, for
longer than its threshold, is sent a message (:func:`ended_at`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any

from skillstate.engine.lease import is_dead_local_worker
from skillstate.errors import TaskNotFound
from skillstate.store.base import HeadInfo, Store
from skillstate.workers.settings import Message

__all__ = ["ENDED", "WAITING_CHILDREN", "dispatch", "ended_at", "follow_up", "ready_to_join"]

log = logging.getLogger("skillstate.workers")

WAITING_CHILDREN = "waiting_children"
ENDED = frozenset({"completed", "failed", "cancelled"})
"""A child's statuses the join takes as its end."""
Enqueue = Callable[[Message, float], None]

_MAY_HAVE_ENDED = frozenset({"completed", "failed", "cancelled", "dead_letter", "stale"})
"""Outcomes after which the message's task may be an ended child: its parent may be due
a wake ("stale": a redelivery finding the child already ended)."""


def waited_on(card: Mapping[str, Any]) -> list[str]:
    """The ids of the children a stored card waits on (``pending`` in its ``children``),
    oldest first."""
    records = card.get("children")
    if not isinstance(records, list):
        return []
    return [
        record["task_id"]
        for record in records
        if isinstance(record, dict)
        and record.get("status", "pending") == "pending"
        and isinstance(record.get("task_id"), str)
    ]


def _status(store: Store, task_id: str) -> str | None:
    try:
        status = store.load(task_id, verify=False).state.get("status")
    except TaskNotFound:
        return None
    return status if isinstance(status, str) else None


def all_ended(store: Store, card: Mapping[str, Any]) -> bool:
    """Whether every child ``card`` waits on has ended (a child not created yet has
    not). Newest first: the children spawned last are the likeliest to be running, so
    a child that ends early answers after a read or two, not one per sibling."""
    return all(_status(store, child) in ENDED for child in reversed(waited_on(card)))


def ready_to_join(store: Store, card: Mapping[str, Any]) -> bool:
    """Whether a stored card is a parent whose join is due: ``waiting_children`` with
    every child it waits on ended. A message for it is never stale."""
    return card.get("status") == WAITING_CHILDREN and all_ended(store, card)


def dispatch(store: Store, parent: str, queue: str, enqueue: Enqueue) -> tuple[int, int]:
    """Send a message to each child ``parent`` waits on that exists, has not ended and
    has no live lease. Called by the parent's slice under its lease, so that until its
    children hold their own, somebody holds the fan-out. Returns (sent, not created
    yet): the run loop creates missing children before it stops, so the second is 0
    unless a child was deleted behind its back."""
    card = store.load(parent, verify=False).state
    sent = missing = 0
    now = datetime.now(timezone.utc)
    for child in waited_on(card):
        try:
            head = store.load(child, verify=False)
        except TaskNotFound:
            missing += 1
            continue
        if head.state.get("status") in ENDED:
            continue
        lease = store.lease(child)
        if lease is not None and lease.expires_at > now and not is_dead_local_worker(lease.worker):
            continue  # its worker carries on; a dead one's message comes back by itself
        enqueue(Message(child, head.version, queue=queue), 0.0)
        sent += 1
    if missing:
        log.warning("task %s: %d child task(s) it waits on do not exist", parent, missing)
    return sent, missing


def follow_up(store: Store, message: Message, kind: str, enqueue: Enqueue) -> str:
    """After a message's outcome ``kind`` (its lease released): the wake a parent is
    due, if any. Returns what was sent, for the worker's log ("" for nothing)."""
    if kind == WAITING_CHILDREN:
        # Children that ended while this slice held the parent sent wakes that found it
        # held, and were dropped: the parent's own message, looked for after releasing.
        head = _head(store, message.task_id)
        if head is not None and ready_to_join(store, head[1]):
            enqueue(Message(message.task_id, head[0], queue=message.queue), 0.0)
            return "; its children had ended: requeued for the join"
        return ""
    if kind in _MAY_HAVE_ENDED:
        parent = wake(store, message.task_id, message.queue, enqueue)
        note = f"; woke parent {parent}" if parent else ""
        if kind == "cancelled":
            # The cancel's commit posted a cancel to each unfinished child
            # (engine.family): they take it when they next run, so they get a message now.
            sent, _ = dispatch(store, message.task_id, message.queue, enqueue)
            note += f"; sent the cancel on to {sent} child task(s)" if sent else ""
        return note
    return ""


def wake(store: Store, child: str, queue: str, enqueue: Enqueue) -> str | None:
    """Send ``child``'s parent a message if ``child`` has ended and so has every
    sibling the parent waits on; returns the parent's id when one was sent."""
    head = _head(store, child)
    if head is None or head[1].get("status") not in ENDED:
        return None
    link = head[1].get("parent")
    parent = link.get("task_id") if isinstance(link, dict) else None
    if not isinstance(parent, str):
        return None
    found = _head(store, parent)
    if found is None or not ready_to_join(store, found[1]):
        return None
    enqueue(Message(parent, found[0], queue=queue), 0.0)
    return parent


def _head(store: Store, task_id: str) -> tuple[int, dict[str, Any]] | None:
    try:
        head = store.load(task_id, verify=False)
    except TaskNotFound:
        return None
    return head.version, head.state


def ended_at(card: Mapping[str, Any], heads: Mapping[str, HeadInfo]) -> datetime | None:
    """When the last child a ``waiting_children`` card waits on ended (its last commit),
    ``None`` while one has not. A child missing from ``heads`` (not created: the parent's
    worker died between its spawn and the children's creation) needs the parent to run
    too, so it counts as ended. ``heads`` are one :meth:`Store.heads` pass, by task id."""
    last: datetime | None = None
    for child in waited_on(card):
        info = heads.get(child)
        if info is None:
            continue
        if info.status not in ENDED or info.updated_at is None:
            return None
        last = info.updated_at if last is None else max(last, info.updated_at)
    return last if last is not None else datetime.min.replace(tzinfo=timezone.utc)
