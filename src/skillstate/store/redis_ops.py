"""The Redis store's operations, written once for both of its drivers.

Each :class:`~skillstate.store.base.Store` method of the Redis store (and its
layout setup) is a generator here, in the vocabulary of :mod:`.redis_io`: it yields
the commands, pipelines, scripts and ``WATCH`` transactions it needs and returns the
method's result. :class:`~skillstate.store.redis.RedisStore` runs them blocking,
:class:`~skillstate.store.redis_async.AsyncRedisStore` on the event loop: the key
layout, the commit encoding, the reply decoding, the ``NOSCRIPT`` and ``WatchError``
retries and the layout migrations exist once, here (``rewrite`` and the artifact
listing in :mod:`.redis_rewrite`). The layout is described in
:mod:`skillstate.store.redis`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime
from functools import partial
from typing import Any

from skillstate.errors import (
    ArtifactNotFound,
    Conflict,
    LeaseHeld,
    StateCorrupted,
    StoreError,
    TaskNotFound,
)
from skillstate.events import Event, utcnow
from skillstate.store import redis_lua
from skillstate.store.base import (
    Checkpoint,
    CheckpointInfo,
    HeadInfo,
    InboxMessage,
    Lease,
    PruneResult,
    artifact_ref,
    check_task_id,
)
from skillstate.store.chain import (
    LEASE_HORIZON,
    Row,
    check_chain_counters,
    check_ttl,
    damaged_lease,
    held_lease,
    plan_prune,
    read_head,
    rebuild,
    restore_event,
    salvage_lease,
)
from skillstate.store.heads import head_info
from skillstate.store.inbox import encode_message, read_message
from skillstate.store.redis_codec import (
    field_version,
    from_ms,
    header,
    info,
    lease_fields,
    number,
    read_time,
    unpack,
    version_of,
)
from skillstate.store.redis_commit import commit_args, committed
from skillstate.store.redis_io import (
    Batch,
    Call,
    Exec,
    Layout,
    Lua,
    Ops,
    Watch,
    scan,
    script,
)
from skillstate.store.redis_url import glob_escape

__all__ = [
    "MIGRATIONS",
    "checkpoint",
    "checkpoints",
    "claim",
    "commit",
    "commit_args",
    "committed",
    "events",
    "exists",
    "force_release",
    "get_artifact",
    "heads",
    "inbox",
    "lease",
    "load",
    "post",
    "prune",
    "put_artifact",
    "release",
    "schema_versions",
    "setup",
    "tasks",
]

CHUNK = 1000
"""Fields per HMGET/HDEL, so a long task never becomes one giant command."""

_PRUNE_ATTEMPTS = 100
"""WATCH retries before prune gives up on a task that is committed to without pause."""


COMMIT = Lua(redis_lua.COMMIT)
CHECKPOINT = Lua(redis_lua.CHECKPOINT)
CLAIM = Lua(redis_lua.CLAIM)
RELEASE = Lua(redis_lua.RELEASE)
FORCE_RELEASE = Lua(redis_lua.FORCE_RELEASE)
POST = Lua(redis_lua.POST)
CONVERT_LEASE = Lua(redis_lua.CONVERT_LEASE)


# --------------------------------------------------------------------- layout migrations


def _initial_layout(store: Layout) -> Ops[None]:
    """Layout 1: nothing to convert (later fields are read as optional)."""
    yield from ()


def _lease_hashes(store: Layout) -> Ops[None]:
    """Layout 2: every lease string (worker, PX) becomes a hash with generation 0."""
    for key in (yield from scan(f"{glob_escape(store.prefix)}:lease:*")):
        yield from script(CONVERT_LEASE, (key,), ())


# Versioned, append-only, like the SQLite store's MIGRATIONS. Several processes may
# open a store at once and run a missing step concurrently, so every step must be
# idempotent; the version is recorded (HSETNX) only after its step has run.
MIGRATIONS: tuple[tuple[int, Callable[[Layout], Ops[None]]], ...] = (
    (1, _initial_layout),
    (2, _lease_hashes),
)


def setup(store: Layout) -> Ops[None]:
    """Apply the layout migrations the database lacks."""
    done = set((yield from schema_versions(store)))
    for version, migrate in MIGRATIONS:
        if version not in done:
            yield from migrate(store)
            yield Call(("HSETNX", store._key("schema"), str(version), utcnow().isoformat()))


def exists(store: Layout) -> Ops[bool]:
    """Whether anything of a store is under the prefix: its layout record or task index."""
    return bool((yield Call(("EXISTS", store._key("schema"), store._key("tasks")))))


def schema_versions(store: Layout) -> Ops[list[int]]:
    """Layout versions recorded, oldest first; a damaged or too new record is ``StoreError``."""
    key = store._key("schema")
    fields: list[bytes] = yield Call(("HKEYS", key))
    versions = []
    for name in fields:
        try:
            versions.append(int(name.decode("ascii")))
        except (UnicodeDecodeError, ValueError):
            raise StoreError(
                f"Redis store {store.url}: its layout record {key!r} is damaged "
                f"({name!r} is not a layout version)"
            ) from None
    newest = max(version for version, _ in MIGRATIONS)
    if versions and max(versions) > newest:
        raise StoreError(
            f"Redis store {store.url} has layout {max(versions)}, newer than {newest}, "
            "the newest this code knows: upgrade skillstate"
        )
    return sorted(versions)


# --------------------------------------------------------------------- the protocol


def load(store: Layout, task_id: str, verify: bool) -> Ops[Checkpoint]:
    check_task_id(task_id)
    fields = ("version", "head", "updated_at", "digest", "chain_len", "chain_bytes")
    version, head, updated_at, checksum, chain_len, chain_bytes = yield Call(
        ("HMGET", store._key("task", task_id), *fields)
    )
    if version is None:
        raise TaskNotFound(task_id)
    parsed = version_of(task_id, version)
    if head is None or updated_at is None:
        raise StateCorrupted(task_id, parsed, "the task record has no head")
    if verify:
        check_chain_counters(task_id, parsed, chain_len, chain_bytes)
    state = read_head(task_id, parsed, head, checksum, verify=verify)
    return Checkpoint(task_id, parsed, state, read_time(task_id, parsed, updated_at))


def commit(
    store: Layout,
    task_id: str,
    expected_version: int,
    state: Mapping[str, Any],
    event: Event,
    *,
    fence: int | None,
) -> Ops[int]:
    """One COMMIT script: fence, compare, snapshot rule and every write (redis_lua)."""
    enc, args = commit_args(store, task_id, expected_version, state, event, fence=fence)
    reply = yield from script(COMMIT, store.commit_keys(task_id), args, hot=True)
    return committed(store, enc, reply)


def checkpoint(store: Layout, task_id: str, version: int) -> Ops[Checkpoint]:
    check_task_id(task_id)
    keys = tuple(store._key(kind, task_id) for kind in ("task", "cp", "snap", "sum"))
    reply: list[Any] = yield from script(CHECKPOINT, keys, (version,))
    kind = reply[0]
    if kind == 0:
        raise TaskNotFound(task_id)
    if kind == 1:
        head, updated_at, checksum = [*reply[1:], None, None, None][:3]
        if head is None or updated_at is None:
            raise StateCorrupted(task_id, version, "the task record has no head")
        state = read_head(task_id, version, head, checksum)
        return Checkpoint(task_id, version, state, read_time(task_id, version, updated_at))
    if kind == 3:
        raise StoreError(f"task {task_id!r} has no checkpoint at version {version}")
    body: bytes | None = reply[1]
    records: list[bytes] = reply[2::2]  # newest first
    checksums: list[bytes | None] = reply[3::2]
    rows: list[Row] = []
    pairs = zip(reversed(records), reversed(checksums), strict=True)
    for v, (record, raw) in enumerate(pairs, version - len(records) + 1):
        is_snapshot, _, created_at, stored = header(task_id, v, record)
        digest = raw.decode("ascii", "replace") if raw is not None else None
        # Only the oldest record can be a snapshot (the walk stops there); a body
        # that has gone missing stays None and rebuild reports the broken chain.
        snapshot = unpack(task_id, v, body) if is_snapshot and body is not None else None
        rows.append(Row(v, snapshot, unpack(task_id, v, stored) or None, created_at, digest))
    return Checkpoint(task_id, version, rebuild(task_id, version, rows), rows[-1].created_at)


def checkpoints(store: Layout, task_id: str) -> Ops[list[CheckpointInfo]]:
    check_task_id(task_id)
    exists, records = yield Batch(
        (
            Call(("EXISTS", store._key("task", task_id))),
            Call(("HGETALL", store._key("cp", task_id))),
        ),
        transaction=True,
    )
    if not exists:
        raise TaskNotFound(task_id)
    return [
        info(task_id, version, records[name])
        for version, name in sorted((field_version(task_id, f), f) for f in records)
    ]


def events(store: Layout, task_id: str, since: int) -> Ops[list[Event]]:
    check_task_id(task_id)
    head = yield Call(("HGET", store._key("task", task_id), "version"))
    if head is None:
        raise TaskNotFound(task_id)
    versions = list(range(max(since, 0) + 1, version_of(task_id, head) + 1))
    # Versions above the head read now are not asked for: the answer is the log as
    # of that head. Events are never deleted, so the second read sees every one of
    # them; a checkpoint pruned meanwhile only drops a patch, which is what events()
    # returns for a pruned version anyway.
    calls: list[Call] = []
    for start in range(0, len(versions), CHUNK):
        chunk = versions[start : start + CHUNK]
        calls.append(Call(("HMGET", store._key("ev", task_id), *chunk)))
        calls.append(Call(("HMGET", store._key("cp", task_id), *chunk)))
    replies: list[list[bytes | None]] = (
        (yield Batch(tuple(calls), transaction=False)) if calls else []
    )
    texts = [text for reply in replies[0::2] for text in reply]
    records = [record for reply in replies[1::2] for record in reply]
    found = []
    for version, text, record in zip(versions, texts, records, strict=True):
        if text is None:
            continue  # as stored: a missing event shows as a missing version
        stored = header(task_id, version, record)[3] if record is not None else b""
        patch = unpack(task_id, version, stored) or None
        found.append(restore_event(task_id, unpack(task_id, version, text), patch, version))
    return found


def tasks(store: Layout) -> Ops[list[str]]:
    members: list[bytes] = yield Call(("ZRANGE", store._key("tasks"), 0, -1))
    return sorted(m.decode() for m in members)


def heads(store: Layout) -> Ops[list[HeadInfo]]:
    """The task index, then each task's head fields and lease hash, pipelined in chunks."""
    ids = yield from tasks(store)
    infos = []
    for start in range(0, len(ids), CHUNK):
        chunk = ids[start : start + CHUNK]
        calls: list[Call] = []
        for task_id in chunk:
            calls.append(
                Call(("HMGET", store._key("task", task_id), "version", "head", "updated_at"))
            )
            calls.append(
                Call(("HMGET", store._key("lease", task_id), "worker", "expires", "generation"))
            )
        replies = yield Batch(tuple(calls), transaction=False)
        for i, task_id in enumerate(chunk):
            infos.append(_head_info(task_id, replies[2 * i], replies[2 * i + 1]))
    return infos


