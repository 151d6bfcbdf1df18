"""Counting the workers a task has killed, and the dead letter that ends the count.

The count lives in the task's own error log, in the store (the only truth): worker
memory dies with the worker, and a counter kept in the broker would not survive a
purge. A worker that takes a task over from a dead one commits a ``worker_lost``
entry; its ``attempt`` is one more than the previous entry's when nothing was
committed in between (the entry's ``step_id`` names the version the note itself
became), so crashes only count *in a row*: a task that makes progress between two
kills is not crashing its workers, it is just unlucky.

After ``max_crashes`` in a row the task is dead-lettered instead: a ``dead_letter``
entry, status ``failed``, and no message for it any more. ``skillstate requeue ID``
(:func:`reopen`) puts it back to ``running`` and sends a new message.
"""

from __future__ import annotations

from typing import Any, cast

from skillstate.engine.runtime import Runtime
from skillstate.errors import UsageError
from skillstate.state.model import AgentState, ErrorEntry, TaskStatus

__all__ = ["crash_note", "dead_letter", "dead_lettered", "reason_to_fail", "reopen"]


def crash_note(state: AgentState, holder: str, max_crashes: int) -> ErrorEntry:
    """The entry that records ``holder``'s death: ``worker_lost``, or ``dead_letter``
    when it is the ``max_crashes``-th in a row."""
    last = state.errors[-1] if state.errors else None
    in_a_row = (
        last.attempt + 1
        if last is not None
        and last.kind == "worker_lost"
        and last.step_id == _version_id(state.version)
        else 1
    )
    where = f"at step {state.current_step!r} (version {state.version})"
    if in_a_row >= max_crashes:
        return ErrorEntry(
            kind="dead_letter",
            message=f"dead letter: {in_a_row} workers in a row died running this task {where}; "
            f"the last was {holder}. Fix the cause, then: skillstate requeue {state.task_id}",
            attempt=in_a_row,
            max_attempts=max_crashes,
            permanent=True,
        )
    return ErrorEntry(
        kind="worker_lost",
        message=f"worker {holder} died holding the task {where}; taken over",
        step_id=_version_id(state.version + 1),  # the version this note becomes
        attempt=in_a_row,
        max_attempts=max_crashes,
    )


def reason_to_fail(reason: str) -> ErrorEntry:
    """A dead letter for another reason than crashes (a provider that keeps failing)."""
    return ErrorEntry(kind="dead_letter", message=f"dead letter: {reason}", permanent=True)


def dead_letter(runtime: Runtime[Any], task_id: str, entry: ErrorEntry) -> None:
    """Fail the task with ``entry`` as its reason (one commit, under the lease)."""
    action = {"kind": "dead_letter", "reason": entry.message}
    runtime.mark(task_id, action, error=entry, status=TaskStatus.FAILED)


def dead_lettered(state: AgentState) -> bool:
    """Whether the task failed because workers gave up on it (so it may be reopened)."""
    return (
        state.status is TaskStatus.FAILED
        and bool(state.errors)
        and state.errors[-1].kind == "dead_letter"
    )


def reopen(runtime: Runtime[Any], task_id: str) -> AgentState:
    """Put a dead-lettered task back to ``running`` (a person's decision, recorded as
    one); a running task is left as it is. Raises :class:`UsageError` otherwise."""
    state = runtime.load(task_id)
    if state.status is TaskStatus.RUNNING or state.status is TaskStatus.CREATED:
        return cast(AgentState, state)
    if not dead_lettered(state):
        raise UsageError(
            f"task {task_id!r} is {state.status.value}, not dead-lettered: nothing to requeue"
        )
    action = {"kind": "requeue", "after": state.errors[-1].message}
    return cast(AgentState, runtime.mark(task_id, action, status=TaskStatus.RUNNING, actor="human"))


def _version_id(version: int) -> str:
    return f"v{version}"
