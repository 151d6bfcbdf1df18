"""What an agent does with a message sent to its running task (``Agent(messages=...)``),
and how a decision marks the messages it saw.

Kept apart from :mod:`skillstate.control.inbox` (which needs the engine) so the agent
definition and the commit phase can use them without an import cycle.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from skillstate.state.model import AgentState, UserMessage

__all__ = ["MESSAGE_STRATEGIES", "MessageStrategy", "seen_by"]

MessageStrategy = Literal["enqueue", "interrupt", "reject"]
"""``enqueue``: the next decision sees the message; ``interrupt``: the next decision
sees it first, marked urgent (and a wait for a reply ends); ``reject``: refused."""

MESSAGE_STRATEGIES: tuple[MessageStrategy, ...] = ("enqueue", "interrupt", "reject")


def seen_by(state: AgentState, shown: Sequence[UserMessage]) -> AgentState:
    """``state`` without the messages a decision's view showed: a decision sees each once."""
    if not shown or not state.messages:
        return state
    done = {m.seq for m in shown}
    return state.replace(messages=tuple(m for m in state.messages if m.seq not in done))