def _head_info(task_id: str, record: list[Any], lease: list[Any]) -> HeadInfo:
    version, head, updated_at = record
    worker, expires, generation = lease
    problem = None
    if version is None:
        problem = "the task is indexed but has no task record"
    elif updated_at is None:
        problem = "the task record has no head"
    return head_info(
        task_id,
        number(version),
        head,
        None if updated_at is None else partial(read_time, task_id, None, updated_at),
        None
        if worker is None and generation is None
        else lease_fields(worker, expires, generation),
        problem=problem,
    )


def prune(store: Layout, task_id: str, keep_last: int, keep_every: int | None) -> Ops[PruneResult]:
    """plan_prune in Python (the rule every backend shares) between WATCH and EXEC:
    a commit or another prune in between makes EXEC fail, and the plan is made again."""
    from redis.exceptions import WatchError

    check_task_id(task_id)
    task_key, cp_key = store._key("task", task_id), store._key("cp", task_id)
    for _ in range(_PRUNE_ATTEMPTS):
        yield Watch((task_key, cp_key))
        if not (yield Call(("EXISTS", task_key))):
            raise TaskNotFound(task_id)
        records: dict[bytes, bytes] = yield Call(("HGETALL", cp_key))
        infos = [info(task_id, field_version(task_id, f), r) for f, r in records.items()]
        kept, deleted = plan_prune(task_id, infos, keep_last=keep_last, keep_every=keep_every)
        if deleted:
            calls: list[Call] = []
            for start in range(0, len(deleted), CHUNK):
                chunk = deleted[start : start + CHUNK]
                for kind in ("cp", "snap", "sum"):
                    calls.append(Call(("HDEL", store._key(kind, task_id), *chunk)))
            try:
                yield Exec(tuple(calls))
            except WatchError:
                continue
        return PruneResult(task_id, kept, deleted)
    raise Conflict(
        f"task {task_id!r} changed during each of {_PRUNE_ATTEMPTS} prune attempts; "
        "nothing was deleted"
    )


