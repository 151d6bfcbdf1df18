"""Redis store for asyncio: :class:`~skillstate.store.redis.RedisStore`, awaited.

``store = await AsyncRedisStore.open(url)`` takes the same URLs (``?prefix=``,
``rediss://``, redis-py's options) and raises the same errors as ``RedisStore``:
``InvalidStoreURL``, ``StoreNotFound`` with ``create=False``, ``StoreUnavailable``
naming the masked URL when the server cannot be reached (on opening and on any later
call). Every call waits on the event loop, never in a thread: many coroutines of one
loop share one connection pool, and each command checks a connection out only while
it runs. The store belongs to the loop it was opened on.

Nothing Redis-specific is written here: the key layout, the Lua scripts, the commit
encoding, the reply decoding, the ``NOSCRIPT`` and ``WatchError`` retries and the
layout migrations are ``RedisStore``'s own operations (:mod:`.redis_ops`,
:mod:`.redis_rewrite`), which this store awaits one reply at a time (:meth:`_run`).
Data written by either store reads the same through the other.

Cancellation: a coroutine cancelled while a command is on the wire leaves no
connection with an unread reply behind. redis-py disconnects a connection whose
send or read was interrupted (by any ``BaseException``, ``CancelledError``
included) before it goes back to the pool, and a pipeline holding a ``WATCH`` is
reset (``UNWATCH``, or dropped) on the way out. A commit is one script, so a
cancelled commit either ran whole on the server or not at all; the caller cannot
tell which, as with a lost connection: reloading the head says.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from datetime import datetime
from types import ModuleType, TracebackType
from typing import Any, TypeVar

from skillstate.errors import InvalidStoreURL, StoreNotFound, StoreUnavailable
from skillstate.events import Event
from skillstate.store import redis_delete, redis_restore, redis_rewrite
from skillstate.store import redis_ops as ops
from skillstate.store.base import (
    Checkpoint,
    CheckpointInfo,
    HeadInfo,
    InboxMessage,
    Lease,
    PruneResult,
)
from skillstate.store.chain import DEFAULT_MAX_CHAIN
from skillstate.store.redis import OPEN_TIMEOUT, _redis
from skillstate.store.redis_codec import one_line, store_error
from skillstate.store.redis_io import Batch, Call, Eval, Exec, Layout, Ops, Watch
from skillstate.store.redis_url import parse_url
from skillstate.store.restoring import plan_restore

__all__ = ["AsyncRedisStore"]

T = TypeVar("T")

POOL_SIZE = 100
"""Connections the pool opens at most unless the URL says (``max_connections``), as
redis-py's own default; a coroutine that finds them all busy waits for one."""

POOL_TIMEOUT = 20.0
"""Seconds a coroutine waits for a free connection before ``StoreUnavailable``."""


