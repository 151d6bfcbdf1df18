"""Store.heads: every task's head summary and lease in one read, on every backend."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any

from skillstate.events import Event
from skillstate.store.base import HeadInfo, Store
from skillstate.store.chain import UNREADABLE_EXPIRY
from tests.contract.damage import Damage


def card(task_id: str, version: int = 1, **fields: Any) -> dict[str, Any]:
    base = {"status": "running", "current_step": "triage", "agent": "pkg.mod:agent"}
    return {"task_id": task_id, "version": version, "facts": {}, **base, **fields}


def commit(store: Store, task_id: str, version: int = 1, **fields: Any) -> None:
    event = Event(task_id=task_id, version=version, actor="runtime", action={"kind": "test"})
    store.commit(task_id, version - 1, card(task_id, version, **fields), event)


def by_id(store: Store) -> dict[str, HeadInfo]:
    return {head.task_id: head for head in store.heads()}


def test_empty_store_has_no_heads(store: Store) -> None:
    """A store without tasks lists nothing."""
    assert store.heads() == []


def test_heads_lists_every_task_sorted_with_its_fields(store: Store) -> None:
    """One entry per task, sorted like tasks(): version, commit time and card fields."""
    for task_id in ("b", "a", "工单-1", "c/d"):
        commit(store, task_id)
    commit(store, "a", 2, status="waiting_user", current_step="ask")
    heads = store.heads()
    assert [h.task_id for h in heads] == store.tasks()
    a = heads[0]
    assert (a.task_id, a.version, a.status, a.current_step, a.agent) == (
        "a",
        2,
        "waiting_user",
        "ask",
        "pkg.mod:agent",
    )
    for head in heads:
        loaded = store.load(head.task_id)
        assert head.version == loaded.version
        assert head.updated_at == loaded.created_at
        assert head.updated_at is not None
        assert head.updated_at.tzinfo is not None
        assert head.lease is None
        assert head.problem is None
        assert head.lease_problem is None


def test_missing_and_non_text_fields(store: Store) -> None:
    """A field the card lacks is None; a JSON value that is not text comes as JSON text."""
    commit(store, "t", status=3, current_step={"b": [1, None], "a": True}, agent=None)
    state = card("u")
    del state["status"], state["current_step"], state["agent"]
    event = Event(task_id="u", version=1, actor="runtime", action={"kind": "test"})
    store.commit("u", 0, state, event)
    heads = by_id(store)
    assert (heads["t"].status, heads["t"].current_step, heads["t"].agent) == (
        "3",
        '{"a": true, "b": [1, null]}',
        None,
    )
    assert (heads["u"].status, heads["u"].current_step, heads["u"].agent) == (None, None, None)


def test_heads_count_steps_and_tokens(store: Store) -> None:
    """steps_taken and the usage's prompt + completion tokens; None where the card has none."""
    commit(store, "used", steps_taken=7, usage={"prompt": 120, "completion": 30, "calls": 2})
    commit(store, "prompt-only", steps_taken=0, usage={"prompt": 5})
    commit(store, "old")  # a card without steps_taken or usage
    commit(store, "odd", steps_taken="7", usage={"prompt": True, "completion": 1.5})
    heads = by_id(store)
    assert (heads["used"].steps, heads["used"].tokens) == (7, 150)
    assert (heads["prompt-only"].steps, heads["prompt-only"].tokens) == (0, 5)
    assert (heads["old"].steps, heads["old"].tokens) == (None, None)
    assert (heads["odd"].steps, heads["odd"].tokens) == (None, None)


