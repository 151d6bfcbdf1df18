"""AsyncRedisStore specifics the contract suite cannot show: one loop, many coroutines.

The contract suite runs every Store behaviour against ``redis-async`` through a
``BlockingStore``, one call at a time. These tests await the store directly
(``asyncio.run``): many coroutines racing on one task and on many tasks over one
connection pool, a cancellation while a reply is on its way, a script the server
lost, and opening errors.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import pytest

from skillstate.errors import InvalidStoreURL, StaleState, StoreNotFound, StoreUnavailable
from skillstate.events import Event
from skillstate.state.diff import make_patch
from skillstate.store.aio import open_async_store
from skillstate.store.redis import RedisStore
from skillstate.store.redis_async import AsyncRedisStore
from tests.contract.backends import drop_redis_data, redis_url_for

T = TypeVar("T")


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    """A Redis URL with a prefix of this test's own; its keys are deleted afterwards."""
    yield redis_url_for(tmp_path)
    drop_redis_data()


def run(body: Callable[[AsyncRedisStore], Awaitable[T]], url: str) -> T:
    """``body(store)`` on a fresh event loop, with a store opened and closed on it."""

    async def main() -> T:
        async with await AsyncRedisStore.open(url) as store:
            return await body(store)

    return asyncio.run(main())


def card(task_id: str, version: int) -> dict[str, Any]:
    return {"task_id": task_id, "version": version, "n": version}


async def commit_next(store: AsyncRedisStore, task_id: str, version: int) -> int:
    """Commit ``version`` of a small card over ``version - 1``; the version written."""
    before = card(task_id, version - 1) if version > 1 else {}
    state = card(task_id, version)
    step = Event(
        task_id=task_id,
        version=version,
        actor="runtime",
        action={"kind": "t"},
        patch=make_patch(before, state),
    )
    return await store.commit(task_id, version - 1, state, step)


def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.services
def test_coroutines_racing_on_one_task(url: str) -> None:
    """20 coroutines x 20 steps on one task, one loop, one pool: each step lands once.

    As ``tests/contract/test_race.py`` with processes: a writer that lost the race
    gets StaleState, reloads and tries again; no version goes missing, the state's log
    is the commit order, and every version rebuilds to what its event says.
    """
    workers, steps = 20, 20

    async def worker(store: AsyncRedisStore, worker: int) -> int:
        retries = 0
        for i in range(steps):
            while True:
                head = await store.load("race")
                version = head.version + 1
                state = {**head.state, "version": version, "last": [worker, i]}
                state["log"] = [*head.state["log"], f"{worker}:{i}"]
                step = Event(
                    task_id="race",
                    version=version,
                    actor="runtime",
                    action={"kind": "race", "worker": worker, "i": i},
                    patch=make_patch(head.state, state),
                )
                try:
                    await store.commit("race", head.version, state, step)
                    break
                except StaleState:
                    retries += 1
        return retries

    async def body(store: AsyncRedisStore) -> None:
        first = {"task_id": "race", "version": 1, "log": [], "last": None}
        start = Event(task_id="race", version=1, actor="runtime", action={})
        await store.commit("race", 0, first, start)
        retries = await asyncio.gather(*(worker(store, w) for w in range(workers)))
        assert sum(retries) > 0  # they did race

        head = await store.load("race")
        assert head.version == 1 + workers * steps
        events = await store.events("race")
        assert [e.version for e in events] == list(range(1, head.version + 1))
        done = [(e.action["worker"], e.action["i"]) for e in events[1:]]
        assert sorted(done) == [(w, i) for w in range(workers) for i in range(steps)]
        assert head.state["log"] == [f"{w}:{i}" for w, i in done]
        infos = await store.checkpoints("race")
        assert [c.version for c in infos] == list(range(1, head.version + 1))
        for e in events[1::37]:
            old = await store.checkpoint("race", e.version)
            assert old.state["last"] == [e.action["worker"], e.action["i"]]

    run(body, url)


