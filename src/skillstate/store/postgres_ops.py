"""What the PostgreSQL stores do, without doing any I/O: one implementation, two drivers.

Each store call is an *op*: a generator that yields the :class:`Statement` values it
needs run, is sent each one's result back, and returns the call's result. An op whose
statements must run in one transaction yields :data:`BEGIN` before them; the
transaction lasts until the op returns (committed) or raises (rolled back). The op
decides everything else: the SQL (from :mod:`skillstate.store.postgres_sql`), its
parameters, the commit statement's snapshot guess, how rows decode, what is an
error. The drivers only execute: :class:`~skillstate.store.postgres.PostgresStore`
over its connection and pool, :class:`~skillstate.store.postgres_async.AsyncPostgresStore`
over psycopg's async pool. A driver runs an op up to its first statement before it
takes a connection, so argument checks and encoding never hold one.

See :mod:`skillstate.store.postgres` for the data model and why ``commit`` is the one
statement it is.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Literal, TypeVar

from skillstate.errors import (
    ArtifactNotFound,
    Conflict,
    LeaseHeld,
    StaleState,
    StateCorrupted,
    StoreError,
    StoreNotFound,
    TaskNotFound,
)
from skillstate.events import Event
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
    COMPRESS_FROM,
    LEASE_HORIZON,
    EncodedCommit,
    Row,
    check_chain_counters,
    check_fence,
    check_ttl,
    decompress,
    encode_commit,
    held_lease,
    plan_prune,
    read_head,
    read_lease,
    rebuild,
    restore_event,
    salvage_lease,
    take_snapshot,
)
from skillstate.store.heads import head_info
from skillstate.store.inbox import encode_message, read_message
from skillstate.store.postgres_sql import MIGRATIONS, Queries
from skillstate.store.rewriting import Body, plan_rewrite

__all__ = ["BEGIN", "Begin", "Op", "PostgresOps", "Statement", "Step"]

T = TypeVar("T")

_COMPRESS_HEAD_FROM = 16 * 1024
"""Heads at least this many characters long are stored compressed. Below it the
head's rewrite is cheap and zlib would cost the commit more time than it saves."""

_CLAIM_ATTEMPTS = 10
"""Rounds of claim-then-look before a claim on a lease that keeps changing gives up."""


@dataclass(frozen=True)
class Statement:
    """One statement an op needs run, and what it wants back."""

    sql: str
    params: Sequence[Any] | Mapping[str, Any] | None = None
    """The parameters; with ``many``, a sequence of parameter sets (``executemany``)."""
    fetch: Literal["one", "all", "rowcount", "none"] = "none"
    """What the op is sent back: ``fetchone()``, ``fetchall()``, the row count, ``None``."""
    binary: bool = False
    """Binary results: a ``BYTEA`` column comes back as its bytes, not as hex text."""
    many: bool = False


@dataclass(frozen=True)
class Begin:
    """Yielded by an op whose statements from here on run in one transaction."""


BEGIN = Begin()

Step = Statement | Begin
Op = Generator[Step, Any, T]
"""An op: yields steps, is sent each statement's result (``None`` for :data:`BEGIN`)."""


