"""SQLite store: the embedded default. One file, WAL mode, stdlib ``sqlite3``.

URLs follow SQLAlchemy's convention: ``sqlite:///relative/path.db``,
``sqlite:////absolute/path.db``, ``sqlite:///:memory:``.

``commit`` runs in a ``BEGIN IMMEDIATE`` transaction: the write lock is taken
before the version is read, so two processes racing on one task serialize there
and the loser sees the new version and raises ``StaleState`` without writing.

WAL checkpoints (copying the log back into the database file, with an fsync)
would otherwise run inside whichever commit crosses the auto-checkpoint
threshold and stall it for milliseconds. Auto-checkpointing is off; a background
thread with its own connection checkpoints passively once the log has grown,
so commits only ever append to the log.

A database this store creates is private to its owner (``0600``, whatever the
umask; SQLite gives its ``-wal`` and ``-shm`` files the database's mode), and so
are the directories it creates for it (``0700``): states may hold personal data.

Schema 3 adds checksums (``tasks.digest`` for the head, ``versions.digest`` per
version) and lease fencing: ``leases.generation``, with ``worker`` NULL once the
lease is released (the row, and so the generation, stays). Schema 4 adds the
``inbox`` table (:meth:`~skillstate.store.base.Store.post`).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from skillstate.errors import (
    ArtifactNotFound,
    InvalidStoreURL,
    StaleState,
    StateCorrupted,
    StoreError,
    StoreNotFound,
    TaskNotFound,
)
from skillstate.events import Event, utcnow
from skillstate.store import sqlite_restore
from skillstate.store.base import (
    Checkpoint,
    CheckpointInfo,
    HeadInfo,
    InboxMessage,
    Lease,
    PruneResult,
    artifact_ref,
    check_task_id,
)
from skillstate.store.chain import (
    COMPRESS_FROM,
    DEFAULT_MAX_CHAIN,
    Row,
    chain_counters,
    check_chain_counters,
    check_fence,
    check_ttl,
    claim_generation,
    compress,
    decompress,
    encode_commit,
    held_lease,
    plan_prune,
    read_head,
    rebuild,
    repaired_generation,
    restore_event,
    salvage_lease,
    take_snapshot,
)
from skillstate.store.heads import head_info
from skillstate.store.inbox import encode_message, read_message
from skillstate.store.restoring import plan_restore
from skillstate.store.rewriting import Body, plan_rewrite

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
    (
        # Delta checkpoints: the head moves into the tasks row, and one row per
        # version holds its event and its checkpoint: a snapshot, or the patch from
        # the previous version. One row (not a checkpoint row and an event row) is
        # one b-tree insert per commit. A rowid table, because WITHOUT ROWID keeps at
        # most ~1 KB of a row in its page and spills the rest to overflow pages.
        # Bodies of 768 B or more are stored zlib-compressed (BLOB), smaller ones
        # as text. ``kept`` = 0 once pruned: the event stays, the checkpoint is gone.
        # Every version written by schema 1 was a full copy: each becomes a snapshot,
        # and its event keeps its patch inside its JSON (that still loads).
        2,
        """
        CREATE TABLE versions (
            task_id    TEXT NOT NULL,
            version    INTEGER NOT NULL,
            kept       INTEGER NOT NULL,
            snapshot   BLOB,
            patch      BLOB,
            event      BLOB NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (task_id, version)
        );
        INSERT INTO versions SELECT c.task_id, c.version, 1, c.state, NULL, e.event, c.created_at
            FROM checkpoints c JOIN events e ON e.task_id = c.task_id AND e.version = c.version;
        ALTER TABLE tasks ADD COLUMN head TEXT;
        ALTER TABLE tasks ADD COLUMN chain_len INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE tasks ADD COLUMN chain_bytes INTEGER NOT NULL DEFAULT 0;
        UPDATE tasks SET head = (SELECT state FROM checkpoints c
            WHERE c.task_id = tasks.task_id AND c.version = tasks.version);
        DROP TABLE checkpoints;
        DROP TABLE events;
        CREATE TABLE leases (
            task_id    TEXT PRIMARY KEY,
            worker     TEXT NOT NULL,
            expires_at REAL NOT NULL
        );
        """,
    ),
    (
        # Checksums: the head's, and each version's (the state it is, whether stored
        # as a snapshot or a delta); NULL for versions written before. Fencing: a
        # lease row keeps its generation after a release, which sets worker to NULL
        # (so the table is rebuilt: worker was NOT NULL). Leases held when this runs
        # keep their holder, with generation 0.
        3,
        """
        ALTER TABLE tasks ADD COLUMN digest TEXT;
        ALTER TABLE versions ADD COLUMN digest TEXT;
        CREATE TABLE leases_v3 (
            task_id    TEXT PRIMARY KEY,
            worker     TEXT,
            expires_at REAL NOT NULL,
            generation INTEGER NOT NULL DEFAULT 0
        );
        INSERT INTO leases_v3 (task_id, worker, expires_at) SELECT task_id, worker, expires_at
            FROM leases;
        DROP TABLE leases;
        ALTER TABLE leases_v3 RENAME TO leases;
        """,
    ),
    (
        # The inbox: messages posted to a task beside its card (Store.post), numbered
        # per task from 1. A post reads max(seq) and inserts in one BEGIN IMMEDIATE
        # transaction, so concurrent posts take turns and never share a number.
        4,
        """
        CREATE TABLE inbox (
            task_id   TEXT NOT NULL,
            seq       INTEGER NOT NULL,
            kind      TEXT NOT NULL,
            body      TEXT NOT NULL,
            posted_at TEXT NOT NULL,
            PRIMARY KEY (task_id, seq)
        );
        """,
    ),
)

_WAL_CHECKPOINT_BYTES = 4 * 1024 * 1024
"""Checkpoint the WAL in the background once it is this large."""

# Store.heads in one statement: each head's summary fields are extracted by SQLite's
# JSON functions (a JSON array of the summary values), so Python never parses a whole
# head. A head those functions do not take as a JSON object comes back whole instead
# (``CASE`` stops at the first match, so a malformed head is never passed to
# json_type or json_extract, which would fail the statement), and Python reports why.
_HEADS = """
    SELECT task_id, version, updated_at, summary, CASE WHEN summary IS NULL THEN head END,
           has_lease, worker, expires_at, generation
    FROM (
        SELECT t.task_id, t.version, t.updated_at, t.head,
               CASE WHEN typeof(t.head) IS NOT 'text' THEN NULL
                    WHEN NOT json_valid(t.head) THEN NULL
                    WHEN json_type(t.head) IS NOT 'object' THEN NULL
                    ELSE json_extract(t.head, '$.status', '$.current_step', '$.agent',
                                      '$.steps_taken', '$.usage.prompt', '$.usage.completion',
                                      '$.wait.deadline', '$.parent.task_id')
               END AS summary,
               l.task_id IS NOT NULL AS has_lease, l.worker, l.expires_at, l.generation
        FROM tasks t LEFT JOIN leases l ON l.task_id = t.task_id
    )
    ORDER BY task_id
