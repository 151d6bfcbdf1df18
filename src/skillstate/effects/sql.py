"""A SQL effect that records its idempotency key in the same transaction as the change.

The world remembers the key because the key *is* part of the change: a helper table
(``skillstate_effects``: ``key`` primary key, ``result`` as JSON text, ``created_at``)
gets one row per effect, written and committed together with the rows the effect
changes. Either both are there or neither is, so "did the effect with this key
happen?" is one ``SELECT``::

    with sql.once(conn, ctx.idempotency_key) as effect:
        if effect.fresh:
            conn.execute("INSERT INTO payments (amount) VALUES (?)", (42,))
            effect.result = {"amount": 42}
    outcome = Outcome(writes={"paid": effect.result["amount"]})

and in the probe ``sql.lookup(conn, ctx.idempotency_key)`` returns the recorded
result (wrapped in :class:`Recorded`) or ``None``.

How ``once`` orders its statements, and why:

1. ``BEGIN`` (``BEGIN IMMEDIATE`` on SQLite, so the write lock is taken up front and
   a second writer waits on the busy timeout instead of failing on a lock upgrade).
2. *Claim* the key: ``INSERT ... ON CONFLICT (key) DO NOTHING`` with no result yet.
   The claim comes first so that a second transaction claiming the same key waits on
   the row lock (PostgreSQL) or the database lock (SQLite) until the first one
   commits or rolls back, then sees its answer. Checking with a ``SELECT`` first
   would let two transactions both see "absent" and both apply the change.
3. Claimed: the block makes the change. Already there: the recorded result is
   loaded and the block must do nothing (whatever it does is rolled back anyway).
4. Store the result and ``COMMIT``: the change, the key and the result become
   visible together. Any exception before that rolls all of it back.

Supported connections: :class:`sqlite3.Connection` (``?`` parameters) and psycopg 3
``Connection`` (``%s`` parameters), told apart by type; psycopg is never imported
unless a psycopg connection is passed in. Limits:

* ``once`` and :func:`ensure_table` own their transaction: the connection must not
  be inside one (:class:`~skillstate.errors.UsageError` otherwise). The one
  exception is ``sqlite3`` with ``autocommit=False`` (Python 3.12+), where a
  transaction is always open: commit your own work before calling ``once``, or it
  commits with the effect.
* Do not commit inside the block. (If you do, the key still commits with the change,
  because it was claimed first; only the result is stored in a later transaction.)
* PostgreSQL at ``REPEATABLE READ`` or ``SERIALIZABLE`` answers a lost race with a
  serialization failure instead of waiting: catch it and call ``once`` again (the
  whole transaction was rolled back, so retrying is safe). ``READ COMMITTED``, the
  default, waits and needs no retry.
* Keys are never deleted here; prune old rows by ``created_at`` once no task that
  could still be resumed refers to them.
"""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from skillstate.errors import UsageError

if TYPE_CHECKING:
    from typing import TypeAlias

    import psycopg

    Connection: TypeAlias = sqlite3.Connection | psycopg.Connection[Any]
    """The connections the helpers accept."""
else:
    Connection = Any

__all__ = ["DEFAULT_TABLE", "Connection", "Effect", "Recorded", "ensure_table", "lookup", "once"]

DEFAULT_TABLE = "skillstate_effects"
"""The helper table's name when none is given."""

# The table name is spliced into SQL (identifiers cannot be parameters), so only a
# plain identifier, optionally schema-qualified, is accepted.
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?")


@dataclass(frozen=True)
class Recorded:
    """A key that is recorded, and the result stored with it (``None`` is a valid result)."""

    result: Any


class Effect:
    """What :func:`once` hands its block: whether to act, and the effect's result.

    ``fresh`` is true when this call claimed the key: make the change and set
    ``result`` (anything JSON can encode). When it is false the key was recorded
    before, ``result`` is what was stored then, and the block must not act again.
    """

    __slots__ = ("_result", "fresh", "key")

    def __init__(self, key: str, fresh: bool, result: Any = None) -> None:
        self.key = key
        self.fresh = fresh
        self._result = result

    @property
    def result(self) -> Any:
        """The result to record (fresh) or the one recorded earlier (not fresh)."""
        return self._result

    @result.setter
    def result(self, value: Any) -> None:
        if not self.fresh:
            raise UsageError(f"effect {self.key!r} is already recorded; its result is final")
        self._result = value

    def __repr__(self) -> str:
        return f"Effect(key={self.key!r}, fresh={self.fresh}, result={self._result!r})"


