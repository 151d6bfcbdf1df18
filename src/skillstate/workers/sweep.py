"""Finding stranded tasks and sending them a message: the safety net under the queue.

A running task is always somebody's: a live lease, or a message in the broker
(:mod:`skillstate.workers.advance`). A task that is ``running`` (or ``created``) with
**no live lease** (none, expired, or held by a process of this host that has exited)
and **no commit for longer than a threshold** looks like nobody's: a bug dropped
its last message. So does a ``waiting`` task (:mod:`skillstate.control.waits`) whose
deadline passed longer than the threshold ago: its requeued message should have woken
it by then. A task waiting before its deadline, or for a signal without a timeout, is
never stranded. Nor is a ``waiting_children`` parent (:mod:`skillstate.workers.children`)
until every child it waits on has ended: with no live lease, and its last child ended
longer than the threshold ago, the child's wake was lost. The sweeper sends it a
message, judged against the store like any other:

* with **no lease**, the sweeper first claims the task under its own name
  (``sweeper@host:s<token>``, for as long as the threshold), checks under that lease
  that the head has not moved, and sends a message that names it (``after``): the
  worker that gets it takes the lease over, as from a slice's continuation. While
  the sweeper's lease lives, the task is somebody's again, so no other sweeper sends
  it another message; a message that was only waiting in a long queue finds the
  sweeper's lease and is dropped, and the sweeper's own runs the task.
* with a **dead worker's lease**, it sends a plain message, which takes the task over
  as a redelivery would (the death is counted towards the dead letter); this
  sweeper does not send that task another one for a threshold's time.

Either way a false alarm (the task's own message was only late) costs a duplicate
message, never a step run twice: one of the two finds the task held or already past
its version and is dropped.
"""

from __future__ import annotations

import logging
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from skillstate.engine.lease import is_dead_local_worker
from skillstate.errors import LeaseHeld, TaskNotFound
from skillstate.store.base import HeadInfo, Store
from skillstate.workers.children import ENDED, WAITING_CHILDREN, ended_at
from skillstate.workers.settings import Message

__all__ = ["SWEEPER", "Stranded", "Sweeper", "requeue_stranded", "rescue", "stranded"]

SWEEPER = "sweeper"
"""The tag of a sweeper's lease name, ``sweeper@host:s<token>``: not a message id, and
not a process (the lease lives its whole TTL, whatever becomes of the sweeper)."""
_MIN_CLAIM = 60.0
"""Seconds a sweeper's lease lives at least (``requeue --stranded --older-than 0``)."""

log = logging.getLogger("skillstate.workers")

_OWNED = frozenset({"running", "created"})
"""Statuses a message must be responsible for (the others wait for nobody, or for a
person: a reply, an approval; never requeued)."""
_WAITING = "waiting"
"""Waiting for a time or a signal: a message is responsible once the deadline passed."""
_RESCUED = _OWNED | {_WAITING, WAITING_CHILDREN}
"""Statuses a sweeper's message may be sent for (checked again under its lease)."""


@dataclass(frozen=True)
class Stranded:
    """A task nobody seems responsible for."""

    task_id: str
    version: int
    status: str
    idle: float
    """Seconds since its last commit (a waiting task's: since its deadline passed)."""
    holder: str | None
    """The lease it was left with (expired, or a dead process's), ``None`` when none."""
    agent: str | None

    def as_json(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "version": self.version,
            "status": self.status,
            "idle_s": round(self.idle, 1),
            "lease_holder": self.holder,
            "agent": self.agent,
        }

    def describe(self) -> str:
        lease = f"lease of {self.holder} dead" if self.holder else "no lease"
        if self.status == WAITING_CHILDREN:
            return f"{self.status}, v{self.version}, {lease}, children ended {self.idle:.0f}s ago"
        if self.status == _WAITING:
            return f"{self.status}, v{self.version}, {lease}, deadline {self.idle:.0f}s ago"
        return f"{self.status}, v{self.version}, {lease}, no commit for {self.idle:.0f}s"


def stranded(store: Store, older_than: float, *, now: datetime | None = None) -> list[Stranded]:
    """Every ``running`` or ``created`` task with no live lease and no commit for
    ``older_than`` seconds (one :meth:`Store.heads` pass), every ``waiting`` one past
    its deadline by as much, and every ``waiting_children`` parent whose children ended
    as long ago."""
    now = now or datetime.now(timezone.utc)
    heads = store.heads()
    found = [found for head in heads if (found := _stranded(head, older_than, now))]
    return found + _parents(store, heads, older_than, now)


def _stranded(head: HeadInfo, older_than: float, now: datetime) -> Stranded | None:
    if head.problem or head.lease_problem or head.version is None or head.updated_at is None:
        return None  # unreadable: for a person (`skillstate doctor`, `unlock`), not a message
    if head.status == _WAITING:
        # Waiting is nobody's work until its deadline: then its message is due.
        if head.wait_until is None:
            return None  # a signal without a timeout: its delivery sends the message
        idle = (now - head.wait_until).total_seconds()
    elif head.status in _OWNED:
        idle = (now - head.updated_at).total_seconds()
    else:
        return None
    if idle < older_than:
        return None
    if _live(head, now):
        return None
    holder = head.lease.worker if head.lease is not None else None
    return Stranded(head.task_id, head.version, str(head.status), idle, holder, head.agent)


