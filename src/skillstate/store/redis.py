"""Redis store: shared state for many worker processes or machines (``redis-py``).

URL: ``redis://[[user]:password@]host[:port][/db][?prefix=NAME]`` (``rediss://``
for TLS). Every key starts with ``NAME:`` (default ``skillstate``), so several
stores can share one Redis database. Other query parameters (``socket_timeout``,
``max_connections``...) go to redis-py unchanged; one that redis-py's connection
does not take (or that would change how values are encoded, like
``decode_responses``) is ``InvalidStoreURL`` naming it.

A server that cannot be reached (down, refusing, timing out, rejecting the
credentials, a database number it does not have) is
:class:`~skillstate.errors.StoreUnavailable` naming the URL with its password
masked, on opening and on any later call; other Redis errors are ``StoreError``.

Layout, per task ``ID`` (``P`` is the prefix)::

    P:task:ID    hash    version, head (the head document whole), chain_len,
                         chain_bytes, updated_at, digest (the head's checksum)
    P:cp:ID      hash    VERSION -> "KIND SIZE CREATED_AT PATCH"  (one per kept version)
    P:snap:ID    hash    VERSION -> snapshot text                 (snapshot versions only)
    P:sum:ID     hash    VERSION -> the version's checksum        (one per kept version)
    P:ev:ID      hash    VERSION -> event JSON without its patch  (never pruned)
    P:lease:ID   hash    worker (absent once released), generation, expires
                         (ms since the epoch, the server's clock); never deleted,
                         so the generation survives releases and expiry
    P:tasks      zset    every task id (score 0: members sort by bytes = code points)
    P:art:REF    hash    data, media_type, created_at
    P:schema     hash    layout version -> when it was applied

The checkpoint record carries a short header (``S``/``D`` for snapshot or delta,
the body's size in bytes as stored, the commit time) so that
:meth:`RedisStore.checkpoints` never has to read snapshot bodies, and the patch
inline: it is usually small and every reader of a record wants it. Snapshots live
apart because they are large and only a rebuild needs them.

Snapshot bodies, patches and event texts of 768 characters or more are stored
zlib-compressed (level 1, as the SQLite store does): a NUL byte, then the zlib
stream. Every value stored before this (and every shorter one) is JSON text, which
never starts with NUL (JSON escapes control characters), so the marker is
unambiguous and data written uncompressed loads unchanged: no layout migration. The
head stays uncompressed: loading it is the hot read.

Versions written before checksums have no ``P:sum`` field and no ``digest`` in
the task hash: they load unverified, again without a migration. Layout 2 turned the lease from a
string expiring with ``PX`` into the hash above (``MIGRATIONS``); the
Lua scripts live in :mod:`skillstate.store.redis_lua`.

``commit`` is one Lua script, hence one round trip and atomic: it checks the
fencing token against the lease, compares the version, mirrors
:func:`skillstate.store.chain.take_snapshot` and writes everything. redis-py
retries a command whose connection broke (as its ``retry`` setting allows); if
the first attempt had landed, the retry finds the head moved and reports
``StaleState``, so a retried commit is never written twice.

The commit is the hot path, so it skips redis-py's generic command layer, which
cost more Python than everything else a commit does: the store packs the
``EVALSHA`` itself (the script's SHA and the task's keys packed once per task),
sends it on a connection of its own and reads the reply with redis-py's parser,
under redis-py's retry policy; ``NOSCRIPT`` (a restarted or flushed server) loads
the script and sends the commit once more. The reply of a commit that landed is
one string. The own connection is taken from the pool once and kept for commits
while no other thread commits (then a pooled one serves), and only from a pool of
16 connections or more (redis-py's default is 100): a store used for more than
commits then holds one connection more than before. Before each commit it is
checked with one ``poll`` (the pool's checkout check costs several syscalls): one
the server closed meanwhile is reconnected before anything is sent. A process
forked from the one that took it takes another.

Cross-key scripts mean a single Redis (or a primary with replicas), not Redis
Cluster: the keys of one task are not hash-tagged into one slot, and the ``tasks``
set spans all of them.
"""

from __future__ import annotations

import os
import select
import threading
import zlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from datetime import datetime, timezone
from functools import partial
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

