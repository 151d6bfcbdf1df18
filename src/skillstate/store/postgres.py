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
with ``worker`` NULL. Schema 3 adds the inbox (``inbox``, one row per message, and
``inboxes``, each task's last message number: see :meth:`PostgresStore.post`).

The SQL lives in :mod:`skillstate.store.postgres_sql`, what each call runs and
makes of the rows in :mod:`skillstate.store.postgres_ops` (shared with
:class:`~skillstate.store.postgres_async.AsyncPostgresStore`), URLs and error
wrapping in :mod:`skillstate.store.postgres_url`; this module is the synchronous
driver: connections, the pool, and running ops on them.

psycopg is imported when a store is opened, never at ``import skillstate.store``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from skillstate.errors import StoreError
from skillstate.events import Event
from skillstate.store import postgres_delete, postgres_restore
from skillstate.store.base import (
    Checkpoint,
    CheckpointInfo,
    HeadInfo,
    InboxMessage,
    Lease,
    PruneResult,
)
from skillstate.store.chain import DEFAULT_MAX_CHAIN
from skillstate.store.postgres_ops import Begin, Op, PostgresOps, Statement, Step
from skillstate.store.postgres_sql import MIGRATIONS
from skillstate.store.postgres_url import (
    DEFAULT_SCHEMA,
    PostgresURL,
    connect_options,
    driver,
    parse_url,
    wrap,
)
from skillstate.store.restoring import plan_restore

if TYPE_CHECKING:
    from psycopg import Connection, Cursor
    from psycopg_pool import ConnectionPool

__all__ = ["DEFAULT_SCHEMA", "MIGRATIONS", "PostgresStore", "PostgresURL", "parse_url"]

T = TypeVar("T")

_IDLE = 0
"""``pq.TransactionStatus.IDLE``: a connection outside any transaction, ready for more."""


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
        psycopg = driver()
        from psycopg_pool import ConnectionPool

        parsed = parse_url(url)
        self.url = parsed.masked
        self.schema = parsed.schema
        self.max_chain = max_chain
        self._ops = PostgresOps(parsed.schema, max_chain)
        self._sql = self._ops.sql
        self._db_error: type[Exception] = psycopg.Error
        self._lock = threading.Lock()
        self._closed = False
        extra = connect_options(psycopg, parsed)

        # A plain connection first: it fails fast with libpq's own reason (refused,
        # bad password, no such database), where a pool would retry in the background
        # and only report a timeout. It also runs the migrations before any pooled
        # connection exists.
        try:
            with psycopg.connect(parsed.conninfo, **extra) as conn:
                op = self._ops.open(self.url, create=create)
                _drive(conn, conn.cursor(), op, next(op))
        except psycopg.Error as exc:
            raise wrap(f"cannot open PostgreSQL store {self.url}", exc) from exc

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
            raise wrap(f"cannot open PostgreSQL store {self.url}", exc) from exc

    @classmethod
    def from_url(cls, url: str, *, create: bool = True) -> PostgresStore:
        return cls(url, create=create)

    # ------------------------------------------------------------------ schema

    def setup(self) -> None:
        """Create or upgrade the schema and its tables. Safe to call any number of times."""
        self._run(self._ops.migrate())

    def schema_versions(self) -> list[int]:
        """The migrations applied to this store's schema, oldest first."""
        return self._run(self._ops.schema_versions())

    # ------------------------------------------------------------------ protocol

    def load(self, task_id: str, *, verify: bool = True) -> Checkpoint:
        return self._run(self._ops.load(task_id, verify=verify))

    def commit(
        self,
        task_id: str,
        expected_version: int,
        state: Mapping[str, Any],
        event: Event,
        *,
        fence: int | None = None,
    ) -> int:
        return self._run(self._ops.commit(task_id, expected_version, state, event, fence=fence))

    def checkpoint(self, task_id: str, version: int) -> Checkpoint:
        return self._run(self._ops.checkpoint(task_id, version))

    def checkpoints(self, task_id: str) -> list[CheckpointInfo]:
        return self._run(self._ops.checkpoints(task_id))

    def events(self, task_id: str, *, since: int = 0) -> list[Event]:
        return self._run(self._ops.events(task_id, since=since))

    def tasks(self) -> list[str]:
        return self._run(self._ops.tasks())

    def heads(self) -> list[HeadInfo]:
        return self._run(self._ops.heads())

    def prune(self, task_id: str, *, keep_last: int, keep_every: int | None = None) -> PruneResult:
        return self._run(self._ops.prune(task_id, keep_last=keep_last, keep_every=keep_every))

    def claim(self, task_id: str, worker: str, ttl: float) -> Lease:
        return self._run(self._ops.claim(task_id, worker, ttl))

    def release(self, task_id: str, worker: str) -> None:
        self._run(self._ops.release(task_id, worker))

    def lease(self, task_id: str) -> Lease | None:
        return self._run(self._ops.lease(task_id))

    def force_release(self, task_id: str) -> Lease | None:
        return self._run(self._ops.force_release(task_id))

    def post(self, task_id: str, kind: str, body: Mapping[str, Any]) -> int:
        return self._run(self._ops.post(task_id, kind, body))

    def inbox(self, task_id: str, *, after: int = 0) -> list[InboxMessage]:
        return self._run(self._ops.inbox(task_id, after=after))

    def put_artifact(self, data: bytes, *, media_type: str = "application/octet-stream") -> str:
        return self._run(self._ops.put_artifact(data, media_type=media_type))

    def get_artifact(self, ref: str) -> bytes:
        return self._run(self._ops.get_artifact(ref))

    def rewrite(self, task_id: str, expected_version: int, fn: Callable[[Any], Any]) -> int:
        """One transaction, with the task's row locked ``FOR UPDATE`` from the first read."""
        return self._run(self._ops.rewrite(task_id, expected_version, fn))

    def artifact_refs(self) -> list[str]:
        return self._run(self._ops.artifact_refs())

    def replace_artifact(self, ref: str, data: bytes) -> None:
        self._run(self._ops.replace_artifact(ref, data))

    def restore(
        self,
        task_id: str,
        checkpoints: Sequence[Checkpoint],
        events: Sequence[Event],
        inbox: Sequence[InboxMessage],
        *,
        overwrite: bool = False,
    ) -> int:
        """One transaction (:mod:`~skillstate.store.postgres_restore`)."""
        plan = plan_restore(task_id, checkpoints, events, inbox, max_chain=self._ops.max_chain)
        return self._run(
            postgres_restore.restore(self._ops, plan, overwrite=overwrite, url=self.url)
        )

    def delete_task(self, task_id: str) -> bool:
        return self._run(postgres_delete.delete_task(self._ops, task_id))

    def delete_artifact(self, ref: str, *, unused_since: datetime | None = None) -> bool:
        return self._run(postgres_delete.delete_artifact(self._ops, ref, unused_since))

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

    def _run(self, op: Op[T]) -> T:
        """Run ``op`` (:mod:`~skillstate.store.postgres_ops`) on a connection from
        :meth:`_take`; driver errors become one-line ``StoreError``s.

        The op runs up to its first statement before a connection is taken, so an
        argument it refuses never touches one.
        """
        try:
            step = next(op)
        except StopIteration as done:
            result: T = done.value
            return result
        try:
            conn, cursor = self._take()
            try:
                return _drive(conn, cursor or conn.cursor(), op, step)
            finally:
                self._give(conn, cursor)
        except self._db_error as exc:
            raise wrap(f"PostgreSQL error on {self.url}", exc) from exc
        finally:
            op.close()

    @contextmanager
    def _connection(self) -> Iterator[Connection[Any]]:
        """A connection (autocommit) for raw SQL; driver errors become ``StoreError``s.

        See :meth:`_take` for which one.
        """
        try:
            conn, cursor = self._take()
            try:
                yield conn
            finally:
                self._give(conn, cursor)
        except self._db_error as exc:
            raise wrap(f"PostgreSQL error on {self.url}", exc) from exc

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


def _drive(conn: Connection[Any], cursor: Cursor[Any], op: Op[T], step: Step) -> T:
    """Run ``op`` from ``step`` (its first) to its result, on ``conn`` with ``cursor``."""
    if isinstance(step, Begin):
        with ExitStack() as transaction:
            return _steps(conn, cursor, op, step, transaction)
    # Most calls (a commit, a load) are one statement outside any transaction: no
    # ExitStack until an op asks for one.
    try:
        reply = _execute(cursor, step)
        step = op.send(reply)
    except StopIteration as done:
        result: T = done.value
        return result
    with ExitStack() as transaction:
        return _steps(conn, cursor, op, step, transaction)


def _steps(
    conn: Connection[Any], cursor: Cursor[Any], op: Op[T], step: Step, transaction: ExitStack
) -> T:
    while True:
        if isinstance(step, Begin):
            transaction.enter_context(conn.transaction())
            reply = None
        else:
            reply = _execute(cursor, step)
        try:
            step = op.send(reply)
        except StopIteration as done:
            result: T = done.value
            return result


def _execute(cursor: Cursor[Any], statement: Statement) -> Any:
    if statement.many:
        cursor.executemany(statement.sql, statement.params or ())
        return None
    cursor.execute(statement.sql, statement.params, binary=statement.binary)
    fetch = statement.fetch
    if fetch == "one":
        return cursor.fetchone()
    if fetch == "all":
        return cursor.fetchall()
    return cursor.rowcount if fetch == "rowcount" else None
