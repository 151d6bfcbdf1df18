"""Every byte a backend holds, read from outside the Store protocol: for "no trace" checks.

:func:`traces` returns where ``needle`` still occurs in a store's storage: each
table row (SQLite, PostgreSQL), key and value (Redis), file name and content (files
store), object the memory store keeps; compressed bodies are decompressed first, so
a zlib-stored snapshot is searched too. The SQLite database file and its WAL are
also searched as raw bytes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sqlite3
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from skillstate.store.aio import BlockingStore, ThreadedStore
from skillstate.store.base import Store
from skillstate.store.files import FilesStore
from skillstate.store.memory import MemoryStore
from skillstate.store.sqlite import SQLiteStore


def _unwrap(store: Any) -> Any:
    while isinstance(store, BlockingStore | ThreadedStore):
        store = store.store
    return store


def _texts(value: Any) -> Iterator[bytes]:
    """``value`` as bytes, and decompressed when it is a zlib body (with or without a NUL)."""
    if isinstance(value, memoryview):
        value = bytes(value)
    if isinstance(value, str):
        value = value.encode("utf-8", "surrogatepass")
    if not isinstance(value, bytes):
        value = repr(value).encode("utf-8", "surrogatepass")
    yield value
    for start in (0, 1):
        with contextlib.suppress(zlib.error):
            yield zlib.decompress(value[start:])


def _memory(store: MemoryStore) -> Iterator[tuple[str, Any]]:
    def walk(where: str, value: Any) -> Iterator[tuple[str, Any]]:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            for f in dataclasses.fields(value):
                yield from walk(f"{where}.{f.name}", getattr(value, f.name))
        elif isinstance(value, dict):
            for key, item in value.items():
                yield where, key
                yield from walk(f"{where}[{key!r}]", item)
        elif isinstance(value, list | tuple):
            for i, item in enumerate(value):
                yield from walk(f"{where}[{i}]", item)
        else:
            yield where, value

    for name in ("_tasks", "_leases", "_artifacts"):
        yield from walk(name, getattr(store, name))


def _sqlite(store: SQLiteStore) -> Iterator[tuple[str, Any]]:
    conn = sqlite3.connect(store.path)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            for row in conn.execute(f'SELECT * FROM "{table}"'):
                for value in row:
                    yield table, value
    finally:
        conn.close()
    for suffix in ("", "-wal"):
        path = Path(store.path + suffix)
        if path.exists():
            yield f"file {path.name}", path.read_bytes()


def _files(store: FilesStore) -> Iterator[tuple[str, Any]]:
    for folder, dirs, files in os.walk(store.root):
        for name in [*dirs, *files]:
            yield f"name {folder}/{name}", name
        for name in files:
            yield f"file {folder}/{name}", (Path(folder) / name).read_bytes()


def _postgres(store: Any) -> Iterator[tuple[str, Any]]:
    import psycopg
    from psycopg import sql

    from tests.contract.backends import POSTGRES_URL

    schema = store._ops.schema
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                (schema,),
            )
        ]
        for table in tables:
            query = sql.SQL("SELECT * FROM {}.{}").format(
                sql.Identifier(schema), sql.Identifier(table)
            )
            for row in conn.execute(query):
                for value in row:
                    yield table, value


def _redis(store: Any) -> Iterator[tuple[str, Any]]:
    import redis

    from tests.contract.backends import REDIS_URL

    client = redis.Redis.from_url(REDIS_URL)
    try:
        for key in client.scan_iter(match=f"{store.prefix}:*", count=1000):
            yield "key", key
            values: list[Any]
            found = client.type(key)
            kind = found.decode() if isinstance(found, bytes) else str(found)
            if kind == "hash":
                values = [v for pair in client.hgetall(key).items() for v in pair]
            elif kind == "list":
                values = client.lrange(key, 0, -1)
            elif kind == "zset":
                values = client.zrange(key, 0, -1)
            elif kind == "set":
                values = list(client.smembers(key))
            else:
                values = [client.get(key)]
            for value in values:
                yield str(key), value
    finally:
        client.close()


def _stored(store: Store) -> Iterator[tuple[str, Any]]:
    inner = _unwrap(store)
    if isinstance(inner, MemoryStore):
        return _memory(inner)
    if isinstance(inner, SQLiteStore):
        return _sqlite(inner)
    if isinstance(inner, FilesStore):
        return _files(inner)
    if hasattr(inner, "_ops"):
        return _postgres(inner)
    return _redis(inner)


def traces(store: Store, needle: str) -> list[str]:
    """Where ``needle`` occurs in what ``store`` holds (empty: nowhere)."""
    raw = needle.encode()
    found = []
    for where, value in _stored(store):
        if any(raw in text for text in _texts(value)):
            found.append(where)
    return found