@pytest.mark.services
@pytest.mark.parametrize("pool", ["", "&max_connections=4"])
def test_many_tasks_at_once(url: str, pool: str) -> None:
    """100 tasks committed to concurrently, 10 versions each, on one store: all land.

    With 4 connections for 100 coroutines, they wait for one in turn (no "Too many
    connections")."""

    async def chain(store: AsyncRedisStore, task_id: str) -> None:
        for v in range(1, 11):
            assert await commit_next(store, task_id, v) == v

    async def body(store: AsyncRedisStore) -> None:
        ids = [f"task-{i:03d}" for i in range(100)]
        await asyncio.gather(*(chain(store, t) for t in ids))
        assert await store.tasks() == ids
        heads = await store.heads()
        assert [(h.task_id, h.version) for h in heads] == [(t, 10) for t in ids]
        loads = await asyncio.gather(*(store.load(t) for t in ids))
        assert [c.state for c in loads] == [card(t, 10) for t in ids]
        logs = await asyncio.gather(*(store.events(t) for t in ids))
        assert all([e.version for e in log] == list(range(1, 11)) for log in logs)

    run(body, url + pool)


@pytest.mark.services
def test_data_reads_the_same_through_either_store(url: str) -> None:
    """What the async store wrote the sync store reads, and the other way round."""
    sync = RedisStore(url)
    try:

        async def body(store: AsyncRedisStore) -> None:
            await commit_next(store, "t", 1)
            assert sync.load("t").state == card("t", 1)
            sync.commit(
                "t",
                1,
                card("t", 2),
                Event(task_id="t", version=2, actor="runtime", action={"kind": "t"}),
            )
            assert (await store.load("t")).state == card("t", 2)
            assert await commit_next(store, "t", 3) == 3
            assert [e.version for e in sync.events("t")] == [1, 2, 3]

        run(body, url)
    finally:
        sync.close()


@pytest.mark.services
def test_scripts_are_reloaded_after_script_flush(url: str) -> None:
    """After ``SCRIPT FLUSH`` (as after a server restart) commit and claim load theirs again."""
    sync = RedisStore(url)
    try:

        async def body(store: AsyncRedisStore) -> None:
            assert await commit_next(store, "t", 1) == 1
            sync._client.script_flush()
            assert await commit_next(store, "t", 2) == 2
            sync._client.script_flush()
            lease = await store.claim("t", "w", 30)
            assert lease.generation == 1
            assert (await store.load("t")).state == card("t", 2)
            assert [i.version for i in await store.checkpoints("t")] == [1, 2]
            assert len(await store.events("t")) == 2  # written once

        run(body, url)
    finally:
        sync.close()


class ReplyGate:
    """A TCP proxy to Redis that can hold a server's reply back.

    Once the client sends a chunk containing ``marker`` on a connection, what the
    server sends next on that connection is held (and ``held`` is set): the command
    ran on the server, its reply was sent, and the client is still waiting for it.
    :meth:`release` passes it on, to a client that is still there. Other connections
    pass as usual.
    """

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.marker: bytes | None = None
        self.held = asyncio.Event()
        self.released = asyncio.Event()
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    def release(self) -> None:
        self.released.set()

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        holding = [False]  # this connection's: set once the marker went up
        try:
            await asyncio.gather(
                self._pipe(reader, up_writer, holding, upstream=True),
                self._pipe(up_reader, writer, holding, upstream=False),
            )
        except (ConnectionError, OSError):
            pass
        finally:
            for w in (writer, up_writer):
                w.close()

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        holding: list[bool],
        *,
        upstream: bool,
    ) -> None:
        while data := await reader.read(65536):
            if upstream and self.marker is not None and self.marker in data:
                self.marker, holding[0] = None, True
            if not upstream and holding[0]:
                self.held.set()
                await self.released.wait()
                holding[0] = False
            writer.write(data)
            await writer.drain()
        writer.close()


def through(url: str, port: int, option: str) -> str:
    """``url`` with its host and port replaced by the proxy's, and ``option`` added."""
    parts = urlsplit(url)
    userinfo, at, _ = parts.netloc.rpartition("@")
    netloc = f"{userinfo}{at}127.0.0.1:{port}"
    return urlunsplit(parts._replace(netloc=netloc, query=f"{parts.query}&{option}"))


