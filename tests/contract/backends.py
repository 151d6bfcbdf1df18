"""The backends every contract test runs against.

A backend is a name and a factory taking pytest's ``tmp_path``. Backends that need
a server (PostgreSQL, Redis) probe for it: when it is down they skip with the
reason, unless ``SKILLSTATE_REQUIRE_SERVICES=1`` (set by CI), where they fail.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import os
import threading
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

from skillstate.store.aio import AsyncStore, BlockingStore, open_async_store
from skillstate.store.base import Store
from skillstate.store.files import FilesStore
from skillstate.store.memory import MemoryStore
from skillstate.store.sqlite import SQLiteStore

Factory = Callable[[Path], Store]
T = TypeVar("T")


def require_service(name: str, reachable: bool, reason: str) -> None:
    """Skip (or, in CI, fail) a test whose backend server is not reachable."""
    if reachable:
        return
    message = f"{name} not reachable: {reason}"
    if os.environ.get("SKILLSTATE_REQUIRE_SERVICES") == "1":
        pytest.fail(f"{message} (SKILLSTATE_REQUIRE_SERVICES=1)")
    pytest.skip(message)


# Redis: one server, a key prefix per test. The prefix is derived from tmp_path
# (a test that opens the factory twice must see the same data) plus an id of this
# run (runs never see each other's keys); drop_redis_data() deletes the keys.
REDIS_URL = os.environ.get("SKILLSTATE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
_REDIS_RUN = uuid.uuid4().hex[:10]
_redis_prefixes: set[str] = set()


@functools.cache
def redis_reachable() -> tuple[bool, str]:
    """``(reachable, reason)`` for REDIS_URL: one PING per session, with a short timeout."""
    try:
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry
    except ImportError:
        return False, "redis-py is not installed (pip install 'skillstate[redis]')"
    client = redis.Redis.from_url(
        REDIS_URL, socket_connect_timeout=0.5, socket_timeout=0.5, retry=Retry(NoBackoff(), 0)
    )
    try:
        client.ping()
    except redis.RedisError as exc:
        return False, f"{REDIS_URL}: {exc}"
    finally:
        client.close()
    return True, ""


def redis_url_for(tmp: Path) -> str:
    """A store URL on REDIS_URL with this test's own prefix (skips when Redis is down)."""
    require_service("Redis", *redis_reachable())
    digest = hashlib.sha256(str(tmp).encode()).hexdigest()[:12]
    prefix = f"skillstate-test:{_REDIS_RUN}:{digest}"
    _redis_prefixes.add(prefix)
    return f"{REDIS_URL}{'&' if '?' in REDIS_URL else '?'}prefix={prefix}"


def redis_store(tmp: Path) -> Store:
    from skillstate.store.redis import RedisStore

    return RedisStore(redis_url_for(tmp))


def drop_redis_data() -> None:
    """Delete every key the Redis stores of this run wrote so far (SCAN + UNLINK)."""
    if not _redis_prefixes:
        return
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    try:
        while _redis_prefixes:
            prefix = _redis_prefixes.pop()
            batch: list[bytes] = []
            for key in client.scan_iter(match=f"{prefix}:*", count=1000):
                batch.append(key)
                if len(batch) >= 1000:
                    client.unlink(*batch)
                    batch.clear()
            if batch:
                client.unlink(*batch)
    finally:
        client.close()


# PostgreSQL: one database, a schema per test, named like the Redis prefixes (from
# tmp_path, so a second open sees the first one's data, plus this run's id);
# drop_postgres_schemas() drops them after the test.
POSTGRES_URL = os.environ.get(
    "SKILLSTATE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
_POSTGRES_RUN = uuid.uuid4().hex[:10]
_postgres_schemas: set[str] = set()


@functools.cache
def postgres_reachable() -> tuple[bool, str]:
    """``(reachable, reason)`` for POSTGRES_URL: one connection per session, 2 s at most."""
    try:
        import psycopg
    except ImportError:
        return False, "psycopg is not installed (pip install 'skillstate[postgres]')"
    try:
        psycopg.connect(POSTGRES_URL, connect_timeout=2).close()
    except psycopg.Error as exc:
        return False, f"{POSTGRES_URL}: " + " ".join(str(exc).split())
    return True, ""


def postgres_url_for(tmp: Path) -> str:
    """A store URL on POSTGRES_URL with this test's own schema (skips when it is down)."""
    require_service("PostgreSQL", *postgres_reachable())
    digest = hashlib.sha256(str(tmp).encode()).hexdigest()[:12]
    schema = f"test_{_POSTGRES_RUN}_{digest}"
    _postgres_schemas.add(schema)
    return f"{POSTGRES_URL}{'&' if '?' in POSTGRES_URL else '?'}schema={schema}"


def postgres_store(tmp: Path) -> Store:
    from skillstate.store.postgres import PostgresStore

    return PostgresStore(postgres_url_for(tmp))


def drop_postgres_schemas() -> None:
    """Drop every schema the PostgreSQL stores of this run created so far."""
    if not _postgres_schemas:
        return
    import psycopg
    from psycopg import sql

    with psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=2) as conn:
        while _postgres_schemas:
            schema = _postgres_schemas.pop()
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


# Async stores: the whole suite runs against each AsyncStore unchanged, through a
# BlockingStore on one event loop that runs in a background thread for the session
# (so every call is awaited on a loop, as under AsyncRuntime).


@functools.cache
def event_loop() -> asyncio.AbstractEventLoop:
    """The async backends' event loop, running in a daemon thread until the process ends."""
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name="contract-loop", daemon=True).start()
    return loop


def on_loop(call: Coroutine[Any, Any, T]) -> T:
    """Run ``call`` on :func:`event_loop` and wait for its result."""
    return asyncio.run_coroutine_threadsafe(call, event_loop()).result()


def _async(url: Callable[[Path], str]) -> Factory:
    def factory(tmp: Path) -> Store:
        store: AsyncStore = on_loop(open_async_store(url(tmp)))
        return BlockingStore(store, event_loop())

    return factory


SERVICE_BACKENDS = frozenset({"postgres", "redis", "postgres-async", "redis-async"})
"""Backends that need a server; ``pytest -m services`` selects their tests."""


BACKENDS: dict[str, Factory] = {
    "memory": lambda tmp: MemoryStore(),
    "sqlite": lambda tmp: SQLiteStore(tmp / "state.db"),
    "redis": redis_store,
    "postgres": postgres_store,
    "files": lambda tmp: FilesStore(tmp / "files"),
    # open_async_store: a ThreadedStore for SQLite, the native async stores for the servers
    "sqlite-async": _async(lambda tmp: f"sqlite:///{tmp / 'state.db'}"),
    "postgres-async": _async(postgres_url_for),
    "redis-async": _async(redis_url_for),
}


URLS: dict[str, Callable[[Path], str]] = {
    "sqlite": lambda tmp: f"sqlite:///{tmp / 'state.db'}",
    "files": lambda tmp: f"file://{tmp / 'files'}",
    "postgres": postgres_url_for,
    "redis": redis_url_for,
}
"""Backends several processes can open by URL (memory cannot be shared)."""
