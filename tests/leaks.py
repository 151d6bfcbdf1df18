"""Everything a store holds, as bytes to search for a plaintext: compressed bodies inflated.

A store zlib-compresses bodies past a few hundred bytes (``skillstate.store.chain``),
so searching raw files for a secret would miss one inside a compressed snapshot.
Each stored value (a file, a column of a row, a Redis value) is read on its own and,
when it inflates, searched in both forms.
"""

from __future__ import annotations

import sqlite3
import zlib
from collections.abc import Iterator
from pathlib import Path

from tests.contract.backends import POSTGRES_URL, REDIS_URL


def stored_bytes(url: str) -> bytes:
    """Every value the store at ``url`` holds (sqlite, file, postgres, redis), inflated."""
    if url.startswith("sqlite:///"):
        cells = _sqlite(Path(url.removeprefix("sqlite://")))
    elif url.startswith("file://"):
        cells = _files(Path(url.removeprefix("file://")))
    elif url.startswith("postgres"):
        cells = _postgres(url.rsplit("schema=", 1)[1])
    elif url.startswith("redis"):
        cells = _redis(url.rsplit("prefix=", 1)[1])
    else:
        raise ValueError(f"no raw reader for {url}")
    out: list[bytes] = []
    for cell in cells:
        out.append(cell)
        inflated = _inflate(cell)
        if inflated is not None:
            out.append(inflated)
    assert out, f"nothing stored at {url}"
    return b"\n".join(out)


def _inflate(data: bytes) -> bytes | None:
    try:
        return zlib.decompress(data)
    except zlib.error:
        return None


def _files(root: Path) -> Iterator[bytes]:
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        yield path.read_bytes()


def _sqlite(path: Path) -> Iterator[bytes]:
    # The raw files too (a WAL holds pages not yet in the database), then every cell.
    yield from _files(path.parent)
    with sqlite3.connect(path) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            for row in conn.execute(f'SELECT * FROM "{table}"'):
                yield from (_cell(v) for v in row)
    conn.close()


def _postgres(schema: str) -> Iterator[bytes]:
    import psycopg
    from psycopg import sql

    with psycopg.connect(POSTGRES_URL) as conn:
        tables = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,)
        ).fetchall()
        assert tables, f"no tables in schema {schema}"
        for (table,) in tables:
            query = sql.SQL("SELECT * FROM {}.{}").format(
                sql.Identifier(schema), sql.Identifier(table)
            )
            for row in conn.execute(query):
                yield from (_cell(v) for v in row)


def _redis(prefix: str) -> Iterator[bytes]:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    try:
        for key in client.scan_iter(match=f"{prefix}:*"):
            kind = client.type(key)
            if kind == b"string":
                yield client.get(key) or b""
            elif kind == b"hash":
                for k, v in client.hgetall(key).items():
                    yield k
                    yield v
            elif kind == b"zset":
                yield from (m for m, _ in client.zrange(key, 0, -1, withscores=True))
            elif kind == b"list":
                yield from client.lrange(key, 0, -1)
            elif kind == b"set":
                yield from client.smembers(key)
            else:
                yield client.dump(key) or b""
    finally:
        client.close()


def _cell(value: object) -> bytes:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    return str(value).encode("utf-8", "surrogateescape")
