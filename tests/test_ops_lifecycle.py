"""Data lifecycle on every backend: delete (no trace, audited, trees), prune by age, gc."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from skillstate.audit import Identity
from skillstate.errors import ArtifactNotFound, TaskNotFound, UsageError
from skillstate.events import Event
from skillstate.ops.delete import delete_tasks, plan_deletion, select_tasks
from skillstate.ops.gc import collect
from skillstate.ops.refs import refs_in
from skillstate.ops.retention import plan_finished, prune_older_than
from skillstate.state.diff import make_patch
from skillstate.store.base import Store
from tests.contract import conftest as contract
from tests.contract.traces import traces

# The contract suite's fixtures: every backend, services skipped locally, data dropped.
backend_name = contract.backend_name
backend = contract.backend
store = contract.store
_drop_redis_data = contract._drop_redis_data
_drop_postgres_schemas = contract._drop_postgres_schemas

WHO = Identity(by="dpo@example.com", reason="privacy request #42")
PRIVATE = "zz-customer-address-9c1e"


@pytest.fixture
def sealed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sealing key for this test (sealed values and artifacts are encrypted)."""
    from skillstate.state.secrets import generate_key

    monkeypatch.setenv("SKILLSTATE_KEY", generate_key())


def card(task_id: str, version: int, **fields: Any) -> dict[str, Any]:
    return {"task_id": task_id, "version": version, "status": "running", **fields}


def write(store: Store, task_id: str, versions: int, **fields: Any) -> dict[str, Any]:
    """Commit ``versions`` versions of a card (each one rewrites ``note`` whole, so each
    version is stored as a snapshot and old ones can be pruned)."""
    previous: dict[str, Any] = {}
    for version in range(1, versions + 1):
        state = card(task_id, version, note=f"{version}:" + str(version) * 1500, **fields)
        event = Event(
            task_id=task_id,
            version=version,
            actor="runtime",
            action={"kind": "step"},
            patch=make_patch(previous, state) if previous else [],
        )
        store.commit(task_id, version - 1, state, event)
        previous = state
    return previous


def holders(store: Store, needle: str) -> list[str]:
    """Records whose stored JSON (head, events, inbox) mentions ``needle``."""
    found = []
    for head in store.heads():
        texts = [json.dumps(store.load(head.task_id, verify=False).state)]
        texts += [e.model_dump_json() for e in store.events(head.task_id)]
        texts += [json.dumps(m.body) for m in store.inbox(head.task_id)]
        if any(needle in t for t in texts):
            found.append(head.task_id)
    return found