def ensure_table(conn: Connection, *, table: str = DEFAULT_TABLE) -> None:
    """Create the helper table if it does not exist, in a transaction of its own.

    Safe to call any number of times, also from processes racing to create it.
    """
    driver = _driver(conn)
    name = _table(table)
    if _exists(driver, name):
        return  # no DDL, no lock, no "already exists" notice
    driver.begin()
    try:
        driver.cursor().execute(driver.create_sql(name))
        driver.commit()
    except Exception as exc:
        _rollback_quietly(driver)
        # PostgreSQL's CREATE TABLE IF NOT EXISTS can still fail when another session
        # creates the same table at the same instant; the table is there, all is well.
        if not (driver.is_duplicate_table(exc) and _exists(driver, name)):
            raise


def lookup(conn: Connection, key: str, *, table: str = DEFAULT_TABLE) -> Recorded | None:
    """The result recorded for ``key``, or ``None`` when no effect with that key committed.

    A missing table holds no keys (``once`` cannot record into it), so it answers
    ``None`` too: a probe may run before anything called :func:`ensure_table`. Inside
    a caller's transaction the read uses that transaction's snapshot; otherwise it
    leaves the connection idle.
    """
    driver = _driver(conn)
    name = _table(table)
    _check_key(key)
    with driver.reading():
        if not driver.table_exists(name):
            return None
        cur = driver.cursor()
        cur.execute(driver.sql(f"SELECT result FROM {name} WHERE key = {{p}}"), (key,))
        row = cur.fetchone()
    return None if row is None else Recorded(_decode(row[0]))


@contextlib.contextmanager
def once(conn: Connection, key: str, *, table: str = DEFAULT_TABLE) -> Iterator[Effect]:
    """Run the block's change at most once per ``key``, atomically with recording the key.

    In one transaction: claim ``key``; if it was new, the block makes its change
    (``effect.fresh`` is true) and sets ``effect.result``; then key, result and change
    commit together. If ``key`` was already recorded, nothing is changed and
    ``effect.result`` is the recorded result. An exception in the block (or a result
    JSON cannot encode) rolls back the change and the key alike, and propagates.
    The helper table must exist (:func:`ensure_table`).
    """
    driver = _driver(conn)
    name = _table(table)
    _check_key(key)
    driver.begin()
    try:
        cur = driver.cursor()
        cur.execute(
            driver.sql(f"INSERT INTO {name} (key) VALUES ({{p}}) ON CONFLICT (key) DO NOTHING"),
            (key,),
        )
        if cur.rowcount == 1:
            effect = Effect(key, fresh=True)
        else:
            cur.execute(driver.sql(f"SELECT result FROM {name} WHERE key = {{p}}"), (key,))
            row = cur.fetchone()
            effect = Effect(key, fresh=False, result=_decode(row[0]) if row else None)
        yield effect
        if effect.fresh:
            cur = driver.cursor()  # the block may have reused or closed ours
            cur.execute(
                driver.sql(f"UPDATE {name} SET result = {{p}} WHERE key = {{p}}"),
                (_encode(effect.result, key), key),
            )
            driver.commit()
        else:
            driver.rollback()  # a replayed block must leave no trace
    except BaseException:
        _rollback_quietly(driver)
        raise


# ---------------------------------------------------------------- drivers