"""


class SQLiteStore:
    """A store in one SQLite file (or in memory)."""

    def __init__(
        self,
        path: str | Path,
        *,
        url: str | None = None,
        max_chain: int = DEFAULT_MAX_CHAIN,
        synchronous: str = "normal",
        create: bool = True,
    ) -> None:
        """Open (and with ``create``, first create) the database at ``path``.

        ``create=False`` opens only a store that exists: a missing file, or a file
        without a store's tables (an empty one), is ``StoreNotFound`` and nothing is
        created or written (not even the WAL mode) until the file is known to hold a
        store; one that does is upgraded like any other.
        """
        self.path = str(path)
        self.url = url or f"sqlite:///{self.path}"
        self.max_chain = max_chain
        if synchronous.lower() not in {"normal", "full"}:
            raise InvalidStoreURL(f"synchronous must be normal or full, got {synchronous!r}")
        try:
            if self.path == ":memory:":
                self._conn = _connect(self.path, synchronous.upper())
            elif create:
                _create_private(Path(self.path))
                self._conn = _connect(self.path, synchronous.upper())
            else:
                self._conn = _open_existing(self.path, self.url, synchronous.upper())
        except (OSError, sqlite3.Error) as exc:
            # A path that cannot hold a database is bad input, not a backend fault.
            raise InvalidStoreURL(f"cannot open SQLite database {self.path!r}: {exc}") from exc
        self._lock = threading.RLock()
        self._closed = False
        self.setup()
        self._checkpointer: _WalCheckpointer | None = None
        if self.path != ":memory:":
            self._checkpointer = _WalCheckpointer(self.path)

    @classmethod
    def from_url(cls, url: str, *, create: bool = True) -> SQLiteStore:
        """``sqlite:///path.db``; ``?synchronous=full`` also survives power loss (slower)."""
        rest, _, query = url.split("://", 1)[1].partition("?")
        path = rest[1:] if rest.startswith("/") else rest
        if not path:
            raise InvalidStoreURL(f"{url!r} names no database file (try sqlite:///state.db)")
        try:
            options = dict(parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query)))
        except ValueError as exc:
            raise InvalidStoreURL(f"malformed SQLite URL {url!r}: {exc}") from exc
        unknown = set(options) - {"synchronous"}
        if unknown:
            raise InvalidStoreURL(f"unknown SQLite URL option(s): {', '.join(sorted(unknown))}")
        return cls(path, url=url, synchronous=options.get("synchronous", "normal"), create=create)

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
        return [row[0] for row in self._all("SELECT version FROM schema_migrations", ())]

    # ------------------------------------------------------------------ protocol

    def load(self, task_id: str, *, verify: bool = True) -> Checkpoint:
        check_task_id(task_id)
        row = self._one(
            "SELECT version, head, updated_at, digest, chain_len, chain_bytes FROM tasks "
            "WHERE task_id = ?",
            (task_id,),
        )
        if row is None:
            raise TaskNotFound(task_id)
        version, head, updated_at, checksum, chain_len, chain_bytes = row
        if not isinstance(version, int) or isinstance(head, bytes | None):
            raise StateCorrupted(task_id, None, "the task row has no valid version and head")
        if verify:
            check_chain_counters(task_id, version, chain_len, chain_bytes)
        state = read_head(task_id, version, head, checksum, verify=verify)
        return Checkpoint(task_id, version, state, _time(task_id, version, updated_at))

    def commit(
        self,
        task_id: str,
        expected_version: int,
        state: Mapping[str, Any],
        event: Event,
        *,
        fence: int | None = None,
    ) -> int:
        enc = encode_commit(task_id, expected_version, state, event, fence=fence)
        now = utcnow().isoformat()
        # take_snapshot with an empty chain says whether the snapshot is forced; the
        # rest of its rule needs the chain counters, so it runs in the UPDATE itself
        # (SET expressions see the row before the update), keeping the version check,
        # the decision and the write one statement.
        with self._tx() as cur:
            # The head's counters and the lease in one statement (a row even when the
            # task or the lease does not exist yet).
            task, head, chain_len, chain_bytes, leased, worker, generation = cur.execute(
                "SELECT t.task_id, t.version, t.chain_len, t.chain_bytes, "
                "l.task_id, l.worker, l.generation "
                "FROM (SELECT ? AS id) AS k LEFT JOIN tasks AS t ON t.task_id = k.id "
                "LEFT JOIN leases AS l ON l.task_id = k.id",
                (task_id,),
            ).fetchone()
            check_fence(task_id, enc.fence, *((worker, generation) if leased else (None, 0)))
            if task is None:
                head, chain_len, chain_bytes = 0, 0, 0
            if head != enc.expected:
                raise StaleState(task_id, enc.expected, head)
            # Counters damaged outside skillstate: a snapshot, which resets them.
            counters = chain_counters(chain_len, chain_bytes)
            snapshot = counters is None or take_snapshot(*counters, enc, self.max_chain)
            if snapshot:
                chain_len, chain_bytes = 0, 0
            else:
                chain_len, chain_bytes = chain_len + 1, chain_bytes + len(enc.patch or "")
            cur.execute(
                "INSERT INTO tasks "
                "(task_id, version, updated_at, head, chain_len, chain_bytes, digest) "
                "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (task_id) DO UPDATE SET "
                "version = excluded.version, updated_at = excluded.updated_at, "
                "head = excluded.head, chain_len = excluded.chain_len, "
                "chain_bytes = excluded.chain_bytes, digest = excluded.digest",
                (task_id, enc.version, now, enc.state, chain_len, chain_bytes, enc.digest),
            )
            cur.execute(
                "INSERT INTO versions "
                "(task_id, version, kept, snapshot, patch, event, created_at, digest) "
                "VALUES (?, ?, 1, ?, ?, ?, ?, ?)",
                (
                    task_id,
                    enc.version,
                    _pack(enc.state) if snapshot else None,
                    _pack(enc.patch),
                    _pack(enc.event),
                    now,
                    enc.version_digest,
                ),
            )
        return enc.version

    def checkpoint(self, task_id: str, version: int) -> Checkpoint:
        # The head's version only (its state is not parsed: an old version does not need
        # it, and a damaged head must not hide the versions before it).
        check_task_id(task_id)
        found = self._one("SELECT version FROM tasks WHERE task_id = ?", (task_id,))
        if found is None:
            raise TaskNotFound(task_id)
        if not isinstance(found[0], int):
            raise StateCorrupted(task_id, None, "the task row has no valid version and head")
        if version == found[0]:
            return self.load(task_id)
        rows = [
            Row(
                v,
                _unpack(task_id, v, snapshot),
                _unpack(task_id, v, patch),
                _time(task_id, v, created),
                checksum,
            )
            for v, snapshot, patch, created, checksum in self._all(
                "SELECT version, snapshot, patch, created_at, digest FROM versions "
                "WHERE task_id = ? AND kept AND version <= ? AND version >= (SELECT MAX(version) "
                "FROM versions WHERE task_id = ? AND kept AND version <= ? "
                "AND snapshot IS NOT NULL) ORDER BY version",
                (task_id, version, task_id, version),
            )
        ]
        if not rows or rows[-1].version != version:
            if self._one(
                "SELECT 1 FROM versions WHERE task_id = ? AND version = ? AND kept",
                (task_id, version),
            ):
                rows = []  # the version is kept but nothing it depends on is: rebuild says so
            else:
                raise StoreError(f"task {task_id!r} has no checkpoint at version {version}")
        return Checkpoint(task_id, version, rebuild(task_id, version, rows), rows[-1].created_at)

    def checkpoints(self, task_id: str) -> list[CheckpointInfo]:
        check_task_id(task_id)
        rows = self._all(
            "SELECT version, snapshot IS NOT NULL, "
            "length(CAST(coalesce(snapshot, patch, '') AS BLOB)), created_at "
            "FROM versions WHERE task_id = ? AND kept ORDER BY version",
            (task_id,),
        )
        if not rows:
            self.load(task_id, verify=False)  # TaskNotFound for an unknown task
        return [
            CheckpointInfo(task_id, v, _time(task_id, v, created), bool(snap), size)
            for v, snap, size, created in rows
        ]

    def events(self, task_id: str, *, since: int = 0) -> list[Event]:
        check_task_id(task_id)
        rows = self._all(
            "SELECT version, event, patch FROM versions "
            "WHERE task_id = ? AND version > ? ORDER BY version",
            (task_id, since),
        )
        if not rows and self._one("SELECT 1 FROM tasks WHERE task_id = ?", (task_id,)) is None:
            raise TaskNotFound(task_id)
        return [
            restore_event(task_id, _unpack(task_id, v, text) or "", _unpack(task_id, v, patch), v)
            for v, text, patch in rows
        ]

    def tasks(self) -> list[str]:
        return [row[0] for row in self._all("SELECT task_id FROM tasks ORDER BY task_id", ())]

    def heads(self) -> list[HeadInfo]:
        """One statement over ``tasks`` joined with ``leases`` (see ``_HEADS``)."""
        infos = []
        for row in self._all(_HEADS, ()):
            task_id, version, updated_at, summary, head, has_lease, *lease = row
            problem = None
            if summary is None and not isinstance(head, str):
                problem = "the task row has no valid version and head"
            infos.append(
                head_info(
                    task_id,
                    version,
                    head,
                    partial(_time, task_id, None, updated_at),
                    (lease[0], lease[1], lease[2]) if has_lease else None,
                    fields=json.loads(summary) if summary is not None else None,
                    problem=problem,
                )
            )
        return infos

    def prune(self, task_id: str, *, keep_last: int, keep_every: int | None = None) -> PruneResult:
        check_task_id(task_id)
        with self._tx() as cur:
            rows = cur.execute(
                "SELECT version, snapshot IS NOT NULL, created_at FROM versions "
                "WHERE task_id = ? AND kept ORDER BY version",
                (task_id,),
            ).fetchall()
            if not rows:
                raise TaskNotFound(task_id)
            infos = [
                CheckpointInfo(task_id, v, _time(task_id, v, c), bool(s), 0) for v, s, c in rows
            ]
            kept, deleted = plan_prune(task_id, infos, keep_last=keep_last, keep_every=keep_every)
            cur.executemany(
                "UPDATE versions SET kept = 0, snapshot = NULL, patch = NULL "
                "WHERE task_id = ? AND version = ?",
                [(task_id, v) for v in deleted],
            )
        return PruneResult(task_id, kept, deleted)

    def claim(self, task_id: str, worker: str, ttl: float) -> Lease:
        check_task_id(task_id)
        seconds = check_ttl(ttl)
        with self._tx() as cur:
            now = time.time()
            current, last = self._held(task_id, cur, now)
            generation = claim_generation(task_id, current, last, worker, _utc(now))
            cur.execute(
                "INSERT OR REPLACE INTO leases (task_id, worker, expires_at, generation) "
                "VALUES (?, ?, ?, ?)",
                (task_id, worker, now + seconds, generation),
            )
        return Lease(task_id, worker, _utc(now + seconds), generation)

    def release(self, task_id: str, worker: str) -> None:
        check_task_id(task_id)
        with self._tx() as cur:
            cur.execute(
                "UPDATE leases SET worker = NULL WHERE task_id = ? AND worker = ?",
                (task_id, worker),
            )

    def lease(self, task_id: str) -> Lease | None:
        check_task_id(task_id)
        row = self._one(
            "SELECT worker, expires_at, generation FROM leases WHERE task_id = ?", (task_id,)
        )
        return held_lease(task_id, *row)[0] if row else None

    def force_release(self, task_id: str) -> Lease | None:
        check_task_id(task_id)
        with self._tx() as cur:
            row = cur.execute(
                "SELECT worker, expires_at, generation FROM leases WHERE task_id = ?", (task_id,)
            ).fetchone()
            if row is None or row[0] is None:
                return None
            cur.execute(
                "UPDATE leases SET worker = NULL, generation = ? WHERE task_id = ?",
                (repaired_generation(row[2]), task_id),
            )
        return salvage_lease(task_id, *row)

    def put_artifact(self, data: bytes, *, media_type: str = "application/octet-stream") -> str:
        ref = artifact_ref(data)
        with self._tx() as cur:
            # created_at is the *last* put: gc spares an artifact put within its grace
            # period, so a writer that puts it again right before committing a
            # reference keeps it (skillstate.ops.gc).
            cur.execute(
                "INSERT INTO artifacts VALUES (?, ?, ?, ?) "
                "ON CONFLICT(ref) DO UPDATE SET created_at = excluded.created_at",
                (ref, media_type, sqlite3.Binary(data), utcnow().isoformat()),
            )
        return ref

    def get_artifact(self, ref: str) -> bytes:
        row = self._one("SELECT data FROM artifacts WHERE ref = ?", (ref,))
        if row is None:
            raise ArtifactNotFound(f"no artifact {ref!r}")
        return bytes(row[0])

    def rewrite(self, task_id: str, expected_version: int, fn: Callable[[Any], Any]) -> int:
        """One ``BEGIN IMMEDIATE`` transaction: reads, plans and writes under the write lock."""
        check_task_id(task_id)
        with self._tx() as cur:
            row = cur.execute(
                "SELECT version, head, digest FROM tasks WHERE task_id = ?", (task_id,)
            ).fetchone()
            if row is None:
                raise TaskNotFound(task_id)
            version, head, checksum = row
            if not isinstance(version, int) or isinstance(head, bytes | None):
                raise StateCorrupted(task_id, None, "the task row has no valid version and head")
            if version != expected_version:
                raise StaleState(task_id, expected_version, version)
            bodies: list[Body] = []
            events: dict[int, str] = {}
            for v, kept, snapshot, patch, text, digest in cur.execute(
                "SELECT version, kept, snapshot, patch, event, digest FROM versions "
                "WHERE task_id = ? ORDER BY version",
                (task_id,),
            ).fetchall():
                events[v] = _unpack(task_id, v, text) or ""
                if kept:
                    snap, body = _unpack(task_id, v, snapshot), _unpack(task_id, v, patch)
                    bodies.append(Body(v, snap, body, digest))
            plan = plan_rewrite(
                task_id,
                fn,
                version=version,
                head=head,
                head_digest=checksum,
                rows=bodies,
                events=events,
            )
            if plan.head is not None:
                cur.execute(
                    "UPDATE tasks SET head = ?, digest = ? WHERE task_id = ?",
                    (plan.head, plan.head_digest, task_id),
                )
            cur.executemany(
                "UPDATE versions SET snapshot = ?, patch = ?, digest = ? "
                "WHERE task_id = ? AND version = ?",
                [
                    (_pack(b.snapshot), _pack(b.patch), b.digest, task_id, b.version)
                    for b in plan.rows.values()
                ],
            )
            cur.executemany(
                "UPDATE versions SET event = ? WHERE task_id = ? AND version = ?",
                [(_pack(text), task_id, v) for v, text in plan.events.items()],
            )
        return plan.changed

    def artifact_refs(self) -> list[str]:
        return [row[0] for row in self._all("SELECT ref FROM artifacts ORDER BY ref", ())]

    def delete_task(self, task_id: str) -> bool:
        """One transaction over every table, with ``secure_delete`` on so the freed pages
        are zeroed, then the WAL truncated: the task's bytes leave the files too."""
        check_task_id(task_id)
        with self._erasing() as cur:
            cur.execute("DELETE FROM tasks WHERE task_id = ?", (task_id,))
            found = cur.rowcount > 0
            for table in ("versions", "leases", "inbox"):
                cur.execute(f"DELETE FROM {table} WHERE task_id = ?", (task_id,))
                found = found or cur.rowcount > 0
        return found

    def delete_artifact(self, ref: str, *, unused_since: datetime | None = None) -> bool:
        with self._erasing() as cur:
            row = cur.execute("SELECT created_at FROM artifacts WHERE ref = ?", (ref,)).fetchone()
            if row is None:
                return False
            if unused_since is not None and datetime.fromisoformat(row[0]) >= unused_since:
                return False
            cur.execute("DELETE FROM artifacts WHERE ref = ?", (ref,))
        return True

    @contextmanager
    def _erasing(self) -> Iterator[sqlite3.Cursor]:
        """A write transaction whose deleted rows leave the files: ``secure_delete`` zeroes
        the freed pages, and the WAL (which holds their old images) is truncated after."""
        with self._lock:
            self._conn.execute("PRAGMA secure_delete = ON")
            try:
                with self._tx() as cur:
                    yield cur
            finally:
                self._conn.execute("PRAGMA secure_delete = OFF")
                # Best effort: a reader on an old snapshot keeps the WAL until it ends.
                self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()

    def replace_artifact(self, ref: str, data: bytes) -> None:
        with self._tx() as cur:
            cur.execute("UPDATE artifacts SET data = ? WHERE ref = ?", (sqlite3.Binary(data), ref))
            if cur.rowcount == 0:
                raise ArtifactNotFound(f"no artifact {ref!r}")

    def post(self, task_id: str, kind: str, body: Mapping[str, Any]) -> int:
        text = encode_message(task_id, kind, body)
        with self._tx() as cur:
            if cur.execute("SELECT 1 FROM tasks WHERE task_id = ?", (task_id,)).fetchone() is None:
                raise TaskNotFound(task_id)
            (seq,) = cur.execute(
                "SELECT coalesce(max(seq), 0) + 1 FROM inbox WHERE task_id = ?", (task_id,)
            ).fetchone()
            cur.execute(
                "INSERT INTO inbox (task_id, seq, kind, body, posted_at) VALUES (?, ?, ?, ?, ?)",
                (task_id, seq, kind, text, utcnow().isoformat()),
            )
        return int(seq)

    def inbox(self, task_id: str, *, after: int = 0) -> list[InboxMessage]:
        check_task_id(task_id)
        # One statement: no row for an unknown task, one of NULLs when nothing is unread.
        rows = self._all(
            "SELECT i.seq, i.kind, i.body, i.posted_at FROM tasks t "
            "LEFT JOIN inbox i ON i.task_id = t.task_id AND i.seq > ? "
            "WHERE t.task_id = ? ORDER BY i.seq",
            (after, task_id),
        )
        if not rows:
            raise TaskNotFound(task_id)
        return [
            read_message(task_id, seq, kind, body, _time(task_id, None, at))
            for seq, kind, body, at in rows
            if seq is not None
        ]

    def restore(
        self,
        task_id: str,
        checkpoints: Sequence[Checkpoint],
        events: Sequence[Event],
        inbox: Sequence[InboxMessage],
        *,
        overwrite: bool = False,
    ) -> int:
        """One ``BEGIN IMMEDIATE`` transaction (:mod:`skillstate.store.sqlite_restore`)."""
        plan = plan_restore(task_id, checkpoints, events, inbox, max_chain=self.max_chain)
        with self._tx() as cur:
            sqlite_restore.write_plan(cur, plan, overwrite=overwrite, url=self.url, pack=_pack)
        return plan.version

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._checkpointer is not None:
                self._checkpointer.stop()
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

    @staticmethod
    def _held(task_id: str, cur: sqlite3.Cursor, now: float) -> tuple[Lease | None, int]:
        row = cur.execute(
            "SELECT worker, expires_at, generation FROM leases WHERE task_id = ?", (task_id,)
        ).fetchone()
        if row is None:
            return None, 0
        return held_lease(task_id, *row, now=now)

    def _one(self, sql: str, args: tuple[Any, ...]) -> Any:
        rows = self._all(sql, args)
        return rows[0] if rows else None

    def _all(self, sql: str, args: tuple[Any, ...]) -> list[Any]:
        with self._lock:
            try:
                return self._conn.execute(sql, args).fetchall()
            except sqlite3.Error as exc:
                raise StoreError(f"SQLite error on {self.path!r}: {exc}") from exc


