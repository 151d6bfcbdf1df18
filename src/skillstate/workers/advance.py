"""One message, judged against the store, then one slice of a task run under its lease.

This module knows nothing of Celery: a worker hands it a :class:`Message` and a way
to enqueue the task's next message, and gets an :class:`Outcome` back.

Who is responsible for a task is decided by the store alone:

* a **live lease** means a worker is on it. If the lease names *this* message (a
  worker writes the broker's message id into its lease name), the message came
  back while its first worker may be dead but not yet expired: it is tried again
  once the lease can have run out. Any other live holder will carry on by itself,
  so the message is dropped (a duplicate, or a stale message) -- except the holder
  that *sent* it:
* a **hand-over**: a slice enqueues the task's continuation *before* releasing its
  lease (so at every instant either a lease or a message is responsible for a
  running task), and names itself in it (:attr:`Message.after`). The worker that
  gets the continuation while the sender still holds the lease (it has not
  released yet, or it died in between) takes the lease over at once: it releases
  that exact holder and claims. Not a crash: the sender had finished its slice.
  A claim that then fails means someone else took the task: they carry on.
* an **expired lease** (or one whose holder on this host has exited) means its
  worker died mid-slice: whichever message gets here first takes the task over,
  counts the crash in the task's error log, and resumes through the exactly-once
  effect machinery (the pending effect is probed, not run again).
* **no lease** and a head past the message's version: whoever moved it released the
  lease only after enqueueing the next message (or the task stopped): drop.

Should a bug strand a task anyway (running, no lease, no message),
:mod:`skillstate.workers.sweep` finds it and sends it a message.

Child tasks (fan-out) add three messages: a parent's slice that stops
``waiting_children`` sends one to each child, an ended child wakes its parent, and a
parent whose children all ended is never stale (:mod:`skillstate.workers.children`).
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Literal

from skillstate.control.inbox import has_unread
from skillstate.control.waits import signal_arrived
from skillstate.engine.agent import Agent
from skillstate.engine.lease import is_dead_local_worker
from skillstate.engine.results import RunResult
from skillstate.engine.runtime import Runtime
from skillstate.errors import (
    AgentImportError,
    Conflict,
    DefinitionChanged,
    LeaseHeld,
    ProviderError,
    TaskNotFound,
)
from skillstate.state.model import TaskStatus
from skillstate.store.base import Lease, Store
from skillstate.workers.children import WAITING_CHILDREN, dispatch, follow_up, ready_to_join
from skillstate.workers.crashes import crash_note, dead_letter, reason_to_fail
from skillstate.workers.routing import definition_queue
from skillstate.workers.settings import Message, WorkerSettings
from skillstate.workers.sweep import SWEEPER

__all__ = ["Advancer", "Outcome", "OutcomeKind", "worker_name"]

log = logging.getLogger("skillstate.workers")

OutcomeKind = Literal[
    "completed",
    "failed",
    "cancelled",
    "waiting_user",
    "waiting_approval",
    "waiting",
    "waiting_children",
    "budget",
    "stalled",
    "requeued",
    "rerouted",
    "stale",
    "held",
    "retry_later",
    "provider_retry",
    "dead_letter",
    "not_allowed",
    "missing",
]
Enqueue = Callable[[Message, float], None]
"""Send ``message`` to the broker, delivered after ``countdown`` seconds."""

_LEASE_MARGIN = 0.5
"""Seconds past a lease's expiry before its own redelivered message looks again."""
_HANDOVER_TRIES = 3
"""Claims after releasing the sender: its heartbeat may renew once in between (its
lease is then lost to it, and the next try succeeds)."""


@dataclass(frozen=True)
class Outcome:
    """What one message did."""

    kind: OutcomeKind
    version: int | None = None
    """The task's head version afterwards, when it was read."""
    steps: int = 0
    """Decisions taken for this message."""
    detail: str = ""
    ended_here: bool = field(default=False, repr=False, compare=False)
    """The slice itself committed the task's end (completed, failed, cancelled): its
    final state is known, and :attr:`parent` is read from it."""
    parent: str | None = field(default=None, repr=False, compare=False)
    """The ended task's parent (fan-out), when :attr:`ended_here`: ``None`` means it has
    none, so no parent can be due a wake and the wake's head read is skipped."""


def worker_name(message_id: str) -> str:
    """The lease holder's name for one message: ``<message id>@host:pid``.

    The ``host:pid`` part keeps the lease module's fast path (a holder on this host
    that has exited is taken over at once); the message id lets a redelivery
    recognise the lease its first delivery left behind.
    """
    return f"{message_id or 'direct'}@{socket.gethostname()}:{os.getpid()}"