from skillstate.errors import (
    ArtifactNotFound,
    Conflict,
    InvalidStoreURL,
    LeaseHeld,
    LeaseLost,
    MissingExtra,
    StaleState,
    StateCorrupted,
    StoreError,
    StoreNotFound,
    StoreUnavailable,
    TaskNotFound,
)
from skillstate.events import Event, utcnow
from skillstate.store import redis_lua, redis_rewrite
from skillstate.store.base import (
    Checkpoint,
    CheckpointInfo,
    HeadInfo,
    Lease,
    PruneResult,
    artifact_ref,
    check_task_id,
)
from skillstate.store.chain import (
    COMPRESS_FROM,
    DEFAULT_MAX_CHAIN,
    LEASE_HORIZON,
    Row,
    check_fence,
    check_ttl,
    damaged_lease,
    encode_commit,
    held_lease,
    plan_prune,
    read_head,
    rebuild,
    restore_event,
    salvage_lease,
    take_snapshot,
)
from skillstate.store.heads import head_info
from skillstate.store.redis_url import DEFAULT_PREFIX, glob_escape
from skillstate.store.redis_url import parse_url as _parse_url

if TYPE_CHECKING:
    import redis

__all__ = ["DEFAULT_PREFIX", "RedisStore"]

OPEN_TIMEOUT = 2.0
"""Seconds the opening ping may take: a server that is down fails fast, not after retries."""

_PRUNE_ATTEMPTS = 100
"""WATCH retries before prune gives up on a task that is committed to without pause."""

_CHUNK = 1000
"""Fields per HMGET/HDEL, so a long task never becomes one giant command."""

_COMPRESS_FROM = COMPRESS_FROM  # the rule every store shares (store.chain)
"""Bodies at least this many characters long are stored compressed (the SQLite store's
threshold: below it zlib costs more time per commit than the bytes are worth)."""

_ZLIB = b"\0"
"""Leads a compressed value. Stored JSON text never starts with (or contains) NUL."""

_CHAIN_CACHE = 4096
"""Tasks whose chain counters a store remembers from its own commits (then forgotten)."""

_OWN_CONNECTION_FROM = 16
"""A pool of at least this many connections (redis-py's default is 100) lends one to
commits for good; a smaller one, sized on purpose by ``max_connections``, is left
whole and commits check a connection out per call."""


# --------------------------------------------------------------------- layout migrations


def _initial_layout(client: redis.Redis, prefix: str) -> None:
    """Layout 1: nothing to convert (later fields are read as optional)."""


def _lease_hashes(client: redis.Redis, prefix: str) -> None:
    """Layout 2: every lease string (worker, PX) becomes a hash with generation 0."""
    convert = client.register_script(redis_lua.CONVERT_LEASE)
    for key in client.scan_iter(match=f"{glob_escape(prefix)}:lease:*", count=1000):
        convert(keys=[key])


# Versioned, append-only, like the SQLite store's MIGRATIONS. Several processes may
# open a store at once and run a missing step concurrently, so every step must be
# idempotent; the version is recorded (HSETNX) only after its step has run.
MIGRATIONS: tuple[tuple[int, Callable[[redis.Redis, str], None]], ...] = (
    (1, _initial_layout),
    (2, _lease_hashes),
)


# --------------------------------------------------------------------- the store


