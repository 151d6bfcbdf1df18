"""PostgreSQL store: psycopg 3 with a connection pool, for many workers on many hosts.

URL: ``postgresql://user:password@host:port/dbname?schema=NAME`` (``postgres://``
works too). ``schema`` (default ``skillstate``) names the Postgres schema that
holds the tables; it is created if missing, so one database can hold several
independent stores (the tests use one per test). Every other query parameter
(``sslmode``, ``connect_timeout``, ...) goes to libpq unchanged.

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

psycopg is imported when a store is opened, never at ``import skillstate.store``.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from skillstate.errors import (
    ArtifactNotFound,
    InvalidStoreURL,
    LeaseHeld,
    MissingExtra,
    StaleState,
    StateCorrupted,
    StoreError,
    TaskNotFound,
)
from skillstate.events import Event
from skillstate.store.base import Checkpoint, CheckpointInfo, Lease, PruneResult, artifact_ref
from skillstate.store.chain import (
    COMPRESS_FROM,
    DEFAULT_MAX_CHAIN,
    Row,
    encode_commit,
    load_document,
    plan_prune,
    rebuild,
    restore_event,
    take_snapshot,
)

if TYPE_CHECKING:
    from psycopg import Connection
    from psycopg_pool import ConnectionPool

__all__ = ["DEFAULT_SCHEMA", "PostgresStore", "PostgresURL", "parse_url"]

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

# Versioned, append-only: a new schema change is a new entry, never an edit.
# Scripts run with ``search_path`` set to the store's schema, so they name no schema.
# ``COLLATE "C"`` makes ORDER BY task_id byte order, the order ``sorted()`` gives
# in the other backends, whatever the database's default collation.
MIGRATIONS: tuple[tuple[int, str], ...] = (
    (
        1,
        """
        CREATE TABLE tasks (
            task_id     TEXT COLLATE "C" PRIMARY KEY,
            version     BIGINT NOT NULL,
            updated_at  TIMESTAMPTZ NOT NULL,
            head        TEXT,
            head_z      BYTEA,
            chain_len   INTEGER NOT NULL DEFAULT 0,
            chain_bytes BIGINT NOT NULL DEFAULT 0,
            CHECK (num_nonnulls(head, head_z) = 1)
        ) WITH (
            -- room on the page to rewrite the head in place (HOT updates)
            fillfactor = 50,
            -- Every commit rewrites the head, so a large (TOASTed) head leaves a dead
            -- copy per commit until vacuum: vacuum after a fixed number of updates,
            -- not after a fraction of the table, so the garbage stays bounded.
            autovacuum_vacuum_scale_factor = 0,
            autovacuum_vacuum_threshold = 1000,
            toast.autovacuum_vacuum_scale_factor = 0,
            toast.autovacuum_vacuum_threshold = 1000
        );
        CREATE TABLE checkpoints (
            task_id    TEXT COLLATE "C" NOT NULL,
            version    BIGINT NOT NULL,
            snapshot   TEXT,
            snapshot_z BYTEA,
            patch      TEXT,
            patch_z    BYTEA,
            created_at TIMESTAMPTZ NOT NULL,
            PRIMARY KEY (task_id, version)
        );
        CREATE TABLE events (
            task_id TEXT COLLATE "C" NOT NULL,
            version BIGINT NOT NULL,
            event   TEXT,
            event_z BYTEA,
            PRIMARY KEY (task_id, version),
            CHECK (num_nonnulls(event, event_z) = 1)
        );
        -- zlib output does not compress again: keep TOAST from trying.
        ALTER TABLE tasks ALTER COLUMN head_z SET STORAGE EXTERNAL;
        ALTER TABLE checkpoints ALTER COLUMN snapshot_z SET STORAGE EXTERNAL,
                                ALTER COLUMN patch_z SET STORAGE EXTERNAL;
        ALTER TABLE events ALTER COLUMN event_z SET STORAGE EXTERNAL;
        CREATE TABLE leases (
            task_id    TEXT COLLATE "C" PRIMARY KEY,
            worker     TEXT NOT NULL,
            expires_at TIMESTAMPTZ NOT NULL
        );
        CREATE TABLE artifacts (
            ref        TEXT PRIMARY KEY,
            media_type TEXT NOT NULL,
            data       BYTEA NOT NULL,
            created_at TIMESTAMPTZ NOT NULL DEFAULT now()
        );
        """,
    ),
)


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


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


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


# ---------------------------------------------------------------------- SQL


class _Queries:
    """Every statement, with the schema spelled into its table names once.

    Table names are qualified rather than relying on ``search_path`` so that a
    pooled connection (or a transaction-mode pgbouncer) can never point a query
    at another store's tables.
    """

    def __init__(self, schema: str) -> None:
        s = _quote(schema)
        tasks, checkpoints, events = f"{s}.tasks", f"{s}.checkpoints", f"{s}.events"
        leases, artifacts = f"{s}.leases", f"{s}.artifacts"
        self.schema = s
        self.migrations = f"{s}.schema_migrations"

        self.load = f"SELECT version, head, head_z, updated_at FROM {tasks} WHERE task_id = %s"
        self.version = f"SELECT version FROM {tasks} WHERE task_id = %s"

        # ``forced`` is take_snapshot() with an empty chain. Past that, its rule only
        # compares the (never negative) counters with thresholds, so a snapshot forced
        # at (0, 0) is forced at any counters and the SQL needs only the thresholds.
        snapshot = (
            "(%(forced)s OR chain_len + 1 > %(max_chain)s "
            "OR chain_bytes + %(patch_len)s >= %(state_len)s)"
        )
        # chain_len is 0 after the update exactly when this version is a snapshot.
        # The snapshot body is the compressed state (snapshot_z) when the client sent
        # one, else the head text: a state under 768 characters, or (when the client's
        # guess of the counters was stale) a state the client did not compress.
        self.advance = f"""
            WITH head AS (
                UPDATE {tasks} SET
                    version = %(version)s, head = %(head)s::text, head_z = %(head_z)s::bytea,
                    updated_at = now(),
                    chain_len = CASE WHEN {snapshot} THEN 0 ELSE chain_len + 1 END,
                    chain_bytes = CASE WHEN {snapshot} THEN 0
                                  ELSE chain_bytes + %(patch_len)s END
                WHERE task_id = %(task_id)s AND version = %(expected)s
                RETURNING chain_len = 0 AS snapshot, chain_len, chain_bytes, updated_at
            ), checkpoint AS (
                INSERT INTO {checkpoints}
                    (task_id, version, snapshot, snapshot_z, patch, patch_z, created_at)
                SELECT %(task_id)s, %(version)s,
                       CASE WHEN head.snapshot AND %(snapshot_z)s::bytea IS NULL
                            THEN %(head)s::text END,
                       CASE WHEN head.snapshot THEN %(snapshot_z)s::bytea END,
                       %(patch)s::text, %(patch_z)s::bytea, head.updated_at
                FROM head
            ), event AS (
                INSERT INTO {events} (task_id, version, event, event_z)
                SELECT %(task_id)s, %(version)s, %(event)s::text, %(event_z)s::bytea FROM head
            )
            SELECT chain_len, chain_bytes FROM head
        """
        self.create = f"""
            WITH head AS (
                INSERT INTO {tasks}
                    (task_id, version, updated_at, head, head_z, chain_len, chain_bytes)
                VALUES (%(task_id)s, %(version)s, now(), %(head)s::text, %(head_z)s::bytea,
                        %(chain_len)s, %(chain_bytes)s)
                ON CONFLICT (task_id) DO NOTHING
                RETURNING chain_len, chain_bytes, updated_at
            ), checkpoint AS (
                INSERT INTO {checkpoints}
                    (task_id, version, snapshot, snapshot_z, patch, patch_z, created_at)
                SELECT %(task_id)s, %(version)s, %(snapshot)s::text, %(snapshot_z)s::bytea,
                       %(patch)s::text, %(patch_z)s::bytea, head.updated_at
                FROM head
            ), event AS (
                INSERT INTO {events} (task_id, version, event, event_z)
                SELECT %(task_id)s, %(version)s, %(event)s::text, %(event_z)s::bytea FROM head
            )
            SELECT chain_len, chain_bytes FROM head
        """

        # The version's rows from the greatest snapshot at or before it. Without any
        # snapshot only the version itself comes back, and rebuild() reports the
        # broken chain rather than this returning "no such version".
        self.chain = f"""
            SELECT version, snapshot, snapshot_z, patch, patch_z, created_at FROM {checkpoints}
            WHERE task_id = %(task_id)s AND version <= %(version)s
              AND version >= coalesce(
                  (SELECT max(version) FROM {checkpoints}
                   WHERE task_id = %(task_id)s AND version <= %(version)s
                     AND num_nonnulls(snapshot, snapshot_z) > 0),
                  %(version)s)
            ORDER BY version
        """
        self.checkpoints = f"""
            SELECT version, num_nonnulls(snapshot, snapshot_z) > 0,
                   coalesce(octet_length(snapshot), octet_length(snapshot_z),
                            octet_length(patch), octet_length(patch_z), 0),
                   created_at
            FROM {checkpoints} WHERE task_id = %s ORDER BY version
        """
        self.events = f"""
            SELECT e.event, e.event_z, c.patch, c.patch_z FROM {events} e
            LEFT JOIN {checkpoints} c ON c.task_id = e.task_id AND c.version = e.version
            WHERE e.task_id = %s AND e.version > %s ORDER BY e.version
        """
        self.tasks = f"SELECT task_id FROM {tasks} ORDER BY task_id"

        self.lock_task = f"SELECT version FROM {tasks} WHERE task_id = %s FOR UPDATE"
        self.prune_rows = (
            f"SELECT version, num_nonnulls(snapshot, snapshot_z) > 0, created_at "
            f"FROM {checkpoints} "
            "WHERE task_id = %s ORDER BY version"
        )
        self.prune_delete = (
            f"DELETE FROM {checkpoints} WHERE task_id = %s AND version = ANY(%s::bigint[])"
        )

        # One statement, judged by the server's clock: take the lease when it is free,
        # ours already, or expired; otherwise return nothing and leave it alone.
        self.claim = f"""
            INSERT INTO {leases} AS l (task_id, worker, expires_at)
            VALUES (%(task_id)s, %(worker)s, now() + make_interval(secs => %(ttl)s))
            ON CONFLICT (task_id) DO UPDATE
                SET worker = excluded.worker, expires_at = excluded.expires_at
                WHERE l.worker = excluded.worker OR l.expires_at <= now()
            RETURNING expires_at
        """
        self.lease = f"SELECT worker, expires_at FROM {leases} WHERE task_id = %s"
        self.release = f"DELETE FROM {leases} WHERE task_id = %s AND worker = %s"

        self.put_artifact = (
            f"INSERT INTO {artifacts} (ref, media_type, data) VALUES (%s, %s, %s) "
            "ON CONFLICT (ref) DO NOTHING"
        )
        self.get_artifact = f"SELECT data FROM {artifacts} WHERE ref = %s"


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
    ) -> None:
        """Connect, create or upgrade the schema, and open a connection pool.

        ``max_connections`` bounds the pool (one per thread using the store at
        once); ``timeout`` is how long an operation waits for a free connection.
        """
        psycopg = _driver()
        from psycopg_pool import ConnectionPool

        parsed = parse_url(url)
        self.url = parsed.masked
        self.schema = parsed.schema
        self.max_chain = max_chain
        self._sql = _Queries(parsed.schema)
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
                self._migrate(conn)
        except psycopg.Error as exc:
            raise StoreError(f"cannot open PostgreSQL store {self.url}: {_one_line(exc)}") from exc

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
            raise StoreError(f"cannot open PostgreSQL store {self.url}: {_one_line(exc)}") from exc

    @classmethod
    def from_url(cls, url: str) -> PostgresStore:
        return cls(url)

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

    def load(self, task_id: str) -> Checkpoint:
        with self._connection() as conn:
            # Binary results: a compressed head comes as its bytes, not as hex text.
            row = conn.execute(self._sql.load, (task_id,), binary=True).fetchone()
        if row is None:
            raise TaskNotFound(task_id)
        version, head, head_z, updated_at = row
        text = head if head_z is None else _inflate(task_id, version, head_z)
        return Checkpoint(task_id, version, load_document(task_id, version, text), _utc(updated_at))

    def commit(
        self, task_id: str, expected_version: int, state: Mapping[str, Any], event: Event
    ) -> int:
        enc = encode_commit(task_id, expected_version, state, event)
        forced = take_snapshot(0, 0, enc, self.max_chain)
        large = len(enc.state) >= _COMPRESS_HEAD_FROM
        head_z = _deflate(enc.state) if large else None
        patch, patch_z = _pack(enc.patch)
        event_text, event_z = _pack(enc.event)
        params: dict[str, Any] = {
            "task_id": task_id,
            "version": enc.version,
            "head": None if large else enc.state,
            "head_z": head_z,
            "patch": patch,
            "patch_z": patch_z,
            "event": event_text,
            "event_z": event_z,
        }
        if enc.expected == 0:
            # A new task's chain is empty, so take_snapshot decides outright.
            snapshot = forced
            query = self._sql.create
            params["chain_len"] = 0 if forced else 1
            params["chain_bytes"] = 0 if forced else len(enc.patch or "")
        else:
            # The server decides (on the counters as they are when the row is locked);
            # the counters this store last saw tell whether the state needs compressing
            # for a snapshot body. A stale guess never changes the decision: it costs
            # a compression, or stores that one snapshot as text.
            chain = self._chains.get(task_id)
            if chain is not None and chain[0] == enc.expected:
                snapshot = take_snapshot(chain[1], chain[2], enc, self.max_chain)
            else:
                snapshot = True
            query = self._sql.advance
            params["expected"] = enc.expected
            params["forced"] = forced
            params["max_chain"] = self.max_chain
            params["patch_len"] = len(enc.patch or "")
            params["state_len"] = len(enc.state)
        # The snapshot body, in case the version is one: a short state as text, a long
        # one compressed (the head's bytes when the head is compressed: free, so always
        # sent). The advance statement stores the head text when given no snapshot_z.
        snapshot_text = enc.state if snapshot and len(enc.state) < _COMPRESS_FROM else None
        if head_z is not None and (snapshot or enc.expected):
            snapshot_z = head_z
        elif snapshot and len(enc.state) >= _COMPRESS_FROM:
            snapshot_z = _deflate(enc.state)
        else:
            snapshot_z = None
        params["snapshot"], params["snapshot_z"] = snapshot_text, snapshot_z
        with self._connection() as conn:
            row = conn.execute(query, params).fetchone()
            if row is None:
                self._chains.pop(task_id, None)
                # Lost the compare-and-set (or the task is not where the writer thinks).
                # Read the head now: the statement's own snapshot predates the winner.
                current = conn.execute(self._sql.version, (task_id,)).fetchone()
                raise StaleState(task_id, enc.expected, current[0] if current else 0)
        self._chains[task_id] = (enc.version, row[0], row[1])
        return enc.version

    def checkpoint(self, task_id: str, version: int) -> Checkpoint:
        head = self.load(task_id)
        if version == head.version:
            return head
        with self._connection() as conn:
            fetched = conn.execute(
                self._sql.chain, {"task_id": task_id, "version": version}, binary=True
            )
            rows = [
                Row(v, _unpack(snap, snap_z), _unpack(patch, patch_z), _utc(created))
                for v, snap, snap_z, patch, patch_z, created in fetched
            ]
        if not rows or rows[-1].version != version:
            raise StoreError(f"task {task_id!r} has no checkpoint at version {version}")
        return Checkpoint(task_id, version, rebuild(task_id, version, rows), rows[-1].created_at)

    def checkpoints(self, task_id: str) -> list[CheckpointInfo]:
        with self._connection() as conn:
            rows = conn.execute(self._sql.checkpoints, (task_id,)).fetchall()
        if not rows:
            self.load(task_id)  # TaskNotFound for an unknown task
        return [
            CheckpointInfo(task_id, v, _utc(created), bool(snap), size)
            for v, snap, size, created in rows
        ]

    def events(self, task_id: str, *, since: int = 0) -> list[Event]:
        with self._connection() as conn:
            rows = conn.execute(self._sql.events, (task_id, since), binary=True).fetchall()
        if not rows:
            self.load(task_id)
        return [
            restore_event(task_id, _unpack(text, text_z) or "", _unpack(patch, patch_z))
            for text, text_z, patch, patch_z in rows
        ]

    def tasks(self) -> list[str]:
        with self._connection() as conn:
            return [row[0] for row in conn.execute(self._sql.tasks)]

    def prune(self, task_id: str, *, keep_last: int, keep_every: int | None = None) -> PruneResult:
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
        params = {"task_id": task_id, "worker": worker, "ttl": float(ttl)}
        with self._connection() as conn:
            while True:
                row = conn.execute(self._sql.claim, params).fetchone()
                if row is not None:
                    return Lease(task_id, worker, _utc(row[0]))
                holder = conn.execute(self._sql.lease, (task_id,)).fetchone()
                if holder is not None:
                    raise LeaseHeld(task_id, holder[0], _utc(holder[1]))
                # Released between the two statements: the task is free, claim again.

    def release(self, task_id: str, worker: str) -> None:
        with self._connection() as conn:
            conn.execute(self._sql.release, (task_id, worker))

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

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._pool.close()

    def __repr__(self) -> str:
        return f"PostgresStore({self.url!r})"

    # ------------------------------------------------------------------ helpers

    @contextmanager
    def _connection(self) -> Iterator[Connection[Any]]:
        """A pooled connection (autocommit); driver errors become one-line ``StoreError``s."""
        if self._closed:
            raise StoreError(f"PostgreSQL store {self.url} is closed")
        try:
            with self._pool.connection() as conn:
                yield conn
        except self._db_error as exc:
            raise StoreError(f"PostgreSQL error on {self.url}: {_one_line(exc)}") from exc


def _deflate(text: str) -> bytes:
    return zlib.compress(text.encode(), 1)


def _pack(text: str | None) -> tuple[str | None, bytes | None]:
    """``text`` as stored: (text, None) when short, (None, compressed) when long."""
    if text is None or len(text) < _COMPRESS_FROM:
        return text, None
    return None, _deflate(text)


def _unpack(text: str | None, compressed: bytes | None) -> str | None:
    if compressed is None:
        return text
    return zlib.decompress(compressed).decode()


def _inflate(task_id: str, version: int, compressed: bytes) -> bytes:
    try:
        return zlib.decompress(compressed)
    except zlib.error as exc:
        raise StateCorrupted(task_id, version, f"stored head does not decompress ({exc})") from exc


def _utc(value: datetime) -> datetime:
    # timestamptz comes back in the session's TimeZone; the protocol promises UTC.
    return value.astimezone(timezone.utc)
