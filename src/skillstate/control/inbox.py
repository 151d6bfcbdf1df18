"""Messages to a running task, and cancel: posted to its inbox, taken at a step boundary.

A task a worker holds cannot take a commit from anyone else: the lease fences the
card, and a second writer would only make the worker's next step conflict. So
``send`` and ``cancel`` never write the card. They post to the task's inbox in the
store (:meth:`~skillstate.store.base.Store.post`: append-only, numbered, no lease
needed), and whoever runs the task takes what it has not taken yet at the top of
its run loop, between two steps, in one commit of its own that also records how far
it read (the card's ``inbox_seen``). The compare-and-set makes that commit, and so
each message, land once however the process dies; the worker holding the task sees
a message at its next step boundary, never mid-step.

**Messages** (kind ``message``, ``skillstate send``) go where the agent says
(``Agent(messages=...)``):

* ``enqueue`` (the default): the message joins the card's ``messages``; the next
  decision's view shows it (``View.messages``, and a "Message from ..." line in the
  rendered view) and that decision's commit takes it off the card, so a decision
  sees it once (the event that took it keeps it). Like a reply, it is new
  information: the stall guard's count starts over. A task waiting for a reply keeps
  waiting; the message is shown with the decision after the reply.
* ``interrupt``: the same, and more. The step in progress finishes (nothing is cut
  off mid-step: its effect settles, its commit lands); then the message comes first:
  it is marked urgent, listed before anything else the view shows (before the plan,
  the facts and any reply), and a task waiting for a reply stops waiting: it runs
  again at once with the message, and replies given ahead (``replies_ahead``) wait
  for the next question instead of answering this one. The question it interrupted
  is kept on the message.
  A task in a durable wait (``waiting``) or waiting for approval keeps waiting with
  either strategy: the message is shown when the task runs again.
* ``reject``: :func:`send` refuses with a one-line :class:`~skillstate.errors.MessageRefused`
  and posts nothing. A message that arrives anyway (posted before the agent changed,
  or straight to the store) is taken and recorded as rejected in the event log; the
  card only moves ``inbox_seen``.

**Cancel** (kind ``cancel``, ``skillstate cancel``) stops the task at the boundary:
status ``cancelled`` (terminal), with the reason and who asked in the event. With
``compensate``, every effect the task ran (its ledger of effects,
:func:`~skillstate.engine.effects.known_effects`) is first queued for its skill's
``rollback`` hook, newest first, in the same commit that takes the cancel
(``cancelling`` records the request); the run loop then runs the queue as it runs a
compensating rollback's, one commit per undone effect (a ``kill -9`` resumes the
queue where it stopped), and only then commits ``cancelled``. A compensation that
fails stays queued, the task stays running (and ``cancelling``), and the error says
so; resuming retries it. Messages and signals the task had not taken when it was
cancelled are taken with the cancel and dropped. A parent's cancel cascades: the commit that
takes it posts a cancel to each unfinished child task and lists them in its event
(``children``; :mod:`skillstate.engine.family`).

Inbox kinds this module does not handle (``signal``: :mod:`skillstate.control.waits`)
are left to their own readers; ``inbox_seen`` only says how far this one read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from skillstate.audit import BY_CHARS, Identity, current, of_message
from skillstate.control.approvals import ACTOR_CHARS, default_actor
from skillstate.engine.agent import Agent
from skillstate.engine.draft import Draft
from skillstate.engine.effects import crossed_effects, describe
from skillstate.engine.family import cancel_children
from skillstate.engine.results import StepReport
from skillstate.errors import MessageRefused
from skillstate.events import Actor, Event
from skillstate.limits import problem
from skillstate.state.model import (
    AgentState,
    Cancelling,
    Compensation,
    ErrorEntry,
    TaskStatus,
    UserMessage,
)
from skillstate.store.base import InboxMessage, Store

__all__ = [
    "CANCEL",
    "KINDS",
    "MESSAGE",
    "Inbox",
    "cancel",
    "cancelled_line",
    "has_unread",
    "send",
]

MESSAGE = "message"
"""The inbox kind of ``skillstate send``: ``{"text": ..., "actor": ...}``."""
CANCEL = "cancel"
"""The inbox kind of ``skillstate cancel``: ``{"reason", "actor", "compensate"}``."""
KINDS = frozenset({MESSAGE, CANCEL})
"""The kinds the run loop takes here."""
REASON_CHARS = 1_000

Commit = Callable[[AgentState, Draft, dict[str, Any], Actor], tuple[AgentState, Event]]
"""The runtime's commit (:meth:`~skillstate.engine.commit.Committer.commit`)."""


