"""Fingerprint kinds beyond files: a SQL query's rows and an HTTP resource.

Each kind is a :data:`~skillstate.state.fingerprint.DigestFn`: ``digest(target) ->
str``, the same text while the resource is the same. A digest that cannot be taken
raises (the runtime records ``error:<ExceptionName>``, which never compares equal:
an unreachable database or server makes the step stale, never trusted).

* :func:`sql_digest` (any DB-API connection) and :func:`sqlite_digest` (the built-in
  ``sqlite`` kind) hash a query's column names and rows, in the order the query
  returns them: give it an ``ORDER BY`` (or a single row) so that the same data
  always gives the same digest.
* :func:`http_digest` (the built-in ``http`` kind) asks for the headers only (a
  ``HEAD``) and uses the ``ETag``, else ``Last-Modified``; a server that sends
  neither is fetched (``GET``) and its body hashed. A 404 or 410 is ``absent``.
  Only ``http`` and ``https`` URLs are fetched.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from contextlib import closing
from typing import Any

__all__ = ["ERROR", "http_digest", "sql_digest", "sqlite_digest", "sqlite_target"]

ERROR = "error:"
"""The prefix of a digest that could not be taken (it never compares equal)."""

_SEPARATOR = "::"
_BATCH = 1000
_CHUNK = 1 << 16


def _rows_digest(columns: Iterable[str], batches: Iterable[list[Any]]) -> str:
    """``sha256:`` of the column names and the rows, one JSON line each."""
    digest = hashlib.sha256()
    digest.update(json.dumps(list(columns), ensure_ascii=False).encode())
    for batch in batches:
        for row in batch:
            line = json.dumps(list(row), ensure_ascii=False, default=str, sort_keys=True)
            digest.update(b"\n" + line.encode())
    return "sha256:" + digest.hexdigest()


def _query_digest(connection: Any, query: str) -> str:
    cursor = connection.cursor()
    try:
        cursor.execute(query)
        columns = [d[0] for d in cursor.description or ()]

        def batches() -> Iterable[list[Any]]:
            while batch := cursor.fetchmany(_BATCH):
                yield list(batch)

        return _rows_digest(columns, batches())
    finally:
        cursor.close()


def sql_digest(connect: Callable[[], Any]) -> Callable[[str], str]:
    """A digest of a SQL query's result on connections from ``connect()`` (DB-API 2).

    The target is the query; a new connection is opened and closed for each digest::

        register_fingerprint_kind("orders_db", sql_digest(lambda: psycopg.connect(DSN)))
        ctx.fingerprint("SELECT id, status FROM orders WHERE id = 42", kind="orders_db")
    """

    def digest(query: str) -> str:
        connection = connect()
        try:
            return _query_digest(connection, query)
        finally:
            connection.close()

    return digest


def sqlite_target(database: str, query: str) -> str:
    """The target of the built-in ``sqlite`` kind: ``"<database>::<query>"``."""
    if _SEPARATOR in database:
        raise ValueError(f"an sqlite database path cannot contain {_SEPARATOR!r}")
    return f"{database}{_SEPARATOR}{query}"


def sqlite_digest(target: str) -> str:
    """The ``sqlite`` kind: the rows of ``query`` on ``database`` (``"<database>::<query>"``),
    opened read-only (a missing file is an error, never created)."""
    database, sep, query = target.partition(_SEPARATOR)
    if not sep or not query.strip():
        raise ValueError("an sqlite fingerprint's target is '<database>::<query>'")
    uri = "file:" + urllib.parse.quote(database) + "?mode=ro"
    with closing(sqlite3.connect(uri, uri=True)) as connection:
        return _query_digest(connection, query)


def http_digest(
    *, headers: Mapping[str, str] | None = None, timeout: float = 10.0
) -> Callable[[str], str]:
    """A digest of the resource at a URL: its ``ETag``, else its ``Last-Modified``,
    else a sha256 of its body. ``headers`` go with every request (a token, say: they
    stay in this process, never in the card)::

        register_fingerprint_kind("api", http_digest(headers={"Authorization": TOKEN}))
        ctx.fingerprint("https://api.example.com/v1/prices", kind="api")
    """
    sent = dict(headers or {})

    def digest(url: str) -> str:
        scheme = urllib.parse.urlsplit(url).scheme.lower()
        if scheme not in ("http", "https"):
            raise ValueError(f"only http and https URLs are fingerprinted, not {scheme!r}")
        try:
            with _open(url, "HEAD", sent, timeout) as response:
                found = _validator(response.headers)
        except urllib.error.HTTPError as exc:
            if exc.code in (404, 410):
                return "absent"
            if exc.code not in (405, 501):  # a server that does not do HEAD: GET it
                raise
            found = None
        if found is not None:
            return found
        try:
            with _open(url, "GET", sent, timeout) as response:
                found = _validator(response.headers)
                if found is not None:
                    return found
                body = hashlib.sha256()
                while chunk := response.read(_CHUNK):
                    body.update(chunk)
                return "sha256:" + body.hexdigest()
        except urllib.error.HTTPError as exc:
            if exc.code in (404, 410):
                return "absent"
            raise

    return digest


def _open(url: str, method: str, headers: Mapping[str, str], timeout: float) -> Any:
    request = urllib.request.Request(url, method=method, headers=dict(headers))
    return urllib.request.urlopen(request, timeout=timeout)  # the scheme was checked


def _validator(headers: Any) -> str | None:
    etag = headers.get("ETag")
    if etag:
        return f"etag:{etag}"
    modified = headers.get("Last-Modified")
    return f"modified:{modified}" if modified else None
