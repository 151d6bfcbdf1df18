"""PostgreSQL store: psycopg 3 with a connection pool, for many workers on many hosts.

URL: ``postgresql://user:password@host:port/dbname?schema=NAME`` (``postgres://``
works too). ``schema`` (default ``skillstate``) names the Postgres schema that
holds the tables; it is created if missing, so one database can hold several
independent stores (the tests use one per test). Every other query parameter
(``sslmode``, ``connect_timeout``, ...) goes to libpq unchanged.

Which parameters are accepted: ``schema`` (ours) and whatever libpq knows. libpq's
options are many and grow with its versions, so the store does not keep its own
list; it asks libpq (``conninfo_to_dict``) before connecting, and a parameter
neither knows is ``InvalidStoreURL`` naming it, never a driver error.

A server that cannot be reached (down, refusing, timing out, rejecting the
credentials, no such database, shutting down) is
:class:`~skillstate.errors.StoreUnavailable` naming the URL with its password
masked, when the store opens and on any later call; other database errors are
``StoreError``. Both are one line.

The data model is the SQLite store's: the ``tasks`` row holds the head document
whole plus the delta-chain counters; ``checkpoints`` holds a snapshot or a patch
per version; ``events`` holds each event without its patch.

Bodies (snapshot, patch, event) of 768 characters or more are stored
zlib-compressed (level 1), as the SQLite and Redis stores do: each body has a
``TEXT`` column for the short ones and a ``BYTEA`` ``..._z`` column for the
compressed ones, exactly one of them set. The head is compressed too once it is
large (16 K characters): every commit rewrites it, and the old copy stays behind
as dead TOAST tuples until vacuum, so the compressed head keeps that garbage (and
the bytes a load moves) about three times smaller. A small head stays text, so
the common small-state commit pays no zlib. The ``BYTEA`` columns use ``STORAGE
EXTERNAL``: PostgreSQL does not try to compress zlib output again.

``commit`` is a single statement, so a commit costs one round trip and one
server-side transaction. Its version check is a conditional ``UPDATE ... WHERE
version = expected`` (``INSERT ... ON CONFLICT DO NOTHING`` for version 1): under
READ COMMITTED a writer that queued behind another on the row lock re-checks the
condition against the row the other one committed, finds a newer version, and
updates nothing; the checkpoint and event inserts read the ``UPDATE``'s
``RETURNING`` rows, so they write nothing either. Whether the version becomes a
snapshot depends on the chain counters of the row being updated, which only the
server knows at that instant, so the threshold part of
:func:`~skillstate.store.chain.take_snapshot` is evaluated in SQL (as the Redis
backend does in Lua); the rest of the rule is decided by ``take_snapshot`` itself,
and ``tests/test_postgres.py`` checks both agree with the memory store.

Every call runs on the store's own connection while no other thread uses it, and
on a pooled one otherwise: the own one is checked out of the pool once and kept,
with one cursor, because a checkout and return cost a commit about as much Python
as executing its statement. It goes back to the pool (which resets or replaces
it) when it is not idle after a call (an error, a transaction left open) and when
the store closes; a process forked from the one that took it never uses it. A
single-threaded worker thus holds one connection, as it did with the pool alone;
with ``max_connections=1`` nothing is kept aside and every call takes the pool's.

The same statement checks the fencing token: with ``fence`` set it locks the
lease row ``FOR SHARE`` and writes only if the lease is held with that
generation. Schema 2 adds the checksum columns (``tasks.digest``,
``checkpoints.digest``) and ``leases.generation``; a released lease keeps its row
with ``worker`` NULL. The SQL lives in :mod:`skillstate.store.postgres_sql`.

psycopg is imported when a store is opened, never at ``import skillstate.store``.
"""

from __future__ import annotations

import os
import threading
import zlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from skillstate.errors import (
    ArtifactNotFound,
    Conflict,
    InvalidStoreURL,
    LeaseHeld,
    MissingExtra,
    StaleState,
    StateCorrupted,
    StoreError,
    StoreNotFound,
    StoreUnavailable,
    TaskNotFound,
)
from skillstate.events import Event
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
    EncodedCommit,
    Row,
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
from skillstate.store.postgres_sql import MIGRATIONS, Queries
from skillstate.store.rewriting import Body, plan_rewrite

if TYPE_CHECKING:
    from psycopg import Connection, Cursor
    from psycopg_pool import ConnectionPool

