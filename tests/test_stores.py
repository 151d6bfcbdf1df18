"""Backend-specific behaviour beyond the contract: URLs, persistence, schema setup."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from skillstate.errors import InvalidStoreURL, StateCorrupted
from skillstate.events import Event
from skillstate.store import DEFAULT_STORE_URL, default_store_url, open_store
from skillstate.store.memory import MemoryStore
from skillstate.store.sqlite import MIGRATIONS, SQLiteStore


def _commit(store: SQLiteStore, task_id: str) -> None:
    state = {"task_id": task_id, "version": 1}
    store.commit(task_id, 0, state, Event(task_id=task_id, version=1, actor="runtime", action={}))


class TestOpenStore:
    def test_memory_url(self) -> None:
        """memory:// opens an in-process store."""
        assert isinstance(open_store("memory://"), MemoryStore)

    def test_sqlite_relative_and_absolute(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """sqlite:///rel.db is relative to the cwd; sqlite:////abs.db is absolute."""
        monkeypatch.chdir(tmp_path)
        rel = open_store("sqlite:///sub/rel.db")
        assert isinstance(rel, SQLiteStore)
        assert (tmp_path / "sub" / "rel.db").exists()
        absolute = open_store(f"sqlite:///{tmp_path}/abs.db")
        assert (tmp_path / "abs.db").exists()
        rel.close()
        absolute.close()

    @pytest.mark.parametrize("url", ["bogus://x", "no-scheme", "sqlite://", "", "postgres"])
    def test_bad_urls_are_refused(self, url: str, monkeypatch: pytest.MonkeyPatch) -> None:
        """An unknown or empty URL raises InvalidStoreURL with a one-line message."""
        monkeypatch.setenv("SKILLSTATE_STORE", "bogus://env")
        with pytest.raises(InvalidStoreURL) as info:
            open_store(url)
        assert "\n" not in str(info.value)

    def test_default_comes_from_environment(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """$SKILLSTATE_STORE overrides the SQLite default."""
        monkeypatch.delenv("SKILLSTATE_STORE", raising=False)
        assert default_store_url() == DEFAULT_STORE_URL
        monkeypatch.setenv("SKILLSTATE_STORE", "memory://")
        assert default_store_url() == "memory://"


class TestSQLite:
    def test_state_survives_reopening(self, tmp_path: Path) -> None:
        """What one connection committed, a new one loads."""
        first = SQLiteStore(tmp_path / "s.db")
        _commit(first, "t")
        first.close()
        second = SQLiteStore(tmp_path / "s.db")
        assert second.load("t").version == 1
        second.close()

    def test_setup_is_idempotent_and_recorded(self, tmp_path: Path) -> None:
        """Opening the same file repeatedly applies each migration once."""
        for _ in range(3):
            store = SQLiteStore(tmp_path / "s.db")
            store.setup()
            assert store.schema_versions() == [v for v, _ in MIGRATIONS]
            store.close()

    def test_wal_mode(self, tmp_path: Path) -> None:
        """The database runs in WAL mode (readers never block the writer)."""
        store = SQLiteStore(tmp_path / "s.db")
        mode = store._conn.execute("PRAGMA journal_mode").fetchone()[0]
        assert mode == "wal"
        store.close()

    def test_schema_1_database_is_upgraded_in_place(self, tmp_path: Path) -> None:
        """A database written by schema 1 (full copies) loads and keeps working after upgrade."""
        path = tmp_path / "old.db"
        conn = sqlite3.connect(path)
        conn.executescript(MIGRATIONS[0][1])
        conn.execute(
            "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT)"
        )
        conn.execute("INSERT INTO schema_migrations VALUES (1, '2026-11-30T00:00:00+00:00')")
        at = "2026-11-30T00:00:00+00:00"
        for v in (1, 2):
            state = {"task_id": "t", "version": v, "facts": {"n": v}}
            event = Event(task_id="t", version=v, actor="runtime", action={"kind": "old"})
            conn.execute(
                "INSERT INTO checkpoints VALUES ('t', ?, ?, ?)", (v, json.dumps(state), at)
            )
            conn.execute("INSERT INTO events VALUES ('t', ?, ?)", (v, event.model_dump_json()))
        conn.execute("INSERT INTO tasks VALUES ('t', 2, ?)", (at,))
        conn.commit()
        conn.close()

        store = SQLiteStore(path)
        assert store.schema_versions() == [v for v, _ in MIGRATIONS]
        assert store.load("t").state["facts"] == {"n": 2}
        assert store.checkpoint("t", 1).state["facts"] == {"n": 1}
        assert [c.snapshot for c in store.checkpoints("t")] == [True, True]
        nxt = {"task_id": "t", "version": 3, "facts": {"n": 3}}
        store.commit("t", 2, nxt, Event(task_id="t", version=3, actor="runtime", action={}))
        assert store.load("t").state == nxt
        assert [e.version for e in store.events("t")] == [1, 2, 3]
        store.close()

    def test_broken_head_is_state_corrupted(self, tmp_path: Path) -> None:
        """A hand-broken head record raises StateCorrupted; nothing is overwritten."""
        store = SQLiteStore(tmp_path / "s.db")
        _commit(store, "t")
        store._conn.execute("UPDATE tasks SET head = '{not json' WHERE task_id = 't'")
        with pytest.raises(StateCorrupted) as info:
            store.load("t")
        assert "version 1" in str(info.value)
        assert store._conn.execute("SELECT head FROM tasks").fetchone()[0] == "{not json"
        store.close()

    def test_synchronous_option(self, tmp_path: Path) -> None:
        """?synchronous=full fsyncs every commit; unknown options are refused."""
        store = open_store(f"sqlite:///{tmp_path}/s.db?synchronous=full")
        assert isinstance(store, SQLiteStore)
        assert store._conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        store.close()
        for bad in ("?synchronous=sometimes", "?fast=1"):
            with pytest.raises(InvalidStoreURL):
                open_store(f"sqlite:///{tmp_path}/t.db{bad}")