class RedisStore:
    """A store in a Redis database, shared by every process that opens the same URL."""

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        max_chain: int = DEFAULT_MAX_CHAIN,
        create: bool = True,
    ) -> None:
        """Connect (a short ping first) and apply missing layout migrations.

        There is nothing to create on a Redis server, but a store exists once
        something was stored under its prefix: ``create=False`` opens only a prefix
        that holds skillstate data (its layout record or its task index), and is
        ``StoreNotFound`` naming the URL otherwise, having written nothing.
        """
        module = _redis()
        self._redis = module
        client_url, prefix, masked = _parse_url(url, module)
        self.url = masked
        self.prefix = prefix
        self.max_chain = max_chain
        self._closed = False
        # task -> (version, chain_len, chain_bytes) after this store's last commit to
        # it: with it, commit knows whether the script will snapshot and compresses the
        # state only then. A stale or missing entry costs a compression, never a
        # wrong decision (the script decides; see redis_lua.COMMIT).
        self._chains: dict[str, tuple[int, int, int]] = {}
        self._ping(module, client_url)
        try:
            self._client: redis.Redis = module.Redis.from_url(client_url)
        except (TypeError, ValueError) as exc:
            raise InvalidStoreURL(f"bad Redis URL {masked!r}: {_one_line(exc)}") from exc
        # register_script only hashes the text; EVALSHA loads it on first use.
        # COMMIT is sent packed by this store (see _evalsha): only its SHA is kept.
        self._commit_sha = self._client.register_script(redis_lua.COMMIT).sha.encode()
        # task -> the packed EVALSHA, SHA and keys that start each of its commits.
        self._commit_heads: dict[str, tuple[int, bytes]] = {}
        # The connection commits use while no other thread does (see _send). It is
        # one of the pool's, kept out of it: only when the pool has many to spare.
        self._own: Any = None
        self._own_lock = threading.Lock()
        pool_size = getattr(self._client.connection_pool, "max_connections", 0)
        self._own_ok = isinstance(pool_size, int) and pool_size >= _OWN_CONNECTION_FROM
        self._checkpoint = self._client.register_script(redis_lua.CHECKPOINT)
        self._claim = self._client.register_script(redis_lua.CLAIM)
        self._release = self._client.register_script(redis_lua.RELEASE)
        self._force_release = self._client.register_script(redis_lua.FORCE_RELEASE)
        try:
            if not create and not self._exists():
                raise StoreNotFound(self.url, f"no skillstate data under prefix {prefix!r}")
            self.setup()
        except BaseException:
            self.close()
            raise

    @classmethod
    def from_url(cls, url: str, *, create: bool = True) -> RedisStore:
        return cls(url, create=create)

    # ------------------------------------------------------------------ schema

    def setup(self) -> None:
        """Apply the layout migrations this database lacks. Safe to call any number of times."""
        key = self._key("schema")
        done = set(self.schema_versions())
        with self._errors():
            for version, migrate in MIGRATIONS:
                if version in done:
                    continue
                migrate(self._client, self.prefix)
                self._client.hsetnx(key, str(version), utcnow().isoformat())

    def _exists(self) -> bool:
        """Whether anything of a store is under the prefix: its layout record or task index."""
        with self._errors():
            return bool(self._client.exists(self._key("schema"), self._key("tasks")))

    def schema_versions(self) -> list[int]:
        """Layout versions recorded in this database, oldest first.

        A record that is not a layout version, or names one newer than this code
        knows, is a one-line ``StoreError``: the store is not opened on a guess.
        """
        key = self._key("schema")
        with self._errors():
            fields = cast("list[bytes]", self._client.hkeys(key))
        versions = []
        for field in fields:
            try:
                versions.append(int(field.decode("ascii")))
            except (UnicodeDecodeError, ValueError):
                raise StoreError(
                    f"Redis store {self.url}: its layout record {key!r} is damaged "
                    f"({field!r} is not a layout version)"
                ) from None
        newest = max(version for version, _ in MIGRATIONS)
        if versions and max(versions) > newest:
            raise StoreError(
                f"Redis store {self.url} has layout {max(versions)}, newer than {newest}, "
                "the newest this code knows: upgrade skillstate"
            )
        return sorted(versions)

    # ------------------------------------------------------------------ protocol

    def load(self, task_id: str, *, verify: bool = True) -> Checkpoint:
        check_task_id(task_id)
        with self._errors():
            version, head, updated_at, checksum = self._client.hmget(
                self._key("task", task_id), ["version", "head", "updated_at", "digest"]
            )
        if version is None:
            raise TaskNotFound(task_id)
        number = _version(task_id, version)
        if head is None or updated_at is None:
            raise StateCorrupted(task_id, number, "the task record has no head")
        state = read_head(task_id, number, head, checksum, verify=verify)
        return Checkpoint(task_id, number, state, _time(task_id, number, updated_at))

    def commit(
        self,
        task_id: str,
        expected_version: int,
        state: Mapping[str, Any],
        event: Event,
        *,
        fence: int | None = None,
    ) -> int:
        enc = encode_commit(task_id, expected_version, state, event, fence=fence)
        patch = enc.patch or ""
        chain = self._chains.get(task_id)
        if chain is not None and chain[0] == enc.expected:
            snapshot = take_snapshot(chain[1], chain[2], enc, self.max_chain)
        else:
            snapshot = True  # cannot tell: send the snapshot body in case
        state_text = enc.state.encode()
        if snapshot and len(enc.state) >= _COMPRESS_FROM:
            body = _ZLIB + zlib.compress(state_text, 1)
        else:
            body = b""
        # The arguments of redis_lua.COMMIT, after its keys, in its order.
        args = (
            b"%d" % enc.expected,
            b"%d" % enc.version,
            state_text,
            _pack_bytes(enc.event),
            _pack_bytes(patch),
            b"1" if enc.is_delta else b"0",
            b"%d" % len(patch),
            b"%d" % len(enc.state),
            b"%d" % self.max_chain,
            utcnow().isoformat().encode(),
            task_id.encode(),
            body,
            enc.digest.encode(),
            b"" if enc.fence is None else b"%d" % enc.fence,
            enc.version_digest.encode(),
        )
        count, head = self._commit_head(task_id)
        command = b"".join((b"*%d\r\n" % (count + len(args)), head, *map(_bulk, args)))
        reply = self._evalsha(command, redis_lua.COMMIT)
        if isinstance(reply, bytes):  # committed
            version, chain_len, chain_bytes = map(int, reply.split())
            if len(self._chains) >= _CHAIN_CACHE:
                self._chains.clear()
            self._chains[task_id] = (version, chain_len, chain_bytes)
            return version
        result = cast("list[Any]", reply)
        if result[0] == 2:
            _, holder, generation = [*result, None, None][:3]
            check_fence(task_id, enc.fence, holder, _number(generation))
            raise LeaseLost(task_id, enc.fence or 0, None)  # pragma: no cover - raced
        if result[0] == 3:
            raise StateCorrupted(task_id, None, "the task record's version is not a number")
        if result[0] != 0:  # pragma: no cover - the script returns nothing else
            raise StoreError(f"Redis store {self.url}: unexpected commit reply {reply!r}")
        raise StaleState(task_id, enc.expected, result[1])

    def _commit_head(self, task_id: str) -> tuple[int, bytes]:
        """How many frames start a task's COMMIT, and those frames packed: ``EVALSHA``,
        the script's SHA, the number of keys, the keys (the same for every commit)."""
        head = self._commit_heads.get(task_id)
        if head is None:
            keys = [
                self._key("task", task_id),
                self._key("cp", task_id),
                self._key("snap", task_id),
                self._key("ev", task_id),
                self._key("tasks"),
                self._key("lease", task_id),
                self._key("sum", task_id),
            ]
            parts = [b"EVALSHA", self._commit_sha, b"%d" % len(keys)]
            parts += [key.encode() for key in keys]
            head = (len(parts), b"".join(map(_bulk, parts)))
            if len(self._commit_heads) >= _CHAIN_CACHE:
                self._commit_heads.clear()
            self._commit_heads[task_id] = head
        return head

    def _evalsha(self, command: bytes, script: str) -> Any:
        """Send one packed ``EVALSHA`` and read its reply: one round trip.

        This is what redis-py's ``Script`` call does, minus its generic command
        layer (argument encoding, per-call bookkeeping), which cost a commit more
        than the round trip itself: redis-py's retry policy (a broken connection is
        dropped, reconnected and the command sent again), the reply read by
        redis-py's parser, errors translated as every call's are. A server that does
        not have the script (restarted, flushed) gets it loaded and the command
        sent once more: ``NOSCRIPT`` means nothing ran.

        The connection is the store's own commit connection while no other thread
        is using it (checking one out of the pool and back costs a commit several
        syscalls), else a pooled one: see :data:`_OWN_CONNECTION_FROM`.
        """
        exceptions = self._redis.exceptions
        with self._errors():
            for attempt in (1, 2):
                try:
                    return self._send(command)
                except exceptions.NoScriptError:
                    if attempt == 2:
                        raise
                self._client.script_load(script)
        raise AssertionError("unreachable")  # pragma: no cover

    def _send(self, command: bytes) -> Any:
        if self._own_ok and self._own_lock.acquire(blocking=False):
            try:
                conn = self._own
                if conn is None or conn.pid != os.getpid():
                    # None yet, or inherited through a fork: its socket is the parent's.
                    conn = self._own = self._client.connection_pool.get_connection()
                elif not _idle(conn):
                    # Closed by the server since the last commit (its idle timeout, a
                    # restart): reconnect before sending, as the pool does on checkout,
                    # so that the command goes out once, on a live connection.
                    conn.disconnect()
                return _call(conn, command)
            finally:
                self._own_lock.release()
        pool = self._client.connection_pool
        conn = pool.get_connection()
        try:
            return _call(conn, command)
        finally:
            pool.release(conn)

    def checkpoint(self, task_id: str, version: int) -> Checkpoint:
        check_task_id(task_id)
        with self._errors():
            reply = cast(
                "list[Any]",
                self._checkpoint(
                    keys=[
                        self._key("task", task_id),
                        self._key("cp", task_id),
                        self._key("snap", task_id),
                        self._key("sum", task_id),
                    ],
                    args=[version],
                ),
            )
        kind = cast("int", reply[0])
        if kind == 0:
            raise TaskNotFound(task_id)
        if kind == 1:
            head, updated_at, checksum = [*reply[1:], None, None, None][:3]
            if head is None or updated_at is None:
                raise StateCorrupted(task_id, version, "the task record has no head")
            state = read_head(task_id, version, head, checksum)
            return Checkpoint(task_id, version, state, _time(task_id, version, updated_at))
        if kind == 3:
            raise StoreError(f"task {task_id!r} has no checkpoint at version {version}")
        body = cast("bytes | None", reply[1])
        records = cast("list[bytes]", reply[2::2])  # newest first
        checksums = cast("list[bytes | None]", reply[3::2])
        start = version - len(records) + 1
        rows: list[Row] = []
        pairs = zip(reversed(records), reversed(checksums), strict=True)
        for number, (record, raw) in enumerate(pairs, start):
            is_snapshot, _, created_at, stored = _header(task_id, number, record)
            checksum = raw.decode("ascii", "replace") if raw is not None else None
            patch = _unpack(task_id, number, stored)
            # Only the oldest record can be a snapshot (the walk stops there); a body
            # that has gone missing stays None and rebuild reports the broken chain.
            snapshot = _unpack(task_id, number, body) if is_snapshot and body is not None else None
            rows.append(Row(number, snapshot, patch or None, created_at, checksum))
        return Checkpoint(task_id, version, rebuild(task_id, version, rows), rows[-1].created_at)

    def checkpoints(self, task_id: str) -> list[CheckpointInfo]:
        check_task_id(task_id)
        with self._errors():
            pipe = self._client.pipeline(transaction=True)
            pipe.exists(self._key("task", task_id))
            pipe.hgetall(self._key("cp", task_id))
            exists, records = cast("tuple[int, dict[bytes, bytes]]", pipe.execute())
        if not exists:
            raise TaskNotFound(task_id)
        return [
            _info(task_id, version, records[field])
            for version, field in sorted((_field_version(task_id, f), f) for f in records)
        ]

    def events(self, task_id: str, *, since: int = 0) -> list[Event]:
        check_task_id(task_id)
        with self._errors():
            head = self._client.hget(self._key("task", task_id), "version")
            if head is None:
                raise TaskNotFound(task_id)
            versions = list(range(max(since, 0) + 1, _version(task_id, head) + 1))
            # Versions above the head read now are not asked for: the answer is the
            # log as of that head. Events are never deleted, so the second read sees
            # every one of them; a checkpoint pruned meanwhile only drops a patch,
            # which is what events() returns for a pruned version anyway.
            pipe = self._client.pipeline(transaction=False)
            for start in range(0, len(versions), _CHUNK):
                chunk = versions[start : start + _CHUNK]
                pipe.hmget(self._key("ev", task_id), chunk)
                pipe.hmget(self._key("cp", task_id), chunk)
            replies = cast("list[list[bytes | None]]", pipe.execute() if versions else [])
        texts = [text for reply in replies[0::2] for text in reply]
        records = [record for reply in replies[1::2] for record in reply]
        events = []
        for version, text, record in zip(versions, texts, records, strict=True):
            if text is None:
                continue  # as stored: a missing event shows as a missing version
            stored = _header(task_id, version, record)[3] if record is not None else b""
            patch = _unpack(task_id, version, stored) or None
            events.append(restore_event(task_id, _unpack(task_id, version, text), patch, version))
        return events

    def tasks(self) -> list[str]:
        with self._errors():
            members = self._client.zrange(self._key("tasks"), 0, -1)
        return sorted(cast("bytes", m).decode() for m in members)

    def heads(self) -> list[HeadInfo]:
        """The task index, then each task's head fields and lease hash, pipelined in chunks."""
        ids = self.tasks()
        infos = []
        for start in range(0, len(ids), _CHUNK):
            chunk = ids[start : start + _CHUNK]
            with self._errors():
                pipe = self._client.pipeline(transaction=False)
                for task_id in chunk:
                    pipe.hmget(self._key("task", task_id), ["version", "head", "updated_at"])
                    pipe.hmget(self._key("lease", task_id), ["worker", "expires", "generation"])
                replies = pipe.execute()
            for i, task_id in enumerate(chunk):
                version, head, updated_at = replies[2 * i]
                worker, expires, generation = replies[2 * i + 1]
                number = _number(version)
                problem = None
                if version is None:
                    problem = "the task is indexed but has no task record"
                elif updated_at is None:
                    problem = "the task record has no head"
                infos.append(
                    head_info(
                        task_id,
                        number,
                        head,
                        None if updated_at is None else partial(_time, task_id, None, updated_at),
                        None
                        if worker is None and generation is None
                        else _lease_fields(worker, expires, generation),
                        problem=problem,
                    )
                )
        return infos

    def prune(self, task_id: str, *, keep_last: int, keep_every: int | None = None) -> PruneResult:
        check_task_id(task_id)
        task_key, cp_key = self._key("task", task_id), self._key("cp", task_id)
        watch_error = self._redis.exceptions.WatchError
        with self._errors():
            for _ in range(_PRUNE_ATTEMPTS):
                # plan_prune runs here, in Python, so the retention rule is the one every
                # backend shares; WATCH makes the plan and the delete one atomic step
                # (a commit or another prune in between makes EXEC fail, and we replan).
                with self._client.pipeline(transaction=True) as pipe:
                    try:
                        # Pipeline.watch is the one redis-py method left unannotated.
                        watch = cast("Callable[..., bool]", pipe.watch)
                        watch(task_key, cp_key)
                        if not pipe.exists(task_key):
                            raise TaskNotFound(task_id)
                        records = cast("dict[bytes, bytes]", pipe.hgetall(cp_key))
                        infos = [
                            _info(task_id, _field_version(task_id, f), r)
                            for f, r in records.items()
                        ]
                        kept, deleted = plan_prune(
                            task_id, infos, keep_last=keep_last, keep_every=keep_every
                        )
                        if deleted:
                            pipe.multi()
                            for start in range(0, len(deleted), _CHUNK):
                                chunk = deleted[start : start + _CHUNK]
                                pipe.hdel(cp_key, *chunk)
                                pipe.hdel(self._key("snap", task_id), *chunk)
                                pipe.hdel(self._key("sum", task_id), *chunk)
                            pipe.execute()
                    except watch_error:
                        continue
                return PruneResult(task_id, kept, deleted)
        raise Conflict(
            f"task {task_id!r} changed during each of {_PRUNE_ATTEMPTS} prune attempts; "
            "nothing was deleted"
        )

    def claim(self, task_id: str, worker: str, ttl: float) -> Lease:
        check_task_id(task_id)
        # Whole milliseconds; a ttl that rounds to nothing expires at once.
        ttl_ms = max(1, round(check_ttl(ttl) * 1000))
        key = self._key("lease", task_id)
        with self._errors():
            reply = self._claim(keys=[key], args=[worker, ttl_ms, round(LEASE_HORIZON * 1000)])
        result = cast("list[Any]", reply)
        if result[0] == 1:
            return Lease(task_id, worker, _from_ms(result[2]), int(result[1]))
        if result[0] == 0:
            raise LeaseHeld(task_id, cast("bytes", result[1]).decode(), _from_ms(result[2]))
        held_lease(task_id, *self._lease_record(key))  # says what is damaged
        raise damaged_lease(task_id, "the lease record does not read")  # pragma: no cover

    def release(self, task_id: str, worker: str) -> None:
        check_task_id(task_id)
        with self._errors():
            self._release(keys=[self._key("lease", task_id)], args=[worker])

    def lease(self, task_id: str) -> Lease | None:
        check_task_id(task_id)
        worker, expires, generation = self._lease_record(self._key("lease", task_id))
        if worker is None and generation is None:
            return None  # never claimed
        return held_lease(task_id, worker, expires, generation)[0]

    def force_release(self, task_id: str) -> Lease | None:
        check_task_id(task_id)
        with self._errors():
            reply = cast("list[Any]", self._force_release(keys=[self._key("lease", task_id)]))
        if not reply[0]:
            return None
        worker, generation, expires = [*reply[1:], None, None, None][:3]
        return salvage_lease(task_id, *_lease_fields(worker, expires, generation))

    def put_artifact(self, data: bytes, *, media_type: str = "application/octet-stream") -> str:
        ref = artifact_ref(data)
        key = self._key("art", ref)
        with self._errors():
            # Content-addressed: the same ref always means the same bytes, so the first
            # writer wins every field and a second put changes nothing.
            pipe = self._client.pipeline(transaction=True)
            pipe.hsetnx(key, "data", bytes(data))
            pipe.hsetnx(key, "media_type", media_type)
            pipe.hsetnx(key, "created_at", utcnow().isoformat())
            pipe.execute()
        return ref

    def get_artifact(self, ref: str) -> bytes:
        with self._errors():
            data = self._client.hget(self._key("art", ref), "data")
        if data is None:
            raise ArtifactNotFound(f"no artifact {ref!r}")
        return cast("bytes", data)

    def rewrite(self, task_id: str, expected_version: int, fn: Callable[[Any], Any]) -> int:
        """WATCH, read, plan, write in one MULTI/EXEC (:mod:`.redis_rewrite`)."""
        return redis_rewrite.rewrite(self, task_id, expected_version, fn)

    def artifact_refs(self) -> list[str]:
        return redis_rewrite.artifact_refs(self)

    def replace_artifact(self, ref: str, data: bytes) -> None:
        redis_rewrite.replace_artifact(self, ref, data)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        client: redis.Redis | None = getattr(self, "_client", None)
        if client is not None:
            # Closing sockets to a server that is gone: nothing is left to release.
            with suppress(self._redis.exceptions.RedisError):
                client.close()

    # ------------------------------------------------------------------ helpers

    def _key(self, kind: str, name: str | None = None) -> str:
        return f"{self.prefix}:{kind}" if name is None else f"{self.prefix}:{kind}:{name}"

    def _lease_record(self, key: str) -> tuple[str | None, Any, Any]:
        """``(worker, expires in seconds, generation)`` of a lease hash, as read."""
        with self._errors():
            worker, generation, expires = self._client.hmget(
                key, ["worker", "generation", "expires"]
            )
        return _lease_fields(worker, expires, generation)

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """Translate redis-py's errors into StoreError, keeping the original as the cause.

        A connection that cannot be made or kept (refused, timed out, credentials
        rejected) is ``StoreUnavailable``.
        """
        exceptions = self._redis.exceptions
        try:
            yield
        except (exceptions.ConnectionError, exceptions.TimeoutError) as exc:
            raise StoreUnavailable(f"Redis at {self.url} is unavailable: {_one_line(exc)}") from exc
        except exceptions.RedisError as exc:
            raise StoreError(f"Redis error on {self.url}: {_one_line(exc)}") from exc

    def _ping(self, module: ModuleType, client_url: str) -> None:
        # A throwaway client without retries and with short timeouts: the pooled client
        # retries failed connections with backoff (seconds), which is right for a blip
        # mid-run but makes "the server is not there" take far too long to say.
        retry = module.retry.Retry(module.backoff.NoBackoff(), 0)
        try:
            probe = module.Redis.from_url(
                client_url,
                socket_connect_timeout=OPEN_TIMEOUT,
                socket_timeout=OPEN_TIMEOUT,
                retry=retry,
            )
        except (TypeError, ValueError) as exc:
            raise InvalidStoreURL(f"bad Redis URL {self.url!r}: {_one_line(exc)}") from exc
        try:
            probe.ping()
        except TypeError as exc:  # an option the connection class does not take
            raise InvalidStoreURL(f"bad Redis URL {self.url!r}: {_one_line(exc)}") from exc
        except module.exceptions.RedisError as exc:
            # Refused, timed out, bad credentials, no such database number: all mean
            # this store cannot be used, whatever redis-py calls them.
            raise StoreUnavailable(f"cannot reach Redis at {self.url}: {_one_line(exc)}") from exc
        finally:
            probe.close()


