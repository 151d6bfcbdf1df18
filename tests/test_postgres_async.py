"""AsyncPostgresStore: what the contract suite (run through a BlockingStore) cannot show.

Many coroutines on one loop racing on one task, many tasks sharing a small pool,
coroutines cancelled mid-call, and opening errors. Each test runs its coroutine with
``asyncio.run``; waits for the server are polls on what it reports, never sleeps
of a guessed length.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from skillstate.errors import (
    InvalidStoreURL,
    StaleState,
    StoreError,
    StoreNotFound,
    StoreUnavailable,
)
from skillstate.events import Event
from skillstate.state.diff import make_patch
from skillstate.store.aio import AsyncStore, open_async_store
from skillstate.store.postgres import MIGRATIONS, PostgresStore
from skillstate.store.postgres_async import AsyncPostgresStore
from tests.contract.backends import (
    POSTGRES_URL,
    drop_postgres_schemas,
    postgres_reachable,
    postgres_url_for,
    require_service,
)


@pytest.fixture
def pg_url(tmp_path: Path) -> Iterator[str]:
    """A store URL with a schema of this test's own, dropped after the test."""
    yield postgres_url_for(tmp_path)
    drop_postgres_schemas()


def _event(task_id: str, version: int, **extra: Any) -> Event:
    return Event(
        task_id=task_id, version=version, actor="runtime", action={"kind": "test"}, **extra
    )


async def _commit_next(store: AsyncPostgresStore, task_id: str, version: int) -> int:
    before = {"task_id": task_id, "version": version - 1, "n": version - 1} if version > 1 else {}
    state = {"task_id": task_id, "version": version, "n": version}
    return await store.commit(
        task_id, version - 1, state, _event(task_id, version, patch=make_patch(before, state))
    )


async def _raw(query: str, *params: Any) -> list[tuple[Any, ...]]:
    """Run one statement on a connection of its own (autocommit) and return its rows."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(POSTGRES_URL, autocommit=True) as conn:
        cur = await conn.execute(query, params or None)
        return await cur.fetchall() if cur.description else []


async def _until(check: Callable[[], Awaitable[bool]], what: str) -> None:
    """Poll ``check`` until it holds (10 s at most)."""
    deadline = time.monotonic() + 10
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


class Blocker:
    """A separate connection holding row locks in an open transaction."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    @classmethod
    async def lock(cls, query: str, *params: Any) -> Blocker:
        import psycopg

        conn = await psycopg.AsyncConnection.connect(POSTGRES_URL)
        await conn.execute(query, params)
        return cls(conn)

    async def waited_on(self) -> bool:
        """Whether some other session is waiting for this one's locks."""
        rows = await _raw(
            "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
            self.conn.info.backend_pid,
        )
        return bool(rows[0][0])

    async def release(self) -> None:
        await self.conn.rollback()
        await self.conn.close()


