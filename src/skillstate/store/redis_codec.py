"""How the Redis store's values read and write: numbers, records, compression, errors.

Pure functions on what Redis returns (bytes) and what the store sends, shared by
:class:`~skillstate.store.redis.RedisStore`, its async twin and their operations
(:mod:`skillstate.store.redis_ops`). The layout itself is described in
:mod:`skillstate.store.redis`.

Snapshot bodies, patches and event texts of :data:`COMPRESS_FROM` characters or more
are stored zlib-compressed behind a NUL byte (:data:`ZLIB`); stored JSON text never
starts with NUL, so a value without it was stored as is.
"""

from __future__ import annotations

import time
import zlib
from datetime import datetime, timezone
from typing import Any

from skillstate.errors import StateCorrupted, StoreError, StoreUnavailable
from skillstate.store.base import CheckpointInfo
from skillstate.store.chain import COMPRESS_FROM

__all__ = [
    "COMPRESS_FROM",
    "ZLIB",
    "field_version",
    "from_ms",
    "header",
    "info",
    "lease_fields",
    "now_text",
    "number",
    "one_line",
    "pack",
    "pack_bytes",
    "read_time",
    "store_error",
    "to_bytes",
    "unpack",
    "version_of",
]

ZLIB = b"\0"
"""Leads a compressed value. Stored JSON text never starts with (or contains) NUL."""


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def store_error(url: str, exc: Exception) -> StoreError:
    """redis-py's error as the store's: a connection that cannot be made or kept
    (refused, timed out, credentials rejected) is ``StoreUnavailable``, the rest
    ``StoreError``; the caller raises it ``from exc``."""
    from redis.exceptions import ConnectionError, TimeoutError

    if isinstance(exc, (ConnectionError, TimeoutError)):
        return StoreUnavailable(f"Redis at {url} is unavailable: {one_line(exc)}")
    return StoreError(f"Redis error on {url}: {one_line(exc)}")


def number(value: Any) -> Any:
    """An integer stored as text, as an int; anything else as it is (for the error)."""
    if isinstance(value, bytes):
        try:
            return int(value.decode("ascii"))
        except (UnicodeDecodeError, ValueError):
            return value
    return value


def version_of(task_id: str, value: Any) -> int:
    """The task record's version field as a number (else ``StateCorrupted`` naming it)."""
    parsed = number(value)
    if not isinstance(parsed, int):
        raise StateCorrupted(
            task_id, None, f"the task record's version {value!r} is not a number", field="version"
        )
    return parsed


def field_version(task_id: str, field: bytes) -> int:
    parsed = number(field)
    if not isinstance(parsed, int):
        raise StateCorrupted(task_id, None, f"checkpoint field {field!r} is not a version")
    return parsed


def lease_fields(worker: Any, expires: Any, generation: Any) -> tuple[str | None, Any, Any]:
    """A lease hash's fields as :func:`~skillstate.store.chain.read_lease` takes them."""
    name: str | None = None
    if worker is not None:
        name = worker.decode(errors="surrogateescape") if isinstance(worker, bytes) else worker
    stamp = number(expires)
    seconds = stamp / 1000 if isinstance(stamp, int) else stamp
    return name, seconds, number(generation)


def from_ms(value: Any) -> datetime:
    return datetime.fromtimestamp(int(value) / 1000, timezone.utc)


_SECOND: list[tuple[int, bytes]] = [(-1, b"")]
"""The last second :func:`now_text` formatted, and its text up to the seconds."""


def now_text() -> bytes:
    """Now (UTC) as ISO 8601 bytes with microseconds, as the commit script stores it.

    What ``utcnow().isoformat()`` writes (microseconds always written), for a
    fraction of its cost on the commit path: the date and time up to the second are
    formatted once per second. One tuple is swapped whole, so threads never pair a
    second with another second's text.
    """
    second, micro = divmod(time.time_ns() // 1000, 1_000_000)
    cached = _SECOND[0]
    if cached[0] != second:
        stamp = datetime.fromtimestamp(second, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
        cached = _SECOND[0] = (second, stamp.encode())
    return b"%b.%06d+00:00" % (cached[1], micro)


def read_time(task_id: str, version: int | None, text: bytes | str) -> datetime:
    try:
        raw = text.decode() if isinstance(text, bytes) else text
        return datetime.fromisoformat(raw)
    except ValueError as exc:
        raise StateCorrupted(task_id, version, f"bad timestamp {text!r}") from exc


def header(task_id: str, version: int, record: bytes) -> tuple[bool, int, datetime, bytes]:
    """Split a checkpoint record into ``(snapshot, size, created_at, patch as stored)``."""
    try:
        # Split the bytes, not decoded text: the patch may be compressed (binary).
        kind, size, created, patch = record.split(b" ", 3)
        if kind not in {b"S", b"D"}:
            raise ValueError(f"unknown kind {kind!r}")
        snapshot, parsed = kind == b"S", int(size)
    except ValueError as exc:
        raise StateCorrupted(task_id, version, f"bad checkpoint record ({exc})") from exc
    return snapshot, parsed, read_time(task_id, version, created), patch


def info(task_id: str, version: int, record: bytes) -> CheckpointInfo:
    snapshot, size, created_at, _ = header(task_id, version, record)
    return CheckpointInfo(task_id, version, created_at, snapshot, size)


def pack(text: str) -> str | bytes:
    """``text`` as stored: compressed (after the marker) when long, else as is."""
    if len(text) < COMPRESS_FROM:
        return text
    return ZLIB + zlib.compress(text.encode(), 1)


def pack_bytes(text: str) -> bytes:
    """:func:`pack` as the bytes sent (UTF-8 when not compressed)."""
    if len(text) < COMPRESS_FROM:
        return text.encode()
    return ZLIB + zlib.compress(text.encode(), 1)


def to_bytes(value: str | bytes) -> bytes:
    return value.encode() if isinstance(value, str) else value


def unpack(task_id: str, version: int, value: bytes) -> str:
    """A stored value back as text; one without the marker was stored uncompressed."""
    try:
        if value[:1] == ZLIB:
            return zlib.decompress(value[1:]).decode()
        return value.decode()
    except (zlib.error, UnicodeDecodeError) as exc:
        raise StateCorrupted(task_id, version, f"stored value does not decode ({exc})") from exc