# --------------------------------------------------------------------- module helpers


def _redis() -> ModuleType:
    """redis-py, imported on first use so that the core install does not need it."""
    try:
        import redis
        import redis.backoff
        import redis.connection
        import redis.exceptions
        import redis.retry
    except ImportError as exc:
        raise MissingExtra("Redis store needs: pip install 'skillstate[redis]'") from exc
    return redis


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _number(value: Any) -> Any:
    """An integer stored as text, as an int; anything else as it is (for the error)."""
    if isinstance(value, bytes):
        try:
            return int(value.decode("ascii"))
        except (UnicodeDecodeError, ValueError):
            return value
    return value


def _version(task_id: str, value: Any) -> int:
    number = _number(value)
    if not isinstance(number, int):
        raise StateCorrupted(
            task_id, None, f"the task record's version {value!r} is not a number", field="version"
        )
    return number


def _field_version(task_id: str, field: bytes) -> int:
    number = _number(field)
    if not isinstance(number, int):
        raise StateCorrupted(task_id, None, f"checkpoint field {field!r} is not a version")
    return number


def _lease_fields(worker: Any, expires: Any, generation: Any) -> tuple[str | None, Any, Any]:
    """A lease hash's fields as :func:`~skillstate.store.chain.read_lease` takes them."""
    name: str | None = None
    if worker is not None:
        name = worker.decode(errors="surrogateescape") if isinstance(worker, bytes) else worker
    stamp = _number(expires)
    seconds = stamp / 1000 if isinstance(stamp, int) else stamp
    return name, seconds, _number(generation)


