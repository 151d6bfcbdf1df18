"""The ``AsyncStore`` protocol: the :class:`~skillstate.store.base.Store` protocol, awaited.

Every method of :class:`Store` exists here as a coroutine with the same arguments,
results, errors and guarantees (the contract suite runs against both: see
``tests/contract/backends.py``). What differs is only how a call waits:

* :class:`~skillstate.store.postgres_async.AsyncPostgresStore` (psycopg's async
  connection pool) and :class:`~skillstate.store.redis_async.AsyncRedisStore`
  (``redis.asyncio``) wait on the event loop itself: a hundred tasks on one loop
  share one pool, with no thread per call. Their statements, scripts and decoding
  are the synchronous stores' own (one implementation, two drivers).
* :class:`ThreadedStore` gives any synchronous store the async protocol by running
  each call in a worker thread: what the embedded SQLite, files and memory stores
  use (their I/O is local and short; a thread is what aiosqlite would use too).

:func:`open_async_store` opens one by URL, as :func:`~skillstate.store.open_store`
does for the synchronous protocol.

:class:`BlockingStore` goes the other way: it gives an ``AsyncStore`` the
synchronous protocol from a thread that is not the loop's, by submitting each call
to the loop and waiting. It is how the runtime's one step implementation, which runs
in a worker thread under :class:`~skillstate.engine.aruntime.AsyncRuntime`, reaches
a native async store.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol, TypeVar, cast, runtime_checkable

from skillstate._aio import current_loop, on_thread_of
from skillstate.errors import UsageError
from skillstate.events import Event
from skillstate.store.base import (
    Checkpoint,
    CheckpointInfo,
    HeadInfo,
    InboxMessage,
    Lease,
    PruneResult,
    Store,
)

__all__ = ["AsyncStore", "BlockingStore", "ThreadedStore", "is_async_store", "open_async_store"]

T = TypeVar("T")


@runtime_checkable
class AsyncStore(Protocol):
    """Persistence for tasks, awaited. Each method is :class:`Store`'s, as a coroutine."""

    url: str
    """The URL the store was opened from, with any password masked."""

    async def load(self, task_id: str, *, verify: bool = True) -> Checkpoint:
        """:meth:`Store.load`."""
        ...

    async def commit(
        self,
        task_id: str,
        expected_version: int,
        state: Mapping[str, Any],
        event: Event,
        *,
        fence: int | None = None,
    ) -> int:
        """:meth:`Store.commit`: atomic compare-and-set on the version (and the fence)."""
        ...

    async def checkpoint(self, task_id: str, version: int) -> Checkpoint:
        """:meth:`Store.checkpoint`."""
        ...

    async def checkpoints(self, task_id: str) -> list[CheckpointInfo]:
        """:meth:`Store.checkpoints`."""
        ...

    async def events(self, task_id: str, *, since: int = 0) -> list[Event]:
        """:meth:`Store.events`."""
        ...

    async def tasks(self) -> list[str]:
        """:meth:`Store.tasks`."""
        ...

    async def heads(self) -> list[HeadInfo]:
        """:meth:`Store.heads`."""
        ...

    async def prune(
        self, task_id: str, *, keep_last: int, keep_every: int | None = None
    ) -> PruneResult:
        """:meth:`Store.prune`."""
        ...

    async def claim(self, task_id: str, worker: str, ttl: float) -> Lease:
        """:meth:`Store.claim`."""
        ...

    async def release(self, task_id: str, worker: str) -> None:
        """:meth:`Store.release`."""
        ...

    async def lease(self, task_id: str) -> Lease | None:
        """:meth:`Store.lease`."""
        ...

    async def force_release(self, task_id: str) -> Lease | None:
        """:meth:`Store.force_release`."""
        ...

    async def put_artifact(
        self, data: bytes, *, media_type: str = "application/octet-stream"
    ) -> str:
        """:meth:`Store.put_artifact`."""
        ...

    async def get_artifact(self, ref: str) -> bytes:
        """:meth:`Store.get_artifact`."""
        ...

    async def rewrite(self, task_id: str, expected_version: int, fn: Callable[[Any], Any]) -> int:
        """:meth:`Store.rewrite` (``fn`` stays a plain function: it changes JSON bodies)."""
        ...

    async def artifact_refs(self) -> list[str]:
        """:meth:`Store.artifact_refs`."""
        ...

    async def replace_artifact(self, ref: str, data: bytes) -> None:
        """:meth:`Store.replace_artifact`."""
        ...

    async def delete_task(self, task_id: str) -> bool:
        """:meth:`Store.delete_task`."""
        ...

    async def delete_artifact(self, ref: str, *, unused_since: datetime | None = None) -> bool:
        """:meth:`Store.delete_artifact`."""
        ...

    async def post(self, task_id: str, kind: str, body: Mapping[str, Any]) -> int:
        """:meth:`Store.post`: append to the task's inbox, returning the message's number."""
        ...

    async def inbox(self, task_id: str, *, after: int = 0) -> list[InboxMessage]:
        """:meth:`Store.inbox`."""
        ...

    async def restore(
        self,
        task_id: str,
        checkpoints: Sequence[Checkpoint],
        events: Sequence[Event],
        inbox: Sequence[InboxMessage],
        *,
        overwrite: bool = False,
    ) -> int:
        """:meth:`Store.restore`."""
        ...

    async def close(self) -> None:
        """Release connections. Safe to call twice."""
        ...


