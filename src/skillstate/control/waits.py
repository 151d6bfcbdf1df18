"""Durable waits: a task that waits for a time or a signal waits in the store.

``WaitUntil`` and ``WaitFor`` (:mod:`skillstate.engine.actions`) are decisions like
any other: the act phase turns one into a commit that sets the card's status to
``waiting`` and its ``wait`` record (the kind, the signal, the deadline as an
absolute UTC time, what a timeout does). No process sleeps through a wait: ``run``
and ``resume`` return ``stopped="waiting"``, and a worker sends the task a message
that the broker delivers at the deadline (:mod:`skillstate.workers.advance`). So a
wait survives restarts of anything: whoever drives the task next looks at its wait.

That look is the run loop's hook on a waiting task (:meth:`Waits.settle`), done
before anything is decided:

* a signal wait whose signal is in the task's inbox (posted before or after the
  wait began, not consumed by an earlier wait, posted no later than the deadline)
  consumes it: its payload goes into the card's ``signals``, the task runs on;
* a deadline that has passed wakes a ``WaitUntil`` and times a ``WaitFor`` out: the
  task goes to the escalation step (``on_timeout``) with a ``wait_timeout`` entry in
  its error log, or fails with the reason (``waited for signal X for N s``);
* otherwise the task keeps waiting, and the loop returns.

Each of these is one commit (the runtime's), fenced by the lease like any other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from skillstate.audit import Identity, of_message, who
from skillstate.control.signals import KIND, check_payload
from skillstate.engine.actions import WaitFor, WaitUntil
from skillstate.engine.agent import Agent
from skillstate.engine.draft import Draft, decision
from skillstate.errors import ActionRejected, UsageError
from skillstate.events import Actor, Event, utcnow
from skillstate.state.model import (
    AgentState,
    ErrorEntry,
    Received,
    StepRecord,
    TaskStatus,
    Wait,
)
from skillstate.store.base import InboxMessage, Store

if TYPE_CHECKING:
    from skillstate.engine.runtime import Runtime

__all__ = [
    "Commit",
    "Waits",
    "deliver",
    "describe",
    "pending_signal",
    "signal_arrived",
    "start_wait",
    "timeout_message",
    "waiting_summary",
]

Commit = Callable[[AgentState, Draft, dict[str, Any], Actor], tuple[AgentState, Event]]
"""The runtime's commit (:meth:`~skillstate.engine.commit.Committer.commit`)."""


def start_wait(
    agent: Agent[Any],
    state: AgentState,
    action: WaitUntil | WaitFor,
    step_id: str,
    *,
    now: datetime | None = None,
) -> Draft:
    """The draft of a decided wait: the task ``waiting``, its ``wait`` recorded.

    Raises :class:`~skillstate.errors.ActionRejected` (an undeclared signal, an
    escalation step the machine does not have) or
    :class:`~skillstate.errors.IllegalTransition` (one it cannot reach from here):
    refused like any decision, before anything waits.
    """
    now = now or utcnow()
    wait = _until(action, now) if isinstance(action, WaitUntil) else _for(agent, state, action, now)
    record = StepRecord(
        id=f"{step_id}-{action.kind}",
        step=state.current_step,
        action=action.kind,
        summary=describe(wait),
    )
    after = (
        state.replace(
            status=TaskStatus.WAITING,
            wait=wait,
            last_decision=decision(action, wait.signal),
            inputs=(),  # a decision that worked has used the replies it saw
            question=None,
        )
        .with_step(record)
        # A wait completes no plan entry (with_step would strike the step's name off).
        .replace(pending_steps=state.pending_steps)
    )
    return Draft(after=after, step_id=record.id)


def _until(action: WaitUntil, now: datetime) -> Wait:
    if action.at is not None:
        deadline = action.at.astimezone(timezone.utc)
    else:
        deadline = now + timedelta(seconds=action.seconds or 0.0)
    return Wait(kind="until", deadline=deadline, reason=action.reason)


def _for(agent: Agent[Any], state: AgentState, action: WaitFor, now: datetime) -> Wait:
    specs = agent.signal_specs
    spec = specs.get(action.signal)
    if spec is None:
        known = ", ".join(sorted(specs)) or "none (the agent declares no signals)"
        raise ActionRejected(f"cannot wait for signal {action.signal!r}; signals: {known}")
    timeout = action.timeout if action.timeout is not None else spec.timeout
    on_timeout = action.on_timeout if action.on_timeout is not None else spec.on_timeout
    if on_timeout is not None:
        if on_timeout not in agent.machine.steps:
            raise ActionRejected(f"on_timeout {on_timeout!r} is not a step of the machine")
        # Checked now, not when the timeout comes: an escalation that could not be
        # taken would leave the task waiting for ever.
        agent.machine.check(state.current_step, on_timeout)
    deadline = now + timedelta(seconds=timeout) if timeout is not None else None
    return Wait(
        kind="signal",
        signal=action.signal,
        deadline=deadline,
        timeout=timeout,
        reason=action.reason,
        on_timeout=on_timeout,
    )


def deliver(agent: Agent[Any], store: Store, state: AgentState, name: str, data: Any) -> int:
    """Post signal ``name`` to ``state``'s task; returns its inbox number.

    The payload is checked first (declared signal, schema, size: a refusal is one
    :class:`~skillstate.errors.UsageError` line and nothing is posted) and masked by
    the agent's redaction policy as the card would store it: the inbox holds no
    secret in the clear. A task that has ended would never consume it: refused.
    """
    payload = check_payload(agent.signal_specs, name, data, agent.limits)
    if state.status.is_terminal:
        raise UsageError(
            f"task {state.task_id!r} has ended ({state.status.value}): no wait would consume "
            f"signal {name!r}; nothing was delivered"
        )
    masked = agent.redaction.redactor().json(payload)
    # Who sent it (and why) travels with it: the commit that consumes it is the runtime's.
    return store.post(state.task_id, KIND, {"name": name, "data": masked, **who("human")})