def claim(store: Layout, task_id: str, worker: str, ttl: float) -> Ops[Lease]:
    check_task_id(task_id)
    # Whole milliseconds; a ttl that rounds to nothing expires at once.
    ttl_ms = max(1, round(check_ttl(ttl) * 1000))
    key = store._key("lease", task_id)
    args = (worker, ttl_ms, round(LEASE_HORIZON * 1000))
    result: list[Any] = yield from script(CLAIM, (key,), args)
    if result[0] == 1:
        return Lease(task_id, worker, from_ms(result[2]), int(result[1]))
    if result[0] == 0:
        raise LeaseHeld(task_id, result[1].decode(), from_ms(result[2]))
    held_lease(task_id, *(yield from _lease_record(key)))  # says what is damaged
    raise damaged_lease(task_id, "the lease record does not read")  # pragma: no cover


def release(store: Layout, task_id: str, worker: str) -> Ops[None]:
    check_task_id(task_id)
    yield from script(RELEASE, (store._key("lease", task_id),), (worker,))


def lease(store: Layout, task_id: str) -> Ops[Lease | None]:
    check_task_id(task_id)
    worker, expires, generation = yield from _lease_record(store._key("lease", task_id))
    if worker is None and generation is None:
        return None  # never claimed
    return held_lease(task_id, worker, expires, generation)[0]


