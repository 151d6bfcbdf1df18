"""``restore`` on the PostgreSQL stores, as an op both drivers run (:mod:`.postgres_ops`).

One transaction: the task's row is locked (``FOR UPDATE``) or, for a new task,
inserted, and every checkpoint, event and inbox message is written before ``COMMIT``.
A crash or a lost connection before it rolls everything back, so the task is whole
or absent (with ``overwrite``: whole, or still the old one). A concurrent restore or
first commit of the same new id waits on the primary key and then fails: only one
of them creates the task.
"""

from __future__ import annotations

from skillstate.errors import TaskExists
from skillstate.store.postgres_ops import BEGIN, Op, PostgresOps, Statement, _deflate, _pack
from skillstate.store.restoring import RestorePlan

__all__ = ["restore"]

_COMPRESS_HEAD_FROM = 16 * 1024
"""As :mod:`.postgres_ops` stores heads: compressed from this many characters."""


def restore(ops: PostgresOps, plan: RestorePlan, *, overwrite: bool, url: str) -> Op[int]:
    s, task_id = ops.sql.schema, plan.task_id
    yield BEGIN
    found = yield Statement(
        f"SELECT version FROM {s}.tasks WHERE task_id = %s FOR UPDATE", (task_id,), fetch="one"
    )
    if found is not None:
        if not overwrite:
            raise TaskExists(f"task {task_id!r} already exists in {url}; nothing was written")
        for table in ("checkpoints", "events", "inboxes", "inbox"):
            yield Statement(f"DELETE FROM {s}.{table} WHERE task_id = %s", (task_id,))
    large = len(plan.head) >= _COMPRESS_HEAD_FROM
    yield Statement(
        f"INSERT INTO {s}.tasks "
        "(task_id, version, updated_at, head, head_z, chain_len, chain_bytes, digest) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (task_id) DO UPDATE SET "
        "version = excluded.version, updated_at = excluded.updated_at, head = excluded.head, "
        "head_z = excluded.head_z, chain_len = excluded.chain_len, "
        "chain_bytes = excluded.chain_bytes, digest = excluded.digest",
        (
            task_id,
            plan.version,
            plan.updated_at,
            None if large else plan.head,
            _deflate(plan.head) if large else None,
            plan.chain_len,
            plan.chain_bytes,
            plan.head_digest,
        ),
    )
    yield Statement(
        f"INSERT INTO {s}.checkpoints "
        "(task_id, version, snapshot, snapshot_z, patch, patch_z, created_at, digest) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
        [
            (task_id, r.version, *_pack(r.snapshot), *_pack(r.patch), r.created_at, r.digest)
            for r in plan.rows
        ],
        many=True,
    )
    yield Statement(
        f"INSERT INTO {s}.events (task_id, version, event, event_z) VALUES (%s, %s, %s, %s)",
        [(task_id, e.version, *_pack(e.text)) for e in plan.events],
        many=True,
    )
    if plan.inbox:
        yield Statement(
            f"INSERT INTO {s}.inbox (task_id, seq, kind, body, posted_at) "
            "VALUES (%s, %s, %s, %s, %s)",
            [(task_id, m.seq, m.kind, m.body, m.at) for m in plan.inbox],
            many=True,
        )
        yield Statement(
            f"INSERT INTO {s}.inboxes (task_id, last_seq) VALUES (%s, %s)",
            (task_id, len(plan.inbox)),
        )
    ops._chains.pop(task_id, None)
    return plan.version