# ---------------------------------------------------------------------- sending


def send(store: Store, agent: Agent[Any], task_id: str, text: str, *, actor: str = "") -> int:
    """Post ``text`` to the task's inbox for its next decision; returns the message's number.

    Refused (:class:`~skillstate.errors.MessageRefused`, nothing posted) when the task
    has ended, when the agent rejects messages, and when the text is too long for a
    reply (``Agent(limits=...)``). The text is masked with the agent's redaction
    policy before it is posted, as the card would store it.
    """
    _live_head(store, task_id, "a message")
    if agent.messages == "reject":
        raise MessageRefused(
            f"agent {agent.name!r} rejects messages to running tasks "
            "(Agent(messages='reject')); nothing was sent"
        )
    found = problem(text, chars=agent.limits.reply_chars, depth=agent.limits.depth)
    if found is not None:
        raise MessageRefused(f"message refused: {found}; nothing was sent")
    masked = agent.redaction.redactor().text(text)
    body = {"text": masked, "actor": _actor(actor)}
    stated = current()
    if stated is not None and stated.reason:  # why, for the commit that takes it
        body["reason"] = agent.redaction.redactor().text(stated.reason)
    return store.post(task_id, MESSAGE, body)


def cancel(
    store: Store,
    agent: Agent[Any] | None,
    task_id: str,
    *,
    reason: str = "",
    actor: str = "",
    compensate: bool = False,
) -> int:
    """Post a cancel to the task's inbox; returns its number.

    Refused (nothing posted) when the task has already ended, and with ``compensate``
    when an effect it ran has no ``rollback`` hook to undo it (``agent`` is needed to
    tell).
    """
    head = _live_head(store, task_id, "a cancel")
    if len(reason) > REASON_CHARS:
        raise MessageRefused(f"--reason is {len(reason):,} characters (at most {REASON_CHARS:,})")
    if compensate:
        effects = crossed_effects(store.events(task_id), head.version, 0)
        missing = [r for r in effects if not _undoable(agent, r.skill)]
        if missing:
            raise MessageRefused(
                f"cannot cancel task {task_id!r} with --compensate: {describe(missing)} "
                "has no rollback hook to undo it; cancel without --compensate (the "
                "effects stay), or undo them by hand first"
            )
    body = {"reason": reason, "actor": _actor(actor), "compensate": compensate}
    return store.post(task_id, CANCEL, body)


def has_unread(store: Store, task_id: str, state: dict[str, Any] | None = None) -> bool:
    """Whether the task has a message or cancel it has not taken yet (and has not ended).

    ``state`` is its stored head as read (``None``: read it now). What a worker asks
    before it drops a message for a task that looks idle, and after a slice: a ``send``
    or ``cancel`` enqueues the task for exactly this.
    """
    if state is None:
        state = store.load(task_id, verify=False).state
    if state.get("status") in _ENDED:
        return False
    seen = state.get("inbox_seen")
    after = seen if isinstance(seen, int) and not isinstance(seen, bool) else 0
    return any(m.kind in KINDS for m in store.inbox(task_id, after=after))


def _live_head(store: Store, task_id: str, what: str) -> Any:
    """The task's head, if it has not ended (a status no task has, such as a deleted
    LangGraph thread's, counts as ended)."""
    head = store.load(task_id, verify=False)
    status = head.state.get("status")
    if status in _ENDED or status not in _STATUSES:
        raise MessageRefused(f"task {task_id!r} has ended ({status}); {what} was not sent")
    return head


def _actor(given: str) -> str:
    actor = given or default_actor()
    if len(actor) > ACTOR_CHARS or not actor.isprintable():
        raise MessageRefused(f"--actor must be printable and at most {ACTOR_CHARS} characters")
    return actor


