"""The helpdesk SQLite database of a ticket task: its schema, its seed rows, its reads.

Three tables: ``tickets`` (the ticket to triage among a few others), ``kb`` (the
knowledge base) and ``replies``. The rows are a pure function of the spec's
params, so two builds of one task leave byte-identical databases.
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

from skillstate.eval.families.ticket.rules import CATEGORIES, PRIORITIES, priority_rule
from skillstate.eval.families.ticket.scenarios import KB, NOISE, SCENARIOS

__all__ = ["DB", "NOW", "Helpdesk", "noise_tickets", "target_row"]

DB = "helpdesk.db"
NOW = "2026-03-03T09:30:00Z"
"""The helpdesk's clock: fixed, so two runs leave byte-identical databases."""

_TICKET_COLUMNS = (
    "id",
    "subject",
    "requester",
    "status",
    "kind",
    "reported_priority",
    "users_affected",
    "blocking",
    "category",
    "priority",
    "created_at",
    "body",
    "assignee",
    "asset_tag",
    "location",
    "cc",
    "sla_due_at",
    "merged_into",
    "closed_at",
)

_SCHEMA = f"""
CREATE TABLE tickets (
    id TEXT PRIMARY KEY,
    subject TEXT NOT NULL,
    requester TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('open', 'pending', 'closed')),
    kind TEXT NOT NULL CHECK (kind IN ('incident', 'request')),
    reported_priority TEXT,
    users_affected INTEGER,
    blocking INTEGER,
    category TEXT CHECK (category IS NULL OR category IN ({", ".join(map(repr, CATEGORIES))})),
    priority TEXT CHECK (priority IS NULL OR priority IN ({", ".join(map(repr, PRIORITIES))})),
    created_at TEXT NOT NULL,
    body TEXT NOT NULL,
    assignee TEXT, asset_tag TEXT, location TEXT, cc TEXT,
    sla_due_at TEXT, merged_into TEXT, closed_at TEXT
);
CREATE TABLE kb (
    article_id TEXT PRIMARY KEY,
    category TEXT NOT NULL,
    title TEXT NOT NULL,
    solution TEXT NOT NULL,
    superseded_by TEXT,
    updated_at TEXT NOT NULL
);
CREATE TABLE replies (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ticket_id TEXT NOT NULL REFERENCES tickets (id),
    author TEXT NOT NULL,
    body TEXT NOT NULL,
    created_at TEXT NOT NULL
);
"""


# ---------------------------------------------------------------- seed rows


def noise_tickets(params: dict[str, Any]) -> list[dict[str, Any]]:
    """The other tickets of the queue, deterministic from the seed (never to be touched)."""
    rng = random.Random(f"{params['seed']}:noise")
    number = int(str(params["ticket_id"]).rsplit("-", 1)[-1])
    templates = list(NOISE)
    rng.shuffle(templates)
    rows: list[dict[str, Any]] = []
    for k in range(int(params.get("noise_tickets", 6))):
        template = templates[k % len(templates)]
        category, kind = template.category, template.kind
        status = rng.choice(("open", "pending", "closed", "closed"))
        users, blocking = rng.randint(1, 3), rng.random() < 0.3
        triaged = status != "open"
        rows.append(
            {
                "id": f"T-{number - k - 1}",
                "subject": template.subject,
                "requester": f"user{rng.randrange(100, 999)}@northwind.example",
                "status": status,
                "kind": kind,
                "reported_priority": rng.choice(("P1", "P2", "P3", None)),
                "users_affected": users,
                "blocking": int(blocking),
                "category": category if triaged else None,
                "priority": priority_rule(kind, users, blocking) if triaged else None,
                "created_at": f"2026-03-0{1 + k % 2}T{8 + k:02d}:{rng.randrange(60):02d}:00Z",
                "body": f"{template.body}\n\n--\nsent from my phone",
                "assignee": rng.choice((None, None, "j.doe", "a.lee")),
                "asset_tag": None if rng.random() < 0.7 else f"NW-{rng.randrange(10**5):05d}",
                "location": rng.choice((None, "Paris", "Lyon", None)),
                "cc": None,
                "sla_due_at": None,
                "merged_into": None,
                "closed_at": "2026-03-02T18:00:00Z" if status == "closed" else None,
            }
        )
    return rows