async def _row_is_free(schema: str, task_id: str) -> bool:
    """Whether nobody holds the task's row lock (NOWAIT: fails at once if someone does)."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(POSTGRES_URL) as conn:
        try:
            await conn.execute(
                f'SELECT 1 FROM "{schema}".tasks WHERE task_id = %s FOR UPDATE NOWAIT', (task_id,)
            )
        except psycopg.errors.LockNotAvailable:
            return False
        finally:
            await conn.rollback()
    return True


@pytest.mark.services
class TestConcurrency:
    def test_coroutines_racing_on_one_task_land_every_step_once(self, pg_url: str) -> None:
        """40 coroutines x 10 commits on one task, one loop, one pool: no step lost or doubled."""
        workers, steps, task = 40, 10, "race"

        async def worker(store: AsyncPostgresStore, w: int) -> int:
            retries = 0
            for i in range(steps):
                while True:
                    head = await store.load(task)
                    version = head.version + 1
                    state = {**head.state, "version": version, "log": [*head.state["log"], w]}
                    event = Event(
                        task_id=task,
                        version=version,
                        actor="runtime",
                        action={"kind": "race", "worker": w, "i": i},
                        patch=make_patch(head.state, state),
                    )
                    try:
                        await store.commit(task, head.version, state, event)
                        break
                    except StaleState:
                        retries += 1
            return retries

        async def go() -> tuple[int, Any, list[Event], list[int]]:
            async with await AsyncPostgresStore.open(pg_url, max_connections=5) as store:
                first = {"task_id": task, "version": 1, "log": []}
                await store.commit(task, 0, first, _event(task, 1))
                retries = await asyncio.gather(*(worker(store, w) for w in range(workers)))
                head = await store.load(task)
                events = await store.events(task)
                kept = [info.version for info in await store.checkpoints(task)]
                for version in range(2, head.version + 1, 37):
                    rebuilt = await store.checkpoint(task, version)
                    assert rebuilt.state["log"] == head.state["log"][: version - 1]
                assert store._pool.get_stats()["pool_size"] <= 5
                return sum(retries), head, events, kept

        retries, head, events, kept = asyncio.run(go())
        assert retries > 0  # they did race
        assert head.version == 1 + workers * steps
        assert [e.version for e in events] == list(range(1, head.version + 1))
        done = sorted((e.action["worker"], e.action["i"]) for e in events[1:])
        assert done == [(w, i) for w in range(workers) for i in range(steps)]
        assert head.state["log"] == [e.action["worker"] for e in events[1:]]
        assert kept == list(range(1, head.version + 1))

    def test_many_tasks_share_a_small_pool(self, pg_url: str) -> None:
        """100 tasks committing at once through 3 connections all finish, none stale."""

        async def task_run(store: AsyncPostgresStore, n: int) -> None:
            for v in range(1, 6):
                assert await _commit_next(store, f"t{n:03d}", v) == v
                assert (await store.load(f"t{n:03d}")).version == v
            lease = await store.claim(f"t{n:03d}", f"w{n}", 30)
            await store.commit(
                f"t{n:03d}",
                5,
                {"task_id": f"t{n:03d}", "version": 6},
                _event(f"t{n:03d}", 6),
                fence=lease.generation,
            )
            await store.release(f"t{n:03d}", f"w{n}")

        async def go() -> None:
            async with await AsyncPostgresStore.open(pg_url, max_connections=3) as store:
                await asyncio.gather(*(task_run(store, n) for n in range(100)))
                stats = store._pool.get_stats()
                assert stats["pool_size"] <= 3
                assert stats["requests_waiting"] == 0
                heads = await store.heads()
                assert [(h.task_id, h.version) for h in heads] == [
                    (f"t{n:03d}", 6) for n in range(100)
                ]
                assert all(h.lease is None for h in heads)

        asyncio.run(go())

    def test_sync_and_async_stores_share_one_schema(self, pg_url: str) -> None:
        """What one writes the other reads and continues: one data model, one code."""

        async def go() -> None:
            async with await AsyncPostgresStore.open(pg_url) as store:
                for v in range(1, 4):
                    await _commit_next(store, "t", v)
                sync = await asyncio.to_thread(PostgresStore, pg_url)
                try:
                    assert sync.load("t").version == 3
                    sync.commit("t", 3, {"task_id": "t", "version": 4}, _event("t", 4))
                finally:
                    sync.close()
                assert (await store.load("t")).state == {"task_id": "t", "version": 4}
                assert [e.version for e in await store.events("t")] == [1, 2, 3, 4]
                assert (await store.checkpoint("t", 2)).state["n"] == 2

        asyncio.run(go())


def _one_connection_throughout(store: AsyncPostgresStore) -> bool:
    """Whether the pool's first connection is the only one it ever had, never returned bad
    (a connection handed back mid-statement is closed and replaced)."""
    stats = store._pool.get_stats()
    return (
        stats["connections_num"] == 1
        and not stats.get("returns_bad")
        and not stats.get("connections_lost")
    )


@pytest.mark.services
class TestCancellation:
    def test_a_commit_cancelled_while_it_waits_writes_nothing(self, pg_url: str) -> None:
        """Cancelled on the server mid-statement: nothing lands, the one connection serves on."""

        async def go() -> None:
            async with await AsyncPostgresStore.open(pg_url, max_connections=1) as store:
                await _commit_next(store, "t", 1)
                blocker = await Blocker.lock(
                    f"SELECT 1 FROM {store._sql.schema}.tasks WHERE task_id = 't' FOR UPDATE"
                )
                try:
                    commit = asyncio.create_task(_commit_next(store, "t", 2))
                    await _until(blocker.waited_on, "the commit to wait for the row lock")
                    commit.cancel()
                    with pytest.raises(asyncio.CancelledError):
                        await commit
                finally:
                    await blocker.release()
                assert (await store.load("t")).version == 1
                assert await _commit_next(store, "t", 2) == 2
                assert [e.version for e in await store.events("t")] == [1, 2]
                assert _one_connection_throughout(store)

        asyncio.run(go())

    def test_a_prune_cancelled_mid_transaction_is_rolled_back(self, pg_url: str) -> None:
        """Cancelled holding the task's row lock: rolled back, the lock freed, nothing deleted."""

        async def go() -> None:
            # max_chain=1: short chains, so keeping the last version leaves versions to delete.
            async with await AsyncPostgresStore.open(
                pg_url, max_connections=1, max_chain=1
            ) as store:
                for v in range(1, 5):
                    await _commit_next(store, "t", v)
                # The prune locks the task row, then its DELETE waits for version 1's row.
                blocker = await Blocker.lock(
                    f"SELECT 1 FROM {store._sql.schema}.checkpoints "
                    "WHERE task_id = 't' AND version = 1 FOR UPDATE"
                )
                try:
                    prune = asyncio.create_task(store.prune("t", keep_last=1))
                    await _until(blocker.waited_on, "the prune to wait for the checkpoint row")
                    assert not await _row_is_free(store.schema, "t")  # the prune holds it
                    prune.cancel()
                    with pytest.raises(asyncio.CancelledError):
                        await prune
                    # Rolled back before the connection went back: the lock is gone.
                    assert await _row_is_free(store.schema, "t")
                    assert [c.version for c in await store.checkpoints("t")] == [1, 2, 3, 4]
                finally:
                    await blocker.release()
                result = await store.prune("t", keep_last=1)
                assert result.deleted[0] == 1
                assert result.kept[-1] == 4
                assert await _commit_next(store, "t", 5) == 5
                assert _one_connection_throughout(store)

        asyncio.run(go())

    def test_a_call_cancelled_while_waiting_for_the_pool_loses_no_connection(
        self, pg_url: str
    ) -> None:
        """The only connection is busy; a call queued for it is cancelled; the pool stays whole."""

        async def go() -> None:
            async with await AsyncPostgresStore.open(pg_url, max_connections=1) as store:
                await _commit_next(store, "t", 1)
                blocker = await Blocker.lock(
                    f"SELECT 1 FROM {store._sql.schema}.tasks WHERE task_id = 't' FOR UPDATE"
                )
                try:
                    commit = asyncio.create_task(_commit_next(store, "t", 2))
                    await _until(blocker.waited_on, "the commit to wait for the row lock")
                    queued = asyncio.create_task(store.load("t"))

                    async def is_queued() -> bool:
                        return bool(store._pool.get_stats().get("requests_waiting"))

                    await _until(is_queued, "the load to wait for the pool")
                    queued.cancel()
                    with pytest.raises(asyncio.CancelledError):
                        await queued
                finally:
                    await blocker.release()
                assert await commit == 2
                assert (await store.load("t")).version == 2
                assert _one_connection_throughout(store)

        asyncio.run(go())


