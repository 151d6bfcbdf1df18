"""Reads of old versions and of the audit log do not parse the head's state."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skillstate.errors import StateCorrupted, StoreError, TaskNotFound
from skillstate.store.base import Store
from skillstate.store.files import FilesStore
from skillstate.store.sqlite import SQLiteStore
from tests.contract.test_store_contract import grow


@pytest.fixture(params=["sqlite", "files"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "sqlite":
        return SQLiteStore.from_url(f"sqlite:///{tmp_path / 'db.sqlite'}")
    return FilesStore.from_url(f"file://{tmp_path / 'files'}")


def _break_head_state(store: Store, task_id: str) -> None:
    """Make the head's state unparseable, keeping its version readable."""
    if isinstance(store, SQLiteStore):
        with store._tx() as cur:
            cur.execute("UPDATE tasks SET head = '{\"task_id\": ' WHERE task_id = ?", (task_id,))
        return
    assert isinstance(store, FilesStore)
    path = next(store.root.iterdir()) / "head.json"
    text = path.read_text()
    cut = text.index(',\n "state": ')
    path.write_text(text[:cut] + ',\n "state": {"task_id": }\n')


def test_old_versions_and_events_read_past_an_unparseable_head(store: Store) -> None:
    committed = grow(store, "t", 5)
    _break_head_state(store, "t")
    with pytest.raises(StateCorrupted):
        store.load("t")
    assert store.checkpoint("t", 3).state == committed[3]
    assert [e.version for e in store.events("t", since=3)] == [4, 5]
    assert store.events("t", since=5) == []
    with pytest.raises(StateCorrupted):
        store.checkpoint("t", 5)  # the head itself is still checked
    with pytest.raises(StoreError):
        store.checkpoint("t", 6)


def test_unknown_tasks_are_not_found(store: Store) -> None:
    grow(store, "t", 2)
    with pytest.raises(TaskNotFound):
        store.checkpoint("nope", 1)
    with pytest.raises(TaskNotFound):
        store.events("nope")
    assert store.events("t", since=2) == []


def test_a_hand_written_head_json_is_read_whole(tmp_path: Path) -> None:
    """Another layout than commits write: the version comes from a full parse, as before."""
    store = FilesStore.from_url(f"file://{tmp_path}")
    committed = grow(store, "t", 4)
    path = next(store.root.iterdir()) / "head.json"
    path.write_text(json.dumps(json.loads(path.read_text()), indent=2))
    assert store.checkpoint("t", 2).state == committed[2]
    assert [e.version for e in store.events("t", since=2)] == [3, 4]
    path.write_text("not json")
    with pytest.raises(StateCorrupted):
        store.checkpoint("t", 2)