def target_row(params: dict[str, Any]) -> dict[str, Any]:
    """The ticket to triage, as the spec's scenario builds it (open, untriaged)."""
    scenario = SCENARIOS[str(params["scenario"])]
    return {
        "id": str(params["ticket_id"]),
        "subject": scenario.subject,
        "requester": scenario.requester,
        "status": "open",
        "kind": scenario.kind,
        "reported_priority": scenario.reported_priority,
        "users_affected": scenario.users_affected,
        "blocking": int(scenario.blocking),
        "category": None,
        "priority": None,
        "created_at": "2026-03-03T08:17:00Z",
        "body": scenario.body,
        "assignee": None,
        "asset_tag": None,
        "location": None,
        "cc": None,
        "sla_due_at": None,
        "merged_into": None,
        "closed_at": None,
    }


# ---------------------------------------------------------------- the database


class Helpdesk:
    """One task's ``helpdesk.db``: created from its rows, then read straight from disk.

    The reads are the independent re-checks that verify and the final checks share.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    @contextmanager
    def connect(self) -> Iterator[sqlite3.Connection]:
        """A connection holding one transaction: committed, or rolled back on error."""
        with closing(sqlite3.connect(self.path)) as conn:
            conn.row_factory = sqlite3.Row
            with conn:
                yield conn

    def create(self, tickets: list[dict[str, Any]], closed: list[dict[str, Any]]) -> None:
        """A fresh database: the schema, ``tickets``, the whole knowledge base, and one
        service-desk reply on each ticket of ``closed``."""
        self.path.unlink(missing_ok=True)
        rows = sorted(tickets, key=lambda r: str(r["id"]))
        with self.connect() as conn:
            conn.executescript(_SCHEMA)
            conn.executemany(
                f"INSERT INTO tickets ({', '.join(_TICKET_COLUMNS)}) "
                f"VALUES ({', '.join('?' for _ in _TICKET_COLUMNS)})",
                [tuple(r[c] for c in _TICKET_COLUMNS) for r in rows],
            )
            conn.executemany(
                "INSERT INTO kb VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (
                        a.article_id,
                        a.category,
                        a.title,
                        a.solution,
                        a.superseded_by,
                        "2026-01-15" if a.superseded_by is None else "2024-06-01",
                    )
                    for a in KB
                ],
            )
            conn.executemany(
                "INSERT INTO replies (ticket_id, author, body, created_at) VALUES (?, ?, ?, ?)",
                [
                    (r["id"], "servicedesk", f"Fixed: {r['subject'].lower()}.", r["closed_at"])
                    for r in closed
                ],
            )

    def row(self, ticket_id: str) -> dict[str, Any] | None:
        """One ticket's columns, or ``None`` if there is no such ticket."""
        with self.connect() as conn:
            found = conn.execute("SELECT * FROM tickets WHERE id = ?", (ticket_id,)).fetchone()
        return None if found is None else dict(found)

    def replies(self, ticket_id: str) -> list[dict[str, Any]]:
        """A ticket's replies, oldest first."""
        with self.connect() as conn:
            rows = conn.execute(
                "SELECT * FROM replies WHERE ticket_id = ? ORDER BY id", (ticket_id,)
            ).fetchall()
        return [dict(r) for r in rows]

    def kb(self) -> list[dict[str, Any]]:
        """Every knowledge-base article, by id."""
        with self.connect() as conn:
            return [dict(r) for r in conn.execute("SELECT * FROM kb ORDER BY article_id")]

    def kb_articles(self, category: str) -> list[dict[str, Any]]:
        """A category's knowledge-base articles, by id (so oldest first)."""
        with self.connect() as conn:
            rows = conn.execute(
                "SELECT * FROM kb WHERE category = ? ORDER BY article_id", (category,)
            ).fetchall()
        return [dict(r) for r in rows]