def message_of(holder: str) -> str | None:
    """The message id a worker's lease name carries, ``None`` for other holders
    (``sweeper`` for a sweeper's: a message is on its way, no worker died with it)."""
    tag, sep, _ = holder.partition("@")
    return tag if sep and tag and tag not in {"human", "direct"} else None


class Advancer:
    """Advances tasks for one worker process: one store, cached agents."""

    def __init__(
        self,
        store: Store,
        settings: WorkerSettings,
        *,
        stopping: Callable[[], bool] = lambda: False,
        allowed: frozenset[str] | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.stopping = stopping
        """True once the worker shuts down: the slice ends after the current step."""
        self._allowed = allowed
        self._agents: dict[str, Agent[Any]] = {}

    def advance(self, message: Message, enqueue: Enqueue) -> Outcome:
        """Judge ``message`` against the store and, if it is responsible, run a slice;
        then send the wake a fan-out is due, if any (:func:`children.follow_up`)."""
        outcome = self._advance(message, enqueue)
        if outcome.ended_here and outcome.parent is None and outcome.kind != "cancelled":
            # The slice ended a task with no parent: no wake is due (a cancel still
            # goes on to its children). Saves re-reading the head it just committed.
            return outcome
        woke = follow_up(self.store, message, outcome.kind, enqueue)
        return replace(outcome, detail=outcome.detail + woke) if woke else outcome

    def _advance(self, message: Message, enqueue: Enqueue) -> Outcome:
        # The lease first: a message for a task another message's worker holds (a
        # duplicate, a stale one) is judged on it alone, one read. The head is read
        # after it, so a holder that commits and releases in between is seen as a
        # head past this message's version, exactly as in the other order.
        lease = self.store.lease(message.task_id)
        crashed: Lease | None = None
        handover = lease is not None and bool(message.after) and lease.worker == message.after
        judged: Lease | float | None = None
        if lease is not None and not handover:
            verdict = self._judge_lease(message, lease)
            if isinstance(verdict, Outcome):
                return verdict
            judged = verdict
        try:
            head = self.store.load(message.task_id, verify=False)
        except TaskNotFound:
            return Outcome("missing", detail="no such task in the store")
        if isinstance(judged, float):
            enqueue(message, judged)  # the same message id: it may take this lease over
            detail = f"held by {lease.worker if lease else ''}; again in {judged:.1f}s"
            return Outcome("retry_later", head.version, detail=detail)
        if judged is not None:
            crashed = judged
        elif head.version > message.expected and not self._posted(head.state):
            return Outcome("stale", head.version, detail=f"head is at {head.version}")
        if head.state.get("status") in _IDLE and crashed is None and not self._posted(head.state):
            return Outcome("stale", head.version, detail=f"task is {head.state.get('status')}")
        try:
            agent = self._agent(head.state.get("agent"))
        except AgentImportError as exc:
            return Outcome("not_allowed", head.version, detail=str(exc))
        runtime = Runtime(
            agent,
            self.store,
            worker=worker_name(message.message_id),
            lease_ttl=self.settings.lease_ttl,
            children="dispatch",  # children are tasks of their own, on any worker
        )
        try:
            with self._hold(runtime, message, handover):
                outcome = self._slice(runtime, message, crashed, enqueue)
        except LeaseHeld as exc:  # another message won the race for the task
            return Outcome("held", detail=f"held by {exc.holder}")
        except Conflict as exc:  # lost the lease mid-slice: the new holder carries on
            return Outcome("held", detail=str(exc))
        if outcome.kind == "waiting" and signal_arrived(runtime, message.task_id):
            # Posted while this slice held the lease: its own message found the task
            # held and was dropped. Looked for after releasing, so none is missed.
            enqueue(Message(message.task_id, outcome.version or 0, queue=message.queue), 0.0)
        elif outcome.kind in _AT_REST and has_unread(self.store, message.task_id):
            # A send or cancel posted after this slice's last step boundary: its own
            # message found the task held and was dropped (control.inbox).
            enqueue(Message(message.task_id, outcome.version or 0, queue=message.queue), 0.0)
        return outcome

    def _posted(self, head: dict[str, Any]) -> bool:
        """A send or cancel waits in the task's inbox, or its children all ended and the
        join is due: a message for it is not stale."""
        task_id = head.get("task_id")
        if not isinstance(task_id, str):
            return False
        return has_unread(self.store, task_id, head) or ready_to_join(self.store, head)

    # ------------------------------------------------------------------ internals

    def _hold(self, runtime: Runtime[Any], message: Message, handover: bool) -> ExitStack:
        """The task's lease, held until the returned stack closes; on a hand-over, taken
        from the sender first. Raises :class:`LeaseHeld` when another worker has it."""
        stack = ExitStack()
        tries = _HANDOVER_TRIES if handover else 1
        while True:
            tries -= 1
            if handover:  # names the sender: a no-op if anyone else holds it now
                self.store.release(message.task_id, message.after)
            try:
                stack.enter_context(runtime.hold(message.task_id))
                return stack
            except LeaseHeld as exc:
                if tries == 0 or exc.holder != message.after:
                    raise

    def _judge_lease(self, message: Message, lease: Lease) -> Outcome | Lease | float:
        """An outcome when the message must stop here, the lease when its holder died,
        or the seconds after which this message should look again."""
        now = datetime.now(timezone.utc)
        if lease.expires_at <= now or is_dead_local_worker(lease.worker):
            return lease
        mine = message_of(lease.worker)
        if mine is not None and mine != message.message_id:
            return Outcome("held", detail=f"held by {lease.worker}")
        # Our own redelivery (our first worker may be dead), or a person or tool: look
        # again once the lease can have run out.
        return (lease.expires_at - now).total_seconds() + _LEASE_MARGIN

    def _slice(
        self,
        runtime: Runtime[Any],
        message: Message,
        crashed: Lease | None,
        enqueue: Enqueue,
    ) -> Outcome:
        task_id = message.task_id
        # Read under the lease: the task may have ended or parked since the judging read
        # (or its worker died after its last commit). As stored, not parsed: the run's
        # own first read checks and parses it; only a crash note needs it parsed here.
        head = self.store.load(task_id, verify=False)
        status = head.state.get("status")
        if status in _IDLE and not has_unread(self.store, task_id, head.state):
            return Outcome("stale", head.version, detail=f"task is {status}")
        if crashed is not None and message_of(crashed.worker) not in (None, SWEEPER):
            state = runtime.load(task_id)
            note = crash_note(state, crashed.worker, self.settings.max_crashes)
            if note.kind == "dead_letter":
                dead_letter(runtime, task_id, note)
                return Outcome("dead_letter", runtime.load(task_id).version, detail=note.message)
            runtime.mark(task_id, {"kind": "worker_lost", "worker": crashed.worker}, error=note)
        # One run for the whole slice: the head is read and rechecked once, not per step.
        try:
            result = runtime.run(task_id, max_steps=self.settings.slice_steps, stop=self.stopping)
        except ProviderError as exc:
            return self._provider_error(runtime, message, exc, enqueue)
        except DefinitionChanged as exc:  # pinned to a definition this worker does not have
            return self._other_definition(runtime, message, exc, enqueue)
        if result.stopped == "waiting":
            return self._requeue_wait(runtime, message, result, enqueue)
        if result.stopped == WAITING_CHILDREN:  # sent under the lease: never nobody's
            sent, _ = dispatch(self.store, task_id, message.queue, enqueue)
            detail = f"{sent} child message(s) sent"
            return Outcome("waiting_children", result.state.version, result.steps, detail)
        if result.stopped != "max_steps":
            outcome = Outcome(result.stopped, result.state.version, result.steps)
            if result.state.status.value in _ENDED:  # the final state names any parent
                link = result.state.parent
                parent = link.task_id if link is not None else None
                outcome = replace(outcome, ended_here=True, parent=parent)
            return outcome
        version = result.state.version
        # Enqueue while still holding the lease: never a moment without an owner. The
        # continuation names this holder, so it may take the lease over at once.
        enqueue(Message(task_id, version, queue=message.queue, after=runtime.worker), 0.0)
        return Outcome("requeued", version, result.steps)

    def _requeue_wait(
        self,
        runtime: Runtime[Any],
        message: Message,
        result: RunResult[Any],
        enqueue: Enqueue,
    ) -> Outcome:
        """The task waits: a message the broker delivers at its deadline (no worker
        sleeps), sent under the lease like a continuation. A wait without a deadline
        (a signal without a timeout) gets none: the signal's delivery enqueues it."""
        version = result.state.version
        at = result.resume_at
        if at is None:
            return Outcome("waiting", version, result.steps, detail="for a signal")
        left = max(0.0, (at - datetime.now(timezone.utc)).total_seconds())
        countdown = min(left, self.settings.max_countdown)
        later = Message(message.task_id, version, queue=message.queue, after=runtime.worker)
        enqueue(later, countdown)
        detail = f"until {at.isoformat(timespec='seconds')}; requeued in {countdown:.1f}s"
        return Outcome("waiting", version, result.steps, detail=detail)

    def _provider_error(
        self,
        runtime: Runtime[Any],
        message: Message,
        exc: ProviderError,
        enqueue: Enqueue,
    ) -> Outcome:
        """Nothing of the failed decision was committed: try the task again later.

        The steps committed before it in this slice stay (the outcome does not count
        them: ``version`` says how far the task got)."""
        version = runtime.load(message.task_id).version
        if message.attempt + 1 >= self.settings.max_retries:
            reason = f"the model provider failed {message.attempt + 1} times in a row: {exc}"
            dead_letter(runtime, message.task_id, reason_to_fail(reason))
            return Outcome("dead_letter", version, detail=reason)
        wait = self.settings.backoff(message.attempt)
        retry = Message(
            message.task_id,
            version,
            attempt=message.attempt + 1,
            queue=message.queue,
            after=runtime.worker,  # sent under the lease, as a continuation is
        )
        enqueue(retry, wait)
        return Outcome("provider_retry", version, detail=f"{exc}; again in {wait:.1f}s")

    def _other_definition(
        self, runtime: Runtime[Any], message: Message, exc: DefinitionChanged, enqueue: Enqueue
    ) -> Outcome:
        """Never run a task under a definition it is not pinned to: forward it to its
        definition's queue (routing on), else dead-letter it with the reason
        (:mod:`skillstate.workers.routing`)."""
        task_id = message.task_id
        version = runtime.load(task_id).version
        if self.settings.route_definitions and exc.pinned and not exc.blocked:
            queue = definition_queue(message.queue, exc.pinned)
            if queue != message.queue:  # already on it: a misconfigured worker, not a bounce
                # Sent under the lease, as a continuation: its worker takes the task over.
                enqueue(Message(task_id, version, queue=queue, after=runtime.worker), 0.0)
                return Outcome("rerouted", version, detail=f"to {queue}: {exc}")
        dead_letter(runtime, task_id, reason_to_fail(str(exc)))
        return Outcome("dead_letter", runtime.load(task_id).version, detail=str(exc))

    def warm(self) -> None:
        """Before the first message: read the allow-list (configuration, installed entry
        points) and import the ``--agent`` agents, so that no message pays for them.

        An agent that does not import is logged and left for its messages, which are
        answered as before (``not_allowed``, the reason in the worker's log): one bad
        reference must not keep the worker from the others."""
        self.allows(None)
        for ref in sorted(self.settings.agents):
            try:
                self._agent(ref)
            except Exception as exc:  # any import error: its messages say it again
                log.warning("agent %s did not import at start: %s", ref, exc)

    def allows(self, ref: str | None) -> bool:
        """Whether this worker may import the agent ``ref`` (a task's card names it)."""
        from skillstate.config import allowed_agents, load_config
        from skillstate.fanout.spec import CHILD_REF

        if self._allowed is None:
            self._allowed = allowed_agents(load_config()) | self.settings.agents
        if ref is None:
            return False
        # A child kind with no reference of its own is imported through its parent's
        # (``parent#children.kind``, skillstate.fanout): the parent's is what is allowed.
        return ref.partition(CHILD_REF)[0] in self._allowed

    def _agent(self, ref: object) -> Agent[Any]:
        """The task's agent, imported only if the operator allowed its reference."""
        from skillstate.engine.agent import load_agent
        from skillstate.errors import AgentNotAllowed

        if not isinstance(ref, str) or not ref:
            raise AgentImportError("the task does not record which agent drives it")
        if ref in self._agents:
            return self._agents[ref]
        if not self.allows(ref):
            raise AgentNotAllowed(
                f"agent {ref!r} is not allowed on this worker (skillstate worker --agent "
                f"{ref}, or [tool.skillstate] agents)"
            )
        agent = self._agents[ref] = load_agent(ref, search_cwd=True)
        return agent


_IDLE = frozenset(
    {
        TaskStatus.COMPLETED.value,
        TaskStatus.FAILED.value,
        TaskStatus.CANCELLED.value,
        TaskStatus.WAITING_USER.value,
        TaskStatus.WAITING_APPROVAL.value,
    }
)
"""Statuses no message has anything to do for (a reply, an approval or a rejection
enqueues a new message)."""

_ENDED = frozenset(
    {TaskStatus.COMPLETED.value, TaskStatus.FAILED.value, TaskStatus.CANCELLED.value}
)

_AT_REST = frozenset(
    {"waiting_user", "waiting_approval", "waiting", "waiting_children", "budget", "stalled"}
)
"""Outcomes after which the task sits with no message of its own in flight."""
