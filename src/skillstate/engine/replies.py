"""The replies a run is given (``Runtime.run(task, inputs=[...])``), numbered.

``inputs[i]`` is the task's reply number ``inputs_from + i``, so running again with the
same list after a crash never gives a reply twice. The numbering is absolute, which
makes one mistake easy: calling ``run`` a second time with *new* replies and the
default ``inputs_from=0``. The new replies then carry numbers the task has already
received and used to be dropped without a word while the task waited forever.
:func:`check_numbering` refuses that before anything is written (a list that repeats
what was received, as after a crash, is fine), and :func:`unused` says which inputs a
run did not give (the task finished, or stopped, before asking).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from skillstate.errors import Conflict, UsageError
from skillstate.skills.handles import reply_note, secret_reply
from skillstate.state.model import AgentState, TaskStatus, UserInput
from skillstate.state.redact import Redactor
from skillstate.store.base import Store

__all__ = ["check_numbering", "unused"]


def check_numbering(
    store: Store, state: AgentState, inputs: Sequence[str], first: int, redactor: Redactor
) -> None:
    """Refuse ``inputs`` (numbered from ``first``) that differ from replies the task has
    already received under the same numbers. Raises a one-line :class:`UsageError`."""
    received = state.inputs_received
    overlap = min(len(inputs), received - first)
    if overlap <= 0:
        return
    given = {
        e.action.get("index"): e.action.get("text")
        for e in store.events(state.task_id)
        if e.action.get("kind") == "reply"
    }
    for i in range(overlap):
        number = first + i
        text = inputs[i]
        if given.get(number) not in (text, redactor.text(text)):
            raise UsageError(
                f"task {state.task_id!r} already received reply {number} (it has "
                f"{received}); inputs are numbered from inputs_from={first}, so input {i} "
                f"would be reply {number} again. Pass inputs_from={received} to give the "
                "next replies, or use Runtime.reply()"
            )


def unused(inputs: Sequence[str], first: int, state: AgentState) -> tuple[str, ...]:
    """The ``inputs`` (numbered from ``first``) that ``state`` has not received."""
    given = state.inputs_received - first
    return tuple(inputs[max(given, 0) :])


def replied(
    state: AgentState, text: str, *, ahead: bool, into: str | None
) -> tuple[AgentState, dict[str, Any]]:
    """The card after ``text`` answers the open question of ``state``, and the event's
    action. With ``ahead``, ``text`` is the card's first reply given ahead, taken off
    it in the same commit; with ``into``, it is a secret kept in that ``Sensitive``
    field, and the reply the decision sees is the field's handle."""
    task_id = state.task_id
    if ahead and state.replies_ahead[:1] != (text,):
        raise Conflict(f"task {task_id!r}: its replies given ahead changed meanwhile")
    kept: AgentState = state
    if into is not None:
        kept = secret_reply(state, into, text)
        text = reply_note(into)
    reply = UserInput(index=state.inputs_received, text=text)
    after = kept.replace(
        status=TaskStatus.RUNNING,
        inputs=(*state.inputs, reply),
        inputs_received=reply.index + 1,
        replies_ahead=state.replies_ahead[1:] if ahead else state.replies_ahead,
        question=None,
        no_progress=0,
        tried=(),
    )
    action = {
        "kind": "reply",
        "text": text,
        "index": reply.index,
        "question": state.question,
        **({"ahead": True} if ahead else {}),
        **({"into": into} if into is not None else {}),
    }
    return after, action
