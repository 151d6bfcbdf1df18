"""Backend-specific behaviour beyond the contract: URLs, persistence, schema setup."""

from __future__ import annotations

from pathlib import Path

import pytest

from skillstate.errors import InvalidStoreURL
from skillstate.events import Event
from skillstate.store import DEFAULT_STORE_URL, default_store_url, open_store
from skillstate.store.memory import MemoryStore
from skillstate.store.sqlite import SQLiteStore


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
            assert store.schema_versions() == [1]
            store.close()

    def test_wal_mode(self, tmp_path: Path) -> None:
        """The database runs in WAL mode (readers never block the writer)."""
        store = SQLiteStore(tmp_path / "s.db")
        mode = store._conn.execute("PRAGMA journal_mode").fetchone()[0]
        assert mode == "wal"
        store.close()
