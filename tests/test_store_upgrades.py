"""Stores written before fencing and checksums open, upgrade in place, and keep working;
damaged store metadata is a named one-line error.

Each test writes the old layout (or the damage) directly into its backend.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skillstate.errors import LeaseHeld, StateCorrupted, StoreError
from skillstate.events import Event
from skillstate.store.base import Store
from skillstate.store.files import FilesStore
from skillstate.store.sqlite import MIGRATIONS as SQLITE_MIGRATIONS
from skillstate.store.sqlite import SQLiteStore
from tests.contract.backends import (
    POSTGRES_URL,
    drop_postgres_schemas,
    drop_redis_data,
    postgres_url_for,
    redis_url_for,
)


def _event(version: int) -> Event:
    return Event(task_id="t", version=version, actor="runtime", action={"kind": "old"})


def _carries_on(store: Store, holder: str) -> None:
    """A lease taken before fencing has generation 0: its holder renews it, others wait."""
    lease = store.lease("t")
    assert lease is not None
    assert (lease.worker, lease.generation) == (holder, 0)
    assert store.claim("t", holder, 30).generation == 0
    with pytest.raises(LeaseHeld):
        store.claim("t", "someone-else", 30)
    store.commit("t", 0, {"task_id": "t", "version": 1}, _event(1), fence=0)
    store.release("t", holder)
    assert store.claim("t", "someone-else", 30).generation == 1


# ---------------------------------------------------------------- SQLite


def test_sqlite_schema_2_upgrades(tmp_path: Path) -> None:
    """A schema-2 database: leases keep their holder (generation 0), checksums start empty."""
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT)")
    for version, script in SQLITE_MIGRATIONS[:2]:
        conn.executescript(script)
        conn.execute("INSERT INTO schema_migrations VALUES (?, '2026-01-01')", (version,))
    conn.execute("INSERT INTO leases VALUES ('t', 'old-worker', ?)", (time.time() + 60,))
    conn.commit()
    conn.close()
    store = SQLiteStore(path)
    try:
        assert store.schema_versions() == [v for v, _ in SQLITE_MIGRATIONS]
        _carries_on(store, "old-worker")
        store.setup()  # idempotent
        assert store.load("t").version == 1
    finally:
        store.close()


@pytest.mark.parametrize("value", ["soon", 1e300, b"\x00"], ids=["text", "huge", "blob"])
def test_sqlite_lease_with_unreadable_expiry(tmp_path: Path, value: Any) -> None:
    """A lease row whose expiry is not a usable time: StateCorrupted naming the task."""
    store = SQLiteStore(tmp_path / "s.db")
    try:
        store.claim("t", "w", 30)
        store._conn.execute("UPDATE leases SET expires_at = ?", (value,))
        with pytest.raises(StateCorrupted, match=r"task 't'.*lease is damaged"):
            store.claim("t", "other", 30)
        dropped = store.force_release("t")
        assert dropped is not None
        assert dropped.worker == "w"
        assert store.claim("t", "other", 30).generation == 2
    finally:
        store.close()


# ---------------------------------------------------------------- files


def test_files_lease_written_before_fencing(tmp_path: Path) -> None:
    """A lease.json without a generation is generation 0."""
    store = FilesStore(tmp_path)
    (tmp_path / "t").mkdir()
    expires = time.time() + 60
    (tmp_path / "t" / "lease.json").write_text(
        json.dumps(
            {
                "task_id": "t",
                "worker": "old-worker",
                "expires_at": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(expires)),
            }
        )
    )
    _carries_on(store, "old-worker")


def test_files_lease_that_is_not_json(tmp_path: Path) -> None:
    """A lease.json that does not parse is a damaged lease; force_release rewrites it."""
    store = FilesStore(tmp_path)
    store.claim("t", "w", 30)
    (tmp_path / "t" / "lease.json").write_text("{half")
    with pytest.raises(StateCorrupted, match="lease is damaged"):
        store.lease("t")
    assert store.force_release("t") is not None
    assert store.lease("t") is None
    assert store.claim("t", "w", 30).generation > 2  # above any fence handed out before


# ---------------------------------------------------------------- PostgreSQL


@pytest.fixture
def pg_url(tmp_path: Path) -> Iterator[str]:
    yield postgres_url_for(tmp_path)
    drop_postgres_schemas()


@pytest.mark.services
def test_postgres_schema_1_upgrades(pg_url: str) -> None:
    """A schema-1 store: leases keep their holder (generation 0), checksums start empty."""
    import psycopg

    from skillstate.store.postgres import MIGRATIONS, PostgresStore, parse_url

    schema = parse_url(pg_url).schema
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        conn.execute(f'SET search_path TO "{schema}"')
        conn.execute(MIGRATIONS[0][1])
        conn.execute(
            "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, "
            "applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
        )
        conn.execute("INSERT INTO schema_migrations (version) VALUES (1)")
        conn.execute("INSERT INTO leases VALUES ('t', 'old-worker', now() + interval '1 minute')")
    store = PostgresStore(pg_url)
    try:
        assert store.schema_versions() == [v for v, _ in MIGRATIONS]
        _carries_on(store, "old-worker")
    finally:
        store.close()


# ---------------------------------------------------------------- Redis


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    yield redis_url_for(tmp_path)
    drop_redis_data()


def _client(url: str) -> Any:
    """A plain redis-py client on the store's server (to write old layouts and damage)."""
    import redis

    return redis.Redis.from_url(url.partition("?")[0])


