"""The person-facing commands of :class:`~skillstate.engine.runtime.Runtime`, and its lease.

Signals, messages, cancels, replies, approvals, re-pins, rechecks, compensations
and notes: each is one commit (or one inbox post) made while holding the task's
lease, outside the run loop. Kept apart from the loop so that
:mod:`skillstate.engine.runtime` stays about running steps; :class:`Commands` is a
mixin of :class:`~skillstate.engine.runtime.Runtime` and relies on the attributes
its ``__init__`` sets.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from skillstate.control.inbox import cancel as cancel_task
from skillstate.control.inbox import send as send_message
from skillstate.control.waits import deliver
from skillstate.engine.draft import Draft
from skillstate.engine.lease import Holder
from skillstate.engine.replies import replied
from skillstate.engine.stale import stale_steps
from skillstate.errors import UsageError
from skillstate.events import Actor
from skillstate.limits import problem
from skillstate.state.model import AgentState, ErrorEntry, StepRecord, TaskStatus

if TYPE_CHECKING:
    from skillstate.control.approvals import Approvals
    from skillstate.engine.agent import Agent
    from skillstate.engine.commit import Committer
    from skillstate.engine.settle import Settling
    from skillstate.store.base import Store

__all__ = ["Commands"]

S = TypeVar("S", bound=AgentState)


class Commands(Generic[S]):
    """What a person (or a worker) asks of a task between runs, and the lease it holds.

    A mixin: :class:`~skillstate.engine.runtime.Runtime` sets these attributes.
    """

    agent: Agent[S]
    store: Store
    lease: bool
    worker: str
    lease_ttl: float
    _holders: dict[str, Holder]
    _committer: Committer
    _settling: Settling
    _approvals: Approvals

    if TYPE_CHECKING:

        def load(self, task_id: str) -> S: ...

    def signal(self, task_id: str, name: str, data: Any) -> int:
        """Deliver signal ``name`` with payload ``data`` to a task; returns its inbox number.

        The payload is validated against the schema the agent declares for ``name``
        (a bad one, or an undeclared name, is one-line
        :class:`~skillstate.errors.UsageError` and nothing is written), then posted to
        the task's inbox: the card is not touched, so a worker holding the task is not
        disturbed. The task's next run consumes it if it waits for it (``WaitFor``), or
        the next ``WaitFor`` of that name does (see :mod:`skillstate.control.waits`).
        """
        return deliver(self.agent, self.store, self.load(task_id), name, data)

    def send(self, task_id: str, text: str, *, actor: str | None = None) -> int:
        """Send a message to a task while it runs; returns its inbox number.

        Posted to the task's inbox (the card is not touched, so the worker holding it
        is not disturbed); the next run takes it at a step boundary and handles it as
        ``Agent(messages=...)`` says (see :mod:`skillstate.control.inbox`). Refused with
        :class:`~skillstate.errors.MessageRefused` (nothing posted) when the task has
        ended or the agent rejects messages. ``actor`` defaults to ``$SKILLSTATE_ACTOR``,
        else the OS user.
        """
        return send_message(self.store, self.agent, task_id, text, actor=actor or "")

    def cancel(
        self,
        task_id: str,
        *,
        reason: str = "",
        actor: str | None = None,
        compensate: bool = False,
    ) -> int:
        """Ask a task to stop at its next step boundary; returns the cancel's inbox number.

        The next run (here, or the worker holding the task) takes it and commits
        ``cancelled``; with ``compensate`` it first undoes every effect the task ran,
        newest first (:mod:`skillstate.control.inbox`). A task that has ended is
        refused (:class:`~skillstate.errors.MessageRefused`).
        """
        return cancel_task(
            self.store, self.agent, task_id, reason=reason, actor=actor or "", compensate=compensate
        )

    def reply(self, task_id: str, text: str, *, into: str | None = None) -> S:
        """Answer the open question of a ``waiting_user`` task; it becomes ``running``.

        A reply is new information: the stall guard's count starts over. With
        ``into``, the reply is a secret (a card number, a password): it is kept in
        that ``Sensitive`` field of the card (sealed) and never shown to a decision,
        which sees a note with the field's handle instead (``<sensitive:FIELD>``, see
        :mod:`skillstate.skills.handles`) and passes that to a skill, which gets the
        real value.
        """
        return self._reply(task_id, text, into=into)

    def _reply(self, task_id: str, text: str, *, ahead: bool = False, into: str | None = None) -> S:
        """:meth:`reply`; with ``ahead``, ``text`` is the card's first reply given ahead
        (``replies_ahead``), which the same commit takes off the card."""
        self._check_reply(text)
        with self._holding(task_id):
            state = self._committer.head(task_id)
            if state.status is not TaskStatus.WAITING_USER:
                raise UsageError(
                    f"task {task_id!r} is not waiting for a reply (status: {state.status.value})"
                )
            after, action = replied(state, text, ahead=ahead, into=into)
            return cast(S, self._committer.commit(state, Draft(after=after), action, "user")[0])

    def approve(
        self,
        task_id: str,
        *,
        edits: dict[str, Any] | None = None,
        actor: str | None = None,
        reason: str | None = None,
    ) -> S:
        """Approve the call a ``waiting_approval`` task waits on, with ``edits`` of its
        params (validated; a bad one writes nothing): one commit by ``actor`` (default
        ``$SKILLSTATE_ACTOR``, else the OS user) makes it the effect in flight, which
        the next :meth:`run` runs exactly once (:mod:`skillstate.control.approvals`).
        :class:`~skillstate.errors.ApprovalNotPending` when someone decided first."""
        approved = self._approvals.approve(task_id, edits=edits, actor=actor, reason=reason)
        return cast(S, approved)

    def reject(self, task_id: str, *, reason: str, actor: str | None = None) -> S:
        """Reject the call a ``waiting_approval`` task waits on; it runs on, its next
        decision's view showing ``reason``. :class:`~skillstate.errors.ApprovalNotPending`
        when someone decided first."""
        return cast(S, self._approvals.reject(task_id, reason=reason, actor=actor))

    def accept_definition(self, task_id: str, *, actor: str | None = None, reason: str = "") -> S:
        """Re-pin a task to this agent's definition, whatever changed since it was pinned.

        One commit by ``actor`` (default ``$SKILLSTATE_ACTOR``, else the OS user), its
        event naming every change and ``reason``; declared patches still rename what
        they rename. Refused (:class:`~skillstate.errors.DefinitionChanged`, nothing
        written) when the card needs what this definition lacks (its current step, the
        skill of its effect in flight). A task pinned to it already is left as it is.
        See :mod:`skillstate.engine.pins`.
        """
        with self._holding(task_id):
            accepted = self._committer.pins.accept(task_id, actor=actor, reason=reason)
            return cast(S, accepted)

    def recheck(self, task_id: str) -> list[StepRecord]:
        """Recompute the fingerprints of a task's completed steps; mark changed ones stale.

        A stale step leaves ``completed_steps``, goes back to the front of
        ``pending_steps``, has its writes undone and gets a ``stale_step`` entry in
        the error log, all in one commit (see :mod:`skillstate.engine.stale`).
        Finished tasks are left alone. Returns the stale steps.
        """
        with self._holding(task_id):
            state = self._committer.head(task_id)
            if (
                state.status.is_terminal
                or state.pending_effect
                or state.compensations
                or state.pending_approval  # the person approves the card they were shown
            ):
                return []
            found = stale_steps(state)
            if found is None:
                return []
            draft, stale = found
            action = {"kind": "recheck", "stale": [r.id for r in stale]}
            self._committer.commit(state, draft, action, "runtime")
            return stale

    def compensate(self, task_id: str) -> int:
        """Run every queued compensation of a task (see ``rollback --compensate``).

        Returns how many ran. Raises :class:`~skillstate.errors.CompensationFailed`
        when one fails; it stays queued.
        """
        done = 0
        with self._holding(task_id):
            while True:
                state = self._committer.head(task_id)
                if not state.compensations:
                    return done
                self._settling.compensate(state)
                done += 1

    def hold(self, task_id: str) -> AbstractContextManager[None]:
        """Hold ``task_id``'s lease across several calls (``run``, ``step``, ``mark``).

        A worker that runs a task in slices keeps one lease (one fencing token) for a
        whole slice, and does what must happen before others may take the task (such
        as enqueueing its continuation) while still holding it. Raises
        :class:`~skillstate.errors.LeaseHeld` while another live worker holds it.
        """
        return self._holding(task_id)

    def mark(
        self,
        task_id: str,
        action: dict[str, Any],
        *,
        error: ErrorEntry | None = None,
        status: TaskStatus | None = None,
        actor: Actor = "runtime",
    ) -> S:
        """Commit a note about the task itself, not a decision: an ``error`` entry in its
        log (a worker found its predecessor gone), a new ``status`` (a dead letter
        fails the task; a person reopens it), or both. One commit, fenced by the lease."""
        with self._holding(task_id):
            state = self.load(task_id)
            after = state.with_error(error) if error is not None else state
            if status is not None:
                after = after.replace(status=status)
            draft = Draft(after=after, error=error.message if error is not None else None)
            return cast(S, self._committer.commit(state, draft, action, actor)[0])

    def _check_reply(self, text: str) -> None:
        limits = self.agent.limits
        found = problem(text, chars=limits.reply_chars, depth=limits.depth)
        if found is not None:
            raise UsageError(f"reply refused: {found}; nothing was written")

    # ------------------------------------------------------------------ the lease

    @contextmanager
    def _holding(self, task_id: str) -> Iterator[None]:
        """Hold the task's lease for the duration (re-entrant: run -> reply, step...)."""
        if not self.lease or task_id in self._holders:
            yield
            return
        holder = Holder(self.store, task_id, self.worker, self.lease_ttl)
        holder.acquire()
        self._holders[task_id] = holder
        try:
            yield
        finally:
            del self._holders[task_id]
            holder.release()

    def _fence(self, task_id: str) -> int | None:
        holder = self._holders.get(task_id)
        return holder.fence if holder is not None else None

    def _check_lease(self, task_id: str) -> None:
        holder = self._holders.get(task_id)
        if holder is not None:
            holder.check()