_PRIVATE_FILE = 0o600
_PRIVATE_DIR = 0o700


def _create_private(path: Path) -> None:
    """Create the database file (and missing parent directories) owner-only.

    Only what this creates is changed: an existing database or directory keeps its
    mode. The file is created empty (SQLite takes an empty file as a new database),
    so SQLite never creates it with the umask's mode; its ``-wal`` and ``-shm`` files
    take the database's mode.
    """
    missing = [parent for parent in (path.parent, *path.parent.parents) if not parent.exists()]
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=_PRIVATE_DIR)
        except FileExistsError:
            continue
        os.chmod(directory, _PRIVATE_DIR)  # the umask may have taken bits off
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, _PRIVATE_FILE)
    except FileExistsError:
        return
    try:
        os.fchmod(fd, _PRIVATE_FILE)
    finally:
        os.close(fd)


def _open_existing(path: str, url: str, synchronous: str) -> sqlite3.Connection:
    """A connection to the store at ``path``; ``StoreNotFound`` when there is none.

    The file is opened read-write without ``O_CREAT`` (SQLite's ``mode=rw``), and is
    checked to hold a store's tables before :func:`_connect`'s pragmas run: on an
    empty file, switching to WAL mode would already write a database header.
    """
    if not os.path.exists(path):
        raise StoreNotFound(url)
    uri = Path(path).absolute().as_uri() + "?mode=rw"
    conn = sqlite3.connect(
        uri, uri=True, isolation_level=None, check_same_thread=False, timeout=30.0
    )
    try:
        found = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'"
        ).fetchone()
    except BaseException:
        conn.close()
        raise
    if found is None:
        conn.close()
        raise StoreNotFound(url, "the file holds no skillstate tables")
    _configure(conn, synchronous)
    return conn