@pytest.mark.services
class TestOpen:
    def test_open_async_store_opens_this_store(self, pg_url: str) -> None:
        """Both schemes open the native store; its URL hides the password; close twice."""

        async def go() -> None:
            for scheme in ("postgresql", "postgres"):
                url = pg_url.replace("postgresql://postgres@", f"{scheme}://postgres:pw@", 1)
                store = await open_async_store(url)
                assert isinstance(store, AsyncPostgresStore)
                assert isinstance(store, AsyncStore)
                assert ":pw@" not in store.url
                assert await store.schema_versions() == [v for v, _ in MIGRATIONS]
                await store.setup()
                await store.close()
                await store.close()
                with pytest.raises(StoreError, match="closed"):
                    await store.load("t")

        asyncio.run(go())

    def test_missing_store_without_create_is_not_found_and_not_created(self, pg_url: str) -> None:
        schema = pg_url.rpartition("schema=")[2]

        async def go() -> None:
            with pytest.raises(StoreNotFound) as info:
                await AsyncPostgresStore.open(pg_url, create=False)
            assert str(info.value).startswith(f"no store at {pg_url}")
            rows = await _raw("SELECT 1 FROM pg_namespace WHERE nspname = %s", schema)
            assert rows == []
            async with await AsyncPostgresStore.open(pg_url) as created:
                await _commit_next(created, "t", 1)
            async with await AsyncPostgresStore.open(pg_url, create=False) as again:
                assert await again.tasks() == ["t"]

        asyncio.run(go())

    def test_refused_login_is_unavailable(self) -> None:
        """No such database: StoreUnavailable naming the URL."""
        require_service("PostgreSQL", *postgres_reachable())
        head, _, rest = POSTGRES_URL.partition("://")
        url = f"{head}://{rest.partition('/')[0]}/no_such_database_skillstate"
        with pytest.raises(StoreUnavailable, match="no_such_database_skillstate"):
            asyncio.run(AsyncPostgresStore.open(url))

    def test_driver_errors_are_wrapped_on_one_line(self, pg_url: str) -> None:
        async def go() -> None:
            async with await AsyncPostgresStore.open(pg_url) as store:
                await _raw(f"DROP TABLE {store._sql.schema}.events")
                with pytest.raises(StoreError) as info:
                    await _commit_next(store, "t", 1)
                assert "\n" not in str(info.value)
                assert isinstance(info.value.__cause__, Exception)
                assert await store.tasks() == []  # the commit was one statement: all or nothing

        asyncio.run(go())


class TestOpenWithoutServer:
    """Opening errors found before any server answers."""

    @pytest.mark.parametrize(
        ("url", "match"),
        [
            ("postgresql://u@127.0.0.1:1/db?bogus_option=1", "bogus_option"),
            ("mysql://u@h/db", "not a postgresql"),
            ("postgresql://u@h/db?schema=pg_catalog", "reserved"),
        ],
    )
    def test_unusable_url_is_invalid(self, url: str, match: str) -> None:
        """Refused before connecting, naming what is wrong."""
        with pytest.raises(InvalidStoreURL, match=match):
            asyncio.run(AsyncPostgresStore.open(url))

    def test_server_that_is_not_there_is_unavailable(self) -> None:
        """A refused connection: StoreUnavailable naming the masked URL, one line, at once."""
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        url = f"postgresql://someone:hunter2@127.0.0.1:{port}/db"
        started = time.monotonic()
        with pytest.raises(StoreUnavailable) as info:
            asyncio.run(AsyncPostgresStore.open(url))
        assert time.monotonic() - started < 5
        message = str(info.value)
        assert "\n" not in message
        assert "hunter2" not in message
        assert url.replace(":hunter2@", ":***@") in message