def pending_signal(store: Store, state: AgentState, name: str) -> InboxMessage | None:
    """The oldest ``name`` signal in ``state``'s inbox that no wait of the task consumed
    (consumed ones are numbered up to the card's ``signals[name].seq``)."""
    seen = state.signals.get(name)
    for message in store.inbox(state.task_id, after=seen.seq if seen else 0):
        if message.kind == KIND and message.body.get("name") == name:
            return message
    return None


def signal_arrived(runtime: Runtime[Any], task_id: str) -> bool:
    """Whether ``task_id`` waits for a signal that is in its inbox already (read
    without the lease: a worker asks after releasing it, see
    :mod:`skillstate.workers.advance`)."""
    state = runtime.load(task_id)
    wait = state.wait
    if state.status is not TaskStatus.WAITING or wait is None or wait.signal is None:
        return False
    return pending_signal(runtime.store, state, wait.signal) is not None


def describe(wait: Wait) -> str:
    """One line: ``until 2025-05-01T09:00:00Z`` or ``signal paid, until ...``."""
    until = f"until {_iso(wait.deadline)}" if wait.deadline is not None else "no timeout"
    if wait.kind == "until":
        return until
    return f"signal {wait.signal}, {until}"


def waiting_summary(task_id: str, wait: Wait, *, now: datetime | None = None) -> str:
    """What ``skillstate run`` prints for a waiting task (rich markup): what it waits
    for, until when, and the command that moves it on."""
    from rich.markup import escape

    task = escape(task_id)
    left = ""
    if wait.deadline is not None:
        seconds = max(0.0, (wait.deadline - (now or utcnow())).total_seconds())
        left = f" (in {seconds:.0f} s)"
    reason = f"\nreason: {escape(wait.reason)}" if wait.reason else ""
    if wait.kind == "until":
        return (
            f"[yellow]waiting {escape(describe(wait))}{left}[/] · task {task}{reason}\n"
            f"nothing sleeps meanwhile; after that time: skillstate resume {task}"
        )
    then = ""
    if wait.deadline is not None:
        goes = f"goes to step {wait.on_timeout!r}" if wait.on_timeout else "fails"
        then = f"; at the timeout it {goes}"
    return (
        f"[yellow]waiting for {escape(describe(wait))}{left}[/] · task {task}{reason}\n"
        f"deliver it with: skillstate signal {task} {escape(wait.signal or '')} --data '{{...}}'"
        + escape(then)
    )


def timeout_message(wait: Wait) -> str:
    """Why a timed-out signal wait ended: ``waited for signal X for N s``."""
    seconds = f"{wait.timeout:g}" if wait.timeout is not None else "?"
    return f"waited for signal {wait.signal!r} for {seconds} s"


def _iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class Waits:
    """The run loop's hook on a ``waiting`` task (see the module's doc)."""

    agent: Agent[Any]
    store: Store
    commit: Commit

    def settle(self, state: AgentState, *, now: datetime | None = None) -> bool:
        """End ``state``'s wait if its signal came or its deadline passed (one commit).

        True when it committed (the loop reloads and goes on), False while the task
        must keep waiting.
        """
        now = now or utcnow()
        wait = state.wait
        if wait is None:  # a hand edit left a waiting task with nothing to wait for
            self._end(state, state.replace(status=TaskStatus.RUNNING), {"kind": "wake"})
            return True
        if wait.kind == "signal" and wait.signal is not None:
            message = self.pending(state, wait.signal)
            if message is not None and (wait.deadline is None or message.at <= wait.deadline):
                self._consume(state, wait.signal, message)
                return True
        if wait.deadline is None or now < wait.deadline:
            return False
        if wait.kind == "until":
            action = {"kind": "wake", "deadline": _iso(wait.deadline)}
            self._end(state, state.replace(status=TaskStatus.RUNNING, wait=None), action)
        else:
            self._time_out(state, wait)
        return True

    def pending(self, state: AgentState, name: str) -> InboxMessage | None:
        """The oldest ``name`` signal in the inbox that no wait of this task consumed."""
        return pending_signal(self.store, state, name)

    def _consume(self, state: AgentState, name: str, message: InboxMessage) -> None:
        data = message.body.get("data")
        received = Received(seq=message.seq, data=data if isinstance(data, dict) else None)
        after = state.replace(
            status=TaskStatus.RUNNING,
            wait=None,
            signals={**state.signals, name: received},
            no_progress=0,  # news from the world, as a reply is
            tried=(),
        )
        action = {"kind": "signal", "name": name, "seq": message.seq}
        self._end(state, after, action, identity=of_message(message.body))

    def _time_out(self, state: AgentState, wait: Wait) -> None:
        message = timeout_message(wait)
        if wait.on_timeout is not None:
            message += f"; escalated to step {wait.on_timeout!r}"
            status, step = TaskStatus.RUNNING, wait.on_timeout
        else:
            status, step = TaskStatus.FAILED, state.current_step
        entry = ErrorEntry(kind="wait_timeout", message=message)
        after = state.with_error(entry).replace(status=status, current_step=step, wait=None)
        action = {"kind": "wait_timeout", "signal": wait.signal, "to": wait.on_timeout}
        self._end(state, after, action, error=message)

    def _end(
        self,
        state: AgentState,
        after: AgentState,
        action: dict[str, Any],
        *,
        error: str | None = None,
        identity: Identity | None = None,
    ) -> None:
        self.commit(state, Draft(after=after, error=error, identity=identity), action, "runtime")
