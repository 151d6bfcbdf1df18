"""The PostgreSQL store for asyncio: psycopg's async connection pool, no threads.

:class:`AsyncPostgresStore` is :class:`~skillstate.store.postgres.PostgresStore` with
every method a coroutine: the same URL and options, the same data, errors and
guarantees, and the same code. What each call runs and makes of the rows is
:mod:`skillstate.store.postgres_ops`, shared with the synchronous store; this module
only drives those ops over an ``AsyncConnectionPool``. Any number of coroutines on
one loop may call one store at once: each call takes a pooled connection for its
statements (waiting on the loop while all are busy, up to ``timeout``) and gives it
back at once.

A coroutine cancelled mid-call never leaves a connection working or in a
transaction in the pool: psycopg cancels a statement in flight on the server and
waits for it to end, the transaction (of ``prune``, ``rewrite``) rolls back on the
way out, and the pool rolls back or discards whatever still is not idle when it
gets the connection back. Whether a cancelled ``commit`` landed is, as for any
interrupted write, for the next ``load`` to say.

psycopg is imported when a store is opened, never at import time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from datetime import datetime
from types import TracebackType
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
from skillstate.store.postgres_url import connect_options, driver, parse_url, wrap
from skillstate.store.restoring import plan_restore

if TYPE_CHECKING:
    from psycopg import AsyncConnection, AsyncCursor
    from psycopg_pool import AsyncConnectionPool

__all__ = ["AsyncPostgresStore"]

T = TypeVar("T")


class AsyncPostgresStore:
    """A store in one schema of a PostgreSQL database, awaited (an ``AsyncStore``).

    Open it with :meth:`open` (``await AsyncPostgresStore.open(url)``), which
    connects, runs the migrations and fills the pool; ``async with`` closes it. The
    store belongs to the event loop it was opened on (its pool's connections and
    tasks do): other threads reach it through
    :class:`~skillstate.store.aio.BlockingStore`.
    """

    url: str
    """The URL the store was opened from, with any password masked."""

    def __init__(
        self,
        ops: PostgresOps,
        pool: AsyncConnectionPool[AsyncConnection[Any]],
        *,
        url: str,
        db_error: type[Exception],
    ) -> None:
        """Use :meth:`open`: this only binds an opened pool to a schema's ops."""
        self.url = url
        self.schema = ops.schema
        self.max_chain = ops.max_chain
        self._ops = ops
        self._sql = ops.sql
        self._pool = pool
        self._db_error = db_error
        self._closed = False

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        create: bool = True,
        max_connections: int = 10,
        timeout: float = 10.0,
        max_chain: int = DEFAULT_MAX_CHAIN,
    ) -> AsyncPostgresStore:
        """Connect, create or upgrade the schema, and open a connection pool.

        The options are :class:`~skillstate.store.postgres.PostgresStore`'s:
        ``max_connections`` bounds the pool (here: calls in flight at once, across
        every coroutine), ``timeout`` is how long a call waits for a free
        connection, and ``create=False`` opens only a store that exists
        (``StoreNotFound`` otherwise, with nothing created).
        """
        psycopg = driver()
        from psycopg_pool import AsyncConnectionPool

        parsed = parse_url(url)
        ops = PostgresOps(parsed.schema, max_chain)
        extra = connect_options(psycopg, parsed)
        context = f"cannot open PostgreSQL store {parsed.masked}"
        # A plain connection first, as the sync store does: it fails fast with
        # libpq's own reason, and runs the migrations before the pool connects.
        try:
            async with await psycopg.AsyncConnection.connect(parsed.conninfo, **extra) as conn:
                op = ops.open(parsed.masked, create=create)
                await _drive(conn, op, next(op))
        except psycopg.Error as exc:
            raise wrap(context, exc) from exc

        pool: AsyncConnectionPool[AsyncConnection[Any]] = AsyncConnectionPool(
            parsed.conninfo,
            kwargs=extra,
            min_size=1,
            max_size=max(1, max_connections),
            timeout=timeout,
            open=False,
            name=f"skillstate-async:{parsed.schema}",
        )
        try:
            await pool.open(wait=True, timeout=timeout)
        except psycopg.Error as exc:
            await pool.close()
            raise wrap(context, exc) from exc
        except BaseException:
            await pool.close()
            raise
        return cls(ops, pool, url=parsed.masked, db_error=psycopg.Error)

    async def __aenter__(self) -> AsyncPostgresStore:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # ------------------------------------------------------------------ schema

    async def setup(self) -> None:
        """Create or upgrade the schema and its tables. Safe to call any number of times."""
        await self._run(self._ops.migrate())

    async def schema_versions(self) -> list[int]:
        """The migrations applied to this store's schema, oldest first."""
        return await self._run(self._ops.schema_versions())

    # ------------------------------------------------------------------ protocol

    async def load(self, task_id: str, *, verify: bool = True) -> Checkpoint:
        return await self._run(self._ops.load(task_id, verify=verify))

    async def commit(
        self,
        task_id: str,
        expected_version: int,
        state: Mapping[str, Any],
        event: Event,
        *,
        fence: int | None = None,
    ) -> int:
        return await self._run(
            self._ops.commit(task_id, expected_version, state, event, fence=fence)
        )

    async def checkpoint(self, task_id: str, version: int) -> Checkpoint:
        return await self._run(self._ops.checkpoint(task_id, version))

    async def checkpoints(self, task_id: str) -> list[CheckpointInfo]:
        return await self._run(self._ops.checkpoints(task_id))

    async def events(self, task_id: str, *, since: int = 0) -> list[Event]:
        return await self._run(self._ops.events(task_id, since=since))

    async def tasks(self) -> list[str]:
        return await self._run(self._ops.tasks())

    async def heads(self) -> list[HeadInfo]:
        return await self._run(self._ops.heads())

    async def prune(
        self, task_id: str, *, keep_last: int, keep_every: int | None = None
    ) -> PruneResult:
        return await self._run(self._ops.prune(task_id, keep_last=keep_last, keep_every=keep_every))

    async def claim(self, task_id: str, worker: str, ttl: float) -> Lease:
        return await self._run(self._ops.claim(task_id, worker, ttl))

    async def release(self, task_id: str, worker: str) -> None:
        await self._run(self._ops.release(task_id, worker))

    async def lease(self, task_id: str) -> Lease | None:
        return await self._run(self._ops.lease(task_id))

    async def force_release(self, task_id: str) -> Lease | None:
        return await self._run(self._ops.force_release(task_id))

    async def post(self, task_id: str, kind: str, body: Mapping[str, Any]) -> int:
        return await self._run(self._ops.post(task_id, kind, body))

    async def inbox(self, task_id: str, *, after: int = 0) -> list[InboxMessage]:
        return await self._run(self._ops.inbox(task_id, after=after))

    async def put_artifact(
        self, data: bytes, *, media_type: str = "application/octet-stream"
    ) -> str:
        return await self._run(self._ops.put_artifact(data, media_type=media_type))

    async def get_artifact(self, ref: str) -> bytes:
        return await self._run(self._ops.get_artifact(ref))

    async def rewrite(self, task_id: str, expected_version: int, fn: Callable[[Any], Any]) -> int:
        """One transaction, with the task's row locked ``FOR UPDATE`` from the first read."""
        return await self._run(self._ops.rewrite(task_id, expected_version, fn))

    async def artifact_refs(self) -> list[str]:
        return await self._run(self._ops.artifact_refs())

    async def replace_artifact(self, ref: str, data: bytes) -> None:
        await self._run(self._ops.replace_artifact(ref, data))

    async def restore(
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
        return await self._run(
            postgres_restore.restore(self._ops, plan, overwrite=overwrite, url=self.url)
        )

    async def delete_task(self, task_id: str) -> bool:
        return await self._run(postgres_delete.delete_task(self._ops, task_id))

    async def delete_artifact(self, ref: str, *, unused_since: datetime | None = None) -> bool:
        return await self._run(postgres_delete.delete_artifact(self._ops, ref, unused_since))

    async def close(self) -> None:
        """Close the pool (connections still out close as they come back). Safe twice."""
        if self._closed:
            return
        self._closed = True
        await self._pool.close()

    def __repr__(self) -> str:
        return f"AsyncPostgresStore({self.url!r})"

    # ------------------------------------------------------------------ driver

    async def _run(self, op: Op[T]) -> T:
        """Run ``op`` on a pooled connection; driver errors become one-line ``StoreError``s.

        The op runs up to its first statement before a connection is taken, so an
        argument it refuses never waits for one.
        """
        try:
            step = next(op)
        except StopIteration as done:
            result: T = done.value
            return result
        try:
            if self._closed:
                raise StoreError(f"PostgreSQL store {self.url} is closed")
            conn = await self._pool.getconn()
            try:
                return await _drive(conn, op, step)
            finally:
                # Shielded: a second cancellation must not lose the connection on
                # its way back (the pool rolls back or closes one that is not idle).
                await asyncio.shield(self._pool.putconn(conn))
        except self._db_error as exc:
            raise wrap(f"PostgreSQL error on {self.url}", exc) from exc
        finally:
            op.close()


async def _drive(conn: AsyncConnection[Any], op: Op[T], step: Step) -> T:
    """Run ``op`` from ``step`` (its first) to its result, on ``conn``."""
    cursor = conn.cursor()
    async with AsyncExitStack() as transaction:
        while True:
            if isinstance(step, Begin):
                await transaction.enter_async_context(conn.transaction())
                reply = None
            else:
                reply = await _execute(cursor, step)
            try:
                step = op.send(reply)
            except StopIteration as done:
                result: T = done.value
                return result


async def _execute(cursor: AsyncCursor[Any], statement: Statement) -> Any:
    if statement.many:
        await cursor.executemany(statement.sql, statement.params or ())
        return None
    await cursor.execute(statement.sql, statement.params, binary=statement.binary)
    fetch = statement.fetch
    if fetch == "one":
        return await cursor.fetchone()
    if fetch == "all":
        return await cursor.fetchall()
    return cursor.rowcount if fetch == "rowcount" else None
