"""SQLite store: the embedded default. One file, WAL mode, stdlib ``sqlite3``.

URLs follow SQLAlchemy's convention: ``sqlite:///relative/path.db``,
``sqlite:////absolute/path.db``, ``sqlite:///:memory:``.

``commit`` runs in a ``BEGIN IMMEDIATE`` transaction: the write lock is taken
before the version is read, so two processes racing on one task serialize there
and the loser sees the new version and raises ``StaleState`` without writing.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from skillstate.errors import (
    ArtifactNotFound,
    InvalidStoreURL,
    StaleState,
    StoreError,
    TaskNotFound,
)
from skillstate.events import Event, utcnow
from skillstate.store.base import Checkpoint, artifact_ref, check_commit

__all__ = ["SQLiteStore"]

# Versioned, append-only: a new schema change is a new entry, never an edit.
MIGRATIONS: tuple[tuple[int, str], ...] = (
    (
        1,
        """
        CREATE TABLE tasks (
            task_id    TEXT PRIMARY KEY,
            version    INTEGER NOT NULL,
            updated_at TEXT NOT NULL
        );
        CREATE TABLE checkpoints (
            task_id    TEXT NOT NULL,
            version    INTEGER NOT NULL,
            state      TEXT NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (task_id, version)
        ) WITHOUT ROWID;
        CREATE TABLE events (
            task_id TEXT NOT NULL,
            version INTEGER NOT NULL,
            event   TEXT NOT NULL,
            PRIMARY KEY (task_id, version)
        ) WITHOUT ROWID;
        CREATE TABLE artifacts (
            ref        TEXT PRIMARY KEY,
            media_type TEXT NOT NULL,
            data       BLOB NOT NULL,
            created_at TEXT NOT NULL
        );
        """,
    ),
)


class SQLiteStore:
    """A store in one SQLite file (or in memory)."""

    def __init__(self, path: str | Path, *, url: str | None = None) -> None:
        self.path = str(path)
        self.url = url or f"sqlite:///{self.path}"
        try:
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            # isolation_level=None: we issue BEGIN ourselves, so the lock mode is explicit.
            self._conn = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=30.0
            )
            self._conn.execute("PRAGMA journal_mode=WAL")
            # NORMAL is safe from corruption in WAL mode; a power cut may lose the last
            # commits but never half of one.
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute("PRAGMA busy_timeout=30000")
        except (OSError, sqlite3.Error) as exc:
            # A path that cannot hold a database is bad input, not a backend fault.
            raise InvalidStoreURL(f"cannot open SQLite database {self.path!r}: {exc}") from exc
        self._lock = threading.RLock()
        self.setup()

    @classmethod
    def from_url(cls, url: str) -> SQLiteStore:
        rest = url.split("://", 1)[1]
        path = rest[1:] if rest.startswith("/") else rest
        if not path:
            raise InvalidStoreURL(f"{url!r} names no database file (try sqlite:///state.db)")
        return cls(path, url=url)

    # ------------------------------------------------------------------ schema

    def setup(self) -> None:
        """Create or upgrade the tables. Safe to call any number of times."""
        with self._tx() as cur:
            cur.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations "
                "(version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)"
            )
            done = {row[0] for row in cur.execute("SELECT version FROM schema_migrations")}
            for version, script in MIGRATIONS:
                if version in done:
                    continue
                for statement in filter(str.strip, script.split(";")):
                    cur.execute(statement)
                cur.execute(
                    "INSERT INTO schema_migrations VALUES (?, ?)", (version, utcnow().isoformat())
                )

    def schema_versions(self) -> list[int]:
        with self._lock:
            rows = self._conn.execute("SELECT version FROM schema_migrations ORDER BY version")
            return [row[0] for row in rows]

    # ------------------------------------------------------------------ protocol

    def load(self, task_id: str) -> Checkpoint:
        row = self._one(
            "SELECT c.version, c.state, c.created_at FROM tasks t JOIN checkpoints c "
            "ON c.task_id = t.task_id AND c.version = t.version WHERE t.task_id = ?",
            (task_id,),
        )
        if row is None:
            raise TaskNotFound(task_id)
        return _checkpoint(task_id, row)

    def commit(
        self, task_id: str, expected_version: int, state: Mapping[str, Any], event: Event
    ) -> int:
        new_version = check_commit(task_id, expected_version, state, event)
        try:
            document = json.dumps(state, separators=(",", ":"), ensure_ascii=False)
        except (TypeError, ValueError) as exc:
            raise StoreError(f"state of {task_id!r} is not JSON-serializable: {exc}") from exc
        now = utcnow().isoformat()
        with self._tx() as cur:
            row = cur.execute("SELECT version FROM tasks WHERE task_id = ?", (task_id,)).fetchone()
            head = row[0] if row else 0
            if head != expected_version:
                raise StaleState(task_id, expected_version, head)
            if row is None:
                cur.execute("INSERT INTO tasks VALUES (?, ?, ?)", (task_id, new_version, now))
            else:
                cur.execute(
                    "UPDATE tasks SET version = ?, updated_at = ? WHERE task_id = ?",
                    (new_version, now, task_id),
                )
            cur.execute(
                "INSERT INTO checkpoints VALUES (?, ?, ?, ?)", (task_id, new_version, document, now)
            )
            cur.execute(
                "INSERT INTO events VALUES (?, ?, ?)",
                (task_id, new_version, event.model_dump_json()),
            )
        return new_version

    def checkpoint(self, task_id: str, version: int) -> Checkpoint:
        row = self._one(
            "SELECT version, state, created_at FROM checkpoints WHERE task_id = ? AND version = ?",
            (task_id, version),
        )
        if row is None:
            self.load(task_id)  # raises TaskNotFound for an unknown task
            raise StoreError(f"task {task_id!r} has no checkpoint at version {version}")
        return _checkpoint(task_id, row)

    def checkpoints(self, task_id: str) -> list[Checkpoint]:
        rows = self._all(
            "SELECT version, state, created_at FROM checkpoints WHERE task_id = ? ORDER BY version",
            (task_id,),
        )
        if not rows:
            raise TaskNotFound(task_id)
        return [_checkpoint(task_id, row) for row in rows]

    def events(self, task_id: str, *, since: int = 0) -> list[Event]:
        self.load(task_id)
        rows = self._all(
            "SELECT event FROM events WHERE task_id = ? AND version > ? ORDER BY version",
            (task_id, since),
        )
        return [Event.model_validate_json(row[0]) for row in rows]

    def tasks(self) -> list[str]:
        return [row[0] for row in self._all("SELECT task_id FROM tasks ORDER BY task_id", ())]

    def put_artifact(self, data: bytes, *, media_type: str = "application/octet-stream") -> str:
        ref = artifact_ref(data)
        with self._tx() as cur:
            cur.execute(
                "INSERT OR IGNORE INTO artifacts VALUES (?, ?, ?, ?)",
                (ref, media_type, sqlite3.Binary(data), utcnow().isoformat()),
            )
        return ref

    def get_artifact(self, ref: str) -> bytes:
        row = self._one("SELECT data FROM artifacts WHERE ref = ?", (ref,))
        if row is None:
            raise ArtifactNotFound(f"no artifact {ref!r}")
        return bytes(row[0])

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    # ------------------------------------------------------------------ helpers

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Cursor]:
        with self._lock:
            cur = self._conn.cursor()
            try:
                cur.execute("BEGIN IMMEDIATE")
                yield cur
                cur.execute("COMMIT")
            except BaseException as exc:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise StoreError(f"SQLite error on {self.path!r}: {exc}") from exc
                raise
            finally:
                cur.close()

    def _one(self, sql: str, args: tuple[Any, ...]) -> Any:
        rows = self._all(sql, args)
        return rows[0] if rows else None

    def _all(self, sql: str, args: tuple[Any, ...]) -> list[Any]:
        with self._lock:
            try:
                return self._conn.execute(sql, args).fetchall()
            except sqlite3.Error as exc:
                raise StoreError(f"SQLite error on {self.path!r}: {exc}") from exc


def _checkpoint(task_id: str, row: Any) -> Checkpoint:
    version, state, created_at = row
    return Checkpoint(task_id, version, json.loads(state), datetime.fromisoformat(created_at))
