"""``rewrite`` and the artifact listing of the Redis store (:mod:`skillstate.store.redis`).

Kept apart so the store's module stays readable; the layout is described there.

:func:`rewrite` is a ``WATCH``/``MULTI``/``EXEC`` transaction, like ``prune``: it
watches the task's keys (task, cp, snap, sum, ev), reads every body, plans the
rewrite in Python (:func:`~skillstate.store.rewriting.plan_rewrite`) and writes the
changed fields in one ``MULTI``/``EXEC``. A commit or prune of the task in between
makes ``EXEC`` fail and the rewrite starts again (and finds the head moved:
``StaleState``). ``EXEC`` is applied whole or not at all; a client killed before it
has sent ``EXEC`` leaves nothing behind (the server drops the queued commands with
the connection).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from skillstate.errors import ArtifactNotFound, Conflict, StaleState, StateCorrupted, TaskNotFound
from skillstate.store.base import check_task_id
from skillstate.store.redis_url import glob_escape
from skillstate.store.rewriting import Body, RewritePlan, plan_rewrite

if TYPE_CHECKING:
    from skillstate.store.redis import RedisStore

__all__ = ["artifact_refs", "replace_artifact", "rewrite"]

_ATTEMPTS = 100
"""WATCH retries before a rewrite gives up on a task that is written to without pause."""

_REF = re.compile(rb"sha256:[0-9a-f]{64}")

# KEYS: the artifact's hash; ARGV: data. Replaces the data of an existing artifact only.
_REPLACE = """
if redis.call('HEXISTS', KEYS[1], 'data') == 0 then
  return 0
end
redis.call('HSET', KEYS[1], 'data', ARGV[1])
return 1
"""


def rewrite(
    store: RedisStore, task_id: str, expected_version: int, fn: Callable[[Any], Any]
) -> int:
    """:meth:`Store.rewrite` on Redis (see the module docstring)."""
    check_task_id(task_id)
    names = ("task", "cp", "snap", "sum", "ev")
    keys = {name: store._key(name, task_id) for name in names}
    watch_error = store._redis.exceptions.WatchError
    with store._errors():
        for _ in range(_ATTEMPTS):
            with store._client.pipeline(transaction=True) as pipe:
                try:
                    cast("Callable[..., bool]", pipe.watch)(*keys.values())
                    try:
                        plan, records = _plan(pipe, keys, task_id, expected_version, fn)
                    except StateCorrupted:
                        # The reads are not one snapshot: damage is only damage if nothing
                        # moved meanwhile, which an empty transaction's EXEC tells.
                        pipe.multi()
                        pipe.execute()
                        raise
                    if plan.changed or plan.rows:
                        pipe.multi()
                        _write(pipe, keys, plan, records)
                        pipe.execute()
                except watch_error:
                    continue
            return plan.changed
    raise Conflict(
        f"task {task_id!r} changed during each of {_ATTEMPTS} rewrite attempts; nothing was written"
    )


def _plan(
    pipe: Any, keys: dict[str, str], task_id: str, expected: int, fn: Callable[[Any], Any]
) -> tuple[RewritePlan, dict[int, bytes]]:
    """The plan, and each kept version's checkpoint record as stored (to rewrite it)."""
    from skillstate.store.redis import _field_version, _header, _unpack, _version

    version, head, checksum = pipe.hmget(keys["task"], ["version", "head", "digest"])
    if version is None:
        raise TaskNotFound(task_id)
    number = _version(task_id, version)
    if number != expected:
        raise StaleState(task_id, expected, number)
    if head is None:
        raise StateCorrupted(task_id, number, "the task record has no head")
    records = cast("dict[bytes, bytes]", pipe.hgetall(keys["cp"]))
    snapshots = cast("dict[bytes, bytes]", pipe.hgetall(keys["snap"]))
    sums = cast("dict[bytes, bytes]", pipe.hgetall(keys["sum"]))
    stored_events = cast("dict[bytes, bytes]", pipe.hgetall(keys["ev"]))
    bodies: list[Body] = []
    by_version: dict[int, bytes] = {}
    for field, record in records.items():
        v = _field_version(task_id, field)
        is_snapshot, _, _, stored = _header(task_id, v, record)
        snapshot = None
        if is_snapshot:
            body = snapshots.get(field)
            if body is None:
                raise StateCorrupted(task_id, v, "its snapshot body is missing")
            snapshot = _unpack(task_id, v, body)
        raw = sums.get(field)
        digest = raw.decode("ascii", "replace") if raw is not None else None
        bodies.append(Body(v, snapshot, _unpack(task_id, v, stored) or None, digest))
        by_version[v] = record
    events = {
        _field_version(task_id, field): _unpack(task_id, _field_version(task_id, field), text)
        for field, text in stored_events.items()
    }
    plan = plan_rewrite(
        task_id,
        fn,
        version=number,
        head=head,
        head_digest=checksum,
        rows=bodies,
        events=events,
    )
    return plan, by_version


def _write(pipe: Any, keys: dict[str, str], plan: RewritePlan, records: dict[int, bytes]) -> None:
    """Queue the plan's writes (inside MULTI): only fields that change, layout kept."""
    from skillstate.store.redis import _pack

    if plan.head is not None:
        fields: dict[str, str] = {"head": plan.head}
        if plan.head_digest is not None:
            fields["digest"] = plan.head_digest
        pipe.hset(keys["task"], mapping=fields)
    for version, body in plan.rows.items():
        kind, _, created, _ = records[version].split(b" ", 3)
        patch = _bytes(_pack(body.patch or ""))
        if body.snapshot is not None:
            stored = _bytes(_pack(body.snapshot))
            pipe.hset(keys["snap"], str(version), stored)
            size = len(stored)
        else:
            size = len(patch)
        record = b" ".join((kind, str(size).encode(), created, patch))
        pipe.hset(keys["cp"], str(version), record)
        if body.digest is not None:
            pipe.hset(keys["sum"], str(version), body.digest)
    for version, text in plan.events.items():
        pipe.hset(keys["ev"], str(version), _pack(text))


def _bytes(value: str | bytes) -> bytes:
    return value.encode() if isinstance(value, str) else value


def artifact_refs(store: RedisStore) -> list[str]:
    """Every ``P:art:REF`` key's ref (SCAN: the keyspace is walked, never blocked)."""
    head = f"{store.prefix}:art:".encode()
    refs = []
    with store._errors():
        for key in store._client.scan_iter(match=f"{glob_escape(store.prefix)}:art:*", count=1000):
            ref = cast("bytes", key)[len(head) :]
            if _REF.fullmatch(ref):
                refs.append(ref.decode("ascii"))
    return sorted(refs)


def replace_artifact(store: RedisStore, ref: str, data: bytes) -> None:
    """Overwrite the data of an existing artifact (one script: it cannot create one)."""
    with store._errors():
        done = store._client.eval(_REPLACE, 1, store._key("art", ref), bytes(data))
    if not done:
        raise ArtifactNotFound(f"no artifact {ref!r}")