@pytest.mark.services
@pytest.mark.parametrize("what", ["commit", "prune"])
def test_cancelled_mid_command_leaves_no_unread_reply(url: str, what: str) -> None:
    """A coroutine cancelled while its reply is on the way leaves the store consistent.

    One connection in the pool (``max_connections=1``), so the next command takes the
    very connection the cancelled one was reading on: had the pool kept it with the
    reply unread, the next command would read that reply as its own. ``commit`` is
    cancelled after the server ran it (EVALSHA sent, its reply held back); ``prune``
    during its ``EXEC``, with a ``WATCH`` on the connection.
    """
    parts = urlsplit(url)
    target = (parts.hostname or "127.0.0.1", parts.port or 6379)

    async def main() -> None:
        gate = ReplyGate(target)
        port = await gate.start()
        store = await AsyncRedisStore.open(through(url, port, "max_connections=1"))
        try:
            for v in (1, 2, 3):
                await commit_next(store, "t", v)
            gate.marker = b"EVALSHA" if what == "commit" else b"EXEC"
            call = commit_next(store, "t", 4) if what == "commit" else prune(store)
            task = asyncio.ensure_future(call)
            await gate.held.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            gate.release()  # the reply reaches the connection, if it is still open

            head = await store.load("t")
            landed = 4 if what == "commit" else 3  # the server ran the commit
            assert head.version == landed
            assert head.state == card("t", landed)
            assert await commit_next(store, "t", landed + 1) == landed + 1
            assert [e.version for e in await store.events("t")] == list(range(1, landed + 2))
            kept = [i.version for i in await store.checkpoints("t")]
            for v in kept:
                assert (await store.checkpoint("t", v)).state == card("t", v)
            assert (await store.prune("t", keep_last=1)).kept == [landed + 1]
        finally:
            await store.close()
            await gate.close()

    async def prune(store: AsyncRedisStore) -> None:
        await store.prune("t", keep_last=1)

    asyncio.run(main())


class TestOpen:
    @pytest.mark.parametrize(
        "url",
        ["redis://h/0?prefix=", "redis:///0", "postgres://h/0", "redis://h/notadb"],
    )
    def test_bad_urls_are_usage_errors(self, url: str) -> None:
        """A URL that cannot name a Redis store is InvalidStoreURL, before any network."""
        with pytest.raises(InvalidStoreURL):
            asyncio.run(AsyncRedisStore.open(url))

    def test_unknown_option_is_refused_by_name(self) -> None:
        with pytest.raises(InvalidStoreURL, match="bogus_option"):
            asyncio.run(AsyncRedisStore.open("redis://127.0.0.1:6379/0?bogus_option=1"))

    def test_unreachable_server_is_unavailable_at_once(self) -> None:
        """Nothing listening: StoreUnavailable on one line, the password masked, fast."""
        url = f"redis://someone:hunter2@127.0.0.1:{unused_port()}/0?prefix=x"
        start = time.monotonic()
        with pytest.raises(StoreUnavailable) as info:
            asyncio.run(AsyncRedisStore.open(url))
        assert time.monotonic() - start < 2.0
        message = str(info.value)
        assert "\n" not in message
        assert "hunter2" not in message
        assert url.replace(":hunter2@", ":***@") in message
        assert info.value.__cause__ is not None

    @pytest.mark.services
    def test_missing_store_is_not_found_and_not_created(self, url: str) -> None:
        """create=False on an empty prefix: StoreNotFound naming the URL, no key written."""
        with pytest.raises(StoreNotFound) as info:
            asyncio.run(AsyncRedisStore.open(url, create=False))
        assert info.value.url == url
        import redis

        raw = redis.Redis.from_url(url.rpartition("?")[0])
        try:
            assert list(raw.scan_iter(match=f"{url.rpartition('prefix=')[2]}:*")) == []
        finally:
            raw.close()
        RedisStore(url).close()  # now the store exists

        async def reopen() -> list[int]:
            store = await AsyncRedisStore.open(url, create=False)
            try:
                return await store.schema_versions()
            finally:
                await store.close()
                await store.close()  # safe twice

        assert asyncio.run(reopen()) == [1, 2]

    @pytest.mark.services
    def test_open_async_store_opens_the_native_store(self, url: str) -> None:
        """``open_async_store`` gives a Redis URL an AsyncRedisStore, URL as given."""

        async def main() -> None:
            store = await open_async_store(url)
            try:
                assert isinstance(store, AsyncRedisStore)
                assert store.url == url
                assert await store.tasks() == []
            finally:
                await store.close()

        asyncio.run(main())