__all__ = ["DEFAULT_SCHEMA", "MIGRATIONS", "PostgresStore", "PostgresURL", "parse_url"]

DEFAULT_SCHEMA = "skillstate"

_SCHEMES = ("postgresql", "postgres")
_MAX_IDENTIFIER_BYTES = 63
"""Postgres silently truncates longer names, which could merge two stores into one."""

_CONNECT_TIMEOUT = 10
"""Seconds to wait for the server when the URL sets no ``connect_timeout``."""

_COMPRESS_FROM = COMPRESS_FROM  # the rule every store shares (store.chain)
"""Snapshots, patches and events at least this many characters long are stored
zlib-compressed (the SQLite store's threshold)."""

_COMPRESS_HEAD_FROM = 16 * 1024
"""Heads at least this many characters long are stored compressed. Below it the
head's rewrite is cheap and zlib would cost the commit more time than it saves."""

# ---------------------------------------------------------------------- URLs


@dataclass(frozen=True)
class PostgresURL:
    """A store URL taken apart: what libpq gets, which schema, what to show."""

    conninfo: str
    """The URL without the ``schema`` parameter, for libpq."""
    schema: str
    masked: str
    """The URL as given with any password replaced by ``***``."""


def parse_url(url: str) -> PostgresURL:
    """Split a ``postgresql://`` store URL; raises ``InvalidStoreURL`` when it cannot work."""
    try:
        parts = urlsplit(url)
        query = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError as exc:
        raise InvalidStoreURL(f"malformed PostgreSQL URL {_mask(url)!r}: {exc}") from exc
    if parts.scheme not in _SCHEMES:
        raise InvalidStoreURL(f"{_mask(url)!r} is not a postgresql:// URL")
    schemas = [value for key, value in query if key == "schema"]
    if len(schemas) > 1:
        raise InvalidStoreURL(f"{_mask(url)!r} sets schema more than once")
    schema = schemas[0] if schemas else DEFAULT_SCHEMA
    if not schema or "\x00" in schema or len(schema.encode()) > _MAX_IDENTIFIER_BYTES:
        raise InvalidStoreURL(
            f"schema {schema!r} in {_mask(url)!r} must be 1 to {_MAX_IDENTIFIER_BYTES} bytes"
        )
    if schema.lower().startswith("pg_"):
        raise InvalidStoreURL(f"schema {schema!r}: names starting with pg_ are reserved")
    rest = urlencode([(key, value) for key, value in query if key != "schema"])
    conninfo = urlunsplit((parts.scheme, parts.netloc, parts.path, rest, parts.fragment))
    return PostgresURL(conninfo=conninfo, schema=schema, masked=_mask(url))


