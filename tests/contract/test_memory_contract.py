"""Cross-task memory records on every backend: provenance, audit, retention, races.

A scope is one reserved record committed with the store's compare-and-set
(:mod:`skillstate.memory.record`), so every backend keeps it the same way; these
tests run against each one (memory, SQLite, files, PostgreSQL, Redis and the async
stores behind a blocking facade).
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from skillstate.errors import StaleState, StateCorrupted, UsageError
from skillstate.events import Event
from skillstate.memory import (
    Remembered,
    applied,
    forget,
    load_memory,
    memory_scopes,
    prune,
    record_id,
    remember,
)
from skillstate.memory import record as memory_record
from skillstate.state.redact import RedactionPolicy
from skillstate.store.base import Store, is_reserved

SCOPE = "agent:orders"
T0 = datetime(2026, 12, 3, 5, 0, tzinfo=timezone.utc)


def entry(key: str, value: object, *, version: int = 2, ttl: float | None = None) -> Remembered:
    return Remembered(
        scope=SCOPE,
        key=key,
        value=value,
        version=version,
        skill="learn",
        step="0002-learn",
        ttl=ttl,
    )


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[datetime]:
    """The memory's clock, set by the test: ``clock[0] = ...`` moves it."""
    now = [T0]
    monkeypatch.setattr(memory_record, "now", lambda: now[0])
    return now


class TestRecord:
    def test_a_write_is_a_fact_with_its_provenance_and_an_audited_event(self, store: Store) -> None:
        """The record holds the fact with task, version, skill and step; its event says who."""
        version = remember(store, SCOPE, [entry("carrier", "DHL")], task="A")
        memory = load_memory(store, SCOPE)
        assert version == memory.version == 1
        (fact,) = memory.facts
        assert (fact.key, fact.value, fact.provenance, fact.skill, fact.step) == (
            "carrier",
            "DHL",
            "A@2",
            "learn",
            "0002-learn",
        )
        (event,) = store.events(record_id(SCOPE))
        assert event.actor == "runtime"
        assert event.action == {
            "kind": "remember",
            "task": "A",
            "version": 2,
            "skill": "learn",
            "step": "0002-learn",
            "keys": ["carrier"],
        }
        assert any(op["path"] == "/facts" for op in event.patch)

    def test_the_same_write_twice_is_written_once(self, store: Store) -> None:
        """Idempotent by provenance: a resumed flush of (task, version) changes nothing."""
        remember(store, SCOPE, [entry("carrier", "DHL")], task="A")
        assert remember(store, SCOPE, [entry("carrier", "DHL")], task="A") == 1
        assert len(store.events(record_id(SCOPE))) == 1

    def test_a_later_write_replaces_the_value_and_the_first_still_counts_as_applied(
        self, store: Store
    ) -> None:
        """Another task's write replaces the key; the events still show A's write landed."""
        remember(store, SCOPE, [entry("carrier", "DHL")], task="A")
        remember(store, SCOPE, [entry("carrier", "UPS", version=5)], task="B")
        (fact,) = load_memory(store, SCOPE).facts
        assert (fact.value, fact.provenance) == ("UPS", "B@5")
        assert applied(store, SCOPE, "A", 2)
        assert applied(store, SCOPE, "B", 5)
        assert not applied(store, SCOPE, "A", 3)
        assert not applied(store, "agent:nobody", "A", 2)

    def test_a_write_is_a_patch_of_the_facts_it_changes(self, store: Store) -> None:
        """Replacing one fact of many removes its entry and adds one: the event's patch (the
        stored delta) does not grow with the scope."""
        for i in range(5):
            remember(store, SCOPE, [entry(f"k{i}", i, version=i + 2)], task="A")
        remember(store, SCOPE, [entry("k1", "new", version=9)], task="B")
        patch = store.events(record_id(SCOPE))[-1].patch
        assert sorted((op["op"], op["path"]) for op in patch) == [
            ("add", "/facts/f6"),
            ("remove", "/facts/f2"),
            ("replace", "/next"),
            ("replace", "/version"),
        ]
        assert [(f.seq, f.key) for f in load_memory(store, SCOPE).facts] == [
            (1, "k0"),
            (3, "k2"),
            (4, "k3"),
            (5, "k4"),
            (6, "k1"),
        ]
        # Every version rebuilds from its delta chain to what was committed (checksummed).
        rid = record_id(SCOPE)
        for info in store.checkpoints(rid):
            assert store.checkpoint(rid, info.version).state["version"] == info.version
        forget(store, SCOPE, "k3", reason="test", actor="t")
        assert store.checkpoint(rid, 7).state == store.load(rid).state

    def test_forget_is_a_persons_audited_event(self, store: Store) -> None:
        remember(store, SCOPE, [entry("carrier", "DHL"), entry("zone", 3)], task="A")
        removed = forget(store, SCOPE, "carrier", reason="customer moved", actor="ana")
        assert removed.value == "DHL"
        assert [f.key for f in load_memory(store, SCOPE).facts] == ["zone"]
        last = store.events(record_id(SCOPE))[-1]
        assert last.actor == "human"
        assert last.action == {
            "kind": "forget",
            "key": "carrier",
            "reason": "customer moved",
            "by": "ana",
        }
        with pytest.raises(UsageError, match="no fact 'carrier'"):
            forget(store, SCOPE, "carrier", reason="again", actor="ana")
        with pytest.raises(UsageError, match="needs a reason"):
            forget(store, SCOPE, "zone", reason=" ", actor="ana")
        assert load_memory(store, SCOPE).version == 2  # the refusals wrote nothing

    def test_task_lists_leave_the_record_out_and_scopes_list_it(self, store: Store) -> None:
        remember(store, SCOPE, [entry("carrier", "DHL")], task="A")
        remember(
            store,
            "user:alice",
            [entry("lang", "fr").model_copy(update={"scope": "user:alice"})],
            task="A",
        )
        assert memory_scopes(store) == ["agent:orders", "user:alice"]
        assert all(is_reserved(t) for t in store.tasks())

    def test_a_record_that_is_not_memory_is_corrupted_and_kept(self, store: Store) -> None:
        """A foreign document under the id is refused, never written over."""
        rid = record_id(SCOPE)
        doc = {"task_id": rid, "version": 1, "kind": "something else"}
        store.commit(rid, 0, doc, Event(task_id=rid, version=1, actor="human", action={}))
        with pytest.raises(StateCorrupted, match=r"not a skillstate\.memory record"):
            remember(store, SCOPE, [entry("carrier", "DHL")], task="A")
        assert store.load(rid).state == doc

    def test_a_bad_scope_or_key_is_one_line(self, store: Store) -> None:
        with pytest.raises(UsageError, match="invalid memory scope 'orders'"):
            load_memory(store, "orders")
        with pytest.raises(UsageError, match="invalid memory scope 'user:a b'"):
            load_memory(store, "user:a b")
        with pytest.raises(UsageError, match="invalid memory key"):
            remember(store, SCOPE, [entry("bad\nkey", 1)], task="A")
        assert store.tasks() == []