def test_heads_lists_leases_live_expired_and_released(store: Store) -> None:
    """A held lease is listed live or expired; a released one is not listed."""
    for task_id in ("live", "expired", "released"):
        commit(store, task_id)
    store.claim("live", "w-live", 600)
    expired = store.claim("expired", "w-gone", 0.05)
    store.claim("released", "w-done", 600)
    store.release("released", "w-done")
    while datetime.now(timezone.utc) <= expired.expires_at:  # until the clock passes it
        time.sleep(0.01)
    heads = by_id(store)
    assert heads["live"].lease == store.lease("live")
    assert heads["live"].lease is not None
    assert heads["live"].lease.worker == "w-live"
    assert heads["expired"].lease == store.lease("expired")
    assert heads["expired"].lease is not None
    assert heads["expired"].lease.expires_at < datetime.now(timezone.utc)
    assert heads["released"].lease is None
    assert all(h.lease_problem is None for h in heads.values())


def test_heads_reads_a_tampered_head_as_stored(store: Store, damage: Damage) -> None:
    """A head whose checksum no longer matches is listed as stored (load refuses it)."""
    commit(store, "t")
    damage.set_head(store, "t", '{"task_id": "t", "version": 1, "status": "completed"}')
    head = by_id(store)["t"]
    assert head.status == "completed"
    assert head.problem is None


def test_unreadable_head_is_listed_with_its_reason(store: Store, damage: Damage) -> None:
    """A head that is not a JSON object is listed with a one-line problem; others are not."""
    commit(store, "bad")
    commit(store, "good")
    damage.set_head(store, "bad", "[1, 2]")
    heads = by_id(store)
    assert heads["bad"].problem is not None
    assert "not a JSON object" in heads["bad"].problem or "no state object" in heads["bad"].problem
    assert "\n" not in heads["bad"].problem
    assert heads["bad"].status is None
    assert heads["good"].problem is None
    assert heads["good"].status == "running"


def test_head_that_is_not_json_is_listed(store: Store, damage: Damage, backend_name: str) -> None:
    """Text that is not JSON at all (where a backend can hold it) is a problem, not a crash."""
    commit(store, "bad")
    if backend_name == "files":  # head.json wraps the state: covered by the test above
        return
    damage.set_head(store, "bad", "{not json")
    head = by_id(store)["bad"]
    assert head.problem is not None
    assert head.problem.startswith("stored state is not valid JSON")
    assert head.version == 1


def test_damaged_lease_is_listed_with_its_reason(store: Store, damage: Damage) -> None:
    """A lease whose expiry does not read: the head still lists, the lease says why."""
    commit(store, "t")
    store.claim("t", "w1", 600)
    damage.damage_lease(store, "t", "garbage")
    head = by_id(store)["t"]
    assert head.problem is None
    assert head.status == "running"
    assert head.lease_problem is not None
    assert "lease is damaged" in head.lease_problem
    assert head.lease is not None
    assert head.lease.worker == "w1"
    assert head.lease.expires_at == UNREADABLE_EXPIRY


def test_heads_give_a_waiting_tasks_deadline(store: Store) -> None:
    """wait.deadline as an aware UTC time; None without a wait, or one that does not read."""
    deadline = "2030-01-02T03:04:05.250000Z"
    commit(store, "until", status="waiting", wait={"kind": "until", "deadline": deadline})
    commit(store, "signal", status="waiting", wait={"kind": "signal", "deadline": None})
    commit(store, "bad", status="waiting", wait={"kind": "until", "deadline": "soon"})
    commit(store, "naive", status="waiting", wait={"kind": "until", "deadline": "2030-01-02"})
    commit(store, "none")
    heads = by_id(store)
    assert heads["until"].wait_until == datetime(2030, 1, 2, 3, 4, 5, 250000, timezone.utc)
    assert [heads[t].wait_until for t in ("signal", "bad", "naive", "none")] == [None] * 4


def test_heads_give_a_childs_parent(store: Store) -> None:
    """parent.task_id of a child card (fan-out); None for a root or a parent that does not read."""
    link = {"task_id": "p", "version": 2, "name": "channel", "key": "a", "depth": 1}
    commit(store, "p")
    commit(store, "p.2.a", parent=link)
    commit(store, "root", parent=None)
    commit(store, "odd", parent={"task_id": 7})
    heads = by_id(store)
    assert heads["p.2.a"].parent == "p"
    assert [heads[t].parent for t in ("p", "root", "odd")] == [None] * 3