def _mask(url: str) -> str:
    """``url`` with the password (in the user info or a ``password=`` parameter) hidden."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority, slash, tail = rest.partition("/")
    userinfo, at, hosts = authority.rpartition("@")
    if at and ":" in userinfo:
        authority = userinfo.split(":", 1)[0] + ":***@" + hosts
    path, question, query = tail.partition("?")
    if question:
        query = "&".join(
            "password=***" if pair.split("=", 1)[0] == "password" else pair
            for pair in query.split("&")
        )
    return f"{scheme}://{authority}{slash}{path}{question}{query}"


def _one_line(exc: BaseException) -> str:
    """libpq messages span lines (a DETAIL, a HINT, a tab-indented advice): join them."""
    return " ".join(part.strip() for part in str(exc).splitlines() if part.strip()) or repr(exc)


def _driver() -> Any:
    """Import psycopg now that a PostgreSQL store is really wanted."""
    try:
        import psycopg
        import psycopg_pool  # noqa: F401  (checked here so the error names the extra)
    except ImportError as exc:
        raise MissingExtra("PostgreSQL store needs: pip install 'skillstate[postgres]'") from exc
    return psycopg


# ---------------------------------------------------------------------- store


class PostgresStore:
    """A store in one schema of a PostgreSQL database, shared by any number of processes."""

    def __init__(
        self,
        url: str,
        *,
        max_chain: int = DEFAULT_MAX_CHAIN,
        max_connections: int = 10,
        timeout: float = 10.0,
        create: bool = True,
    ) -> None:
        """Connect, create or upgrade the schema, and open a connection pool.

        ``max_connections`` bounds the pool (one per thread using the store at
        once); ``timeout`` is how long an operation waits for a free connection.
        ``create=False`` opens only a store that exists: a schema that is missing,
        or holds no store's tables, is ``StoreNotFound`` and nothing is created;
        one that exists is upgraded like any other.
        """
        psycopg = _driver()
        from psycopg_pool import ConnectionPool

        parsed = parse_url(url)
        self.url = parsed.masked
        self.schema = parsed.schema
        self.max_chain = max_chain
        self._sql = Queries(parsed.schema)
        self._db_error: type[Exception] = psycopg.Error
        self._lock = threading.Lock()
        self._closed = False
        # task -> (version, chain_len, chain_bytes) after this store's last commit to
        # it, so that commit compresses the state for a snapshot body only when the
        # server is going to take one (see commit).
        self._chains: dict[str, tuple[int, int, int]] = {}

        try:
            options = psycopg.conninfo.conninfo_to_dict(parsed.conninfo)
        except psycopg.Error as exc:
            raise InvalidStoreURL(f"bad PostgreSQL URL {self.url!r}: {_one_line(exc)}") from exc
        extra: dict[str, Any] = {"autocommit": True}
        if "connect_timeout" not in options:
            extra["connect_timeout"] = _CONNECT_TIMEOUT

        # A plain connection first: it fails fast with libpq's own reason (refused,
        # bad password, no such database), where a pool would retry in the background
        # and only report a timeout. It also runs the migrations before any pooled
        # connection exists.
        try:
            with psycopg.connect(parsed.conninfo, **extra) as conn:
                if not create and not self._exists(conn):
                    raise StoreNotFound(self.url, f"no skillstate schema {self.schema!r}")
                self._migrate(conn)
        except psycopg.Error as exc:
            raise _wrap(f"cannot open PostgreSQL store {self.url}", exc) from exc

        # The connection (and its cursor) used while no other thread uses it: _take.
        self._own: Connection[Any] | None = None
        self._own_cursor: Cursor[Any] | None = None
        self._own_pid = 0
        self._own_lock = threading.Lock()
        self._own_ok = max_connections >= 2  # one must stay for the other threads
        self._timeout = timeout
        self._pool: ConnectionPool[Connection[Any]] = ConnectionPool(
            parsed.conninfo,
            kwargs=extra,
            min_size=1,
            max_size=max(1, max_connections),
            timeout=timeout,
            open=False,
            name=f"skillstate:{parsed.schema}",
        )
        try:
            self._pool.open(wait=True, timeout=timeout)
        except psycopg.Error as exc:
            self._pool.close()
            raise _wrap(f"cannot open PostgreSQL store {self.url}", exc) from exc

    @classmethod
    def from_url(cls, url: str, *, create: bool = True) -> PostgresStore:
        return cls(url, create=create)

    # ------------------------------------------------------------------ schema

    def setup(self) -> None:
        """Create or upgrade the schema and its tables. Safe to call any number of times."""
        with self._connection() as conn:
            self._migrate(conn)

    def schema_versions(self) -> list[int]:
        """The migrations applied to this store's schema, oldest first."""
        with self._connection() as conn:
            rows = conn.execute(f"SELECT version FROM {self._sql.migrations} ORDER BY version")
            return [row[0] for row in rows]

    def _exists(self, conn: Connection[Any]) -> bool:
        """Whether the schema holds a store (its migrations table); reads, creates nothing."""
        row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (self._sql.migrations,))
        return bool(row.fetchone() == (True,))

    def _migrate(self, conn: Connection[Any]) -> None:
        with conn.transaction():
            # Serializes concurrent first opens of one schema: the second waits here,
            # then finds every migration recorded and does nothing.
            conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                ("skillstate.migrate:" + self.schema,),
            )
            exists = conn.execute(
                "SELECT 1 FROM pg_namespace WHERE nspname = %s", (self.schema,)
            ).fetchone()
            if exists is None:
                # Only when missing: CREATE SCHEMA IF NOT EXISTS would still demand
                # CREATE on the database from a role that merely uses the schema.
                conn.execute(f"CREATE SCHEMA {self._sql.schema}")
            table = self._sql.migrations
            if conn.execute("SELECT to_regclass(%s)", (table,)).fetchone() == (None,):
                conn.execute(
                    f"CREATE TABLE {table} (version INTEGER PRIMARY KEY, "
                    "applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
                )
            done = {row[0] for row in conn.execute(f"SELECT version FROM {table}")}
            # The scripts name no schema: for this transaction, it is the only one.
            conn.execute(f"SET LOCAL search_path TO {self._sql.schema}")
            for version, script in MIGRATIONS:
                if version in done:
                    continue
                conn.execute(script)
                conn.execute(f"INSERT INTO {table} (version) VALUES (%s)", (version,))

    # ------------------------------------------------------------------ protocol

    def load(self, task_id: str, *, verify: bool = True) -> Checkpoint:
        check_task_id(task_id)
        with self._connection() as conn:
            # Binary results: a compressed head comes as its bytes, not as hex text.
            row = conn.execute(self._sql.load, (task_id,), binary=True).fetchone()
        if row is None:
            raise TaskNotFound(task_id)
        version, head, head_z, updated_at, checksum = row
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
    ) -> int:
        enc = encode_commit(task_id, expected_version, state, event, fence=fence)
        query, params = self._commit_statement(enc)
        # _take/_give rather than _connection(): this is the hot path.
        try:
            conn, cursor = self._take()
            try:
                row = (cursor or conn.cursor()).execute(query, params).fetchone()
                if row is None:
                    self._chains.pop(task_id, None)
                    # Lost the compare-and-set or the fencing check (or the task is not
                    # where the writer thinks). Read both now: the statement's own
                    # snapshot predates the winner.
                    refused = conn.execute(self._sql.refused, {"task_id": task_id}).fetchone()
            finally:
                self._give(conn, cursor)
        except self._db_error as exc:
            raise _wrap(f"PostgreSQL error on {self.url}", exc) from exc
        if row is None:
            current, holder, generation = refused or (None, None, None)
            check_fence(task_id, enc.fence, holder, generation)
            if (current or 0) == enc.expected:  # the fence failed, and moved back since
                raise Conflict(f"task {task_id!r} changed during the commit; nothing was written")
            raise StaleState(task_id, enc.expected, current or 0)
        self._chains[task_id] = (enc.version, row[0], row[1])
        return enc.version

    def _commit_statement(self, enc: EncodedCommit) -> tuple[str, dict[str, Any]]:
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
            query = self._sql.create
            params["chain_len"] = 0 if forced else 1
            params["chain_bytes"] = 0 if forced else len(enc.patch or "")
            params["snapshot"] = enc.state if snapshot and state_len < _COMPRESS_FROM else None
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
            query = self._sql.advance
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
        elif snapshot and state_len >= _COMPRESS_FROM:
            params["snapshot_z"] = _deflate(enc.state)
        else:
            params["snapshot_z"] = None
        return query, params

    def checkpoint(self, task_id: str, version: int) -> Checkpoint:
        # The head's version only: a damaged head must not hide the versions before it.
        head = self.load(task_id, verify=False)
        if version == head.version:
            return self.load(task_id)
        with self._connection() as conn:
            fetched = conn.execute(
                self._sql.chain, {"task_id": task_id, "version": version}, binary=True
            ).fetchall()
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

    def checkpoints(self, task_id: str) -> list[CheckpointInfo]:
        check_task_id(task_id)
        with self._connection() as conn:
            rows = conn.execute(self._sql.checkpoints, (task_id,)).fetchall()
        if not rows:
            self.load(task_id, verify=False)  # TaskNotFound for an unknown task
        return [
            CheckpointInfo(task_id, v, _utc(created), bool(snap), size)
            for v, snap, size, created in rows
        ]

    def events(self, task_id: str, *, since: int = 0) -> list[Event]:
        check_task_id(task_id)
        with self._connection() as conn:
            rows = conn.execute(self._sql.events, (task_id, since), binary=True).fetchall()
        if not rows:
            self.load(task_id, verify=False)
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

    def tasks(self) -> list[str]:
        with self._connection() as conn:
            return [row[0] for row in conn.execute(self._sql.tasks)]

    def heads(self) -> list[HeadInfo]:
        """One statement over ``tasks`` joined with ``leases``; heads are parsed here.

        PostgreSQL 15 has no way to test text for valid JSON without failing the
        statement, and large heads are stored compressed, so the whole heads travel.
        """
        with self._connection() as conn:
            rows = conn.execute(self._sql.heads, binary=True).fetchall()
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

    def prune(self, task_id: str, *, keep_last: int, keep_every: int | None = None) -> PruneResult:
        check_task_id(task_id)
        with self._connection() as conn, conn.transaction():
            # The row lock makes a prune and a commit of the same task take turns, so
            # the plan is made from the chain as it stands when the deletes run.
            if conn.execute(self._sql.lock_task, (task_id,)).fetchone() is None:
                raise TaskNotFound(task_id)
            infos = [
                CheckpointInfo(task_id, v, _utc(created), bool(snap), 0)
                for v, snap, created in conn.execute(self._sql.prune_rows, (task_id,))
            ]
            kept, deleted = plan_prune(task_id, infos, keep_last=keep_last, keep_every=keep_every)
            if deleted:
                conn.execute(self._sql.prune_delete, (task_id, deleted))
        return PruneResult(task_id, kept, deleted)

    def claim(self, task_id: str, worker: str, ttl: float) -> Lease:
        check_task_id(task_id)
        params = {
            "task_id": task_id,
            "worker": worker,
            "ttl": check_ttl(ttl),
            "horizon": LEASE_HORIZON,
        }
        with self._connection() as conn:
            for _ in range(_CLAIM_ATTEMPTS):
                row = conn.execute(self._sql.claim, params).fetchone()
                if row is not None:
                    return Lease(task_id, worker, _utc(row[0]), row[1])
                found = conn.execute(self._sql.lease, (task_id,)).fetchone()
                if found is None or found[0] is None:
                    continue  # released between the two statements: claim again
                holder, expires, generation, expired = found
                lease = read_lease(task_id, holder, expires, generation)  # damaged: raises
                if holder != worker and not expired:
                    raise LeaseHeld(task_id, lease.worker, lease.expires_at)
                # It expired (or became ours) between the two statements: claim again.
        raise Conflict(f"task {task_id!r}: the lease kept changing during the claim")

    def release(self, task_id: str, worker: str) -> None:
        check_task_id(task_id)
        with self._connection() as conn:
            conn.execute(self._sql.release, (task_id, worker))

    def lease(self, task_id: str) -> Lease | None:
        check_task_id(task_id)
        with self._connection() as conn:
            row = conn.execute(self._sql.lease, (task_id,)).fetchone()
        if row is None:
            return None
        return held_lease(task_id, *row[:3])[0]

    def force_release(self, task_id: str) -> Lease | None:
        check_task_id(task_id)
        with self._connection() as conn:
            row = conn.execute(self._sql.force_release, (task_id,)).fetchone()
        return salvage_lease(task_id, *row) if row is not None else None

    def put_artifact(self, data: bytes, *, media_type: str = "application/octet-stream") -> str:
        ref = artifact_ref(data)
        with self._connection() as conn:
            conn.execute(self._sql.put_artifact, (ref, media_type, bytes(data)))
        return ref

    def get_artifact(self, ref: str) -> bytes:
        with self._connection() as conn:
            row = conn.execute(self._sql.get_artifact, (ref,)).fetchone()
        if row is None:
            raise ArtifactNotFound(f"no artifact {ref!r}")
        return bytes(row[0])

    def rewrite(self, task_id: str, expected_version: int, fn: Callable[[Any], Any]) -> int:
        """One transaction, with the task's row locked ``FOR UPDATE`` from the first read."""
        check_task_id(task_id)
        sql = self._sql
        with self._connection() as conn, conn.transaction():
            row = conn.execute(sql.rewrite_head, (task_id,), binary=True).fetchone()
            if row is None:
                raise TaskNotFound(task_id)
            version, head, head_z, checksum = row
            if version != expected_version:
                raise StaleState(task_id, expected_version, version)
            text = head if head_z is None else _inflate(task_id, version, head_z)
            bodies = [
                Body(v, _unpack(task_id, v, s, s_z), _unpack(task_id, v, p, p_z), digest)
                for v, s, s_z, p, p_z, digest in conn.execute(
                    sql.rewrite_rows, (task_id,), binary=True
                )
            ]
            events = {
                v: _unpack(task_id, v, e, e_z) or ""
                for v, e, e_z in conn.execute(sql.rewrite_events, (task_id,), binary=True)
            }
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
                conn.execute(
                    sql.rewrite_set_head,
                    (
                        None if large else plan.head,
                        _deflate(plan.head) if large else None,
                        plan.head_digest,
                        task_id,
                    ),
                )
            with conn.cursor() as cur:
                cur.executemany(
                    sql.rewrite_set_row,
                    [
                        (*_pack(b.snapshot), *_pack(b.patch), b.digest, task_id, b.version)
                        for b in plan.rows.values()
                    ],
                )
                cur.executemany(
                    sql.rewrite_set_event,
                    [(*_pack(text), task_id, v) for v, text in plan.events.items()],
                )
        return plan.changed

    def artifact_refs(self) -> list[str]:
        with self._connection() as conn:
            return [row[0] for row in conn.execute(self._sql.artifact_refs)]

    def replace_artifact(self, ref: str, data: bytes) -> None:
        with self._connection() as conn:
            updated = conn.execute(self._sql.replace_artifact, (bytes(data), ref)).rowcount
        if not updated:
            raise ArtifactNotFound(f"no artifact {ref!r}")

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        # After a call in flight in another thread; not forever (a close from inside
        # a call would wait for itself): the pool then closes what it can.
        if self._own_lock.acquire(timeout=self._timeout):
            try:
                conn, self._own, self._own_cursor = self._own, None, None
                if conn is not None and self._own_pid == os.getpid():
                    self._pool.putconn(conn)
            finally:
                self._own_lock.release()
        self._pool.close()

    def __repr__(self) -> str:
        return f"PostgresStore({self.url!r})"

    # ------------------------------------------------------------------ helpers

    @contextmanager
    def _connection(self) -> Iterator[Connection[Any]]:
        """A connection (autocommit); driver errors become one-line ``StoreError``s.

        See :meth:`_take` for which one.
        """
        try:
            conn, cursor = self._take()
            try:
                yield conn
            finally:
                self._give(conn, cursor)
        except self._db_error as exc:
            raise _wrap(f"PostgreSQL error on {self.url}", exc) from exc

    def _take(self) -> tuple[Connection[Any], Cursor[Any] | None]:
        """A connection for one call, and its kept cursor when it is the store's own.

        The store's own connection while no other thread is using it, else a pooled
        one. The own one is taken from the pool once and kept (with one cursor):
        checking a connection out of the pool and back costs a commit about as much
        Python as its statement. It goes back to the pool (which resets or replaces
        it) as soon as it is not idle after a use (an error, a transaction left
        open) and when the store is closed, and is forgotten, never used, in a
        process forked from the one that took it. A single-threaded worker thus
        holds one connection, as with the pool alone. Every call must be paired
        with :meth:`_give`.
        """
        if self._closed:
            raise StoreError(f"PostgreSQL store {self.url} is closed")
        if not (self._own_ok and self._own_lock.acquire(blocking=False)):
            return self._pool.getconn(), None
        try:
            if self._own is None or self._own_pid != os.getpid():
                conn = self._pool.getconn()
                self._own, self._own_cursor, self._own_pid = conn, conn.cursor(), os.getpid()
            return self._own, self._own_cursor
        except BaseException:
            self._own_lock.release()
            raise

    def _give(self, conn: Connection[Any], cursor: Cursor[Any] | None) -> None:
        """Hand back what :meth:`_take` gave."""
        if cursor is None:
            self._pool.putconn(conn)
            return
        try:
            if conn.closed or conn.pgconn.transaction_status != _IDLE:
                self._own = self._own_cursor = None
                self._pool.putconn(conn)
        finally:
            self._own_lock.release()