class AsyncRedisStore(Layout):
    """A store in a Redis database, for asyncio; open it with :meth:`open`."""

    def __init__(self, client: Any, url: str, prefix: str, max_chain: int) -> None:
        """Wrap an opened ``redis.asyncio`` client (:meth:`open` is how to get one)."""
        super().__init__(url, prefix, max_chain)
        self._client = client
        self._closed = False

    @classmethod
    async def open(
        cls, url: str, *, create: bool = True, max_chain: int = DEFAULT_MAX_CHAIN
    ) -> AsyncRedisStore:
        """Connect (a short ping first) and apply missing layout migrations.

        ``create=False`` opens only a prefix that holds skillstate data, and is
        ``StoreNotFound`` naming the URL otherwise, having written nothing (as
        :class:`~skillstate.store.redis.RedisStore`).
        """
        module = _redis()
        import redis.asyncio

        client_url, prefix, masked = parse_url(url, module)
        await _ping(module, client_url, masked)
        try:
            # Waits for a free connection: many coroutines on a pool of max_connections
            # take turns instead of failing with "Too many connections".
            pool = redis.asyncio.BlockingConnectionPool.from_url(
                client_url, max_connections=POOL_SIZE, timeout=POOL_TIMEOUT
            )
        except (TypeError, ValueError) as exc:
            raise InvalidStoreURL(f"bad Redis URL {masked!r}: {one_line(exc)}") from exc
        store = cls(redis.asyncio.Redis.from_pool(pool), masked, prefix, max_chain)
        try:
            if not create and not await store._exists():
                raise StoreNotFound(store.url, f"no skillstate data under prefix {prefix!r}")
            await store.setup()
        except BaseException:
            await store.close()
            raise
        return store

    async def __aenter__(self) -> AsyncRedisStore:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self.close()

    # ------------------------------------------------------------------ schema

    async def setup(self) -> None:
        """Apply the layout migrations this database lacks. Safe to call any number of times."""
        await self._run(ops.setup(self))

    async def _exists(self) -> bool:
        return await self._run(ops.exists(self))

    async def schema_versions(self) -> list[int]:
        """Layout versions recorded in this database, oldest first (``RedisStore``'s)."""
        return await self._run(ops.schema_versions(self))

    # ------------------------------------------------------------------ protocol

    async def load(self, task_id: str, *, verify: bool = True) -> Checkpoint:
        return await self._run(ops.load(self, task_id, verify))

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
            ops.commit(self, task_id, expected_version, state, event, fence=fence)
        )

    async def checkpoint(self, task_id: str, version: int) -> Checkpoint:
        return await self._run(ops.checkpoint(self, task_id, version))

    async def checkpoints(self, task_id: str) -> list[CheckpointInfo]:
        return await self._run(ops.checkpoints(self, task_id))

    async def events(self, task_id: str, *, since: int = 0) -> list[Event]:
        return await self._run(ops.events(self, task_id, since))

    async def tasks(self) -> list[str]:
        return await self._run(ops.tasks(self))

    async def heads(self) -> list[HeadInfo]:
        return await self._run(ops.heads(self))

    async def prune(
        self, task_id: str, *, keep_last: int, keep_every: int | None = None
    ) -> PruneResult:
        return await self._run(ops.prune(self, task_id, keep_last, keep_every))

    async def claim(self, task_id: str, worker: str, ttl: float) -> Lease:
        return await self._run(ops.claim(self, task_id, worker, ttl))

    async def release(self, task_id: str, worker: str) -> None:
        await self._run(ops.release(self, task_id, worker))

    async def lease(self, task_id: str) -> Lease | None:
        return await self._run(ops.lease(self, task_id))

    async def force_release(self, task_id: str) -> Lease | None:
        return await self._run(ops.force_release(self, task_id))

    async def post(self, task_id: str, kind: str, body: Mapping[str, Any]) -> int:
        return await self._run(ops.post(self, task_id, kind, body))

    async def inbox(self, task_id: str, *, after: int = 0) -> list[InboxMessage]:
        return await self._run(ops.inbox(self, task_id, after))

    async def put_artifact(
        self, data: bytes, *, media_type: str = "application/octet-stream"
    ) -> str:
        return await self._run(ops.put_artifact(self, data, media_type))

    async def get_artifact(self, ref: str) -> bytes:
        return await self._run(ops.get_artifact(self, ref))

    async def rewrite(self, task_id: str, expected_version: int, fn: Callable[[Any], Any]) -> int:
        return await self._run(redis_rewrite.rewrite(self, task_id, expected_version, fn))

    async def artifact_refs(self) -> list[str]:
        return await self._run(redis_rewrite.artifact_refs(self))

    async def replace_artifact(self, ref: str, data: bytes) -> None:
        await self._run(redis_rewrite.replace_artifact(self, ref, data))

    async def restore(
        self,
        task_id: str,
        checkpoints: Sequence[Checkpoint],
        events: Sequence[Event],
        inbox: Sequence[InboxMessage],
        *,
        overwrite: bool = False,
    ) -> int:
        """``WATCH`` then one ``MULTI``/``EXEC`` (:mod:`~skillstate.store.redis_restore`)."""
        plan = plan_restore(task_id, checkpoints, events, inbox, max_chain=self.max_chain)
        return await self._run(redis_restore.restore(self, plan, overwrite=overwrite))

    async def delete_task(self, task_id: str) -> bool:
        return await self._run(redis_delete.delete_task(self, task_id))

    async def delete_artifact(self, ref: str, *, unused_since: datetime | None = None) -> bool:
        return await self._run(redis_delete.delete_artifact(self, ref, unused_since))

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        from redis.exceptions import RedisError

        # Closing sockets to a server that is gone: nothing is left to release.
        with suppress(RedisError):
            await self._client.aclose()

    def __repr__(self) -> str:
        return f"AsyncRedisStore({self.url!r})"

    # ------------------------------------------------------------------ the driver

    async def _run(self, operation: Ops[T]) -> T:
        """Run one operation of :mod:`.redis_ops` to its result, awaiting each reply.

        As ``RedisStore._run``: redis-py's errors go back into the operation, one it
        lets out is translated. The pipeline holding a ``WATCH`` is reset however the
        operation ends, cancelled included.
        """
        from redis.exceptions import RedisError

        watching: Any = None  # the pipeline holding a WATCH, from Watch to Exec
        reply: Any = None
        error: Exception | None = None
        try:
            while True:
                try:
                    op = operation.send(reply) if error is None else operation.throw(error)
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]
                reply = error = None
                try:
                    if isinstance(op, Watch):
                        if watching is not None:
                            await watching.reset()
                        watching = self._client.pipeline(transaction=True)
                        await watching.watch(*op.keys)
                    else:
                        reply = await self._do(op, watching)
                except RedisError as exc:
                    error = exc
        except RedisError as exc:
            raise store_error(self.url, exc) from exc
        finally:
            operation.close()
            if watching is not None:
                await watching.reset()

    async def _do(self, op: Call | Batch | Eval | Exec, watching: Any) -> Any:
        # A pipeline with nothing queued is falsy: hence "is None", never "or".
        client: Any = self._client if watching is None else watching
        if isinstance(op, Call):
            return await client.execute_command(*op.args)
        if isinstance(op, Eval):
            return await client.execute_command("EVALSHA", op.sha, len(op.keys), *op.keys, *op.args)
        if isinstance(op, Batch):
            pipe: Any = self._client.pipeline(transaction=op.transaction)
        else:  # Exec: the transaction on the watching connection
            pipe = watching
            pipe.multi()
        async with pipe:
            for call in op.calls:
                pipe.execute_command(*call.args)  # queued: nothing to await yet
            return await pipe.execute()


async def _ping(module: ModuleType, client_url: str, masked: str) -> None:
    """A throwaway client without retries and with short timeouts, as ``RedisStore``'s:
    "the server is not there" is said at once, not after the pooled client's backoff."""
    import redis.asyncio
    import redis.asyncio.retry

    retry = redis.asyncio.retry.Retry(module.backoff.NoBackoff(), 0)
    try:
        probe = redis.asyncio.Redis.from_url(
            client_url,
            socket_connect_timeout=OPEN_TIMEOUT,
            socket_timeout=OPEN_TIMEOUT,
            retry=retry,
        )
    except (TypeError, ValueError) as exc:
        raise InvalidStoreURL(f"bad Redis URL {masked!r}: {one_line(exc)}") from exc
    try:
        await probe.ping()
    except TypeError as exc:  # an option the connection class does not take
        raise InvalidStoreURL(f"bad Redis URL {masked!r}: {one_line(exc)}") from exc
    except module.exceptions.RedisError as exc:
        # Refused, timed out, bad credentials, no such database number.
        raise StoreUnavailable(f"cannot reach Redis at {masked}: {one_line(exc)}") from exc
    finally:
        await probe.aclose()
