"""Opening stores by URL, on every backend: unknown options, servers that are not there."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from skillstate.errors import InvalidStoreURL, StoreUnavailable
from skillstate.store import open_store
from tests.contract.backends import (
    POSTGRES_URL,
    REDIS_URL,
    URLS,
    postgres_reachable,
    redis_reachable,
    require_service,
)

WITH_MEMORY: dict[str, Callable[[Path], str]] = {"memory": lambda tmp: "memory://", **URLS}


def _with_option(url: str, option: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{option}"


@pytest.mark.parametrize("backend", sorted(WITH_MEMORY))
def test_unknown_url_option_is_refused_by_name(backend: str, tmp_path: Path) -> None:
    """Every backend names an option it does not know: InvalidStoreURL, one line, nothing made."""
    url = _with_option(WITH_MEMORY[backend](tmp_path), "bogus_option=1")
    with pytest.raises(InvalidStoreURL) as info:
        open_store(url)
    message = str(info.value)
    assert "bogus_option" in message
    assert "\n" not in message
    assert list(tmp_path.iterdir()) == []


def _closed_port() -> int:
    """A local port nothing listens on: bound once to get it, then closed."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


UNREACHABLE: dict[str, Callable[[], str]] = {
    "postgres-closed-port": lambda: f"postgresql://someone:hunter2@127.0.0.1:{_closed_port()}/db",
    "redis-closed-port": lambda: f"redis://someone:hunter2@127.0.0.1:{_closed_port()}/0",
}


@pytest.mark.parametrize("case", sorted(UNREACHABLE))
def test_server_that_is_not_there_is_unavailable(case: str) -> None:
    """A refused connection is StoreUnavailable naming the masked URL, on one line."""
    url = UNREACHABLE[case]()
    with pytest.raises(StoreUnavailable) as info:
        open_store(url)
    message = str(info.value)
    assert "\n" not in message
    assert "hunter2" not in message
    assert url.replace(":hunter2@", ":***@") in message


def _swap_path(url: str, path: str) -> str:
    """``url`` (with ``/db`` and maybe a query) with its path replaced."""
    head, _, rest = url.partition("://")
    authority, _, tail = rest.partition("/")
    query = tail.partition("?")[2]
    return f"{head}://{authority}/{path}" + (f"?{query}" if query else "")


@pytest.mark.services
def test_redis_database_out_of_range_is_unavailable() -> None:
    """A database number the server does not have is StoreUnavailable, not a driver error."""
    require_service("Redis", *redis_reachable())
    url = _swap_path(REDIS_URL, "9999")
    with pytest.raises(StoreUnavailable) as info:
        open_store(url)
    assert url in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.services
@pytest.mark.parametrize("what", ["database", "role"])
def test_postgres_refusing_the_login_is_unavailable(what: str) -> None:
    """No such database, or a role the server refuses: StoreUnavailable naming the URL."""
    require_service("PostgreSQL", *postgres_reachable())
    if what == "database":
        url = _swap_path(POSTGRES_URL, "no_such_database_skillstate")
    else:
        head, _, rest = POSTGRES_URL.partition("://")
        url = f"{head}://no_such_role_skillstate@{rest.partition('@')[2] or rest}"
    with pytest.raises(StoreUnavailable) as info:
        open_store(url)
    assert url in str(info.value)
    assert "\n" not in str(info.value)
