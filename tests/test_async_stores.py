"""AsyncRuntime on async stores, and the async protocol's own edges.

The contract suite runs against every async store (``tests/contract/backends.py``:
``sqlite-async``, ``postgres-async``, ``redis-async``). What it cannot show is here:
the runtime driving its one step logic through an awaited store (the demos, the
same history as the synchronous runtime writes), many tasks on one loop sharing one
native async store, and what using an async store wrongly does.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from skillstate import Runtime
from skillstate.engine.aruntime import AsyncRuntime
from skillstate.errors import InvalidStoreURL, StoreNotFound, UsageError
from skillstate.examples.ledger import agent as ledger_agent
from skillstate.examples.ticket import agent as ticket_agent
from skillstate.store.aio import (
    AsyncStore,
    BlockingStore,
    ThreadedStore,
    is_async_store,
    open_async_store,
)
from skillstate.store.memory import MemoryStore
from skillstate.store.sqlite import SQLiteStore
from tests.contract.backends import (
    drop_postgres_schemas,
    drop_redis_data,
    postgres_url_for,
    redis_url_for,
)
from tests.test_async_runtime import SlowModel, count_agent
from tests.test_docs import run_example

URLS: dict[str, Callable[[Path], str]] = {
    "sqlite": lambda tmp: f"sqlite:///{tmp / 'state.db'}",
    "postgres": postgres_url_for,
    "redis": redis_url_for,
}
NATIVE = {"postgres": "AsyncPostgresStore", "redis": "AsyncRedisStore"}


@pytest.fixture(
    params=[
        pytest.param(name, marks=pytest.mark.services) if name in NATIVE else name for name in URLS
    ]
)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield URLS[request.param](tmp_path)
    drop_redis_data()
    drop_postgres_schemas()


async def opened(url: str) -> AsyncStore:
    store = await open_async_store(url)
    scheme = url.partition("://")[0]
    expected = NATIVE.get("postgres" if scheme.startswith("postgres") else scheme)
    assert type(store).__name__ == (expected or "ThreadedStore")
    assert is_async_store(store)
    return store


class TestRuntimeOnAsyncStores:
    def test_the_ticket_demo_writes_what_the_sync_runtime_writes(
        self, url: str, tmp_path: Path
    ) -> None:
        sync_store = SQLiteStore(tmp_path / "sync.db")
        inputs = list(ticket_agent.sample_inputs)
        done = Runtime(ticket_agent, sync_store).run("t", inputs=inputs, create=True)

        async def go() -> Any:
            store = await opened(url)
            try:
                runtime = AsyncRuntime(ticket_agent, store)
                assert runtime.store is store
                result = await runtime.run("t", inputs=inputs, create=True)
                events = await store.events("t")
                head = await store.load("t")
                return result, events, head
            finally:
                await store.close()

        result, events, head = asyncio.run(go())
        assert result.stopped == done.stopped == "completed"
        assert head.version == result.state.version
        assert [(e.version, e.action, e.skill, e.patch) for e in events] == [
            (e.version, e.action, e.skill, e.patch) for e in sync_store.events("t")
        ]

    def test_the_ledger_demo_writes_each_entry_once(self, url: str, tmp_path: Path) -> None:
        ledger = tmp_path / "ledger.txt"

        async def go() -> Any:
            store = await opened(url)
            try:
                runtime = AsyncRuntime(ledger_agent, store)
                await runtime.start("l", ledger=str(ledger), target=5)
                return await runtime.run("l")
            finally:
                await store.close()

        assert asyncio.run(go()).stopped == "completed"
        lines = ledger.read_text(encoding="utf-8").splitlines()
        assert [line.split()[-1] for line in lines] == ["1", "2", "3", "4", "5"]

    def test_many_tasks_on_one_loop_share_one_store(self, url: str) -> None:
        """40 tasks, their model calls overlapping (observed), every commit in the store."""
        model = SlowModel(0.05)

        async def go() -> Any:
            store = await opened(url)
            try:
                runtime = AsyncRuntime(count_agent(model), store)
                results = await asyncio.gather(
                    *(runtime.run(f"t{i}", create=True) for i in range(40))
                )
                heads = {h.task_id: h.version for h in await store.heads()}
                return results, heads
            finally:
                await store.close()

        results, heads = asyncio.run(go())
        assert all(r.stopped == "completed" and r.state.n == 3 for r in results)
        assert heads == {f"t{i}": r.state.version for i, r in enumerate(results)}
        assert model.most >= 10, f"at most {model.most} model calls were in flight at once"


class TestProtocolEdges:
    def test_an_embedded_store_opens_in_a_thread_wrapper(self, tmp_path: Path) -> None:
        async def go() -> None:
            store = await open_async_store(f"sqlite:///{tmp_path / 'a.db'}")
            assert isinstance(store, ThreadedStore)
            assert isinstance(store.store, SQLiteStore)
            assert await store.tasks() == []
            await store.close()
            await store.close()  # twice is safe

        asyncio.run(go())

    def test_bad_urls_are_refused_as_open_store_refuses_them(self, tmp_path: Path) -> None:
        with pytest.raises(InvalidStoreURL, match="unsupported store URL"):
            asyncio.run(open_async_store("mysql://x"))
        with pytest.raises(StoreNotFound):
            asyncio.run(open_async_store(f"sqlite:///{tmp_path / 'missing.db'}", create=False))
        assert not (tmp_path / "missing.db").exists()

    def test_a_sync_store_is_not_taken_for_an_async_one(self) -> None:
        sync = MemoryStore()
        assert not is_async_store(sync)
        assert is_async_store(ThreadedStore(sync))
        assert AsyncRuntime(ticket_agent, sync).store is sync

    def test_blocking_on_the_loops_own_thread_is_refused_not_hung(self) -> None:
        async def go() -> None:
            blocking = BlockingStore(ThreadedStore(MemoryStore()), asyncio.get_running_loop())
            with pytest.raises(UsageError, match="its event loop's own thread"):
                blocking.tasks()
            assert await asyncio.to_thread(blocking.tasks) == []  # off the loop: fine

        asyncio.run(go())

    def test_an_async_store_outside_any_loop_is_refused(self) -> None:
        runtime = Runtime(ticket_agent, BlockingStore(ThreadedStore(MemoryStore())))
        with pytest.raises(UsageError, match="outside its event loop"):
            runtime.start("t")


class AwaitedInThreads:
    """An async store whose every call needs the loop's default executor (like a pool
    resolving a host name, or a tool run with ``to_thread``)."""

    def __init__(self, store: MemoryStore) -> None:
        self._store = store
        self.url = store.url
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._store, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return await asyncio.to_thread(method, *args, **kwargs)

        return call

    async def commit(self, *args: Any, **kwargs: Any) -> int:
        self.calls += 1
        version: int = await asyncio.to_thread(self._store.commit, *args, **kwargs)
        return version


def test_steps_never_starve_the_loops_default_executor() -> None:
    """20 tasks, a default executor of 2 threads, and a store that needs it for every
    call: were steps run in that executor, they would hold both threads waiting for
    store calls queued behind them, forever. (The wait_for turns a hang into a failure.)"""
    store = AwaitedInThreads(MemoryStore())
    assert is_async_store(store)

    async def go() -> list[Any]:
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(2))
        runtime = AsyncRuntime(count_agent(SlowModel(0.0)), store)
        return await asyncio.wait_for(
            asyncio.gather(*(runtime.run(f"t{i}", create=True) for i in range(20))), timeout=600
        )

    # In a daemon thread: a starved loop cannot even shut down, so the test thread
    # gives up on it after the wait_for's time instead of hanging with it.
    results: list[Any] = []
    runner = threading.Thread(target=lambda: results.extend(asyncio.run(go())), daemon=True)
    runner.start()
    runner.join(timeout=150)
    assert not runner.is_alive(), "the steps starved the default executor"
    assert len(results) == 20
    assert all(r.stopped == "completed" and r.state.n == 3 for r in results)
    assert store.calls >= 20 * 4  # every task's loads and commits went through it


def test_the_docs_example_runs_and_a_second_run_changes_nothing(tmp_path: Path) -> None:
    """docs/integrations/asyncio.md's complete example, as a script, twice."""
    doc = Path(__file__).resolve().parents[1] / "docs" / "integrations" / "asyncio.md"
    first = run_example(doc, tmp_path, "many_tickets.py")
    assert first[0] == "['completed']"
    assert first[1] == "2 ask_user"
    assert first[-2:] == ["10 finish", "51 tasks"]
    assert run_example(doc, tmp_path, "many_tickets.py") == ["['completed']", "51 tasks"]
    assert (tmp_path / "tickets.db").exists()
