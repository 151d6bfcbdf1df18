"""Alert rules over the store (skillstate.ops.alerts): each rule fires and clears, on
every backend. Cards are committed raw, as a runtime or a worker would leave them."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from skillstate.events import Event
from skillstate.ops.alerts import Alert, evaluate
from skillstate.ops.rules import AlertRules
from skillstate.store.base import Store

RULES = AlertRules(stale_after=600, waiting_after=3600, max_retries=2, budget_tokens=1000)


def commit(store: Store, task_id: str, version: int, **fields: Any) -> None:
    card = {"task_id": task_id, "version": version, "status": "running", "current_step": "work"}
    event = Event(task_id=task_id, version=version, actor="runtime", action={"kind": "test"})
    store.commit(task_id, version - 1, {**card, **fields}, event)


def firing(store: Store, task_id: str, *, late: float = 0.0) -> list[Alert]:
    """The task's alerts, evaluated ``late`` seconds after its head's commit."""
    head = next(h for h in store.heads() if h.task_id == task_id)
    assert head.updated_at is not None
    now = head.updated_at + timedelta(seconds=late)
    return [a for a in evaluate(store, RULES, now=now) if a.task_id == task_id]


def rules_of(alerts: list[Alert]) -> list[str]:
    return [a.rule for a in alerts]


def test_stale_running_task_fires_then_clears(store: Store) -> None:
    """A running task with no commit past stale_after fires; its next commit clears it."""
    commit(store, "t", 1)
    assert firing(store, "t", late=60) == []
    [alert] = firing(store, "t", late=3600)
    assert alert.rule == "stale"
    assert "no commit for 1h00m" in alert.detail
    assert alert.since == next(h for h in store.heads()).updated_at
    commit(store, "t", 2, status="completed")
    assert firing(store, "t", late=7200) == []


def test_waiting_on_a_person_fires_then_clears(store: Store) -> None:
    """waiting_user and waiting_approval past waiting_after fire; a reply clears it."""
    commit(store, "u", 1, status="waiting_user")
    commit(store, "a", 1, status="waiting_approval")
    assert firing(store, "u", late=600) == []  # not stale: waiting is not running
    assert rules_of(firing(store, "u", late=7200)) == ["waiting"]
    assert rules_of(firing(store, "a", late=7200)) == ["waiting"]
    commit(store, "u", 2, status="running")
    assert firing(store, "u", late=60) == []


def test_retries_over_the_limit_fire_until_the_step_completes(store: Store) -> None:
    """Failed attempts of one step above max_retries fire; the step completing clears it."""
    errors = [{"kind": "verify_failed", "message": "no", "step_id": "s2"}] * 3
    errors += [{"kind": "budget", "message": "a runtime note", "step_id": "s3"}] * 5
    commit(store, "r", 1, errors=errors)
    [alert] = firing(store, "r")
    assert alert.rule == "retries"
    assert alert.detail.startswith("step s2: 3 failed attempts")
    commit(store, "r", 2, errors=errors, completed_steps=[{"id": "s2", "step": "work"}])
    assert firing(store, "r") == []


def test_failed_compensation_fires_until_the_queue_empties(store: Store) -> None:
    """A compensation that failed and is still queued fires; undoing it clears it."""
    failed = [{"kind": "compensation_failed", "message": "cannot undo", "skill": "pay"}]
    queued = [{"key": "k1", "skill": "pay", "params": {}, "version": 3}]
    commit(store, "c", 1, errors=failed, compensations=queued)
    [alert] = firing(store, "c")
    assert alert.rule == "compensation"
    assert "pay" in alert.detail
    assert "1 still queued" in alert.detail
    commit(store, "c", 2, errors=failed, compensations=[])
    assert firing(store, "c") == []


def test_dead_letter_fires_until_requeued(store: Store) -> None:
    """A task failed by its workers (dead_letter) fires; a requeue clears it."""
    note = [{"kind": "dead_letter", "message": "dead letter: 3 crashes", "permanent": True}]
    commit(store, "d", 1, status="failed", errors=note)
    assert rules_of(firing(store, "d")) == ["dead_letter"]
    commit(store, "d", 2, status="running", errors=note)
    assert firing(store, "d") == []


def test_budget_fires_from_usage_or_a_recorded_warning(store: Store) -> None:
    """Usage at budget_warn_at of a configured limit fires, as does a warning the
    runtime recorded; the task ending clears it."""
    commit(store, "b", 1, usage={"calls": 2, "prompt": 799})
    assert firing(store, "b") == []
    commit(store, "b", 2, usage={"calls": 2, "prompt": 800})
    [alert] = firing(store, "b")
    assert alert.rule == "budget"
    assert alert.detail == "tokens budget at 80% (800 of 1000)"
    warned = [{"dimension": "calls", "used": 4, "limit": 5, "warn_at": 0.8}]
    commit(store, "w", 1, usage={"calls": 4}, budget_warnings=warned)
    [alert] = firing(store, "w")
    assert alert.detail == "calls budget at 80% (4 of 5)"
    commit(store, "b", 3, status="completed", usage={"calls": 2, "prompt": 800})
    assert firing(store, "b") == []


def test_disabled_rules_and_no_value_in_details(store: Store) -> None:
    """A disabled rule never fires, and no card value reaches an alert's detail."""
    secret = "sk-live-do-not-leak"
    commit(store, "s", 1, status="waiting_user", facts={"api_key": secret}, question=secret)
    late = next(h for h in store.heads()).updated_at + timedelta(days=3)  # type: ignore[operator]
    everything = evaluate(store, RULES, now=late)
    assert rules_of(everything) == ["waiting"]
    assert all(secret not in str(a.as_json()) for a in everything)
    quiet = RULES.model_copy(update={"disabled": ("waiting",)})
    assert evaluate(store, quiet, now=late) == []


def test_a_cancel_that_could_not_undo_fires(store: Store) -> None:
    """A task cancelled with a compensation that could not run keeps firing: nothing
    will retry it."""
    failed = [{"kind": "compensation_failed", "message": "cancel could not undo pay"}]
    commit(store, "x", 1, status="cancelled", errors=failed)
    assert rules_of(firing(store, "x")) == ["compensation"]


def test_odd_cards_do_not_break_an_evaluation(store: Store) -> None:
    """Fields of the wrong shape (a repair's work) are skipped, never an exception; an
    empty error log fires nothing."""
    commit(store, "e", 1, status="failed", errors=[])
    commit(store, "o", 1, errors={"kind": "x"}, completed_steps=7, compensations="no")
    commit(store, "k", 1, errors=[{"kind": ["odd"], "step_id": "s1"}] * 4, usage="lots")
    assert [a.task_id for a in evaluate(store, RULES)] == ["k"]  # its 4 failed attempts