def _connect(path: str, synchronous: str) -> sqlite3.Connection:
    # isolation_level=None: we issue BEGIN ourselves, so the lock mode is explicit.
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30.0)
    _configure(conn, synchronous)
    return conn


def _configure(conn: sqlite3.Connection, synchronous: str) -> None:
    conn.execute("PRAGMA busy_timeout=30000")
    conn.execute("PRAGMA journal_mode=WAL")
    # NORMAL (the default) is safe from corruption and from a killed process in WAL
    # mode; a power cut or OS crash may lose the last commits, never half of one.
    # FULL fsyncs every commit, for when even that is not acceptable.
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute("PRAGMA wal_autocheckpoint=0")


def _pack(text: str | None) -> str | bytes | None:
    # Long bodies as BLOB, short ones as TEXT: the column's type says which.
    if text is None or len(text) < COMPRESS_FROM:
        return text
    return compress(text)


def _unpack(task_id: str, version: int, value: str | bytes | None) -> str | None:
    if isinstance(value, bytes):
        return decompress(task_id, version, value)
    return value


def _utc(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, timezone.utc)


def _time(task_id: str, version: int | None, value: Any) -> datetime:
    """A stored ISO 8601 timestamp; one that does not read is ``StateCorrupted``."""
    try:
        return datetime.fromisoformat(value)
    except (TypeError, ValueError) as exc:
        raise StateCorrupted(task_id, version, f"bad timestamp {value!r}") from exc


class _WalCheckpointer:
    """Checkpoints the WAL off the commit path (see the module docstring)."""

    def __init__(self, path: str, *, interval: float = 0.25) -> None:
        self._path = path
        self._wal = path + "-wal"
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="skillstate-wal", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        conn: sqlite3.Connection | None = None
        try:
            while not self._stop.wait(self._interval):
                try:
                    if os.path.getsize(self._wal) < _WAL_CHECKPOINT_BYTES:
                        continue
                except OSError:
                    continue
                if conn is None:
                    conn = sqlite3.connect(self._path, isolation_level=None, timeout=30.0)
                # PASSIVE never waits for writers; a later pass finishes what this one left.
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        except sqlite3.Error:
            # Best effort: a failed background checkpoint leaves a longer WAL, never bad data.
            pass
        finally:
            if conn is not None:
                conn.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def run_now(self) -> None:
        """Checkpoint and truncate the WAL synchronously (benchmarks measure file sizes)."""
        conn = sqlite3.connect(self._path, isolation_level=None, timeout=30.0)
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()