_IDLE = 0
"""``pq.TransactionStatus.IDLE``: a connection outside any transaction, ready for more."""

_CLAIM_ATTEMPTS = 10
"""Rounds of claim-then-look before a claim on a lease that keeps changing gives up."""

_UNAVAILABLE_STATES = ("08", "28", "3D000", "57P01", "57P02", "57P03")
"""SQLSTATEs (classes or codes) meaning the server cannot be used at all: connection
exceptions, rejected credentials, no such database, shutting down or starting up."""


def _wrap(context: str, exc: Exception) -> StoreError:
    """A driver error as one line: ``StoreUnavailable`` when the server cannot be reached."""
    import psycopg  # imported already: a store exists

    message = f"{context}: {_one_line(exc)}"
    sqlstate = getattr(exc, "sqlstate", None)
    if sqlstate is None:
        # No answer from a server: failed to connect, connection lost, or the pool
        # timed out waiting for one (psycopg_pool.PoolTimeout is an OperationalError).
        unavailable = isinstance(exc, psycopg.OperationalError)
    else:
        unavailable = sqlstate.startswith(_UNAVAILABLE_STATES)
    return StoreUnavailable(message) if unavailable else StoreError(message)


def _deflate(text: str) -> bytes:
    return zlib.compress(text.encode(), 1)


def _pack(text: str | None) -> tuple[str | None, bytes | None]:
    """``text`` as stored: (text, None) when short, (None, compressed) when long."""
    if text is None or len(text) < _COMPRESS_FROM:
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
