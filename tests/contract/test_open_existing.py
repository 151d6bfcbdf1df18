"""open_store(url, create=False): a store that is not there is StoreNotFound, and
nothing is created for it; one that is there opens as usual."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from skillstate.errors import StoreNotFound
from skillstate.events import Event
from skillstate.store import open_store
from tests.contract.backends import (
    POSTGRES_URL,
    URLS,
    postgres_reachable,
    postgres_url_for,
    redis_url_for,
    require_service,
)

# Where each backend's store would be if it existed (the directory does not, either).
MISSING: dict[str, Callable[[Path], str]] = {
    "sqlite": lambda tmp: f"sqlite:///{tmp / 'sub' / 'state.db'}",
    "files": lambda tmp: f"file://{tmp / 'sub' / 'files'}",
    "postgres": postgres_url_for,
    "redis": redis_url_for,
}
_MARKS = {"postgres": pytest.mark.services, "redis": pytest.mark.services}


def _params(names: list[str]) -> list[object]:
    return [pytest.param(n, marks=_MARKS[n]) if n in _MARKS else n for n in sorted(names)]


def _left_behind(backend: str, url: str, tmp_path: Path) -> list[str]:
    """What exists of the store at ``url`` (files, a schema, keys): [] when nothing does."""
    if backend in {"sqlite", "files"}:
        return [p.name for p in tmp_path.iterdir()]
    if backend == "postgres":
        import psycopg

        schema = url.rpartition("schema=")[2]
        with psycopg.connect(url.rpartition("?")[0], autocommit=True) as conn:
            row = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,))
            return [schema] if row.fetchone() else []
    import redis

    client = redis.Redis.from_url(url.rpartition("?")[0])
    try:
        prefix = url.rpartition("prefix=")[2]
        return [k.decode() for k in client.scan_iter(match=f"{prefix}:*")]
    finally:
        client.close()


@pytest.mark.parametrize("backend", _params(list(MISSING)))
def test_missing_store_is_not_found_and_not_created(backend: str, tmp_path: Path) -> None:
    """StoreNotFound naming the URL, on one line; no file, directory, schema or key made."""
    url = MISSING[backend](tmp_path)
    with pytest.raises(StoreNotFound) as info:
        open_store(url, create=False)
    message = str(info.value)
    assert message.startswith(f"no store at {url}")
    assert message.endswith("; it is created by the first run")
    assert "\n" not in message
    assert info.value.url == url
    assert _left_behind(backend, url, tmp_path) == []


@pytest.mark.parametrize("backend", _params(list(URLS)))
def test_existing_store_opens_without_create(backend: str, tmp_path: Path) -> None:
    """A store a writer created opens with create=False and reads the same tasks."""
    url = URLS[backend](tmp_path)
    writer = open_store(url)
    try:
        event = Event(task_id="t", version=1, actor="runtime", action={"kind": "test"})
        writer.commit("t", 0, {"task_id": "t", "version": 1}, event)
    finally:
        writer.close()
    reader = open_store(url, create=False)
    try:
        assert reader.tasks() == ["t"]
        assert reader.load("t").version == 1
    finally:
        reader.close()


@pytest.mark.parametrize("backend", _params(list(URLS)))
def test_empty_store_opens_without_create(backend: str, tmp_path: Path) -> None:
    """A store that was created but holds no task yet exists: it opens, and lists nothing."""
    url = URLS[backend](tmp_path)
    open_store(url).close()
    reader = open_store(url, create=False)
    try:
        assert reader.tasks() == []
        assert reader.heads() == []
    finally:
        reader.close()


def test_memory_store_opens_empty_either_way() -> None:
    """memory:// has nothing to create or find: create=False opens an empty store."""
    store = open_store("memory://", create=False)
    assert store.tasks() == []
    store.close()


def test_empty_sqlite_file_is_no_store_and_stays_untouched(tmp_path: Path) -> None:
    """An empty file holds no store's tables: StoreNotFound, and it is not written to."""
    path = tmp_path / "empty.db"
    path.touch()
    with pytest.raises(StoreNotFound) as info:
        open_store(f"sqlite:///{path}", create=False)
    assert "holds no skillstate tables" in str(info.value)
    assert os.path.getsize(path) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["empty.db"]


@pytest.mark.services
def test_postgres_schema_without_tables_is_no_store(tmp_path: Path) -> None:
    """A hand-made schema without a store's tables is no store, and gets no tables."""
    require_service("PostgreSQL", *postgres_reachable())
    import psycopg
    from psycopg import sql

    url = postgres_url_for(tmp_path)
    schema = url.rpartition("schema=")[2]
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    with pytest.raises(StoreNotFound):
        open_store(url, create=False)
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        tables = conn.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = %s", (schema,)
        ).fetchone()
    assert tables == (0,)
