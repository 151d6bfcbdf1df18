"""Stores, chosen by URL. Backends are imported only when their URL is opened."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import cast

from skillstate.errors import InvalidStoreURL
from skillstate.store.base import Checkpoint, HeadInfo, Store

__all__ = [
    "DEFAULT_STORE_URL",
    "Checkpoint",
    "HeadInfo",
    "Store",
    "default_store_url",
    "open_store",
]

DEFAULT_STORE_URL = "sqlite:///.skillstate/state.db"

# scheme -> "module:factory"; a factory takes the URL and ``create`` (a keyword).
# Later backends add a line here.
_BACKENDS: dict[str, str] = {
    "memory": "skillstate.store.memory:MemoryStore.from_url",
    "sqlite": "skillstate.store.sqlite:SQLiteStore.from_url",
    "postgresql": "skillstate.store.postgres:PostgresStore.from_url",
    "postgres": "skillstate.store.postgres:PostgresStore.from_url",
    "redis": "skillstate.store.redis:RedisStore.from_url",
    "rediss": "skillstate.store.redis:RedisStore.from_url",
    "file": "skillstate.store.files:FilesStore.from_url",
}


def default_store_url() -> str:
    """``$SKILLSTATE_STORE`` if set, else the SQLite file under ``.skillstate/``."""
    return os.environ.get("SKILLSTATE_STORE") or DEFAULT_STORE_URL


def open_store(url: str | None = None, *, create: bool = True) -> Store:
    """Open the store a URL names: ``memory://``, ``sqlite:///path.db``, ``file://dir``,
    ``postgresql://user@host/db?schema=NAME`` (or ``postgres://``),
    ``redis://host:6379/0?prefix=NAME`` (``rediss://`` for TLS).

    ``create=True`` (writers) creates the store when it does not exist yet: the
    SQLite file and its directories, the files directory, the PostgreSQL schema and
    its tables, the Redis layout record. ``create=False`` (commands that only read)
    creates and writes nothing for a store that is not there and raises
    :class:`~skillstate.errors.StoreNotFound` naming the URL instead: no SQLite file
    (or one without a store's tables), no such directory, no such PostgreSQL schema
    (or one without a store's tables), no skillstate data under the Redis prefix.
    ``memory://`` is empty on every open either way. A store that exists opens the
    same either way (an older layout is upgraded, as on every open).
    """
    url = url or default_store_url()
    scheme, sep, _ = url.partition("://")
    if not sep or scheme not in _BACKENDS:
        known = ", ".join(f"{s}://" for s in _BACKENDS)
        raise InvalidStoreURL(f"unsupported store URL {url!r}; expected one of: {known}")
    factory = cast("Callable[..., Store]", import_target(_BACKENDS[scheme]))
    return factory(url, create=create)


def import_target(target: str) -> object:
    """What a ``"module:attr.attr"`` target names, its module imported now (not before:
    a backend's driver is imported only when its URL is opened)."""
    module_name, _, attr = target.partition(":")
    found: object = importlib.import_module(module_name)
    for part in attr.split("."):
        found = getattr(found, part)
    return found