def _undoable(agent: Agent[Any] | None, skill_name: str) -> bool:
    skill = agent.skills.get(skill_name) if agent is not None else None
    return skill is not None and skill.has_rollback


_ENDED = frozenset(s.value for s in TaskStatus if s.is_terminal)
_STATUSES = frozenset(s.value for s in TaskStatus)


# ---------------------------------------------------------------------- taking


class Inbox:
    """The run loop's hook: take what the task's inbox holds, at a step boundary."""

    def __init__(self, agent: Agent[Any], store: Store, commit: Commit) -> None:
        self.agent = agent
        self.store = store
        self._commit = commit

    def boundary(self, state: AgentState) -> StepReport[Any] | None:
        """Take unread messages and cancels in one commit; its report (``None``: nothing
        to take).

        Called at the top of the run loop (and by ``Runtime.step``), once queued
        compensations and an effect in flight are settled: the loop reloads the head
        after a commit here. One read of the inbox when there is nothing to take.
        """
        if state.cancelling is not None:
            if state.compensations:
                return None  # the loop undoes them first
            committed = self._cancelled(state, state, state.cancelling, undone=True)
        elif state.status.is_terminal:
            return None
        else:
            unread = self.store.inbox(state.task_id, after=state.inbox_seen)
            if not any(m.kind in KINDS for m in unread):
                return None
            last = unread[-1].seq
            cancels = [m for m in unread if m.kind == CANCEL]
            if cancels:
                committed = self._cancel(state, cancels[0], unread, last)
            else:
                committed = self._messages(state, [m for m in unread if m.kind == MESSAGE], last)
        after, event = committed
        return StepReport(before=state, after=after, event=event)

    # ------------------------------------------------------------------ messages

    def _messages(
        self, state: AgentState, messages: list[InboxMessage], last: int
    ) -> tuple[AgentState, Event]:
        strategy = self.agent.messages
        listed = [_listed(m) for m in messages]
        action: dict[str, Any] = {"kind": "inbox", "read": last, "strategy": strategy}
        if strategy == "reject":
            action["rejected"] = listed
            return self._commit(
                state, Draft(after=state.replace(inbox_seen=last)), action, "runtime"
            )
        urgent = strategy == "interrupt"
        interrupted = state.question if urgent and _asking(state) else None
        taken = tuple(
            UserMessage(
                seq=m.seq,
                text=str(m.body.get("text", "")),
                actor=str(m.body.get("actor", "")),
                at=m.at,
                urgent=urgent,
                interrupted=interrupted,
            )
            for m in messages
        )
        changes: dict[str, Any] = {
            "inbox_seen": last,
            "messages": (*state.messages, *taken),
            # New information, as a reply is: the stall guard starts over.
            "no_progress": 0,
            "tried": (),
        }
        if interrupted is not None:
            changes.update(status=TaskStatus.RUNNING, question=None)
            action["interrupted"] = interrupted
        action["messages"] = listed
        draft = Draft(after=state.replace(**changes), identity=_senders(messages))
        return self._commit(state, draft, action, "user")

    # ------------------------------------------------------------------ cancel

    def _cancel(
        self, state: AgentState, request: InboxMessage, unread: list[InboxMessage], last: int
    ) -> tuple[AgentState, Event]:
        body = request.body
        wanted = Cancelling(
            seq=request.seq,
            reason=str(body.get("reason", ""))[:REASON_CHARS],
            actor=str(body.get("actor", "")),
            compensate=body.get("compensate") is True,
        )
        dropped = [m.seq for m in unread if m is not request and m.kind in KINDS]
        # A parent's cancel cascades: each unfinished child is sent one (engine.family).
        children = cancel_children(
            self.store,
            state,
            reason=wanted.reason,
            actor=wanted.actor,
            compensate=wanted.compensate,
        )
        queue: list[Compensation] = []
        after = state.replace(inbox_seen=last, messages=())
        error: str | None = None
        if wanted.compensate:
            effects = crossed_effects(self.store.events(state.task_id), state.version, 0)
            queue = [
                Compensation(key=r.key, skill=r.skill, params=r.params, version=r.version)
                for r in effects
                if _undoable(self.agent, r.skill)
            ]
            missing = [r for r in effects if not _undoable(self.agent, r.skill)]
            if missing:  # the agent changed since cancel checked: undo what can be undone
                error = f"cancel could not undo {describe(missing)}: no rollback hook"
                after = after.with_error(ErrorEntry(kind="compensation_failed", message=error))
        if not queue:
            return self._cancelled(
                state, after, wanted, dropped=dropped, error=error, children=children
            )
        after = after.replace(compensations=tuple(queue), cancelling=wanted)
        action = {
            "kind": "cancel",
            "status": "cancelling",
            **_request(wanted),
            "compensate": [c.key for c in queue],
            **({"dropped": dropped} if dropped else {}),
            **({"children": children} if children else {}),
        }
        draft = Draft(after=after, error=error, identity=_requester(wanted))
        return self._commit(state, draft, action, "human")

    def _cancelled(
        self,
        state: AgentState,
        after: AgentState,
        wanted: Cancelling,
        *,
        undone: bool = False,
        dropped: Sequence[int] = (),
        error: str | None = None,
        children: dict[str, int] | None = None,
    ) -> tuple[AgentState, Event]:
        """Commit ``after`` as ``cancelled`` (once its compensations ran, when ``undone``)."""
        after = after.replace(
            status=TaskStatus.CANCELLED,
            cancelling=None,
            question=None,
            wait=None,
            pending_approval=None,
        )
        action: dict[str, Any] = {"kind": "cancel", "status": "cancelled", **_request(wanted)}
        if undone:
            action["compensated"] = True
        if dropped:
            action["dropped"] = list(dropped)
        if children:
            action["children"] = children  # the cancels posted to unfinished children
        draft = Draft(after=after, error=error, identity=_requester(wanted))
        return self._commit(state, draft, action, "human")


