"""The helpdesk's tools: what an agent may call on a ticket task's database.

Each tool is a bound method with a plain keyword signature and a one-line
docstring: the raw-tools variants build their skills from both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from skillstate.eval.families.ticket.db import NOW, Helpdesk
from skillstate.eval.families.ticket.rules import CATEGORIES, PRIORITIES

__all__ = ["EFFECT_TOOLS", "HelpdeskTools"]

EFFECT_TOOLS = frozenset({"update_ticket", "post_reply", "close_ticket"})
"""The tools that change the database."""


class HelpdeskTools:
    """The tools over one task's helpdesk database."""

    def __init__(self, db: Helpdesk) -> None:
        self.db = db

    def as_dict(self) -> dict[str, Callable[..., Any]]:
        """Every tool by its name, in the order an agent sees them."""
        return {
            "get_ticket": self.get_ticket,
            "search_kb": self.search_kb,
            "update_ticket": self.update_ticket,
            "post_reply": self.post_reply,
            "close_ticket": self.close_ticket,
        }

    def get_ticket(self, ticket_id: str) -> dict[str, Any]:
        """Read one ticket (all its columns, the full e-mail body included)."""
        row = self.db.row(ticket_id)
        if row is None:
            raise LookupError(f"no ticket {ticket_id!r}")
        row["blocking"] = None if row["blocking"] is None else bool(row["blocking"])
        row["custom_fields"] = {"vip": None, "cost_center": None, "survey": None}
        return row

    def search_kb(self, category: str) -> list[dict[str, Any]]:
        """The knowledge-base articles of a category, oldest first."""
        if category not in CATEGORIES:
            raise ValueError(f"unknown category {category!r}; one of {', '.join(CATEGORIES)}")
        return [
            {**r, "views": 40 + 7 * i, "tags": [category], "attachments": None, "owner": None}
            for i, r in enumerate(self.db.kb_articles(category))
        ]

    def update_ticket(self, ticket_id: str, category: str, priority: str) -> str:
        """Set a ticket's category and priority."""
        if category not in CATEGORIES:
            raise ValueError(f"unknown category {category!r}; one of {', '.join(CATEGORIES)}")
        if priority not in PRIORITIES:
            raise ValueError(f"unknown priority {priority!r}; one of {', '.join(PRIORITIES)}")
        with self.db.connect() as conn:
            done = conn.execute(
                "UPDATE tickets SET category = ?, priority = ? WHERE id = ?",
                (category, priority, ticket_id),
            ).rowcount
        if not done:
            raise LookupError(f"no ticket {ticket_id!r}")
        return f"{ticket_id}: category={category} priority={priority}"

    def post_reply(self, ticket_id: str, body: str) -> dict[str, Any]:
        """Post a reply to the ticket's requester (an effect: post once per ticket)."""
        if not body.strip():
            raise ValueError("a reply needs a body")
        if self.db.row(ticket_id) is None:
            raise LookupError(f"no ticket {ticket_id!r}")
        with self.db.connect() as conn:
            cursor = conn.execute(
                "INSERT INTO replies (ticket_id, author, body, created_at) VALUES (?, ?, ?, ?)",
                (ticket_id, "servicedesk", body.strip(), NOW),
            )
        return {"reply_id": cursor.lastrowid, "ticket_id": ticket_id, "status": "posted"}

    def close_ticket(self, ticket_id: str) -> str:
        """Close a ticket."""
        with self.db.connect() as conn:
            done = conn.execute(
                "UPDATE tickets SET status = 'closed', closed_at = COALESCE(closed_at, ?) "
                "WHERE id = ?",
                (NOW, ticket_id),
            ).rowcount
        if not done:
            raise LookupError(f"no ticket {ticket_id!r}")
        return f"{ticket_id} closed"