class PostgresOps:
    """Every store call as an op, on one schema; what both PostgreSQL stores run.

    It keeps the one piece of state the calls share: the chain counters this store
    last saw per task, so a commit compresses the state for a snapshot body only
    when the server is going to take one (see :meth:`commit_statement`).
    """

    def __init__(self, schema: str, max_chain: int) -> None:
        self.schema = schema
        self.max_chain = max_chain
        self.sql = Queries(schema)
        # task -> (version, chain_len, chain_bytes) after this store's last commit to it.
        self._chains: dict[str, tuple[int, int, int]] = {}

    # ------------------------------------------------------------------ schema

    def open(self, url: str, *, create: bool) -> Op[None]:
        """What opening runs: ``StoreNotFound`` without a store when not ``create``, then
        the migrations."""
        if not create and not (yield from self.exists()):
            raise StoreNotFound(url, f"no skillstate schema {self.schema!r}")
        yield from self.migrate()

    def exists(self) -> Op[bool]:
        """Whether the schema holds a store (its migrations table); reads, creates nothing."""
        row = yield Statement(
            "SELECT to_regclass(%s) IS NOT NULL", (self.sql.migrations,), fetch="one"
        )
        return bool(row == (True,))

    def migrate(self) -> Op[None]:
        """Create or upgrade the schema and its tables, in one transaction."""
        sql = self.sql
        yield BEGIN
        # Serializes concurrent first opens of one schema: the second waits here,
        # then finds every migration recorded and does nothing.
        yield Statement(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
            ("skillstate.migrate:" + self.schema,),
        )
        exists = yield Statement(
            "SELECT 1 FROM pg_namespace WHERE nspname = %s", (self.schema,), fetch="one"
        )
        if exists is None:
            # Only when missing: CREATE SCHEMA IF NOT EXISTS would still demand
            # CREATE on the database from a role that merely uses the schema.
            yield Statement(f"CREATE SCHEMA {sql.schema}")
        table = sql.migrations
        if (yield Statement("SELECT to_regclass(%s)", (table,), fetch="one")) == (None,):
            yield Statement(
                f"CREATE TABLE {table} (version INTEGER PRIMARY KEY, "
                "applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
            )
        applied = yield Statement(f"SELECT version FROM {table}", fetch="all")
        done = {row[0] for row in applied}
        # The scripts name no schema: for this transaction, it is the only one.
        yield Statement(f"SET LOCAL search_path TO {sql.schema}")
        for version, script in MIGRATIONS:
            if version in done:
                continue
            yield Statement(script)
            yield Statement(f"INSERT INTO {table} (version) VALUES (%s)", (version,))

    def schema_versions(self) -> Op[list[int]]:
        """The migrations applied to this store's schema, oldest first."""
        query = f"SELECT version FROM {self.sql.migrations} ORDER BY version"
        rows = yield Statement(query, fetch="all")
        return [row[0] for row in rows]

    # ------------------------------------------------------------------ protocol

    def load(self, task_id: str, *, verify: bool = True) -> Op[Checkpoint]:
        check_task_id(task_id)
        row = yield Statement(self.sql.load, (task_id,), fetch="one", binary=True)
        if row is None:
            raise TaskNotFound(task_id)
        version, head, head_z, updated_at, checksum, chain_len, chain_bytes = row
        if verify:
            check_chain_counters(task_id, version, chain_len, chain_bytes)
        text = head if head_z is None else _inflate(task_id, version, head_z)
        state = read_head(task_id, version, text, checksum, verify=verify)
        return Checkpoint(task_id, version, state, _utc(updated_at))

    def commit(
        self,
        task_id: str,
        expected_version: int,
        state: Mapping[str, Any],
        event: Event,
        *,
        fence: int | None = None,
    ) -> Op[int]:
        enc = encode_commit(task_id, expected_version, state, event, fence=fence)
        query, params = self.commit_statement(enc)
        row = yield Statement(query, params, fetch="one")
        if row is None:
            self._chains.pop(task_id, None)
            # Lost the compare-and-set or the fencing check (or the task is not where
            # the writer thinks). Read both now: the statement's own snapshot predates
            # the winner.
            refused = yield Statement(self.sql.refused, {"task_id": task_id}, fetch="one")
            current, holder, generation = refused or (None, None, None)
            check_fence(task_id, enc.fence, holder, generation)
            if (current or 0) == enc.expected:  # the fence failed, and moved back since
                raise Conflict(f"task {task_id!r} changed during the commit; nothing was written")
            raise StaleState(task_id, enc.expected, current or 0)
        self._chains[task_id] = (enc.version, row[0], row[1])
        return enc.version

    def commit_statement(self, enc: EncodedCommit) -> tuple[str, dict[str, Any]]:
        """The statement that writes ``enc`` (create or advance) and its parameters."""
        forced = take_snapshot(0, 0, enc, self.max_chain)
        state_len = len(enc.state)
        large = state_len >= _COMPRESS_HEAD_FROM
        head_z = _deflate(enc.state) if large else None
        patch, patch_z = _pack(enc.patch)
        event_text, event_z = _pack(enc.event)
        params: dict[str, Any] = {
            "task_id": enc.task_id,
            "version": enc.version,
            "head": None if large else enc.state,
            "head_z": head_z,
            "patch": patch,
            "patch_z": patch_z,
            "event": event_text,
            "event_z": event_z,
            "digest": enc.digest,
            "version_digest": enc.version_digest,
            "fence": enc.fence,
        }
        if enc.expected == 0:
            # A new task's chain is empty, so take_snapshot decides outright.
            snapshot = forced
            query = self.sql.create
            params["chain_len"] = 0 if forced else 1
            params["chain_bytes"] = 0 if forced else len(enc.patch or "")
            params["snapshot"] = enc.state if snapshot and state_len < COMPRESS_FROM else None
        else:
            # The server decides (on the counters as they are when the row is locked);
            # the counters this store last saw tell whether the state needs compressing
            # for a snapshot body. A stale guess never changes the decision: it costs
            # a compression, or stores that one snapshot as text.
            chain = self._chains.get(enc.task_id)
            if chain is not None and chain[0] == enc.expected:
                snapshot = take_snapshot(chain[1], chain[2], enc, self.max_chain)
            else:
                snapshot = True
            query = self.sql.advance
            params["expected"] = enc.expected
            params["forced"] = forced
            params["max_chain"] = self.max_chain
            params["patch_len"] = len(enc.patch or "")
            params["state_len"] = state_len
        # The snapshot body, in case the version is one: a short state as text (the
        # advance statement stores the head text when given no snapshot_z), a long one
        # compressed (the head's bytes when the head is compressed: free, so always
        # sent).
        if head_z is not None and (snapshot or enc.expected):
            params["snapshot_z"] = head_z
        elif snapshot and state_len >= COMPRESS_FROM:
            params["snapshot_z"] = _deflate(enc.state)
        else:
            params["snapshot_z"] = None
        return query, params

    def checkpoint(self, task_id: str, version: int) -> Op[Checkpoint]:
        # The head's version only: a damaged head must not hide the versions before it.
        head = yield from self.load(task_id, verify=False)
        if version == head.version:
            return (yield from self.load(task_id))
        fetched = yield Statement(
            self.sql.chain, {"task_id": task_id, "version": version}, fetch="all", binary=True
        )
        rows = [
            Row(
                v,
                _unpack(task_id, v, snap, snap_z),
                _unpack(task_id, v, patch, patch_z),
                _utc(created),
                checksum,
            )
            for v, snap, snap_z, patch, patch_z, created, checksum in fetched
        ]
        if not rows or rows[-1].version != version:
            raise StoreError(f"task {task_id!r} has no checkpoint at version {version}")
        return Checkpoint(task_id, version, rebuild(task_id, version, rows), rows[-1].created_at)

    def checkpoints(self, task_id: str) -> Op[list[CheckpointInfo]]:
        check_task_id(task_id)
        rows = yield Statement(self.sql.checkpoints, (task_id,), fetch="all")
        if not rows:
            yield from self.load(task_id, verify=False)  # TaskNotFound for an unknown task
        return [
            CheckpointInfo(task_id, v, _utc(created), bool(snap), size)
            for v, snap, size, created in rows
        ]

    def events(self, task_id: str, *, since: int = 0) -> Op[list[Event]]:
        check_task_id(task_id)
        rows = yield Statement(self.sql.events, (task_id, since), fetch="all", binary=True)
        if not rows:
            yield from self.load(task_id, verify=False)
        # As stored: a version whose event row is gone is simply not in the list.
        return [
            restore_event(
                task_id,
                _unpack(task_id, v, text, text_z) or "",
                _unpack(task_id, v, patch, patch_z),
                v,
            )
            for v, text, text_z, patch, patch_z in rows
        ]

    def tasks(self) -> Op[list[str]]:
        rows = yield Statement(self.sql.tasks, fetch="all")
        return [row[0] for row in rows]

    def heads(self) -> Op[list[HeadInfo]]:
        """One statement over ``tasks`` joined with ``leases``; heads are parsed here.

        PostgreSQL 15 has no way to test text for valid JSON without failing the
        statement, and large heads are stored compressed, so the whole heads travel.
        """
        rows = yield Statement(self.sql.heads, fetch="all", binary=True)
        infos = []
        for task_id, version, updated_at, head, head_z, has_lease, *lease in rows:
            text: str | bytes | None = head
            problem = None
            if head_z is not None:
                try:
                    text = _inflate(task_id, version, head_z)
                except StateCorrupted as exc:
                    text, problem = None, exc.reason
            infos.append(
                head_info(
                    task_id,
                    version,
                    text,
                    _utc(updated_at),
                    (lease[0], lease[1], lease[2]) if has_lease else None,
                    problem=problem,
                )
            )
        return infos

    def prune(
        self, task_id: str, *, keep_last: int, keep_every: int | None = None
    ) -> Op[PruneResult]:
        check_task_id(task_id)
        yield BEGIN
        # The row lock makes a prune and a commit of the same task take turns, so the
        # plan is made from the chain as it stands when the deletes run.
        if (yield Statement(self.sql.lock_task, (task_id,), fetch="one")) is None:
            raise TaskNotFound(task_id)
        rows = yield Statement(self.sql.prune_rows, (task_id,), fetch="all")
        infos = [
            CheckpointInfo(task_id, v, _utc(created), bool(snap), 0) for v, snap, created in rows
        ]
        kept, deleted = plan_prune(task_id, infos, keep_last=keep_last, keep_every=keep_every)
        if deleted:
            yield Statement(self.sql.prune_delete, (task_id, deleted))
        return PruneResult(task_id, kept, deleted)

    def claim(self, task_id: str, worker: str, ttl: float) -> Op[Lease]:
        check_task_id(task_id)
        params = {
            "task_id": task_id,
            "worker": worker,
            "ttl": check_ttl(ttl),
            "horizon": LEASE_HORIZON,
        }
        for _ in range(_CLAIM_ATTEMPTS):
            row = yield Statement(self.sql.claim, params, fetch="one")
            if row is not None:
                return Lease(task_id, worker, _utc(row[0]), row[1])
            found = yield Statement(self.sql.lease, (task_id,), fetch="one")
            if found is None or found[0] is None:
                continue  # released between the two statements: claim again
            holder, expires, generation, expired = found
            lease = read_lease(task_id, holder, expires, generation)  # damaged: raises
            if holder != worker and not expired:
                raise LeaseHeld(task_id, lease.worker, lease.expires_at)
            # It expired (or became ours) between the two statements: claim again.
        raise Conflict(f"task {task_id!r}: the lease kept changing during the claim")

    def release(self, task_id: str, worker: str) -> Op[None]:
        check_task_id(task_id)
        yield Statement(self.sql.release, (task_id, worker))

    def lease(self, task_id: str) -> Op[Lease | None]:
        check_task_id(task_id)
        row = yield Statement(self.sql.lease, (task_id,), fetch="one")
        if row is None:
            return None
        return held_lease(task_id, *row[:3])[0]

    def force_release(self, task_id: str) -> Op[Lease | None]:
        check_task_id(task_id)
        row = yield Statement(self.sql.force_release, (task_id,), fetch="one")
        return salvage_lease(task_id, *row) if row is not None else None

    def put_artifact(self, data: bytes, *, media_type: str = "application/octet-stream") -> Op[str]:
        ref = artifact_ref(data)
        yield Statement(self.sql.put_artifact, (ref, media_type, bytes(data)))
        return ref

    def get_artifact(self, ref: str) -> Op[bytes]:
        row = yield Statement(self.sql.get_artifact, (ref,), fetch="one")
        if row is None:
            raise ArtifactNotFound(f"no artifact {ref!r}")
        return bytes(row[0])

    def rewrite(self, task_id: str, expected_version: int, fn: Callable[[Any], Any]) -> Op[int]:
        """One transaction, with the task's row locked ``FOR UPDATE`` from the first read."""
        check_task_id(task_id)
        sql = self.sql
        yield BEGIN
        row = yield Statement(sql.rewrite_head, (task_id,), fetch="one", binary=True)
        if row is None:
            raise TaskNotFound(task_id)
        version, head, head_z, checksum = row
        if version != expected_version:
            raise StaleState(task_id, expected_version, version)
        text = head if head_z is None else _inflate(task_id, version, head_z)
        stored = yield Statement(sql.rewrite_rows, (task_id,), fetch="all", binary=True)
        bodies = [
            Body(v, _unpack(task_id, v, s, s_z), _unpack(task_id, v, p, p_z), digest)
            for v, s, s_z, p, p_z, digest in stored
        ]
        stored = yield Statement(sql.rewrite_events, (task_id,), fetch="all", binary=True)
        events = {v: _unpack(task_id, v, e, e_z) or "" for v, e, e_z in stored}
        plan = plan_rewrite(
            task_id,
            fn,
            version=version,
            head=text,
            head_digest=checksum,
            rows=bodies,
            events=events,
        )
        if plan.head is not None:
            large = len(plan.head) >= _COMPRESS_HEAD_FROM
            yield Statement(
                sql.rewrite_set_head,
                (
                    None if large else plan.head,
                    _deflate(plan.head) if large else None,
                    plan.head_digest,
                    task_id,
                ),
            )
        rows = [
            (*_pack(b.snapshot), *_pack(b.patch), b.digest, task_id, b.version)
            for b in plan.rows.values()
        ]
        if rows:
            yield Statement(sql.rewrite_set_row, rows, many=True)
        changed = [(*_pack(text), task_id, v) for v, text in plan.events.items()]
        if changed:
            yield Statement(sql.rewrite_set_event, changed, many=True)
        return plan.changed

    def artifact_refs(self) -> Op[list[str]]:
        rows = yield Statement(self.sql.artifact_refs, fetch="all")
        return [row[0] for row in rows]

    def post(self, task_id: str, kind: str, body: Mapping[str, Any]) -> Op[int]:
        text = encode_message(task_id, kind, body)
        params = {"task_id": task_id, "kind": kind, "body": text}
        row = yield Statement(self.sql.post, params, fetch="one")
        if row is None:
            raise TaskNotFound(task_id)
        return int(row[0])

    def inbox(self, task_id: str, *, after: int = 0) -> Op[list[InboxMessage]]:
        check_task_id(task_id)
        rows = yield Statement(self.sql.inbox, (after, task_id), fetch="all")
        if not rows:
            raise TaskNotFound(task_id)
        return [
            read_message(task_id, seq, kind, body, _utc(at))
            for seq, kind, body, at in rows
            if seq is not None
        ]

    def replace_artifact(self, ref: str, data: bytes) -> Op[None]:
        updated = yield Statement(self.sql.replace_artifact, (bytes(data), ref), fetch="rowcount")
        if not updated:
            raise ArtifactNotFound(f"no artifact {ref!r}")


# ---------------------------------------------------------------------- bodies


def _deflate(text: str) -> bytes:
    return zlib.compress(text.encode(), 1)


def _pack(text: str | None) -> tuple[str | None, bytes | None]:
    """``text`` as stored: (text, None) when short, (None, compressed) when long."""
    if text is None or len(text) < COMPRESS_FROM:
        return text, None
    return None, _deflate(text)


def _unpack(task_id: str, version: int, text: str | None, compressed: bytes | None) -> str | None:
    if compressed is None:
        return text
    return decompress(task_id, version, compressed)


def _inflate(task_id: str, version: int, compressed: bytes) -> bytes:
    try:
        return zlib.decompress(compressed)
    except zlib.error as exc:
        raise StateCorrupted(task_id, version, f"stored head does not decompress ({exc})") from exc


def _utc(value: datetime) -> datetime:
    # timestamptz comes back in the session's TimeZone; the protocol promises UTC.
    return value.astimezone(timezone.utc)
