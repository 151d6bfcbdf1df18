"""The Store contract: every backend must pass every test here, unchanged."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from skillstate.errors import ArtifactNotFound, StaleState, StoreError, TaskNotFound
from skillstate.events import Event
from skillstate.store.base import Store
from tests.contract.backends import Factory


def doc(task_id: str, version: int, **extra: Any) -> dict[str, Any]:
    return {"task_id": task_id, "version": version, "facts": {}, **extra}


def event(task_id: str, version: int, **extra: Any) -> Event:
    return Event(
        task_id=task_id, version=version, actor="runtime", action={"kind": "test"}, **extra
    )


def commit(store: Store, task_id: str, version: int, **extra: Any) -> int:
    return store.commit(
        task_id, version - 1, doc(task_id, version, **extra), event(task_id, version)
    )


def snapshot(store: Store, task_id: str) -> tuple[Any, ...]:
    """Everything a commit could have changed, for "nothing was written" checks."""
    return (
        store.load(task_id).state,
        [c.state for c in store.checkpoints(task_id)],
        [e.model_dump() for e in store.events(task_id)],
    )


class TestLoadAndCommit:
    def test_unknown_task_raises_task_not_found(self, store: Store) -> None:
        """Loading a task that was never committed raises TaskNotFound."""
        with pytest.raises(TaskNotFound):
            store.load("missing")

    def test_first_commit_creates_version_one(self, store: Store) -> None:
        """Committing over version 0 creates the task at version 1."""
        assert commit(store, "t", 1) == 1
        head = store.load("t")
        assert head.version == 1
        assert head.state == doc("t", 1)

    def test_head_follows_commits(self, store: Store) -> None:
        """Each commit moves the head one version on."""
        for v in range(1, 6):
            commit(store, "t", v, facts={"n": v})
        head = store.load("t")
        assert head.version == 5
        assert head.state["facts"] == {"n": 5}

    def test_state_round_trips_unicode_and_nesting(self, store: Store) -> None:
        """Non-ASCII text and nested values come back exactly."""
        facts = {"工单": "网络故障", "nested": {"list": [1, 2.5, None, True]}, "emoji": "✓"}
        commit(store, "t", 1, facts=facts)
        assert store.load("t").state["facts"] == facts

    def test_loaded_state_is_a_copy(self, store: Store) -> None:
        """Mutating a loaded state does not change what is stored."""
        commit(store, "t", 1, facts={"a": 1})
        store.load("t").state["facts"]["a"] = 99
        assert store.load("t").state["facts"] == {"a": 1}


class TestCompareAndSet:
    def test_stale_version_raises_and_writes_nothing(self, store: Store) -> None:
        """A commit over an old version raises StaleState and changes nothing."""
        commit(store, "t", 1)
        commit(store, "t", 2)
        before = snapshot(store, "t")
        with pytest.raises(StaleState) as info:
            store.commit("t", 1, doc("t", 2, facts={"lost": True}), event("t", 2))
        assert (info.value.expected, info.value.actual) == (1, 2)
        assert snapshot(store, "t") == before

    def test_creating_an_existing_task_is_stale(self, store: Store) -> None:
        """Committing over version 0 when the task exists is a conflict."""
        commit(store, "t", 1)
        with pytest.raises(StaleState):
            store.commit("t", 0, doc("t", 1), event("t", 1))

    def test_version_mismatch_is_refused(self, store: Store) -> None:
        """The state and event must carry expected_version + 1."""
        commit(store, "t", 1)
        before = snapshot(store, "t")
        with pytest.raises(StoreError):
            store.commit("t", 1, doc("t", 3), event("t", 3))
        with pytest.raises(StoreError):
            store.commit("t", 1, doc("other", 2), event("t", 2))
        assert snapshot(store, "t") == before

    def test_unserializable_state_writes_nothing(self, store: Store) -> None:
        """A state that is not JSON is refused before anything is written."""
        commit(store, "t", 1)
        before = snapshot(store, "t")
        with pytest.raises(StoreError):
            store.commit("t", 1, doc("t", 2, facts={"bad": object()}), event("t", 2))
        assert snapshot(store, "t") == before

    def test_concurrent_writers_one_wins(self, store: Store) -> None:
        """Of many threads committing over the same version, exactly one succeeds."""
        commit(store, "t", 1)
        barrier = threading.Barrier(8)
        outcomes: list[str] = []
        lock = threading.Lock()

        def writer(n: int) -> None:
            barrier.wait()
            try:
                store.commit("t", 1, doc("t", 2, facts={"writer": n}), event("t", 2))
                result = "won"
            except StaleState:
                result = "stale"
            with lock:
                outcomes.append(result)

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(outcomes) == ["stale"] * 7 + ["won"]
        assert store.load("t").version == 2
        assert len(store.events("t")) == 2


class TestCheckpointsAndEvents:
    def test_every_version_is_a_checkpoint(self, store: Store) -> None:
        """Every committed version can be loaded back exactly."""
        for v in range(1, 5):
            commit(store, "t", v, facts={"n": v})
        assert [c.version for c in store.checkpoints("t")] == [1, 2, 3, 4]
        for v in range(1, 5):
            assert store.checkpoint("t", v).state["facts"] == {"n": v}

    def test_unknown_checkpoint(self, store: Store) -> None:
        """A missing version is a StoreError; a missing task is TaskNotFound."""
        commit(store, "t", 1)
        with pytest.raises(StoreError):
            store.checkpoint("t", 7)
        with pytest.raises(TaskNotFound):
            store.checkpoint("nope", 1)
        with pytest.raises(TaskNotFound):
            store.checkpoints("nope")

    def test_events_round_trip_in_order(self, store: Store) -> None:
        """Events come back equal, oldest first, and filtered by ``since``."""
        patch = [{"op": "replace", "path": "/facts", "value": {"x": 1}}]
        store.commit("t", 0, doc("t", 1), event("t", 1))
        sent = event("t", 2, patch=patch, skill="s", skill_version="3", view_tokens=12)
        store.commit("t", 1, doc("t", 2), sent)
        events = store.events("t")
        assert [e.version for e in events] == [1, 2]
        assert events[1] == sent
        assert [e.version for e in store.events("t", since=1)] == [2]

    def test_events_of_unknown_task(self, store: Store) -> None:
        """Asking for the events of an unknown task raises TaskNotFound."""
        with pytest.raises(TaskNotFound):
            store.events("nope")

    def test_tasks_are_listed_sorted(self, store: Store) -> None:
        """tasks() lists every task id once, sorted."""
        for task in ("b", "a", "c"):
            commit(store, task, 1)
        commit(store, "a", 2)
        assert store.tasks() == ["a", "b", "c"]


class TestArtifacts:
    def test_put_is_content_addressed_and_idempotent(self, store: Store) -> None:
        """The same bytes get the same sha256 ref, stored once."""
        ref = store.put_artifact(b"raw tool output", media_type="text/plain")
        assert ref.startswith("sha256:")
        assert store.put_artifact(b"raw tool output") == ref
        assert store.get_artifact(ref) == b"raw tool output"

    def test_binary_and_large_payloads(self, store: Store) -> None:
        """Arbitrary bytes, including large ones, come back intact."""
        data = bytes(range(256)) * 4096
        assert store.get_artifact(store.put_artifact(data)) == data

    def test_unknown_artifact(self, store: Store) -> None:
        """A ref never stored raises ArtifactNotFound."""
        with pytest.raises(ArtifactNotFound):
            store.get_artifact("sha256:" + "0" * 64)


class TestLifecycle:
    def test_close_twice_is_safe(self, backend: Factory, tmp_path: Path) -> None:
        """close() may be called more than once."""
        opened = backend(tmp_path)
        opened.close()
        opened.close()

    def test_store_has_a_url(self, store: Store) -> None:
        """Every store says where it is."""
        assert "://" in store.url
