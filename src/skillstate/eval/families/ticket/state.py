"""The ticket task's card (:class:`TicketState`) and the steps it moves through."""

from __future__ import annotations

from skillstate.eval.families.ticket.rules import Category, Kind, Priority
from skillstate.state.machine import StateMachine
from skillstate.state.model import AgentState

__all__ = ["MACHINE", "TicketState"]


class TicketState(AgentState):
    """The card of a ticket task: what was read, decided and done."""

    ticket_id: str = ""
    """The ticket to triage (set by the environment's ``initial``)."""
    message: str | None = None
    """The requester's own words, without the quoted thread and the signature."""
    kind: Kind | None = None
    users_affected: int | None = None
    blocking: bool | None = None
    """The requester cannot work at all."""
    category: Category | None = None
    priority: Priority | None = None
    reply_id: int | None = None
    kb_article: str | None = None
    closed: bool = False


MACHINE = StateMachine(
    {
        "init": ["reading"],
        "reading": ["triaging"],
        "triaging": ["replying"],
        "replying": ["closing"],
        "closing": ["done"],
        "done": [],
    },
    initial="init",
)
"""init -> reading -> triaging -> replying -> closing -> done."""
