"""Stores that write files make them owner-only (states may hold personal data)."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from skillstate.events import Event
from skillstate.store.base import Store
from skillstate.store.files import FilesStore
from skillstate.store.sqlite import SQLiteStore


@pytest.fixture(params=[0o000, 0o022, 0o077, 0o277], ids=lambda mask: f"umask{mask:03o}")
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    """Run the test under this umask (restored after): modes must not depend on it."""
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _use(store: Store) -> None:
    store.commit(
        "t",
        0,
        {"task_id": "t", "version": 1},
        Event(task_id="t", version=1, actor="runtime", action={}),
    )
    store.claim("t", "w", 30)
    store.release("t", "w")
    store.put_artifact(b"raw output")


OPENERS: dict[str, Callable[[Path], Store]] = {
    "sqlite": lambda root: SQLiteStore(root / "state.db"),
    "files": lambda root: FilesStore(root / "files"),
}


@pytest.mark.parametrize("backend", sorted(OPENERS))
def test_everything_created_is_owner_only(backend: str, tmp_path: Path, umask: int) -> None:
    """Files 0600 and directories 0700, whatever the umask, down to the -wal and -shm."""
    root = tmp_path / "new" / "nested"
    store = OPENERS[backend](root)
    try:
        _use(store)
        made = sorted(p for p in tmp_path.rglob("*"))
        files = [p for p in made if p.is_file()]
        folders = [p for p in made if p.is_dir()]
        assert files, "the store wrote nothing?"
        if backend == "sqlite":
            names = {p.name for p in files}
            assert {"state.db", "state.db-wal", "state.db-shm"} <= names
        for path in files:
            assert _mode(path) == 0o600, (path, oct(_mode(path)))
        for path in folders:
            assert _mode(path) == 0o700, (path, oct(_mode(path)))
    finally:
        store.close()


def test_an_existing_directory_keeps_its_mode(tmp_path: Path) -> None:
    """A store directory the user made is left as it is; only what the store creates is private."""
    root = tmp_path / "shared"
    root.mkdir(mode=0o755)
    os.chmod(root, 0o755)
    store = FilesStore(root)
    _use(store)
    assert _mode(root) == 0o755
    assert _mode(root / "t") == 0o700
    assert _mode(root / "t" / "head.json") == 0o600
