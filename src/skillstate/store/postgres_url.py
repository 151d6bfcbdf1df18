"""PostgreSQL store URLs and the driver boundary, shared by the sync and async stores.

``postgresql://user:password@host:port/dbname?schema=NAME`` (``postgres://`` works
too). ``schema`` (default ``skillstate``) names the Postgres schema that holds the
tables; every other query parameter (``sslmode``, ``connect_timeout``, ...) goes to
libpq unchanged. libpq's options are many and grow with its versions, so the store
keeps no list of its own: it asks libpq (``conninfo_to_dict``) before connecting,
and a parameter neither knows is ``InvalidStoreURL`` naming it, never a driver error.

Driver errors leave the store as one line (:func:`wrap`): ``StoreUnavailable`` when
the server cannot be used at all, ``StoreError`` otherwise, naming the URL with its
password masked. Nothing here imports psycopg at import time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from skillstate.errors import InvalidStoreURL, MissingExtra, StoreError, StoreUnavailable

__all__ = [
    "DEFAULT_SCHEMA",
    "PostgresURL",
    "connect_options",
    "driver",
    "one_line",
    "parse_url",
    "wrap",
]

DEFAULT_SCHEMA = "skillstate"

_SCHEMES = ("postgresql", "postgres")
_MAX_IDENTIFIER_BYTES = 63
"""Postgres silently truncates longer names, which could merge two stores into one."""

_CONNECT_TIMEOUT = 10
"""Seconds to wait for the server when the URL sets no ``connect_timeout``."""

_UNAVAILABLE_STATES = ("08", "28", "3D000", "57P01", "57P02", "57P03")
"""SQLSTATEs (classes or codes) meaning the server cannot be used at all: connection
exceptions, rejected credentials, no such database, shutting down or starting up."""


@dataclass(frozen=True)
class PostgresURL:
    """A store URL taken apart: what libpq gets, which schema, what to show."""

    conninfo: str
    """The URL without the ``schema`` parameter, for libpq."""
    schema: str
    masked: str
    """The URL as given with any password replaced by ``***``."""


def parse_url(url: str) -> PostgresURL:
    """Split a ``postgresql://`` store URL; raises ``InvalidStoreURL`` when it cannot work."""
    try:
        parts = urlsplit(url)
        query = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError as exc:
        raise InvalidStoreURL(f"malformed PostgreSQL URL {mask(url)!r}: {exc}") from exc
    if parts.scheme not in _SCHEMES:
        raise InvalidStoreURL(f"{mask(url)!r} is not a postgresql:// URL")
    schemas = [value for key, value in query if key == "schema"]
    if len(schemas) > 1:
        raise InvalidStoreURL(f"{mask(url)!r} sets schema more than once")
    schema = schemas[0] if schemas else DEFAULT_SCHEMA
    if not schema or "\x00" in schema or len(schema.encode()) > _MAX_IDENTIFIER_BYTES:
        raise InvalidStoreURL(
            f"schema {schema!r} in {mask(url)!r} must be 1 to {_MAX_IDENTIFIER_BYTES} bytes"
        )
    if schema.lower().startswith("pg_"):
        raise InvalidStoreURL(f"schema {schema!r}: names starting with pg_ are reserved")
    rest = urlencode([(key, value) for key, value in query if key != "schema"])
    conninfo = urlunsplit((parts.scheme, parts.netloc, parts.path, rest, parts.fragment))
    return PostgresURL(conninfo=conninfo, schema=schema, masked=mask(url))


def mask(url: str) -> str:
    """``url`` with the password (in the user info or a ``password=`` parameter) hidden."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority, slash, tail = rest.partition("/")
    userinfo, at, hosts = authority.rpartition("@")
    if at and ":" in userinfo:
        authority = userinfo.split(":", 1)[0] + ":***@" + hosts
    path, question, query = tail.partition("?")
    if question:
        query = "&".join(
            "password=***" if pair.split("=", 1)[0] == "password" else pair
            for pair in query.split("&")
        )
    return f"{scheme}://{authority}{slash}{path}{question}{query}"


def one_line(exc: BaseException) -> str:
    """libpq messages span lines (a DETAIL, a HINT, a tab-indented advice): join them."""
    return " ".join(part.strip() for part in str(exc).splitlines() if part.strip()) or repr(exc)


def driver() -> Any:
    """Import psycopg now that a PostgreSQL store is really wanted."""
    try:
        import psycopg
        import psycopg_pool  # noqa: F401  (checked here so the error names the extra)
    except ImportError as exc:
        raise MissingExtra("PostgreSQL store needs: pip install 'skillstate[postgres]'") from exc
    return psycopg


def connect_options(psycopg: Any, parsed: PostgresURL) -> dict[str, Any]:
    """The keyword arguments every connection of a store gets; checks the URL with libpq."""
    try:
        options = psycopg.conninfo.conninfo_to_dict(parsed.conninfo)
    except psycopg.Error as exc:
        raise InvalidStoreURL(f"bad PostgreSQL URL {parsed.masked!r}: {one_line(exc)}") from exc
    extra: dict[str, Any] = {"autocommit": True}
    if "connect_timeout" not in options:
        extra["connect_timeout"] = _CONNECT_TIMEOUT
    return extra


def wrap(context: str, exc: Exception) -> StoreError:
    """A driver error as one line: ``StoreUnavailable`` when the server cannot be reached."""
    import psycopg  # imported already: a store exists

    message = f"{context}: {one_line(exc)}"
    sqlstate = getattr(exc, "sqlstate", None)
    if sqlstate is None:
        # No answer from a server: failed to connect, connection lost, or the pool
        # timed out waiting for one (psycopg_pool.PoolTimeout is an OperationalError).
        unavailable = isinstance(exc, psycopg.OperationalError)
    else:
        unavailable = sqlstate.startswith(_UNAVAILABLE_STATES)
    return StoreUnavailable(message) if unavailable else StoreError(message)
