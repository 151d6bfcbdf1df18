"""``SQLiteStore.restore``: a whole task written in the caller's one transaction.

Kept apart from :mod:`skillstate.store.sqlite` (already long). The caller holds a
``BEGIN IMMEDIATE`` transaction, so the task is all there after ``COMMIT`` or, after a
crash at any instant, not there at all (or, with ``overwrite``, still the old one).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from skillstate.errors import TaskExists
from skillstate.store.restoring import RestorePlan

__all__ = ["write_plan"]


def write_plan(
    cur: sqlite3.Cursor,
    plan: RestorePlan,
    *,
    overwrite: bool,
    url: str,
    pack: Callable[[str | None], str | bytes | None],
) -> None:
    """Write ``plan`` in the open transaction of ``cur`` (``pack`` compresses a body)."""
    task_id = plan.task_id
    if cur.execute("SELECT 1 FROM tasks WHERE task_id = ?", (task_id,)).fetchone():
        if not overwrite:
            raise TaskExists(f"task {task_id!r} already exists in {url}; nothing was written")
        cur.execute("DELETE FROM versions WHERE task_id = ?", (task_id,))
        cur.execute("DELETE FROM inbox WHERE task_id = ?", (task_id,))
    cur.execute(
        "INSERT INTO tasks (task_id, version, updated_at, head, chain_len, chain_bytes, digest) "
        "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (task_id) DO UPDATE SET "
        "version = excluded.version, updated_at = excluded.updated_at, head = excluded.head, "
        "chain_len = excluded.chain_len, chain_bytes = excluded.chain_bytes, "
        "digest = excluded.digest",
        (
            task_id,
            plan.version,
            plan.updated_at.isoformat(),
            plan.head,
            plan.chain_len,
            plan.chain_bytes,
            plan.head_digest,
        ),
    )
    rows = {row.version: row for row in plan.rows}
    values = []
    for event in plan.events:
        row = rows.get(event.version)
        created = row.created_at if row else plan.updated_at
        values.append(
            (
                task_id,
                event.version,
                1 if row else 0,
                pack(row.snapshot) if row else None,
                pack(row.patch) if row else None,
                pack(event.text),
                created.isoformat(),
                row.digest if row else None,
            )
        )
    cur.executemany(
        "INSERT INTO versions (task_id, version, kept, snapshot, patch, event, created_at, digest) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        values,
    )
    cur.executemany(
        "INSERT INTO inbox (task_id, seq, kind, body, posted_at) VALUES (?, ?, ?, ?, ?)",
        [(task_id, m.seq, m.kind, m.body, m.at.isoformat()) for m in plan.inbox],
    )
