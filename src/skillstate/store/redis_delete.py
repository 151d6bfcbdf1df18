"""Deleting from the Redis stores, as operations both drivers run (:mod:`.redis_ops`).

A task is its keys (see :mod:`skillstate.store.redis` for the layout) and its member
of ``P:tasks``: all of them go in one ``MULTI``/``EXEC``, so the task is whole or
gone. An artifact with a grace period goes in one script that reads its time of last
put and deletes it only when that is older: a put that refreshed the time first
keeps it, a put after the delete writes it again.
"""

from __future__ import annotations

from datetime import datetime, timezone

from skillstate.store.base import check_task_id
from skillstate.store.redis_io import Batch, Call, Layout, Lua, Ops, script

__all__ = ["delete_artifact", "delete_task"]

TASK_KEYS = ("task", "cp", "snap", "sum", "ev", "inbox", "lease")
"""The kinds of key one task owns."""

# Times are ISO 8601 UTC as utcnow().isoformat() writes them: they sort as text.
_DELETE_ARTIFACT = Lua(
    """
local at = redis.call('HGET', KEYS[1], 'created_at')
if not at and redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if ARGV[1] ~= '' and at and at >= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1
"""
)


def delete_task(store: Layout, task_id: str) -> Ops[bool]:
    check_task_id(task_id)
    keys = tuple(store._key(kind, task_id) for kind in TASK_KEYS)
    reply = yield Batch(
        (Call(("DEL", *keys)), Call(("ZREM", store._key("tasks"), task_id))),
        transaction=True,
    )
    return bool(reply[0] or reply[1])


def delete_artifact(store: Layout, ref: str, unused_since: datetime | None) -> Ops[bool]:
    since = "" if unused_since is None else unused_since.astimezone(timezone.utc).isoformat()
    done = yield from script(_DELETE_ARTIFACT, (store._key("art", ref),), (since,))
    return bool(done)
