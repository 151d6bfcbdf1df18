"""``Store.rewrite`` backend by backend: how each keeps a task all-old or all-new.

The contract (``tests/contract/test_rewrite.py``) says what every backend does; this
checks the mechanism of each where it can be seen from outside: the files store's
folder exchange (the lock file shared across it, crash leftovers ignored then
swept, a failed exchange writing nothing) and the Redis store's WATCH (a commit
between the reads and EXEC makes the rewrite start again and find the head moved).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skillstate.errors import StaleState, StoreError
from skillstate.state.diff import make_patch
from skillstate.store import files_rewrite
from skillstate.store.files import FilesStore, task_dir_name
from skillstate.store.rewriting import plan_rewrite
from tests.contract.backends import drop_redis_data, redis_store
from tests.contract.test_rewrite import OLD, build, everything, swap
from tests.contract.test_store_contract import event


@pytest.fixture
def files(tmp_path: Path) -> Iterator[FilesStore]:
    store = FilesStore(tmp_path / "files")
    yield store
    store.close()


def leftovers(store: FilesStore) -> list[str]:
    return sorted(p.name for p in store.root.iterdir() if p.name.startswith(".rewrite-"))


class TestFilesExchange:
    def test_the_folder_is_swapped_and_the_lock_file_is_shared(self, files: FilesStore) -> None:
        """The task's folder is a new tree (the old one is gone), holding the same
        ``.lock`` inode, so a writer waiting on the old lock still excludes the others."""
        build(files, versions=8)
        folder = files.root / task_dir_name("t")
        lock, before = os.stat(folder / ".lock").st_ino, os.stat(folder).st_ino
        assert files.rewrite("t", 8, swap) > 0
        assert os.stat(folder).st_ino != before
        assert os.stat(folder / ".lock").st_ino == lock
        assert leftovers(files) == []
        assert files.tasks() == ["t"]

    def test_nothing_to_change_swaps_nothing(self, files: FilesStore) -> None:
        build(files, versions=4)
        folder = files.root / task_dir_name("t")
        before = os.stat(folder).st_ino
        assert files.rewrite("t", 4, lambda value: value) == 0
        assert os.stat(folder).st_ino == before

    def test_leftovers_of_a_crashed_rewrite_are_ignored_then_swept(self, files: FilesStore) -> None:
        """A kill before the exchange leaves an unfinished copy, after it the old tree:
        no task lists them, and the next rewrite of that task deletes its own."""
        build(files, "t", versions=4)
        build(files, "u", versions=4)
        tag = hashlib.sha256(task_dir_name("t").encode()).hexdigest()[:16]
        other = hashlib.sha256(task_dir_name("u").encode()).hexdigest()[:16]
        for name in (f".rewrite-{tag}-dead", f".rewrite-{other}-dead"):
            (files.root / name).mkdir()
            (files.root / name / "head.json").write_text('{"stale": "' + OLD + '"}')
        assert files.tasks() == ["t", "u"]
        files.rewrite("t", 4, swap)
        assert leftovers(files) == [f".rewrite-{other}-dead"]

    def test_a_failed_exchange_writes_nothing(
        self, files: FilesStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        build(files, versions=6)
        before = everything(files, "t")

        def refuse(first: Path, second: Path) -> None:
            raise StoreError("no exchange here")

        monkeypatch.setattr(files_rewrite, "exchange", refuse)
        with pytest.raises(StoreError, match="no exchange here"):
            files.rewrite("t", 6, swap)
        assert everything(files, "t") == before
        assert leftovers(files) == []

    def test_crashed_writers_leftovers_stay_out_of_the_new_tree(self, files: FilesStore) -> None:
        """A checkpoint file above the head, a temporary file and a torn event line (what
        a killed commit leaves) are not copied; the task goes on committing."""
        build(files, versions=5)
        folder = files.root / task_dir_name("t")
        (folder / "state_step_0006.yaml").write_text(f"leftover: {OLD}\n")
        (folder / ".head.json.123.tmp").write_text(OLD)
        with open(folder / "events.jsonl", "ab") as log:
            log.write(b'{"task_id": "t", "version": 6, "torn')
        files.rewrite("t", 5, swap)
        names = set(os.listdir(folder))
        assert "state_step_0006.yaml" not in names
        assert not any(name.endswith(".tmp") for name in names)
        assert (folder / "events.jsonl").read_bytes().endswith(b"\n")
        head = files.load("t").state
        nxt = {**head, "version": 6}
        files.commit("t", 5, nxt, event("t", 6, patch=make_patch(head, nxt)))
        assert files.checkpoint("t", 6).state == nxt
        assert [e.version for e in files.events("t")] == [1, 2, 3, 4, 5, 6]

    def test_exchange_swaps_two_folders(self, tmp_path: Path) -> None:
        (tmp_path / "a").mkdir()
        (tmp_path / "b").mkdir()
        (tmp_path / "a" / "f").write_text("a")
        (tmp_path / "b" / "f").write_text("b")
        files_rewrite.exchange(tmp_path / "a", tmp_path / "b")
        assert (tmp_path / "a" / "f").read_text() == "b"
        assert (tmp_path / "b" / "f").read_text() == "a"


@pytest.mark.services
class TestRedisWatch:
    def test_a_commit_between_the_reads_and_exec_makes_it_stale(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The rewrite read version 6; a commit lands before its EXEC: EXEC fails, the
        rewrite starts again, finds version 7 and writes nothing (StaleState)."""
        store = redis_store(tmp_path)
        other = redis_store(tmp_path)
        try:
            build(store, versions=6)
            real = plan_rewrite
            calls = 0

            def meddle(*args: Any, **kwargs: Any) -> Any:
                nonlocal calls
                calls += 1
                if calls == 1:
                    head = other.load("t").state
                    nxt = {**head, "version": 7}
                    other.commit("t", 6, nxt, event("t", 7, patch=make_patch(head, nxt)))
                return real(*args, **kwargs)

            monkeypatch.setattr("skillstate.store.redis_rewrite.plan_rewrite", meddle)
            with pytest.raises(StaleState):
                store.rewrite("t", 6, swap)
            assert calls == 1
            state = everything(store, "t")
            assert OLD in str(state["head"])
            assert state["head"]["version"] == 7
            assert store.checkpoint("t", 7).state == state["head"]
        finally:
            store.close()
            other.close()
            drop_redis_data()