class TestDelete:
    def test_leaves_no_trace(self, store: Store, sealed: None) -> None:
        """Every record, sealed value and own artifact goes; shared artifacts and the
        other task stay; the audit entry says who, why and how much, not what."""
        from skillstate.state.secrets import seal_text
        from skillstate.store.sealing import read_artifact, write_artifact

        token = seal_text("api_token", "hunter2-secret")
        assert token is not None
        assert token != "hunter2-secret"
        own = write_artifact(store, f"transcript of {PRIVATE}".encode())
        own_bytes = store.get_artifact(own)
        shared = write_artifact(store, b"a public price list")
        evidence = {"evidence": [own, shared], "api_token": token, "address": PRIVATE}
        write(store, "cust-1", 3, **evidence)
        store.post("cust-1", "message", {"text": PRIVATE})
        write(store, "other", 1, evidence=[shared])
        assert traces(store, PRIVATE)
        assert traces(store, token)

        plans = plan_deletion(store, ["cust-1"])
        assert [(p.task_id, p.versions) for p in plans] == [("cust-1", 3)]
        [done] = delete_tasks(store, plans, identity=WHO)

        assert done.found
        assert done.versions == 3
        assert done.messages == 1
        assert done.artifacts == [own]
        with pytest.raises(TaskNotFound):
            store.load("cust-1")
        with pytest.raises(ArtifactNotFound):
            store.get_artifact(own)
        assert read_artifact(store, shared) == b"a public price list"
        assert store.load("other").version == 1
        for needle in (PRIVATE, token, own_bytes[8:60].decode("ascii", "replace")):
            assert traces(store, needle) == [], needle
        assert holders(store, "cust-1") == ["skillstate:audit:deletions"]

        [entry] = store.events("skillstate:audit:deletions")
        assert entry.by == WHO.by
        assert entry.reason == WHO.reason
        assert entry.action["task"] == "cust-1"
        assert entry.action["versions"] == 3
        assert entry.action["artifacts"] == 1
        assert PRIVATE not in entry.model_dump_json()
        assert token not in entry.model_dump_json()

    def test_reason_is_required(self, store: Store) -> None:
        """Without a reason nothing is deleted and nothing recorded."""
        write(store, "t", 1)
        with pytest.raises(UsageError, match="reason"):
            delete_tasks(store, plan_deletion(store, ["t"]), identity=Identity(by="ops"))
        assert store.load("t").version == 1
        with pytest.raises(TaskNotFound):
            store.load("skillstate:audit:deletions")

    def test_refusals(self, store: Store) -> None:
        """Unknown ids, reserved records and tasks a worker holds are refused."""
        write(store, "held", 1)
        store.claim("held", "worker-1", 60)
        with pytest.raises(TaskNotFound):
            plan_deletion(store, ["missing"])
        with pytest.raises(UsageError, match="own records"):
            plan_deletion(store, ["skillstate:audit:deletions"])
        with pytest.raises(UsageError, match="held by worker"):
            plan_deletion(store, ["held"])

    def test_children(self, store: Store) -> None:
        """A parent with children is refused unless --children says delete or detach."""
        write(store, "parent", 1)
        write(store, "kid-a", 1, parent={"task_id": "parent", "version": 1, "name": "k"})
        write(store, "kid-b", 1, parent={"task_id": "parent", "version": 1, "name": "k"})
        with pytest.raises(UsageError, match="--children"):
            plan_deletion(store, ["parent"])

        detach = plan_deletion(store, ["parent"], children="detach")
        assert [p.task_id for p in detach] == ["parent"]
        [done] = delete_tasks(store, detach, identity=WHO)
        assert done.detached == ["kid-a", "kid-b"]
        assert store.load("kid-a").state["parent"] is None
        assert store.events("kid-a")[-1].action == {"kind": "detach", "parent": "parent"}

        write(store, "root", 1)
        write(store, "leaf", 1, parent={"task_id": "root", "version": 1, "name": "k"})
        tree = plan_deletion(store, ["root"], children="delete")
        assert [p.task_id for p in tree] == ["leaf", "root"]
        delete_tasks(store, tree, identity=WHO)
        assert sorted(store.tasks()) == ["kid-a", "kid-b", "skillstate:audit:deletions"]

    def test_select_by_filter(self, store: Store) -> None:
        """--status/--older-than/--agent select tasks; reserved records never."""
        write(store, "done-1", 1, agent="shop:agent")
        store.commit(
            "done-1",
            1,
            {**store.load("done-1").state, "version": 2, "status": "completed"},
            Event(task_id="done-1", version=2, actor="runtime", action={"kind": "finish"}),
        )
        write(store, "run-1", 1, agent="shop:agent")
        later = datetime.now(timezone.utc) + timedelta(days=31)
        assert select_tasks(store, status="completed") == ["done-1"]
        assert select_tasks(store, agent="shop:agent") == ["done-1", "run-1"]
        assert select_tasks(store, older_than=timedelta(days=30)) == []
        assert select_tasks(store, older_than=timedelta(days=30), now=later) == [
            "done-1",
            "run-1",
        ]


class TestFinishedRetention:
    def test_whole_finished_trees_only(self, store: Store) -> None:
        """Finished, old trees are planned children first; a finished parent with a
        running child is left out, with why."""
        link = {"task_id": "p1", "version": 1, "name": "k"}
        write(store, "p1", 1, status="completed")
        write(store, "c1", 1, status="failed", parent=link)
        write(store, "p2", 1, status="cancelled")
        write(store, "c2", 1, parent={**link, "task_id": "p2"})  # still running
        write(store, "alone", 1)
        later = datetime.now(timezone.utc) + timedelta(days=91)
        plans, skipped = plan_finished(store, timedelta(days=90), now=later)
        assert [p.task_id for p in plans] == ["c1", "p1"]
        assert list(skipped) == ["p2"]
        assert "'c2'" in skipped["p2"]
        assert plan_finished(store, timedelta(days=90)) == ([], {})


