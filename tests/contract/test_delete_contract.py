"""The deletion contract (Store.delete_task, Store.delete_artifact) on every backend."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from skillstate.errors import ArtifactNotFound, StaleState, TaskNotFound
from skillstate.events import Event
from skillstate.state.diff import make_patch
from skillstate.store.base import Store
from tests.contract.test_store_contract import commit, doc, event
from tests.contract.traces import traces

MARKER = "zz-private-marker-7f3a"
"""A value only the deleted task holds: it must leave the store with it."""


def _grow(store: Store, task_id: str, versions: int) -> None:
    """Commit ``versions`` versions holding MARKER, large enough to be stored compressed."""
    previous = None
    for version in range(1, versions + 1):
        state = doc(task_id, version, note=f"{MARKER} {'x' * 2000} {version}")
        patch: list[Any] = make_patch(previous, state) if previous is not None else []
        store.commit(
            task_id,
            version - 1,
            state,
            Event(
                task_id=task_id,
                version=version,
                actor="runtime",
                action={"kind": "test", "why": MARKER},
                patch=patch,
            ),
        )
        previous = state


class TestDeleteTask:
    def test_every_record_goes(self, store: Store) -> None:
        """Head, versions, events, inbox and lease are gone; the other task is untouched."""
        _grow(store, "doomed", 4)
        store.post("doomed", "message", {"text": MARKER})
        store.claim("doomed", "w1", 60)
        store.release("doomed", "w1")
        commit(store, "kept", 1)
        assert traces(store, MARKER), "the scan must see the marker before the delete"

        assert store.delete_task("doomed") is True

        with pytest.raises(TaskNotFound):
            store.load("doomed")
        with pytest.raises(TaskNotFound):
            store.inbox("doomed")
        assert _or_missing(store.checkpoints, "doomed") == []
        assert _or_missing(store.events, "doomed") == []
        assert store.lease("doomed") is None
        assert store.tasks() == ["kept"]
        assert [h.task_id for h in store.heads()] == ["kept"]
        assert store.load("kept").version == 1
        assert traces(store, MARKER) == []
        assert traces(store, "doomed") == []

    def test_second_delete_finds_nothing(self, store: Store) -> None:
        """Deleting twice is harmless: the second call says there was nothing."""
        commit(store, "t", 1)
        assert store.delete_task("t") is True
        assert store.delete_task("t") is False
        assert store.delete_task("never") is False

    def test_task_can_be_created_again(self, store: Store) -> None:
        """After a delete, the id starts over at version 1 with no old history."""
        for version in (1, 2, 3):
            commit(store, "t", version)
        store.delete_task("t")
        commit(store, "t", 1)
        assert store.load("t").version == 1
        assert [e.version for e in store.events("t")] == [1]

    def test_stale_writer_cannot_resurrect(self, store: Store) -> None:
        """A writer that read the task before the delete commits nothing after it."""
        commit(store, "t", 1)
        store.delete_task("t")
        with pytest.raises(StaleState):
            store.commit("t", 1, doc("t", 2), event("t", 2))
        with pytest.raises(TaskNotFound):
            store.load("t")

    def test_artifacts_are_kept(self, store: Store) -> None:
        """Artifacts may be shared: delete_task never removes one."""
        ref = store.put_artifact(b"shared bytes")
        commit(store, "t", 1, evidence=[ref])
        store.delete_task("t")
        assert store.get_artifact(ref) == b"shared bytes"


class TestDeleteArtifact:
    def test_delete(self, store: Store) -> None:
        """An artifact deleted is gone; deleting it again, or a missing one, says False."""
        ref = store.put_artifact(b"bytes " + MARKER.encode())
        keep = store.put_artifact(b"other")
        assert store.delete_artifact(ref) is True
        with pytest.raises(ArtifactNotFound):
            store.get_artifact(ref)
        assert store.delete_artifact(ref) is False
        assert store.artifact_refs() == [keep]
        assert traces(store, MARKER) == []

    def test_grace_keeps_a_recent_put(self, store: Store) -> None:
        """With unused_since before the last put, the artifact stays."""
        before = datetime.now(timezone.utc) - timedelta(minutes=5)
        ref = store.put_artifact(b"fresh")
        assert store.delete_artifact(ref, unused_since=before) is False
        assert store.get_artifact(ref) == b"fresh"
        later = datetime.now(timezone.utc) + timedelta(minutes=5)
        assert store.delete_artifact(ref, unused_since=later) is True

    def test_a_second_put_refreshes(self, store: Store) -> None:
        """Putting bytes already stored counts as a put: a grace cut between the two keeps it."""
        ref = store.put_artifact(b"again")
        cut = _after_clock_moves()
        assert store.put_artifact(b"again") == ref
        assert store.delete_artifact(ref, unused_since=cut) is False
        assert store.get_artifact(ref) == b"again"


def _or_missing(read: Callable[[str], list[Any]], task_id: str) -> list[Any]:
    """What ``read`` lists for the task; a backend may say TaskNotFound instead of []."""
    try:
        return read(task_id)
    except TaskNotFound:
        return []


def _after_clock_moves() -> datetime:
    """A time strictly after now, once the clock has moved past it (no fixed sleep)."""
    cut = datetime.now(timezone.utc)
    while datetime.now(timezone.utc) <= cut + timedelta(milliseconds=20):
        pass
    return cut + timedelta(milliseconds=10)
