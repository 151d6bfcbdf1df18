"""Judging messages against the store, without a broker (``skillstate.workers.advance``).

The broker-backed runs (real workers, kill -9) are in ``test_workers_chaos.py``.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from skillstate import Runtime
from skillstate.effects import files
from skillstate.examples import ledger
from skillstate.store.base import Store
from skillstate.store.sqlite import SQLiteStore
from skillstate.workers import Advancer, Message, WorkerSettings, dead_lettered, reopen
from skillstate.workers.advance import Outcome, message_of, worker_name
from tests import workers_support

LEDGER = "skillstate.examples.ledger:agent"


class Sent:
    """The enqueue callback: records what a slice sent, and whether it held the lease."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.messages: list[tuple[Message, float, bool]] = []

    def __call__(self, message: Message, countdown: float) -> None:
        held = self.store.lease(message.task_id) is not None
        self.messages.append((message, countdown, held))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    db = SQLiteStore(tmp_path / "state.db")
    yield db
    db.close()


def _ledger_task(store: Store, tmp_path: Path, task_id: str = "t1", target: int = 4) -> str:
    path = str(tmp_path / "ledger.txt")
    Runtime(ledger.agent, store).start(task_id, ledger=path, target=target)
    return path


def _advancer(store: Store, **options: object) -> Advancer:
    settings = WorkerSettings(store_url=store.url, lease_ttl=5.0, **options)  # type: ignore[arg-type]
    return Advancer(store, settings)


def _lines(path: str, task_id: str) -> list[str]:
    return [line for key, line in files.entries(path) if key.startswith(f"{task_id}:")]


class TestOneMessage:
    def test_a_message_runs_the_task_to_its_end(self, store: Store, tmp_path: Path) -> None:
        """A fresh message at the head's version runs the task and sends nothing."""
        path = _ledger_task(store, tmp_path)
        sent = Sent(store)
        outcome = _advancer(store).advance(Message("t1", 1, "m1"), sent)
        assert (outcome.kind, outcome.steps) == ("completed", 5)
        assert _lines(path, "t1") == [f"entry {n}" for n in range(1, 5)]
        assert sent.messages == []
        assert store.lease("t1") is None

    def test_a_slice_requeues_before_it_releases(self, store: Store, tmp_path: Path) -> None:
        """A long task goes back to the queue after a slice, its lease still held then."""
        _ledger_task(store, tmp_path, target=6)
        sent = Sent(store)
        outcome = _advancer(store, slice_steps=2).advance(Message("t1", 1, "m1"), sent)
        assert (outcome.kind, outcome.steps) == ("requeued", 2)
        [(message, countdown, held)] = sent.messages
        assert (message.expected, message.message_id, countdown, held) == (
            outcome.version,
            "",
            0.0,
            True,
        )
        assert store.lease("t1") is None

    def test_a_stale_message_does_nothing(self, store: Store, tmp_path: Path) -> None:
        """A message older than the head, with nobody holding the task, is dropped."""
        path = _ledger_task(store, tmp_path, target=6)
        _advancer(store, slice_steps=2).advance(Message("t1", 1, "m1"), Sent(store))
        version = store.load("t1").version
        sent = Sent(store)
        outcome = _advancer(store).advance(Message("t1", 1, "m1"), sent)
        assert (outcome.kind, outcome.steps, sent.messages) == ("stale", 0, [])
        assert store.load("t1").version == version
        assert len(_lines(path, "t1")) == 2

    def test_a_duplicate_while_held_does_nothing(self, store: Store, tmp_path: Path) -> None:
        """The same task sent twice: the copy finds a live worker on it and is dropped."""
        _ledger_task(store, tmp_path)
        store.claim("t1", "m1@elsewhere:1", 30)
        sent = Sent(store)
        outcome = _advancer(store).advance(Message("t1", 1, "m2"), sent)
        assert (outcome.kind, sent.messages) == ("held", [])
        assert store.load("t1").version == 1

    def test_its_own_redelivery_waits_for_the_lease(self, store: Store, tmp_path: Path) -> None:
        """A message back while its first worker's lease is live is tried again, same id."""
        _ledger_task(store, tmp_path)
        store.claim("t1", "m1@elsewhere:1", 30)
        sent = Sent(store)
        outcome = _advancer(store).advance(Message("t1", 1, "m1"), sent)
        assert outcome.kind == "retry_later"
        [(message, countdown, _)] = sent.messages
        assert message.message_id == "m1"
        assert 29 < countdown <= 31

    def test_a_finished_task_ignores_messages(self, store: Store, tmp_path: Path) -> None:
        _ledger_task(store, tmp_path)
        _advancer(store).advance(Message("t1", 1, "m1"), Sent(store))
        version = store.load("t1").version
        assert _advancer(store).advance(Message("t1", version, "m2"), Sent(store)).kind == "stale"

    def test_an_unknown_task(self, store: Store) -> None:
        assert _advancer(store).advance(Message("nope", 1, "m1"), Sent(store)).kind == "missing"

    def test_an_agent_not_allowed_is_never_imported(self, store: Store, tmp_path: Path) -> None:
        """The card names the agent; the worker imports it only if the operator allowed it."""
        Runtime(workers_support.crasher, store).start("c1", ledger=str(tmp_path / "l"))
        outcome = _advancer(store).advance(Message("c1", 1, "m1"), Sent(store))
        assert outcome.kind == "not_allowed"
        assert "not allowed" in outcome.detail