class TestPruneOlderThan:
    def test_drops_only_old_checkpoints(self, store: Store) -> None:
        """Versions committed before the cut go; newer ones, the head and events stay."""
        write(store, "t", 3)
        cut = _after_clock_moves()
        head = write_more(store, "t", 3, 6)
        result = prune_older_than(
            store, ["t"], older_than=timedelta(days=30), now=cut + timedelta(days=30)
        )
        [pruned] = result
        assert pruned.deleted == [1, 2, 3]
        assert [c.version for c in store.checkpoints("t")] == [4, 5, 6]
        assert store.checkpoint("t", 4).state["version"] == 4
        assert store.load("t").state == head
        assert [e.version for e in store.events("t")] == [1, 2, 3, 4, 5, 6]

    def test_keep_last_and_head(self, store: Store) -> None:
        """Everything old: --keep-last N still keeps the newest N (the head at least)."""
        write(store, "t", 4)
        far = datetime.now(timezone.utc) + timedelta(days=365)
        [one] = prune_older_than(store, ["t"], older_than=timedelta(days=1), now=far)
        assert [c.version for c in store.checkpoints("t")] == [4]
        assert one.deleted == [1, 2, 3]
        write_more(store, "t", 4, 7)
        prune_older_than(store, ["t"], older_than=timedelta(days=1), now=far, keep_last=2)
        assert [c.version for c in store.checkpoints("t")] == [6, 7]


class TestGarbageCollection:
    def test_removes_only_unreferenced(self, store: Store) -> None:
        """Refs in a card, an old version, an event, an inbox message or a reserved
        record keep an artifact; the rest is removed."""
        in_card = store.put_artifact(b"in the card")
        in_old = store.put_artifact(b"in version 1 only")
        in_event = store.put_artifact(b"in an event")
        in_inbox = store.put_artifact(b"in a message")
        in_memory = store.put_artifact(b"in a memory record")
        orphan = store.put_artifact(b"nobody's")
        write(store, "t", 1, evidence=[in_old])
        state = card("t", 2, evidence=[in_card])
        store.commit(
            "t",
            1,
            state,
            Event(
                task_id="t",
                version=2,
                actor="runtime",
                action={"kind": "step", "saw": in_event},
                patch=make_patch(store.load("t").state, state),
            ),
        )
        store.post("t", "message", {"attachment": in_inbox})
        write(store, "skillstate:memory:agent:x", 1, facts={"f1": {"value": in_memory}})

        dry = collect(store, grace=timedelta(0), dry_run=True)
        assert dry.removed == [orphan]
        assert store.get_artifact(orphan) == b"nobody's"
        done = collect(store, grace=timedelta(0), now=_after_clock_moves())
        assert done.removed == [orphan]
        assert done.referenced == 5
        with pytest.raises(ArtifactNotFound):
            store.get_artifact(orphan)
        for ref in (in_card, in_old, in_event, in_inbox, in_memory):
            assert store.get_artifact(ref)

    def test_keeps_an_artifact_put_during_the_sweep(self, store: Store) -> None:
        """A writer that puts a candidate again and commits a reference to it between
        mark and sweep keeps it; the other candidate goes."""
        raced = store.put_artifact(b"about to be referenced")
        other = store.put_artifact(b"really unused")
        cut = _after_clock_moves()
        seen: list[list[str]] = []

        def writer(candidates: list[str]) -> None:
            seen.append(list(candidates))
            assert store.put_artifact(b"about to be referenced") == raced
            write(store, "late", 1, evidence=[raced])

        done = collect(store, grace=timedelta(0), now=cut, before_sweep=writer)
        assert seen == [sorted([raced, other])], "the race must hit a candidate"
        assert done.removed == [other]
        assert done.recent == [raced]
        assert store.get_artifact(raced) == b"about to be referenced"
        assert raced in set(refs_in(store.load("late").state))
        # The next run sees the reference and keeps it for that reason.
        again = collect(store, grace=timedelta(0), now=_after_clock_moves())
        assert again.removed == []
        assert again.referenced == 1

    def test_grace_keeps_recent(self, store: Store) -> None:
        """An unreferenced artifact put within the grace period stays."""
        ref = store.put_artifact(b"just put")
        done = collect(store, grace=timedelta(hours=1))
        assert done.recent == [ref]
        assert done.removed == []
        assert store.get_artifact(ref) == b"just put"


def write_more(store: Store, task_id: str, after: int, until: int) -> dict[str, Any]:
    previous = store.load(task_id).state
    for version in range(after + 1, until + 1):
        state = card(task_id, version, note=f"{version}:" + str(version) * 1500)
        store.commit(
            task_id,
            version - 1,
            state,
            Event(
                task_id=task_id,
                version=version,
                actor="runtime",
                action={"kind": "step"},
                patch=make_patch(previous, state),
            ),
        )
        previous = state
    return previous


def _after_clock_moves() -> datetime:
    """A time after every put so far, once the clock has passed it (no fixed sleep)."""
    cut = datetime.now(timezone.utc) + timedelta(milliseconds=5)
    while datetime.now(timezone.utc) <= cut + timedelta(milliseconds=5):
        pass
    return cut