class TestRetention:
    def test_an_expired_fact_is_not_live_and_goes_with_the_next_write(
        self, store: Store, clock: list[datetime]
    ) -> None:
        remember(store, SCOPE, [entry("otp_window", "09:00", ttl=60)], task="A")
        (fact,) = load_memory(store, SCOPE).facts
        assert fact.expires_at == T0 + timedelta(seconds=60)
        assert load_memory(store, SCOPE).live(T0 + timedelta(seconds=59))
        clock[0] = T0 + timedelta(seconds=61)
        assert load_memory(store, SCOPE).live() == ()
        remember(store, SCOPE, [entry("carrier", "DHL", version=3)], task="A")
        assert [f.key for f in load_memory(store, SCOPE).facts] == ["carrier"]
        assert store.events(record_id(SCOPE))[-1].action["expired"] == ["otp_window"]

    def test_prune_drops_old_and_expired_facts_and_writes_nothing_else(
        self, store: Store, clock: list[datetime]
    ) -> None:
        remember(store, SCOPE, [entry("old", 1, version=2)], task="A")
        clock[0] = T0 + timedelta(days=10)
        remember(
            store,
            SCOPE,
            [entry("new", 2, version=3), entry("brief", 3, version=3, ttl=5)],
            task="A",
        )
        clock[0] = T0 + timedelta(days=10, seconds=10)
        assert prune(store, older_than=timedelta(days=7), actor="ops") == {SCOPE: ["old", "brief"]}
        assert [f.key for f in load_memory(store, SCOPE).facts] == ["new"]
        event = store.events(record_id(SCOPE))[-1]
        assert (event.actor, event.action["kind"], event.action["by"]) == ("human", "prune", "ops")
        version = load_memory(store, SCOPE).version
        assert prune(store, actor="ops") == {}
        assert load_memory(store, SCOPE).version == version  # nothing to drop: no commit

    def test_a_scope_keeps_at_most_max_facts_the_oldest_go(
        self, store: Store, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(memory_record, "MAX_FACTS", 3)
        for i in range(5):
            remember(store, SCOPE, [entry(f"k{i}", i, version=i + 2)], task="A")
        assert [f.key for f in load_memory(store, SCOPE).facts] == ["k2", "k3", "k4"]
        assert store.events(record_id(SCOPE))[-1].action["evicted"] == ["k1"]


def test_the_redactor_masks_the_record_and_its_event(store: Store) -> None:
    """The second line of defence: values are masked already when they come from a card."""
    phone = "+1 415 555 0100"
    redactor = RedactionPolicy().redactor(["hunter22"])
    remember(
        store,
        SCOPE,
        [entry("callback", f"call {phone}"), entry("pin_hint", "hunter22")],
        task="A",
        redactor=redactor,
    )
    text = str(store.load(record_id(SCOPE)).state) + str(store.events(record_id(SCOPE)))
    assert phone not in text
    assert "hunter22" not in text
    assert {f.key for f in load_memory(store, SCOPE).facts} == {"callback", "pin_hint"}


def test_writers_racing_on_one_scope_all_land(
    store: Store, monkeypatch: pytest.MonkeyPatch, backend_name: str
) -> None:
    """4 threads x 6 writes at once: every fact lands once, one version per write."""
    writers, writes = 4, 6
    barrier = threading.Barrier(writers)
    failures: list[BaseException] = []
    conflicts: list[int] = []
    commit = store.commit

    def counted(*args: Any, **kwargs: Any) -> int:
        try:
            return commit(*args, **kwargs)
        except StaleState:
            conflicts.append(1)
            raise

    monkeypatch.setattr(store, "commit", counted)

    def write(worker: int) -> None:
        try:
            barrier.wait(timeout=30)
            for i in range(writes):
                remember(
                    store, SCOPE, [entry(f"w{worker}-{i}", i, version=i + 2)], task=f"T{worker}"
                )
        except BaseException as exc:  # reported below, with the others
            failures.append(exc)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not failures, failures
    print(f"{backend_name}: {len(conflicts)} compare-and-set conflicts retried")
    memory = load_memory(store, SCOPE)
    assert len(memory.facts) == writers * writes
    assert memory.version == writers * writes
    assert len(store.events(record_id(SCOPE))) == writers * writes