def _from_ms(value: Any) -> datetime:
    return datetime.fromtimestamp(int(value) / 1000, timezone.utc)


def _time(task_id: str, version: int | None, text: bytes | str) -> datetime:
    try:
        raw = text.decode() if isinstance(text, bytes) else text
        return datetime.fromisoformat(raw)
    except ValueError as exc:
        raise StateCorrupted(task_id, version, f"bad timestamp {text!r}") from exc


def _header(task_id: str, version: int, record: bytes) -> tuple[bool, int, datetime, bytes]:
    """Split a checkpoint record into ``(snapshot, size, created_at, patch as stored)``."""
    try:
        # Split the bytes, not decoded text: the patch may be compressed (binary).
        kind, size, created, patch = record.split(b" ", 3)
        if kind not in {b"S", b"D"}:
            raise ValueError(f"unknown kind {kind!r}")
        snapshot, number = kind == b"S", int(size)
    except ValueError as exc:
        raise StateCorrupted(task_id, version, f"bad checkpoint record ({exc})") from exc
    return snapshot, number, _time(task_id, version, created), patch


def _pack(text: str) -> str | bytes:
    """``text`` as stored: compressed (after the marker) when long, else as is."""
    if len(text) < _COMPRESS_FROM:
        return text
    return _ZLIB + zlib.compress(text.encode(), 1)