def _live(head: HeadInfo, now: datetime) -> bool:
    lease = head.lease
    return lease is not None and lease.expires_at > now and not is_dead_local_worker(lease.worker)


def _parents(
    store: Store, heads: list[HeadInfo], older_than: float, now: datetime
) -> list[Stranded]:
    """``waiting_children`` parents with no live lease whose children all ended
    ``older_than`` seconds ago or more: one card read per such parent, none for a
    parent with a child the heads show unfinished."""
    by_id = {head.task_id: head for head in heads}
    busy = {head.parent for head in heads if head.parent and head.status not in ENDED}
    found = []
    for head in heads:
        if head.status != WAITING_CHILDREN or head.task_id in busy or _live(head, now):
            continue
        if head.problem or head.lease_problem or head.version is None or head.updated_at is None:
            continue
        try:
            card = store.load(head.task_id, verify=False).state
        except TaskNotFound:
            continue
        ended = ended_at(card, by_id)
        if ended is None:
            continue
        idle = (now - max(head.updated_at, ended)).total_seconds()
        if idle >= older_than:
            holder = head.lease.worker if head.lease is not None else None
            found.append(
                Stranded(head.task_id, head.version, WAITING_CHILDREN, idle, holder, head.agent)
            )
    return found


def requeue_stranded(
    store: Store,
    send: Callable[[Message], None],
    older_than: float,
    *,
    queue: str,
    allowed: Callable[[str | None], bool] = lambda _: True,
    skip: Callable[[Stranded], bool] = lambda _: False,
) -> list[Stranded]:
    """Send every stranded task whose agent ``allowed`` accepts (and ``skip`` does not)
    a message on ``queue``; returns those sent. A failed send does not stop the others:
    the first failure is raised afterwards."""
    sent: list[Stranded] = []
    failure: Exception | None = None
    for task in stranded(store, older_than):
        if not allowed(task.agent) or skip(task):
            continue
        try:
            if rescue(store, task, send, queue=queue, hold=max(older_than, _MIN_CLAIM)):
                sent.append(task)
        except Exception as exc:  # kombu's connection errors vary by transport
            failure = failure or exc
    if failure is not None:
        raise failure
    return sent


def rescue(
    store: Store, task: Stranded, send: Callable[[Message], None], *, queue: str, hold: float
) -> bool:
    """Send ``task`` its message (see the module's doc); False when it turned out to be
    somebody's after all (claimed, moved on or finished since it was found)."""
    if task.holder is not None:  # a dead worker's: taken over as a redelivery would
        send(Message(task.task_id, task.version, queue=queue))
        return True
    name = f"{SWEEPER}@{socket.gethostname()}:s{uuid.uuid4().hex[:12]}"
    try:
        store.claim(task.task_id, name, hold)
    except LeaseHeld:
        return False
    try:
        head = store.load(task.task_id, verify=False)
        if head.version != task.version or head.state.get("status") not in _RESCUED:
            store.release(task.task_id, name)
            return False
        send(Message(task.task_id, task.version, queue=queue, after=name))
    except TaskNotFound:  # deleted meanwhile
        store.release(task.task_id, name)
        return False
    except Exception:
        store.release(task.task_id, name)  # nothing was sent: leave it to the next sweep
        raise
    return True


class Sweeper:
    """A worker's sweeper: a daemon thread that looks for stranded tasks every
    ``every`` seconds (jittered, so workers started together do not sweep together)
    until ``stopped`` is set."""

    def __init__(
        self,
        store: Store,
        send: Callable[[Message], None],
        *,
        every: float,
        older_than: float,
        queue: str,
        allowed: Callable[[str | None], bool],
        stopped: threading.Event,
    ) -> None:
        self.store = store
        self.send = send
        self.every = every
        self.older_than = older_than
        self.queue = queue
        self.allowed = allowed
        self.stopped = stopped
        self.rescued = 0
        """Tasks this sweeper has sent a message for since the worker started."""
        self._recent: dict[tuple[str, int], float] = {}
        """(task, version) -> when a plain message went to it: not again for a while."""
        self._thread = threading.Thread(target=self._run, name="skillstate-sweeper", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def sweep(self) -> list[Stranded]:
        """One look: send every stranded task a message, log each as a WARNING."""
        now = time.monotonic()
        memory = max(self.older_than, _MIN_CLAIM)
        self._recent = {k: t for k, t in self._recent.items() if now - t < memory}
        found = requeue_stranded(
            self.store,
            self.send,
            self.older_than,
            queue=self.queue,
            allowed=self.allowed,
            skip=lambda task: (task.task_id, task.version) in self._recent,
        )
        for task in found:
            if task.holder is not None:
                self._recent[task.task_id, task.version] = now
            self.rescued += 1
            log.warning(
                "sweeper: rescued stranded task %s (%s): requeued to %s; %d rescue(s) by this "
                "worker so far. A rescue means a message was lost: please report it.",
                task.task_id,
                task.describe(),
                self.queue,
                self.rescued,
            )
        return found

    def _run(self) -> None:
        while not self.stopped.wait(self.every * random.uniform(0.75, 1.25)):
            try:
                self.sweep()
            except Exception as exc:  # the store or the broker hiccupped: next time
                log.warning("sweeper: could not sweep (%s); trying again later", exc)
