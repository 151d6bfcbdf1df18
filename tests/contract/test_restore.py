"""The restore contract (``Store.restore``): every backend, sync and async."""

from __future__ import annotations

from pathlib import Path

import pytest

from skillstate.errors import StoreError, TaskExists, TaskNotFound
from skillstate.events import Event
from skillstate.store.base import Checkpoint, Store
from tests.contract.backends import Factory


def build(store: Store, task_id: str = "t", steps: int = 8) -> None:
    """A task with deltas and snapshots, a pruned prefix and three inbox messages."""
    state = {"task_id": task_id, "version": 1, "facts": {"notes": ["x" * 50]}}
    store.commit(task_id, 0, state, Event(task_id=task_id, version=1, actor="runtime", action={}))
    for version in range(2, steps + 1):
        note = f"note {version} " + "y" * 30
        patch = [
            {"op": "replace", "path": "/version", "value": version},
            {"op": "add", "path": "/facts/notes/-", "value": note},
        ]
        state = {**state, "version": version, "facts": {"notes": [*state["facts"]["notes"], note]}}
        event = Event(
            task_id=task_id, version=version, actor="policy", action={"n": version}, patch=patch
        )
        store.commit(task_id, version - 1, state, event)
    store.prune(task_id, keep_last=5)
    for n in range(3):
        store.post(task_id, "message", {"n": n})


def records(store: Store, task_id: str = "t") -> tuple[list[Checkpoint], list[Event], list]:
    points = [store.checkpoint(task_id, info.version) for info in store.checkpoints(task_id)]
    return points, store.events(task_id), store.inbox(task_id)


class TestRestore:
    def test_round_trip_loads_and_verifies_like_the_source(
        self, store: Store, backend: Factory, tmp_path: Path
    ) -> None:
        """Every kept version, every event (patches too) and the inbox come back equal."""
        build(store)
        points, events, inbox = records(store)
        other = backend(tmp_path / "other")
        try:
            assert other.restore("t", points, events, inbox) == points[-1].version
            assert other.load("t").state == store.load("t").state
            assert [i.version for i in other.checkpoints("t")] == [p.version for p in points]
            for point in points:
                assert other.checkpoint("t", point.version).state == point.state
            assert [e.model_dump() for e in other.events("t")] == [e.model_dump() for e in events]
            assert [(m.seq, m.kind, m.body) for m in other.inbox("t")] == [
                (m.seq, m.kind, m.body) for m in inbox
            ]
            assert other.lease("t") is None
            # It goes on like any task: the next commit and the next post follow on.
            head = other.load("t").state
            nxt = {**head, "version": head["version"] + 1}
            event = Event(task_id="t", version=nxt["version"], actor="user", action={})
            assert other.commit("t", head["version"], nxt, event) == nxt["version"]
            assert other.post("t", "message", {"n": 3}) == len(inbox) + 1
            assert "t" in other.tasks()
        finally:
            other.close()

    def test_an_existing_task_is_refused_unless_overwritten(self, store: Store) -> None:
        """TaskExists leaves the task as it was; overwrite replaces it whole."""
        build(store)
        points, events, _ = records(store)
        first = points[0].version
        early = [e for e in events if e.version <= first]
        with pytest.raises(TaskExists):
            store.restore("t", points[:1], early, [])
        assert store.load("t").version == points[-1].version
        assert len(store.inbox("t")) == 3
        store.restore("t", points[:1], early, [], overwrite=True)
        assert store.load("t").version == points[0].version
        assert store.inbox("t") == []
        assert [i.version for i in store.checkpoints("t")] == [points[0].version]

    def test_records_that_do_not_hold_together_write_nothing(self, store: Store) -> None:
        """A kept version without its event is a StoreError; the task stays absent."""
        build(store)
        points, _, _ = records(store)
        with pytest.raises(StoreError):
            store.restore("u", [], [], [])
        moved = [
            Checkpoint("u", p.version, {**p.state, "task_id": "u"}, p.created_at) for p in points
        ]
        with pytest.raises(StoreError):
            store.restore("u", moved, [], [])
        with pytest.raises(TaskNotFound):
            store.load("u")
        assert "u" not in store.tasks()
