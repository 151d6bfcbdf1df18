"""One tick of a schedule: create its task (at most once) and send it to the workers.

Beat calls :func:`fire` when a schedule is due (:mod:`skillstate.workers.beat`). The
tick's task id comes from the schedule and the tick's slot
(:meth:`~skillstate.control.schedules.Schedule.task_id`), and creating it is the
store's compare-and-set on version 0: whoever fires the same tick again (beat
restarted in the same minute, a catch-up on start, a second beat by mistake) finds
the task there and creates nothing. So a tick makes at most one task, however often
it fires.

Creating and sending are two steps, and beat can die between them. A tick that
finds its task still at version 1, ``created``, with no lease, sends it again:
nobody has started it, and a duplicate message is dropped by the workers (one of
the two finds the task held or past its version). A task whose tick never fires
again (beat stayed down past the next tick) is found by the workers' sweeper,
which requeues ``created`` tasks nobody holds after ``--sweep-after`` seconds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from skillstate.errors import StaleState, TaskNotFound
from skillstate.workers.settings import Message

if TYPE_CHECKING:
    from skillstate.control.schedules import Schedule
    from skillstate.engine.agent import Agent
    from skillstate.store.base import Store

__all__ = ["Tick", "fire"]

log = logging.getLogger("skillstate.schedules")

TickKind = Literal["created", "resent", "done", "no_slot"]


@dataclass(frozen=True)
class Tick:
    """What one firing did."""

    kind: TickKind
    """``created``: the task was made and sent; ``resent``: it existed, unstarted and
    unheld, and was sent again; ``done``: it existed and was somebody's already;
    ``no_slot``: the schedule has no tick at or before now since it was created."""
    task_id: str | None = None
    version: int | None = None

    def describe(self) -> str:
        return {
            "created": f"created {self.task_id} and sent it",
            "resent": f"{self.task_id} existed unstarted and unheld: sent it again",
            "done": f"{self.task_id} exists (this tick ran already): nothing to do",
            "no_slot": "no tick since the schedule was created",
        }[self.kind]


def fire(
    store: Store,
    schedule: Schedule,
    agent: Agent[Any],
    now: datetime,
    send: Callable[[Message], None],
) -> Tick:
    """The tick of ``schedule`` that ``now`` belongs to: its task created and sent once.

    ``send`` enqueues a message (the broker); it is called after the task is
    committed, never before. Raises what the store, the agent's card or ``send``
    raise (a tick that fails is logged by beat; see the module's doc for what
    picks it up)."""
    from skillstate.engine.runtime import Runtime

    slot = schedule.slot(now)
    if slot is None:
        return Tick("no_slot")
    task_id = schedule.task_id(slot)
    # No lease: creating is one compare-and-set on version 0 (nothing runs), and a
    # beat killed while holding one would block the tick's next firing for its TTL.
    runtime = Runtime(agent, store, lease=False)
    try:
        created = runtime.start(task_id, **schedule.fields)
    except StaleState:
        return _existing(store, schedule, task_id, send)
    send(Message(task_id, created.version, queue=schedule.queue))
    return Tick("created", task_id, created.version)


def _existing(
    store: Store, schedule: Schedule, task_id: str, send: Callable[[Message], None]
) -> Tick:
    """The tick's task exists: send it again only if nobody has ever started it."""
    try:
        head = store.load(task_id, verify=False)
    except TaskNotFound:  # pragma: no cover - deleted between the two reads
        return Tick("done", task_id)
    untouched = head.version == 1 and head.state.get("status") == "created"
    if untouched and store.lease(task_id) is None:
        send(Message(task_id, head.version, queue=schedule.queue))
        return Tick("resent", task_id, head.version)
    return Tick("done", task_id, head.version)
