"""The Store contract: every backend must pass every test here, unchanged."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from skillstate.errors import (
    ArtifactNotFound,
    LeaseHeld,
    StaleState,
    StoreError,
    TaskNotFound,
)
from skillstate.events import Event
from skillstate.state.diff import make_patch
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
        [store.checkpoint(task_id, c.version).state for c in store.checkpoints(task_id)],
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


def grow(store: Store, task_id: str, versions: int) -> dict[int, dict[str, Any]]:
    """Commit ``versions`` versions the way the runtime does (each with its real patch).

    The state grows every step (an appended log line) and rewrites a small field,
    so both snapshots and deltas occur. Returns every committed document.
    """
    committed: dict[int, dict[str, Any]] = {}
    previous: dict[str, Any] = {}
    for v in range(1, versions + 1):
        lines = [*previous.get("log", []), f"step {v}: " + "x" * (v % 7) + "状态"]
        state = doc(task_id, v, log=lines, facts={"n": v, "even": v % 2 == 0})
        store.commit(task_id, v - 1, state, event(task_id, v, patch=make_patch(previous, state)))
        committed[v] = state
        previous = state
    return committed


class TestDeltaCheckpoints:
    def test_every_version_rebuilds_exactly(self, store: Store) -> None:
        """With deltas stored, every version loads back equal to what was committed."""
        committed = grow(store, "t", 60)
        for v, state in committed.items():
            assert store.checkpoint("t", v).state == state
        assert store.load("t").state == committed[60]

    def test_most_versions_are_deltas(self, store: Store) -> None:
        """Checkpoints are not full copies: most versions are stored as small deltas."""
        grow(store, "t", 60)
        infos = store.checkpoints("t")
        assert [i.version for i in infos] == list(range(1, 61))
        assert infos[0].snapshot
        deltas = [i for i in infos if not i.snapshot]
        assert len(deltas) > len(infos) // 2
        head_size = len(str(store.load("t").state))
        assert all(i.size < head_size // 4 for i in deltas)

    def test_events_carry_their_patch(self, store: Store) -> None:
        """The audit log returns each event with the patch it was committed with."""
        grow(store, "t", 12)
        previous: dict[str, Any] = {}
        for e in store.events("t"):
            current = store.checkpoint("t", e.version).state
            assert e.patch == make_patch(previous, current)
            previous = current

    def test_commit_without_patch_is_snapshotted(self, store: Store) -> None:
        """A commit whose event has no usable patch still loads exactly."""
        grow(store, "t", 5)
        state = doc("t", 6, facts={"replaced": True})
        store.commit("t", 5, state, event("t", 6))
        assert store.checkpoint("t", 6).state == state
        assert store.checkpoints("t")[-1].snapshot
        store.commit("t", 6, doc("t", 7), event("t", 7, patch=make_patch(state, doc("t", 7))))
        assert store.checkpoint("t", 6).state == state
        assert store.checkpoint("t", 7).state == doc("t", 7)


class TestPrune:
    def test_keeps_head_last_and_every(self, store: Store) -> None:
        """prune keeps the head, the last N, every K-th, and whatever they rebuild from."""
        committed = grow(store, "t", 40)
        result = store.prune("t", keep_last=3, keep_every=10)
        kept = {i.version for i in store.checkpoints("t")}
        assert kept == set(result.kept)
        assert {10, 20, 30, 38, 39, 40} <= kept
        assert set(result.deleted) == set(range(1, 41)) - kept
        assert result.deleted, "a 40-step chain with deltas must free something"
        for v in kept:
            assert store.checkpoint("t", v).state == committed[v]
        for v in result.deleted:
            with pytest.raises(StoreError):
                store.checkpoint("t", v)

    def test_events_survive_and_commits_go_on(self, store: Store) -> None:
        """Pruning keeps every event and the task can keep committing."""
        committed = grow(store, "t", 25)
        store.prune("t", keep_last=1)
        assert [e.version for e in store.events("t")] == list(range(1, 26))
        head = committed[25]
        nxt = doc("t", 26, log=head["log"], facts={"after": "prune"})
        store.commit("t", 25, nxt, event("t", 26, patch=make_patch(head, nxt)))
        assert store.checkpoint("t", 26).state == nxt
        assert store.checkpoint("t", 25).state == head

    def test_prune_is_idempotent(self, store: Store) -> None:
        """A second prune with the same policy deletes nothing more."""
        grow(store, "t", 30)
        store.prune("t", keep_last=2, keep_every=7)
        again = store.prune("t", keep_last=2, keep_every=7)
        assert again.deleted == []

    def test_bad_arguments(self, store: Store) -> None:
        """keep_last < 1 is refused (the head is always kept); unknown tasks too."""
        grow(store, "t", 3)
        with pytest.raises(StoreError):
            store.prune("t", keep_last=0)
        with pytest.raises(TaskNotFound):
            store.prune("nope", keep_last=1)
        assert len(store.checkpoints("t")) == 3


class TestLeases:
    def test_claim_excludes_other_workers(self, store: Store) -> None:
        """A live lease makes another worker's claim fail with LeaseHeld."""
        lease = store.claim("t", "w1", 30)
        assert (lease.task_id, lease.worker) == ("t", "w1")
        with pytest.raises(LeaseHeld) as info:
            store.claim("t", "w2", 30)
        assert info.value.holder == "w1"

    def test_holder_renews(self, store: Store) -> None:
        """The holder may claim again; its lease is extended."""
        first = store.claim("t", "w1", 1)
        second = store.claim("t", "w1", 60)
        assert second.expires_at > first.expires_at

    def test_release_lets_others_in(self, store: Store) -> None:
        """After release another worker can claim; releasing someone else's lease is a no-op."""
        store.claim("t", "w1", 30)
        store.release("t", "w2")
        with pytest.raises(LeaseHeld):
            store.claim("t", "w2", 30)
        store.release("t", "w1")
        assert store.claim("t", "w2", 30).worker == "w2"

    def test_expired_lease_is_taken_over(self, store: Store) -> None:
        """When the holder stops renewing (it died), its lease expires and another takes over."""
        store.claim("t", "dead", 0.2)
        time.sleep(0.4)
        assert store.claim("t", "alive", 30).worker == "alive"
        with pytest.raises(LeaseHeld):
            store.claim("t", "dead", 30)


def test_unserializable_event_writes_nothing(store: Store) -> None:
    """An event that cannot be serialized (a lone surrogate) is a StoreError; nothing changes."""
    commit(store, "t", 1)
    before = snapshot(store, "t")
    with pytest.raises(StoreError):
        store.commit("t", 1, doc("t", 2), event("t", 2, error="bad \udcff text"))
    assert snapshot(store, "t") == before