def _asking(state: AgentState) -> bool:
    return state.status is TaskStatus.WAITING_USER


def _listed(message: InboxMessage) -> dict[str, Any]:
    return {
        "seq": message.seq,
        "actor": message.body.get("actor", ""),
        "text": message.body.get("text", ""),
    }


def _senders(messages: Sequence[InboxMessage]) -> Identity | None:
    """Who sent the messages one commit takes: one sender, or the first and a count."""
    people = [i for m in messages if (i := of_message(m.body, by="actor")) is not None]
    names = list(dict.fromkeys(i.by for i in people))
    if not names:
        return None
    reason = people[0].reason if len(people) == 1 else None
    more = f" and {len(names) - 1} more" if len(names) > 1 else ""
    return Identity(by=names[0][: BY_CHARS - len(more)] + more, reason=reason)


def _requester(wanted: Cancelling) -> Identity | None:
    """Who asked for the cancel, and why."""
    return of_message({"actor": wanted.actor, "reason": wanted.reason}, by="actor")


def _request(wanted: Cancelling) -> dict[str, Any]:
    return {
        "seq": wanted.seq,
        "reason": wanted.reason,
        "actor": wanted.actor,
        **({"with_compensation": True} if wanted.compensate else {}),
    }


def cancelled_line(state: AgentState, store: Store | None) -> str:
    """The CLI's summary of a cancelled task: who cancelled it, why, what was undone."""
    from rich.markup import escape

    who, why, undone = "", "", 0
    if store is not None:
        try:
            events = store.events(state.task_id, since=max(0, state.version - 200))
        except Exception:  # a summary is not worth failing the command for
            events = []
        for event in reversed(events):  # the cancel, its compensations, its request
            kind, action = event.action.get("kind"), event.action
            if kind == "compensate":
                undone += 1
            elif kind == "cancel":
                who, why = str(action.get("actor", "")), str(action.get("reason", ""))
                if action.get("status") == "cancelling" or not action.get("compensated"):
                    break
    by = f" by {escape(who)}" if who else ""
    because = f": {escape(why)}" if why else ""
    effects = f" · {undone} effect(s) undone" if undone else ""
    return f"[yellow]cancelled[/]{by}{because} · task {escape(state.task_id)}{effects}"