def _pack_bytes(text: str) -> bytes:
    """:func:`_pack` as the bytes sent (UTF-8 when not compressed)."""
    if len(text) < _COMPRESS_FROM:
        return text.encode()
    return _ZLIB + zlib.compress(text.encode(), 1)


def _bulk(data: bytes) -> bytes:
    """One argument of a command as the Redis protocol (RESP) frames it."""
    return b"$%d\r\n%b\r\n" % (len(data), data)


def _idle(conn: Any) -> bool:
    """Whether a connection kept between commits is still as it was left: connected
    (or not yet), with nothing to read: no end of stream, no stray reply.

    One ``poll`` with no wait: the checks the pool makes on every checkout
    (``can_read``) cost several syscalls.
    """
    sock = getattr(conn, "_sock", None)
    if sock is None:
        return True  # not connected: sending connects it
    pending = getattr(sock, "pending", None)  # TLS: bytes already decrypted
    if pending is not None and pending():
        return False
    if not hasattr(select, "poll"):  # pragma: no cover - Windows
        return not conn.can_read()
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return not poller.poll(0)


def _call(conn: Any, command: bytes) -> Any:
    """A packed command's reply on ``conn``, retried as redis-py retries its commands."""
    return conn.retry.call_with_retry(
        partial(_send_packed, conn, command), lambda _error: conn.disconnect()
    )


def _send_packed(conn: Any, command: bytes) -> Any:
    """Write a packed command on ``conn`` and read its reply (raises the server's error)."""
    conn.send_packed_command([command])
    return conn.read_response()


def _unpack(task_id: str, version: int, value: bytes) -> str:
    """A stored value back as text; one without the marker was stored uncompressed."""
    try:
        if value[:1] == _ZLIB:
            return zlib.decompress(value[1:]).decode()
        return value.decode()
    except (zlib.error, UnicodeDecodeError) as exc:
        raise StateCorrupted(task_id, version, f"stored value does not decode ({exc})") from exc


def _info(task_id: str, version: int, record: bytes) -> CheckpointInfo:
    snapshot, size, created_at, _ = _header(task_id, version, record)
    return CheckpointInfo(task_id, version, created_at, snapshot, size)