class _Driver:
    """What differs between sqlite3 and psycopg: parameters, transactions, catalog."""

    placeholder = "?"

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def sql(self, template: str) -> str:
        return template.replace("{p}", self.placeholder)

    def cursor(self) -> Any:
        raise NotImplementedError

    def begin(self) -> None:
        raise NotImplementedError

    def commit(self) -> None:
        raise NotImplementedError

    def rollback(self) -> None:
        raise NotImplementedError

    def reading(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def table_exists(self, name: str) -> bool:
        raise NotImplementedError

    def create_sql(self, name: str) -> str:
        raise NotImplementedError

    def is_duplicate_table(self, exc: Exception) -> bool:
        return False


class _SQLite(_Driver):
    conn: sqlite3.Connection

    def cursor(self) -> sqlite3.Cursor:
        cur = self.conn.cursor()
        cur.row_factory = None  # plain tuples, whatever the connection's row_factory
        return cur

    def _pep249(self) -> bool:
        # Python 3.12+: autocommit=False keeps a transaction open at all times.
        return getattr(self.conn, "autocommit", None) is False

    def begin(self) -> None:
        if self._pep249():
            return  # the implicit transaction is ours; the claim is its first write
        if self.conn.in_transaction:
            raise UsageError(
                "the sqlite3 connection is inside a transaction: commit or roll back "
                "before recording an effect"
            )
        # An explicit BEGIN, whatever isolation_level says: with isolation_level=None
        # (or autocommit=True) every statement would otherwise commit on its own, and
        # IMMEDIATE takes the write lock now, so racing writers queue on the busy timeout.
        self.conn.execute("BEGIN IMMEDIATE")

    def commit(self) -> None:
        if self._pep249():
            self.conn.commit()
        elif self.conn.in_transaction:
            # SQL, not conn.commit(): with autocommit=True, commit() does nothing.
            self.conn.execute("COMMIT")

    def rollback(self) -> None:
        if self._pep249():
            self.conn.rollback()
        elif self.conn.in_transaction:
            self.conn.execute("ROLLBACK")

    def table_exists(self, name: str) -> bool:
        # Let SQLite resolve the name as every other statement will (temp, main, then
        # attached databases); preparing the statement is enough to know.
        try:
            self.cursor().execute(f"SELECT 1 FROM {name} LIMIT 0")
        except sqlite3.OperationalError as exc:
            if str(exc).startswith("no such table"):
                return False
            raise
        return True

    def create_sql(self, name: str) -> str:
        return (
            f"CREATE TABLE IF NOT EXISTS {name} ("
            "key TEXT PRIMARY KEY, result TEXT, "
            "created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')))"
        )


class _Postgres(_Driver):
    placeholder = "%s"

    def cursor(self) -> Any:
        from psycopg.rows import tuple_row

        return self.conn.cursor(row_factory=tuple_row)

    def _idle(self) -> bool:
        from psycopg.pq import TransactionStatus

        return bool(self.conn.info.transaction_status == TransactionStatus.IDLE)

    def begin(self) -> None:
        if not self._idle():
            raise UsageError(
                "the psycopg connection is inside a transaction: commit or roll back "
                "before recording an effect"
            )
        if self.conn.autocommit:
            self.conn.execute("BEGIN")
        # Otherwise psycopg opens the transaction with the first statement.

    def commit(self) -> None:
        self.conn.commit()  # sends COMMIT whenever a transaction is open, autocommit or not

    def rollback(self) -> None:
        self.conn.rollback()

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        # A read on an idle non-autocommit connection opens a transaction; end it, so
        # a probe's lookup does not make the skill's next once() refuse the connection.
        idle = self._idle()
        try:
            yield
        finally:
            if idle and not self._idle():
                self.conn.rollback()

    def table_exists(self, name: str) -> bool:
        cur = self.cursor()
        cur.execute("SELECT to_regclass(%s) IS NOT NULL", (name,))
        row = cur.fetchone()
        return bool(row and row[0])

    def create_sql(self, name: str) -> str:
        return (
            f"CREATE TABLE IF NOT EXISTS {name} ("
            "key TEXT PRIMARY KEY, result TEXT, "
            "created_at TIMESTAMPTZ NOT NULL DEFAULT now())"
        )

    def is_duplicate_table(self, exc: Exception) -> bool:
        from psycopg import errors

        return isinstance(exc, (errors.UniqueViolation, errors.DuplicateTable))


def _driver(conn: Any) -> _Driver:
    """The driver for ``conn``, by its type (psycopg is only imported if it is in use)."""
    if isinstance(conn, sqlite3.Connection):
        return _SQLite(conn)
    for cls in type(conn).__mro__:
        if cls.__module__.split(".")[0] == "psycopg" and cls.__name__ == "Connection":
            return _Postgres(conn)
    raise UsageError(
        f"unsupported connection {type(conn).__module__}.{type(conn).__qualname__}: "
        "pass a sqlite3.Connection or a psycopg (v3) Connection"
    )


def _exists(driver: _Driver, name: str) -> bool:
    with driver.reading():
        return driver.table_exists(name)


def _table(table: str) -> str:
    if not _IDENTIFIER.fullmatch(table):
        raise UsageError(f"table name {table!r} must be an identifier, optionally schema.table")
    return table


def _check_key(key: str) -> None:
    if not isinstance(key, str) or not key:
        raise UsageError(f"an idempotency key must be a non-empty string, not {key!r}")


def _encode(result: Any, key: str) -> str:
    try:
        return json.dumps(result, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"the result of effect {key!r} is not JSON: {exc}") from exc


def _decode(text: str | bytes | None) -> Any:
    # NULL only if a caller committed inside the block and crashed before the result
    # was stored: the effect happened, its result is unknown.
    return None if text is None else json.loads(text)


def _rollback_quietly(driver: _Driver) -> None:
    # The error that brought us here is the one worth seeing; a broken connection
    # that also fails to roll back would only hide it.
    with contextlib.suppress(Exception):
        driver.rollback()
