"""Helpers for the question every effectful skill's probe asks: did this effect happen?

A skill declared with ``effects=True`` gets ``ctx.idempotency_key``, the same for
every attempt and every resume of its step. After a crash (or a failed attempt) the
runtime calls the skill's probe before running it again; the probe must answer from
the outside world. These helpers make the world able to answer:

- ``sql.once`` / ``sql.lookup``: the effect is rows in a SQLite or PostgreSQL
  database you write to. The change and the key commit in one transaction: exactly
  once, also against racing processes; the result is stored with the key.
- ``files.append_once`` / ``files.appended``: the effect is a line in a file (a
  ledger, a log). The line is there once; a torn write is never counted (one host,
  local filesystem, flock).
- ``files.write_once`` / ``files.written``: the effect replaces a whole file. Atomic
  replace (old or new, never half); "written" is right for a crash at any point.
- ``http.idempotent_request``: the effect is an HTTP call to a server that honours
  ``Idempotency-Key``. Retries reuse the key; exactly once *only if the server
  dedupes by it*.
- ``readback.read_back``: the world keeps no keys: read it and recognise the effect.
  Nothing by itself: as good as ``matches``; races with other writers (see
  docs/effects.md).

In each case ``run`` and the probe should return the same ``Outcome``, so a resumed
step commits the state an uninterrupted one would. docs/effects.md has an example
skill and probe for each helper, and what a world without keys can still promise.
"""

from __future__ import annotations

from skillstate.effects import files, http, readback, sql
from skillstate.effects.files import append_once, appended, entries, write_once, written
from skillstate.effects.http import (
    HttpError,
    HttpResult,
    HttpStatusError,
    HttpTransportError,
    idempotent_request,
)
from skillstate.effects.readback import read_back
from skillstate.effects.sql import Effect, Recorded, ensure_table, lookup, once

__all__ = [
    "Effect",
    "HttpError",
    "HttpResult",
    "HttpStatusError",
    "HttpTransportError",
    "Recorded",
    "append_once",
    "appended",
    "ensure_table",
    "entries",
    "files",
    "http",
    "idempotent_request",
    "lookup",
    "once",
    "read_back",
    "readback",
    "sql",
    "write_once",
    "written",
]
