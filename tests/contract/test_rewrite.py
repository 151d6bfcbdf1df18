"""The Store contract, continued: ``rewrite``, ``artifact_refs`` and ``replace_artifact``.

Every backend must pass every test here, unchanged. ``rewrite`` applies a function
to every stored body of a task (head, kept snapshots, kept patches, events) and
must leave a task that loads, verifies and audits exactly as the old one did, with
the function applied: the same versions, the same snapshot/delta layout, the same
events in the same order.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from skillstate.engine.doctor import diagnose
from skillstate.errors import ArtifactNotFound, StaleState, StateCorrupted, TaskNotFound
from skillstate.events import Event
from skillstate.state.diff import make_patch
from skillstate.store.base import Store
from skillstate.store.chain import dumps
from tests.contract.damage import Damage
from tests.contract.test_store_contract import commit, doc, event, snapshot

OLD, NEW = "OLD", "NEW"


def swap(value: Any) -> Any:
    """A leaf-wise rewrite, pure: every ``OLD`` in a string becomes ``NEW``."""
    if isinstance(value, str):
        return value.replace(OLD, NEW)
    if isinstance(value, list):
        return [swap(item) for item in value]
    if isinstance(value, dict):
        return {key: swap(item) for key, item in value.items()}
    return value


def build(store: Store, task_id: str = "t", versions: int = 24) -> dict[int, dict[str, Any]]:
    """A task whose marked strings sit in snapshots, deltas, the head and events.

    Every third version's event carries no patch (the store snapshots it); the
    token changes every fourth version (its patch carries the marked string), the
    other deltas do not touch it (only the chain before them holds it).
    """
    committed: dict[int, dict[str, Any]] = {}
    previous: dict[str, Any] = {}
    for v in range(1, versions + 1):
        token = f"tok-{OLD}-{v // 4}"
        state = doc(
            task_id,
            v,
            token=token,
            facts={"n": v, "note": "plain text", "nested": [{"k": f"{OLD}-{v // 6}"}]},
            log=[*previous.get("log", []), f"step {v}"],
        )
        patch = [] if v % 3 == 0 else make_patch(previous, state)
        action = {"kind": "test", "arg": f"{OLD}-event" if v % 2 else "plain"}
        step = Event(task_id=task_id, version=v, actor="runtime", action=action, patch=patch)
        store.commit(task_id, v - 1, state, step)
        committed[v] = state
        previous = state
    return committed


def expected_changes(store: Store, task_id: str) -> int:
    """How many bodies ``swap`` changes, counted through the protocol alone."""
    kept = {info.version: info for info in store.checkpoints(task_id)}
    count = int(OLD in dumps(store.load(task_id).state))
    for e in store.events(task_id):
        count += OLD in e.model_dump_json(exclude={"patch"}, exclude_none=True)
        if e.version in kept:
            count += bool(e.patch) and OLD in dumps(e.patch)
            if kept[e.version].snapshot:
                count += OLD in dumps(store.checkpoint(task_id, e.version).state)
    return count


def everything(store: Store, task_id: str) -> dict[str, Any]:
    """What the store says about a task, every kept version rebuilt (and so verified)."""
    infos = store.checkpoints(task_id)
    return {
        "head": store.load(task_id).state,
        "versions": {i.version: store.checkpoint(task_id, i.version).state for i in infos},
        "layout": [(i.version, i.snapshot, i.created_at) for i in infos],
        "events": [e.model_dump(mode="json") for e in store.events(task_id)],
    }


class TestRewrite:
    def test_applies_fn_to_every_body_and_keeps_the_layout(self, store: Store) -> None:
        """Head, every kept version and every event come back with fn applied; versions,
        snapshot/delta layout, timestamps and event order are the same; checksums verify."""
        build(store)
        store.prune("t", keep_last=5, keep_every=4)
        before = everything(store, "t")
        assert {i.snapshot for i in store.checkpoints("t")} == {True, False}
        count = expected_changes(store, "t")
        assert count > 10

        assert store.rewrite("t", 24, swap) == count

        after = everything(store, "t")  # rebuilds and verifies every kept version
        assert after["head"] == swap(before["head"])
        assert after["versions"] == swap(before["versions"])
        assert after["layout"] == before["layout"]
        assert after["events"] == swap(before["events"])
        assert OLD not in json.dumps(after, default=str)
        assert store.load("t").version == 24
        assert store.tasks() == ["t"]

    def test_doctor_finds_the_rewritten_task_healthy(self, store: Store) -> None:
        """The snapshots, the deltas (each event's patch) and the head still agree."""
        build(store)
        store.rewrite("t", 24, swap)
        report = diagnose(store, "t", None)
        assert report.findings == []
        assert report.checked == 24

    def test_fn_that_changes_nothing_writes_nothing(self, store: Store) -> None:
        build(store, versions=8)
        before = everything(store, "t")
        seen: list[Any] = []

        def identity(value: Any) -> Any:
            seen.append(value)
            return value

        assert store.rewrite("t", 8, identity) == 0
        assert store.rewrite("t", 8, lambda v: json.loads(json.dumps(v))) == 0  # equal copies
        assert everything(store, "t") == before
        assert len(seen) >= 1 + 8 + 8  # the head, each version's bodies, each event

    def test_twice_changes_nothing_the_second_time(self, store: Store) -> None:
        build(store, versions=10)
        assert store.rewrite("t", 10, swap) > 0
        after = everything(store, "t")
        assert store.rewrite("t", 10, swap) == 0
        assert everything(store, "t") == after

    def test_stale_when_the_head_moved(self, store: Store) -> None:
        """A rewrite planned against an older head raises StaleState and writes nothing."""
        build(store, versions=6)
        commit(store, "t", 7, token=f"tok-{OLD}")
        before = snapshot(store, "t")
        with pytest.raises(StaleState) as info:
            store.rewrite("t", 6, swap)
        assert (info.value.expected, info.value.actual) == (6, 7)
        assert snapshot(store, "t") == before

    def test_unknown_task(self, store: Store) -> None:
        with pytest.raises(TaskNotFound):
            store.rewrite("missing", 1, swap)
        assert store.tasks() == []

    def test_fn_that_raises_writes_nothing(self, store: Store) -> None:
        """An error half-way (after fn changed some bodies) leaves every body as it was."""
        build(store, versions=12)
        before = everything(store, "t")
        calls = 0

        def failing(value: Any) -> Any:
            nonlocal calls
            calls += 1
            if calls > 10:
                raise RuntimeError("boom")
            return swap(value)

        with pytest.raises(RuntimeError, match="boom"):
            store.rewrite("t", 12, failing)
        assert everything(store, "t") == before

    def test_damage_is_refused_and_nothing_is_written(self, store: Store, damage: Damage) -> None:
        """A body changed outside skillstate fails the rewrite as it fails a load."""
        committed = build(store, versions=12)
        edited = {**committed[1], "facts": {"forged": True}}
        damage.set_snapshot(store, "t", 1, dumps(edited))
        with pytest.raises(StateCorrupted, match="checksum"):
            store.rewrite("t", 12, swap)
        assert store.load("t").state == committed[12]  # the head was not rewritten

    def test_records_without_checksums_stay_without(self, store: Store, damage: Damage) -> None:
        committed = build(store, versions=9)
        damage.drop_checksums(store, "t")
        assert store.rewrite("t", 9, swap) > 0
        for version, state in committed.items():
            assert store.checkpoint("t", version).state == swap(state)
        assert store.load("t").state == swap(committed[9])

    def test_commits_go_on_after_a_rewrite(self, store: Store) -> None:
        """The next commit's delta applies to the rewritten head; every version rebuilds."""
        committed = build(store, versions=7)
        store.rewrite("t", 7, swap)
        head = store.load("t").state
        nxt = {**head, "version": 8, "facts": {"n": 8}}
        assert store.commit("t", 7, nxt, event("t", 8, patch=make_patch(head, nxt))) == 8
        assert store.checkpoint("t", 8).state == nxt
        assert store.checkpoint("t", 3).state == swap(committed[3])

    def test_leases_are_kept(self, store: Store) -> None:
        """A rewrite leaves the lease alone: the holder's fence still commits."""
        build(store, versions=3)
        lease = store.claim("t", "w1", 30)
        store.rewrite("t", 3, swap)
        after = store.lease("t")
        assert after is not None
        assert (after.worker, after.generation) == ("w1", lease.generation)
        head = store.load("t").state
        nxt = {**head, "version": 4}
        store.commit(
            "t", 3, nxt, event("t", 4, patch=make_patch(head, nxt)), fence=lease.generation
        )
        assert store.load("t").version == 4

    def test_other_tasks_are_untouched(self, store: Store) -> None:
        build(store, "a", versions=5)
        build(store, "b", versions=5)
        before = everything(store, "b")
        store.rewrite("a", 5, swap)
        assert everything(store, "b") == before
        assert store.tasks() == ["a", "b"]


class TestArtifacts:
    def test_refs_list_every_artifact(self, store: Store) -> None:
        assert store.artifact_refs() == []
        refs = {store.put_artifact(f"artifact {i}".encode()) for i in range(5)}
        store.put_artifact(b"artifact 0")  # idempotent: still one
        assert store.artifact_refs() == sorted(refs)

    def test_replace_keeps_the_ref(self, store: Store) -> None:
        """The bytes under a ref change; the ref, and every other artifact, stay."""
        first = store.put_artifact(b"first bytes")
        other = store.put_artifact(b"other bytes")
        store.replace_artifact(first, b"replaced bytes")
        assert store.get_artifact(first) == b"replaced bytes"
        assert store.get_artifact(other) == b"other bytes"
        assert store.artifact_refs() == sorted([first, other])
        # Refs are written once: storing the first bytes again keeps the replacement.
        assert store.put_artifact(b"first bytes") == first
        assert store.get_artifact(first) == b"replaced bytes"

    @pytest.mark.parametrize("ref", ["sha256:" + "0" * 64, "sha256:nothex", "../escape"])
    def test_replace_needs_an_existing_ref(self, store: Store, ref: str) -> None:
        with pytest.raises(ArtifactNotFound):
            store.replace_artifact(ref, b"data")
        assert store.artifact_refs() == []
