"""Helpers for the question every effectful skill's probe asks: did this effect happen?

A skill declared with ``effects=True`` gets ``ctx.idempotency_key``, the same for
every attempt and every resume of its step. After a crash (or a failed attempt) the
runtime calls the skill's probe before running it again; the probe must answer from
the outside world. These helpers make the world able to answer:

=================================  ==========================  ==================================
Helper                             Use it when                 It guarantees
=================================  ==========================  ==================================
``sql.once`` / ``sql.lookup``      the effect is rows in a     change and key commit in one
                                   SQLite or PostgreSQL        transaction: exactly once, also
                                   database you write to       against racing processes; the
                                                               result is stored with the key
``files.append_once`` /            the effect is a line in a   the line is there once; a torn
``files.appended``                 file (a ledger, a log)      write is never counted (one host,
                                                               local filesystem, flock)
``files.write_once`` /             the effect replaces a       atomic replace (old or new, never
``files.written``                  whole file                  half); "written" is right for a
                                                               crash at any point
``http.idempotent_request``        the effect is an HTTP call  retries reuse the key; exactly
                                   to a server that honours    once *only if the server dedupes
                                   ``Idempotency-Key``         by it*
``readback.read_back``             the world keeps no keys:    nothing by itself: as good as
                                   read it and recognise the   ``matches``; races with other
                                   effect                      writers (see docs/effects.md)
=================================  ==========================  ==================================

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