class TestCrashes:
    def _crashed(self, store: Store, task_id: str, message_id: str) -> None:
        """Leave a lease as a worker killed mid-step would: held, never released."""
        store.claim(task_id, f"{message_id}@{_host()}:999999999", 30)

    def test_a_dead_workers_task_is_taken_over(self, store: Store, tmp_path: Path) -> None:
        """Its lease is taken, the death noted in the task's log, the effect not repeated."""
        path = _ledger_task(store, tmp_path)
        Runtime(ledger.agent, store, worker="m1@x:1").run("t1", max_steps=2)
        self._crashed(store, "t1", "m1")
        outcome = _advancer(store).advance(Message("t1", 1, "m1"), Sent(store))
        assert outcome.kind == "completed"
        state = Runtime(ledger.agent, store).load("t1")
        [lost] = [e for e in state.errors if e.kind == "worker_lost"]
        assert "999999999" in lost.message
        assert lost.attempt == 1
        assert _lines(path, "t1") == [f"entry {n}" for n in range(1, 5)]
        assert store.lease("t1") is None

    def test_crashes_in_a_row_end_in_a_dead_letter(self, store: Store, tmp_path: Path) -> None:
        """After max_crashes deaths with no commit between, the task fails; requeue reopens."""
        _ledger_task(store, tmp_path)
        advancer = _advancer(store, max_crashes=3, slice_steps=1)
        runtime = Runtime(ledger.agent, store)
        kinds = []
        for attempt in range(3):
            self._crashed(store, "t1", f"m{attempt}")
            # The taken-over worker commits only its note, then "dies" again.
            advancer.settings = WorkerSettings(
                store.url, lease_ttl=5.0, max_crashes=3, slice_steps=1
            )
            version = store.load("t1").version
            kinds.append(_note_only(advancer, store, Message("t1", version, f"m{attempt}")))
        assert kinds == ["worker_lost", "worker_lost", "dead_letter"]
        state = runtime.load("t1")
        assert dead_lettered(state)
        assert state.status.value == "failed"
        assert "3 workers in a row" in state.errors[-1].message
        assert (
            _advancer(store).advance(Message("t1", state.version, "m9"), Sent(store)).kind
            == "stale"
        )
        reopened = reopen(runtime, "t1")
        assert reopened.status.value == "running"
        assert (
            _advancer(store).advance(Message("t1", reopened.version, "m10"), Sent(store)).kind
            == "completed"
        )

    def test_progress_between_crashes_resets_the_count(self, store: Store, tmp_path: Path) -> None:
        _ledger_task(store, tmp_path, target=8)
        advancer = _advancer(store, max_crashes=2, slice_steps=1)
        for attempt in range(4):
            self._crashed(store, "t1", f"m{attempt}")
            outcome = advancer.advance(
                Message("t1", store.load("t1").version, f"m{attempt}"), Sent(store)
            )
            assert outcome.kind == "requeued"  # a step between every two deaths
        notes = [e.attempt for e in Runtime(ledger.agent, store).load("t1").errors]
        assert notes == [1, 1, 1, 1]


class TestProviderErrors:
    def test_a_rate_limit_is_retried_with_backoff(self, store: Store, tmp_path: Path) -> None:
        """Nothing is committed for the refused decision; the retry waits longer each time."""
        Runtime(workers_support.flaky, store).start("f1", ledger=str(tmp_path / "l"), target=2)
        advancer = _advancer(store, agents=frozenset({"tests.workers_support:flaky"}))
        workers_support.FLAKY_FAILURES["left"] = 2
        waits = []
        message = Message("f1", 1, "m1")
        for _ in range(3):
            sent = Sent(store)
            outcome = advancer.advance(message, sent)
            if outcome.kind != "provider_retry":
                break
            [(message, countdown, held)] = sent.messages
            waits.append(countdown)
            assert held
            assert store.load("f1").version == 1
        assert outcome.kind == "completed"
        assert waits == [2.0, 4.0]


def test_worker_names_carry_the_message() -> None:
    assert message_of(worker_name("abc")) == "abc"
    assert message_of("human@host:1") is None
    assert message_of("host:1") is None


def test_import_skillstate_does_not_load_celery() -> None:
    code = "import sys, skillstate, skillstate.workers; print('celery' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _note_only(advancer: Advancer, store: Store, message: Message) -> str:
    """Run a message whose worker dies right after taking over: only its note commits."""
    before = store.load(message.task_id).version
    original = advancer.settings.slice_steps
    assert original == 1
    stopping = advancer.stopping
    advancer.stopping = lambda: True  # ends the slice before any step
    try:
        outcome: Outcome = advancer.advance(message, Sent(store))
    finally:
        advancer.stopping = stopping
    state = Runtime(ledger.agent, store).load(message.task_id)
    assert state.version == before + 1
    return state.errors[-1].kind if outcome.kind != "dead_letter" else "dead_letter"


def _host() -> str:
    import socket

    return socket.gethostname()
