"""Deleting from the PostgreSQL stores, as ops both drivers run (:mod:`.postgres_ops`).

A task's rows go in one transaction, the ``tasks`` row first: deleting it takes its
row lock, so a commit racing the delete waits, then finds no head and is refused as
stale. Deleted rows stay in the table files as dead tuples until (auto)vacuum
reclaims them, as after any PostgreSQL delete; run ``VACUUM`` on the schema's tables
when they must leave the disk at once.
"""

from __future__ import annotations

from datetime import datetime

from skillstate.store.base import check_task_id
from skillstate.store.postgres_ops import BEGIN, Op, PostgresOps, Statement

__all__ = ["delete_artifact", "delete_task"]

_TASK_TABLES = ("checkpoints", "events", "leases", "inboxes", "inbox")
"""Every table with a ``task_id`` column besides ``tasks``."""


def delete_task(ops: PostgresOps, task_id: str) -> Op[bool]:
    check_task_id(task_id)
    s = ops.sql.schema
    yield BEGIN
    found = yield Statement(
        f"DELETE FROM {s}.tasks WHERE task_id = %s", (task_id,), fetch="rowcount"
    )
    others = 0
    for table in _TASK_TABLES:
        count = yield Statement(
            f"DELETE FROM {s}.{table} WHERE task_id = %s", (task_id,), fetch="rowcount"
        )
        others += count
    ops._chains.pop(task_id, None)
    return bool(found or others)


def delete_artifact(ops: PostgresOps, ref: str, unused_since: datetime | None) -> Op[bool]:
    # One statement: the age check and the delete see the same row version, so a put
    # that refreshed created_at first keeps the artifact (ON CONFLICT DO UPDATE).
    deleted = yield Statement(
        f"DELETE FROM {ops.sql.schema}.artifacts WHERE ref = %(ref)s "
        "AND (%(since)s::timestamptz IS NULL OR created_at < %(since)s::timestamptz)",
        {"ref": ref, "since": unused_since},
        fetch="rowcount",
    )
    return bool(deleted)
