"""Every backend keeps who and why of a person's commit (``Event.by``, ``Event.reason``,
issue 29), reads events written without them unchanged, and ``doctor`` finds both kinds
of task healthy; the store's audit record (``skillstate:audit:NAME``) is committed with
the same compare-and-set.
"""

from __future__ import annotations

from skillstate.audit import Identity, acting, record
from skillstate.engine.doctor import diagnose
from skillstate.events import Event
from skillstate.state.diff import make_patch
from skillstate.store.base import Store


def _doc(version: int, **fields: object) -> dict[str, object]:
    return {"task_id": "t", "version": version, **fields}


def test_identity_round_trips_and_old_events_read_unchanged(store: Store) -> None:
    old = Event(task_id="t", version=1, actor="runtime", action={"kind": "create"})
    edited = Event(
        task_id="t",
        version=2,
        actor="human",
        action={"kind": "set", "writes": {"n": 1}},
        patch=make_patch(_doc(1), _doc(2, n=1)),
        by="ops-alice",
        reason="ticket #4711: customer asked",
    )
    store.commit("t", 0, _doc(1), old)
    store.commit("t", 1, _doc(2, n=1), edited)
    first, second = store.events("t")
    assert first == old
    assert (first.by, first.reason) == (None, None)
    assert second == edited
    assert (second.by, second.reason) == ("ops-alice", "ticket #4711: customer asked")
    report = diagnose(store, "t", None)
    assert report.healthy, report.findings
    assert store.checkpoint("t", 1).state == _doc(1)  # the chain replays as before


def test_the_audit_record_takes_one_version_per_change(store: Store) -> None:
    with acting(Identity(by="ops-bob", reason="key rotation")):
        assert record(store, "rekey", {"kind": "rekey", "tasks": 3}) == 1
    assert record(store, "rekey", {"kind": "rekey", "tasks": 1}, Identity(by="ops-carol")) == 2
    first, second = store.events("skillstate:audit:rekey")
    assert (first.by, first.reason, first.action["tasks"]) == ("ops-bob", "key rotation", 3)
    assert (second.by, second.reason, second.action["tasks"]) == ("ops-carol", None, 1)
    assert store.load("skillstate:audit:rekey").version == 2
    report = diagnose(store, "skillstate:audit:rekey", None)
    assert report.healthy, report.findings