@pytest.mark.services
def test_redis_layout_1_leases_become_hashes(redis_url: str) -> None:
    """A layout-1 lease (a string with PX) is converted with its holder and expiry kept."""
    from skillstate.store.redis import RedisStore

    RedisStore(redis_url).close()
    client = _client(redis_url)
    prefix = redis_url.partition("prefix=")[2]
    try:
        client.hdel(f"{prefix}:schema", "2")
        client.set(f"{prefix}:lease:t", "old-worker", px=60_000)
        client.set(f"{prefix}:lease:gone", "old-worker", px=1)
        time.sleep(0.01)
        store = RedisStore(redis_url)
        try:
            assert client.type(f"{prefix}:lease:t") == b"hash"
            assert not client.exists(f"{prefix}:lease:gone")
            lease = store.lease("t")
            assert lease is not None
            assert 50 < lease.expires_at.timestamp() - time.time() <= 60
            _carries_on(store, "old-worker")
        finally:
            store.close()
    finally:
        client.close()


@pytest.mark.services
@pytest.mark.parametrize("field", ["garbage", "99"])
def test_redis_damaged_layout_record(redis_url: str, field: str) -> None:
    """Garbage (or a layout from the future) in the schema hash: one StoreError line."""
    from skillstate.store.redis import RedisStore

    RedisStore(redis_url).close()
    client = _client(redis_url)
    prefix = redis_url.partition("prefix=")[2]
    try:
        client.hset(f"{prefix}:schema", field, "x")
        with pytest.raises(StoreError) as info:
            RedisStore(redis_url)
        message = str(info.value)
        assert "\n" not in message
        assert f"{prefix}:schema" in message or "newer" in message
        assert not isinstance(info.value, StateCorrupted)
    finally:
        client.close()


@pytest.mark.services
def test_redis_task_record_with_garbage_version(redis_url: str) -> None:
    """A task hash whose version is not a number names the field; commits write nothing."""
    from skillstate.store.redis import RedisStore

    store = RedisStore(redis_url)
    try:
        store.commit("t", 0, {"task_id": "t", "version": 1}, _event(1))
        store._client.hset(store._key("task", "t"), "version", "one")
        with pytest.raises(StateCorrupted) as info:
            store.load("t")
        assert info.value.field == "version"
        for expected in (0, 1):
            with pytest.raises(StateCorrupted):
                store.commit(
                    "t", expected, {"task_id": "t", "version": expected + 1}, _event(1 + expected)
                )
        with pytest.raises(StateCorrupted):
            store.events("t")
    finally:
        store.close()
