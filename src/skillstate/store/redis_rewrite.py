"""``rewrite`` and the artifact listing of the Redis store (:mod:`skillstate.store.redis`).

Operations as :mod:`.redis_ops` writes them (generators that yield what they need
the server to do), run by both Redis stores; the layout is described in
:mod:`skillstate.store.redis`.

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
from typing import Any

from skillstate.errors import ArtifactNotFound, Conflict, StaleState, StateCorrupted, TaskNotFound
from skillstate.store.base import check_task_id
from skillstate.store.redis_codec import field_version, header, pack, to_bytes, unpack, version_of
from skillstate.store.redis_io import Call, Exec, Layout, Lua, Ops, Watch, scan, script
from skillstate.store.redis_url import glob_escape
from skillstate.store.rewriting import Body, RewritePlan, plan_rewrite

__all__ = ["artifact_refs", "replace_artifact", "rewrite"]

_ATTEMPTS = 100
"""WATCH retries before a rewrite gives up on a task that is written to without pause."""

_REF = re.compile(rb"sha256:[0-9a-f]{64}")

# KEYS: the artifact's hash; ARGV: data. Replaces the data of an existing artifact only.
_REPLACE = Lua(
    """
if redis.call('HEXISTS', KEYS[1], 'data') == 0 then
  return 0
end
redis.call('HSET', KEYS[1], 'data', ARGV[1])
return 1
"""
)


def rewrite(
    store: Layout, task_id: str, expected_version: int, fn: Callable[[Any], Any]
) -> Ops[int]:
    """:meth:`Store.rewrite` on Redis (see the module docstring)."""
    from redis.exceptions import WatchError

    check_task_id(task_id)
    names = ("task", "cp", "snap", "sum", "ev")
    keys = {name: store._key(name, task_id) for name in names}
    for _ in range(_ATTEMPTS):
        yield Watch(tuple(keys.values()))
        try:
            try:
                plan, records = yield from _plan(keys, task_id, expected_version, fn)
            except StateCorrupted:
                # The reads are not one snapshot: damage is only damage if nothing
                # moved meanwhile, which an empty transaction's EXEC tells.
                yield Exec(())
                raise
            if plan.changed or plan.rows:
                yield Exec(_write(keys, plan, records))
        except WatchError:
            continue
        return plan.changed
    raise Conflict(
        f"task {task_id!r} changed during each of {_ATTEMPTS} rewrite attempts; nothing was written"
    )


def _plan(
    keys: dict[str, str], task_id: str, expected: int, fn: Callable[[Any], Any]
) -> Ops[tuple[RewritePlan, dict[int, bytes]]]:
    """The plan, and each kept version's checkpoint record as stored (to rewrite it)."""
    version, head, checksum = yield Call(("HMGET", keys["task"], "version", "head", "digest"))
    if version is None:
        raise TaskNotFound(task_id)
    number = version_of(task_id, version)
    if number != expected:
        raise StaleState(task_id, expected, number)
    if head is None:
        raise StateCorrupted(task_id, number, "the task record has no head")
    records: dict[bytes, bytes] = yield Call(("HGETALL", keys["cp"]))
    snapshots: dict[bytes, bytes] = yield Call(("HGETALL", keys["snap"]))
    sums: dict[bytes, bytes] = yield Call(("HGETALL", keys["sum"]))
    stored_events: dict[bytes, bytes] = yield Call(("HGETALL", keys["ev"]))
    bodies: list[Body] = []
    by_version: dict[int, bytes] = {}
    for name, record in records.items():
        v = field_version(task_id, name)
        is_snapshot, _, _, stored = header(task_id, v, record)
        snapshot = None
        if is_snapshot:
            body = snapshots.get(name)
            if body is None:
                raise StateCorrupted(task_id, v, "its snapshot body is missing")
            snapshot = unpack(task_id, v, body)
        raw = sums.get(name)
        digest = raw.decode("ascii", "replace") if raw is not None else None
        bodies.append(Body(v, snapshot, unpack(task_id, v, stored) or None, digest))
        by_version[v] = record
    events = {
        field_version(task_id, name): unpack(task_id, field_version(task_id, name), text)
        for name, text in stored_events.items()
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


def _write(keys: dict[str, str], plan: RewritePlan, records: dict[int, bytes]) -> tuple[Call, ...]:
    """The plan's writes (to go inside MULTI): only fields that change, layout kept."""
    calls: list[Call] = []
    if plan.head is not None:
        fields = ["head", plan.head]
        if plan.head_digest is not None:
            fields += ["digest", plan.head_digest]
        calls.append(Call(("HSET", keys["task"], *fields)))
    for version, body in plan.rows.items():
        kind, _, created, _ = records[version].split(b" ", 3)
        patch = to_bytes(pack(body.patch or ""))
        if body.snapshot is not None:
            stored = to_bytes(pack(body.snapshot))
            calls.append(Call(("HSET", keys["snap"], str(version), stored)))
            size = len(stored)
        else:
            size = len(patch)
        record = b" ".join((kind, str(size).encode(), created, patch))
        calls.append(Call(("HSET", keys["cp"], str(version), record)))
        if body.digest is not None:
            calls.append(Call(("HSET", keys["sum"], str(version), body.digest)))
    for version, text in plan.events.items():
        calls.append(Call(("HSET", keys["ev"], str(version), pack(text))))
    return tuple(calls)


def artifact_refs(store: Layout) -> Ops[list[str]]:
    """Every ``P:art:REF`` key's ref (SCAN: the keyspace is walked, never blocked)."""
    head = f"{store.prefix}:art:".encode()
    keys = yield from scan(f"{glob_escape(store.prefix)}:art:*")
    refs = [key[len(head) :] for key in keys]
    return sorted(ref.decode("ascii") for ref in refs if _REF.fullmatch(ref))


def replace_artifact(store: Layout, ref: str, data: bytes) -> Ops[None]:
    """Overwrite the data of an existing artifact (one script: it cannot create one)."""
    done = yield from script(_REPLACE, (store._key("art", ref),), (bytes(data),))
    if not done:
        raise ArtifactNotFound(f"no artifact {ref!r}")