def force_release(store: Layout, task_id: str) -> Ops[Lease | None]:
    check_task_id(task_id)
    reply: list[Any] = yield from script(FORCE_RELEASE, (store._key("lease", task_id),), ())
    if not reply[0]:
        return None
    worker, generation, expires = [*reply[1:], None, None, None][:3]
    return salvage_lease(task_id, *lease_fields(worker, expires, generation))


def _lease_record(key: str) -> Ops[tuple[str | None, Any, Any]]:
    """``(worker, expires in seconds, generation)`` of a lease hash, as read."""
    worker, generation, expires = yield Call(("HMGET", key, "worker", "generation", "expires"))
    return lease_fields(worker, expires, generation)


def put_artifact(store: Layout, data: bytes, media_type: str) -> Ops[str]:
    ref = artifact_ref(data)
    key = store._key("art", ref)
    # Content-addressed: the same ref always means the same bytes, so the first
    # writer wins data and media type; created_at becomes the last put, what gc's
    # grace period is measured from (skillstate.ops.gc).
    fields = (("data", bytes(data)), ("media_type", media_type))
    calls = tuple(Call(("HSETNX", key, *pair)) for pair in fields)
    at = Call(("HSET", key, "created_at", utcnow().isoformat()))
    yield Batch((*calls, at), transaction=True)
    return ref


def get_artifact(store: Layout, ref: str) -> Ops[bytes]:
    data: bytes | None = yield Call(("HGET", store._key("art", ref), "data"))
    if data is None:
        raise ArtifactNotFound(f"no artifact {ref!r}")
    return data


def post(store: Layout, task_id: str, kind: str, body: Mapping[str, Any]) -> Ops[int]:
    """One POST script: the task must exist, the message's number is the list's length."""
    text = encode_message(task_id, kind, body)
    at = utcnow().isoformat()
    stored = f'{{"kind":{json.dumps(kind)},"at":"{at}","body":{text}}}'.encode()
    keys = (store._key("task", task_id), store._key("inbox", task_id))
    seq = yield from script(POST, keys, (stored,))
    if not seq:
        raise TaskNotFound(task_id)
    return int(seq)


def inbox(store: Layout, task_id: str, after: int) -> Ops[list[InboxMessage]]:
    check_task_id(task_id)
    exists, stored = yield Batch(
        (
            Call(("EXISTS", store._key("task", task_id))),
            Call(("LRANGE", store._key("inbox", task_id), max(after, 0), -1)),
        ),
        transaction=True,
    )
    if not exists:
        raise TaskNotFound(task_id)
    return [_message(task_id, seq, raw) for seq, raw in enumerate(stored, max(after, 0) + 1)]


def _message(task_id: str, seq: int, raw: bytes) -> InboxMessage:
    try:
        record = json.loads(raw)
        kind, body, at = record["kind"], record["body"], datetime.fromisoformat(record["at"])
    except (ValueError, KeyError, TypeError) as exc:
        raise StateCorrupted(task_id, None, f"inbox message {seq} does not load ({exc})") from exc
    return read_message(task_id, seq, kind, body, at)