class ThreadedStore:
    """Any synchronous :class:`Store` as an :class:`AsyncStore`: each call in a worker thread.

    ``await ThreadedStore(SQLiteStore(path)).load(task_id)`` never blocks the loop.
    The wrapped store must be safe to call from several threads at once, which every
    skillstate store is.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        """The synchronous store every call goes to."""
        self.url = store.url

    async def load(self, task_id: str, *, verify: bool = True) -> Checkpoint:
        return await asyncio.to_thread(self.store.load, task_id, verify=verify)

    async def commit(
        self,
        task_id: str,
        expected_version: int,
        state: Mapping[str, Any],
        event: Event,
        *,
        fence: int | None = None,
    ) -> int:
        return await asyncio.to_thread(
            self.store.commit, task_id, expected_version, state, event, fence=fence
        )

    async def checkpoint(self, task_id: str, version: int) -> Checkpoint:
        return await asyncio.to_thread(self.store.checkpoint, task_id, version)

    async def checkpoints(self, task_id: str) -> list[CheckpointInfo]:
        return await asyncio.to_thread(self.store.checkpoints, task_id)

    async def events(self, task_id: str, *, since: int = 0) -> list[Event]:
        return await asyncio.to_thread(self.store.events, task_id, since=since)

    async def tasks(self) -> list[str]:
        return await asyncio.to_thread(self.store.tasks)

    async def heads(self) -> list[HeadInfo]:
        return await asyncio.to_thread(self.store.heads)

    async def prune(
        self, task_id: str, *, keep_last: int, keep_every: int | None = None
    ) -> PruneResult:
        return await asyncio.to_thread(
            self.store.prune, task_id, keep_last=keep_last, keep_every=keep_every
        )

    async def claim(self, task_id: str, worker: str, ttl: float) -> Lease:
        return await asyncio.to_thread(self.store.claim, task_id, worker, ttl)

    async def release(self, task_id: str, worker: str) -> None:
        await asyncio.to_thread(self.store.release, task_id, worker)

    async def lease(self, task_id: str) -> Lease | None:
        return await asyncio.to_thread(self.store.lease, task_id)

    async def force_release(self, task_id: str) -> Lease | None:
        return await asyncio.to_thread(self.store.force_release, task_id)

    async def put_artifact(
        self, data: bytes, *, media_type: str = "application/octet-stream"
    ) -> str:
        return await asyncio.to_thread(self.store.put_artifact, data, media_type=media_type)

    async def get_artifact(self, ref: str) -> bytes:
        return await asyncio.to_thread(self.store.get_artifact, ref)

    async def rewrite(self, task_id: str, expected_version: int, fn: Callable[[Any], Any]) -> int:
        return await asyncio.to_thread(self.store.rewrite, task_id, expected_version, fn)

    async def artifact_refs(self) -> list[str]:
        return await asyncio.to_thread(self.store.artifact_refs)

    async def replace_artifact(self, ref: str, data: bytes) -> None:
        await asyncio.to_thread(self.store.replace_artifact, ref, data)

    async def delete_task(self, task_id: str) -> bool:
        return await asyncio.to_thread(self.store.delete_task, task_id)

    async def delete_artifact(self, ref: str, *, unused_since: datetime | None = None) -> bool:
        return await asyncio.to_thread(self.store.delete_artifact, ref, unused_since=unused_since)

    async def post(self, task_id: str, kind: str, body: Mapping[str, Any]) -> int:
        return await asyncio.to_thread(self.store.post, task_id, kind, body)

    async def inbox(self, task_id: str, *, after: int = 0) -> list[InboxMessage]:
        return await asyncio.to_thread(self.store.inbox, task_id, after=after)

    async def restore(
        self,
        task_id: str,
        checkpoints: Sequence[Checkpoint],
        events: Sequence[Event],
        inbox: Sequence[InboxMessage],
        *,
        overwrite: bool = False,
    ) -> int:
        return await asyncio.to_thread(
            self.store.restore, task_id, checkpoints, events, inbox, overwrite=overwrite
        )

    async def close(self) -> None:
        await asyncio.to_thread(self.store.close)

    def __repr__(self) -> str:
        return f"ThreadedStore({self.store!r})"


class BlockingStore:
    """An :class:`AsyncStore` as a synchronous :class:`Store`, for threads off its loop.

    Each call is submitted to ``loop`` (``run_coroutine_threadsafe``) and waited for,
    so the async store's connections stay on the loop they belong to. ``loop=None``
    means the loop of the code calling (what :func:`skillstate._aio.on_loop` set: the
    worker threads of :class:`~skillstate.engine.aruntime.AsyncRuntime`). Calling it
    from the loop's own thread would wait for the loop it blocks: that is refused
    with a :class:`~skillstate.errors.UsageError` instead of hanging.
    """

    def __init__(self, store: AsyncStore, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.store = store
        """The async store every call goes to."""
        self.loop = loop
        self.url = store.url

    def _wait(self, call: Coroutine[Any, Any, T]) -> T:
        loop = self.loop or current_loop()
        if loop is None or not loop.is_running():
            call.close()
            raise UsageError(
                "an async store was used outside its event loop; "
                "run the task through AsyncRuntime or await the store"
            )
        if on_thread_of(loop):
            call.close()
            raise UsageError(
                "an async store was called synchronously on its event loop's own thread; "
                "await it there instead"
            )
        return asyncio.run_coroutine_threadsafe(call, loop).result()

    def load(self, task_id: str, *, verify: bool = True) -> Checkpoint:
        return self._wait(self.store.load(task_id, verify=verify))

    def commit(
        self,
        task_id: str,
        expected_version: int,
        state: Mapping[str, Any],
        event: Event,
        *,
        fence: int | None = None,
    ) -> int:
        return self._wait(self.store.commit(task_id, expected_version, state, event, fence=fence))

    def checkpoint(self, task_id: str, version: int) -> Checkpoint:
        return self._wait(self.store.checkpoint(task_id, version))

    def checkpoints(self, task_id: str) -> list[CheckpointInfo]:
        return self._wait(self.store.checkpoints(task_id))

    def events(self, task_id: str, *, since: int = 0) -> list[Event]:
        return self._wait(self.store.events(task_id, since=since))

    def tasks(self) -> list[str]:
        return self._wait(self.store.tasks())

    def heads(self) -> list[HeadInfo]:
        return self._wait(self.store.heads())

    def prune(self, task_id: str, *, keep_last: int, keep_every: int | None = None) -> PruneResult:
        return self._wait(self.store.prune(task_id, keep_last=keep_last, keep_every=keep_every))

    def claim(self, task_id: str, worker: str, ttl: float) -> Lease:
        return self._wait(self.store.claim(task_id, worker, ttl))

    def release(self, task_id: str, worker: str) -> None:
        self._wait(self.store.release(task_id, worker))

    def lease(self, task_id: str) -> Lease | None:
        return self._wait(self.store.lease(task_id))

    def force_release(self, task_id: str) -> Lease | None:
        return self._wait(self.store.force_release(task_id))

    def put_artifact(self, data: bytes, *, media_type: str = "application/octet-stream") -> str:
        return self._wait(self.store.put_artifact(data, media_type=media_type))

    def get_artifact(self, ref: str) -> bytes:
        return self._wait(self.store.get_artifact(ref))

    def rewrite(self, task_id: str, expected_version: int, fn: Callable[[Any], Any]) -> int:
        return self._wait(self.store.rewrite(task_id, expected_version, fn))

    def artifact_refs(self) -> list[str]:
        return self._wait(self.store.artifact_refs())

    def replace_artifact(self, ref: str, data: bytes) -> None:
        self._wait(self.store.replace_artifact(ref, data))

    def delete_task(self, task_id: str) -> bool:
        return self._wait(self.store.delete_task(task_id))

    def delete_artifact(self, ref: str, *, unused_since: datetime | None = None) -> bool:
        return self._wait(self.store.delete_artifact(ref, unused_since=unused_since))

    def post(self, task_id: str, kind: str, body: Mapping[str, Any]) -> int:
        return self._wait(self.store.post(task_id, kind, body))

    def inbox(self, task_id: str, *, after: int = 0) -> list[InboxMessage]:
        return self._wait(self.store.inbox(task_id, after=after))

    def restore(
        self,
        task_id: str,
        checkpoints: Sequence[Checkpoint],
        events: Sequence[Event],
        inbox: Sequence[InboxMessage],
        *,
        overwrite: bool = False,
    ) -> int:
        return self._wait(
            self.store.restore(task_id, checkpoints, events, inbox, overwrite=overwrite)
        )

    def close(self) -> None:
        self._wait(self.store.close())

    def __repr__(self) -> str:
        return f"BlockingStore({self.store!r})"


# scheme -> "module:coroutine function" opening a native async store; a scheme not
# here opens its synchronous store in a ThreadedStore.
_NATIVE: dict[str, str] = {
    "postgresql": "skillstate.store.postgres_async:AsyncPostgresStore.open",
    "postgres": "skillstate.store.postgres_async:AsyncPostgresStore.open",
    "redis": "skillstate.store.redis_async:AsyncRedisStore.open",
    "rediss": "skillstate.store.redis_async:AsyncRedisStore.open",
}


async def open_async_store(url: str | None = None, *, create: bool = True) -> AsyncStore:
    """Open the store a URL names, as :func:`~skillstate.store.open_store`, for asyncio.

    PostgreSQL and Redis URLs open a native async store (psycopg's async pool,
    ``redis.asyncio``); the embedded stores (``sqlite:///``, ``file://``,
    ``memory://``) open their synchronous store in a :class:`ThreadedStore`. The
    URL and ``create`` mean what they mean for ``open_store``.
    """
    from skillstate.store import default_store_url, import_target, open_store

    url = url or default_store_url()
    target = _NATIVE.get(url.partition("://")[0])
    if target is None:
        return ThreadedStore(await asyncio.to_thread(open_store, url, create=create))
    opener = cast("Callable[..., Awaitable[AsyncStore]]", import_target(target))
    return await opener(url, create=create)


def is_async_store(store: object) -> bool:
    """Whether ``store`` keeps the :class:`AsyncStore` protocol (its ``commit`` is awaited).

    Both protocols name the same methods, so ``isinstance`` cannot tell them apart.
    """
    return inspect.iscoroutinefunction(getattr(store, "commit", None))
