"""Judging messages against the store, without a broker (``skillstate.workers.advance``).

The broker-backed runs (real workers, kill -9) are in ``test_workers_chaos.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
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


class TestHandOver:
    """A slice's continuation, sent while its sender still holds the lease (issue 24)."""

    def test_a_continuation_that_arrives_before_the_release_takes_over(
        self, store: Store, tmp_path: Path
    ) -> None:
        """The next worker gets the continuation at once, while the sender still holds the
        lease: it takes the task over instead of dropping the message as "held"."""
        path = _ledger_task(store, tmp_path, target=6)
        receiver = _advancer(store, slice_steps=2)
        received: list[Outcome] = []
        later = Sent(store)

        def enqueue_and_deliver_at_once(message: Message, countdown: float) -> None:
            assert store.lease("t1") is not None  # the sender has not released yet
            received.append(receiver.advance(_delivered(message, "m2"), later))

        sender = _advancer(store, slice_steps=2)
        assert sender.advance(Message("t1", 1, "m1"), enqueue_and_deliver_at_once).kind == (
            "requeued"
        )
        assert [o.kind for o in received] == ["requeued"]
        assert received[0].steps == 2
        _drain(store, later)
        assert _lines(path, "t1") == [f"entry {n}" for n in range(1, 7)]
        assert [e.kind for e in Runtime(ledger.agent, store).load("t1").errors] == []
        assert store.lease("t1") is None

    def test_the_sender_killed_before_releasing(self, store: Store, tmp_path: Path) -> None:
        """Its lease left behind (live, another host): the continuation takes it over at
        once, not after the TTL, and it is not counted as a crash."""
        path = _ledger_task(store, tmp_path, target=4)
        sent = Sent(store)
        _advancer(store, slice_steps=2).advance(Message("t1", 1, "m1"), sent)
        [(continuation, _, held)] = sent.messages
        assert held
        assert continuation.after == worker_name("m1")
        store.claim("t1", continuation.after, 300)  # as if it died before releasing
        outcome = _advancer(store).advance(_delivered(continuation, "m2"), Sent(store))
        assert outcome.kind == "completed"
        assert _lines(path, "t1") == [f"entry {n}" for n in range(1, 5)]
        assert Runtime(ledger.agent, store).load("t1").errors == ()
        assert store.lease("t1") is None

    def test_a_previous_message_that_took_over_is_not_the_sender(
        self, store: Store, tmp_path: Path
    ) -> None:
        """The sender's own message, redelivered elsewhere, took the lease over under its
        own name (same message id, another process): the continuation is dropped."""
        _ledger_task(store, tmp_path, target=4)
        store.claim("t1", "m1@elsewhere:2", 300)
        continuation = Message("t1", 1, "m2", after="m1@elsewhere:1")
        outcome = _advancer(store).advance(continuation, Sent(store))
        assert outcome.kind == "held"
        assert store.lease("t1").worker == "m1@elsewhere:2"  # type: ignore[union-attr]

    def test_duplicates_of_a_continuation(self, store: Store, tmp_path: Path) -> None:
        """The continuation delivered twice: one copy runs the slice, the other is dropped
        (stale once the head moved on; its own redelivery waits while it is held)."""
        path = _ledger_task(store, tmp_path, target=6)
        sent = Sent(store)
        _advancer(store, slice_steps=2).advance(Message("t1", 1, "m1"), sent)
        [(continuation, _, _)] = sent.messages
        copy = _delivered(continuation, "m2")
        assert _advancer(store, slice_steps=2).advance(copy, Sent(store)).kind == "requeued"
        assert _advancer(store, slice_steps=2).advance(copy, Sent(store)).kind == "stale"
        store.claim("t1", "m2@elsewhere:7", 300)  # the first copy, live on another host
        assert _advancer(store).advance(copy, Sent(store)).kind == "retry_later"
        assert len(_lines(path, "t1")) == 4

    def test_the_senders_heartbeat_renewing_in_between(self, store: Store, tmp_path: Path) -> None:
        """The sender's heartbeat claims again right after the receiver released it: the
        receiver tries once more (the sender's lease is lost to it by then)."""
        _ledger_task(store, tmp_path, target=4)
        store.claim("t1", "m1@elsewhere:1", 300)
        racing = _RenewsOnce(store, "m1@elsewhere:1")
        advancer = Advancer(racing, WorkerSettings(store_url=store.url, lease_ttl=5.0))  # type: ignore[arg-type]
        outcome = advancer.advance(Message("t1", 1, "m2", after="m1@elsewhere:1"), Sent(store))
        assert outcome.kind == "completed"
        assert racing.renewed == 1

    def test_a_provider_retry_names_its_sender(self, store: Store, tmp_path: Path) -> None:
        """Sent under the lease with a countdown: if the lease is still there when it
        arrives, the retry takes it over."""
        Runtime(workers_support.flaky, store).start("f1", ledger=str(tmp_path / "l"), target=2)
        advancer = _advancer(store, agents=frozenset({"tests.workers_support:flaky"}))
        workers_support.FLAKY_FAILURES["left"] = 1
        sent = Sent(store)
        assert advancer.advance(Message("f1", 1, "m1"), sent).kind == "provider_retry"
        [(retry, countdown, held)] = sent.messages
        assert (retry.after, retry.attempt, countdown, held) == (worker_name("m1"), 1, 2.0, True)
        store.claim("f1", retry.after, 300)
        assert advancer.advance(_delivered(retry, "m2"), Sent(store)).kind == "completed"

    def test_a_shutdown_slice_names_its_sender(self, store: Store, tmp_path: Path) -> None:
        """SIGTERM ends the slice after its step: its continuation hands over too."""
        _ledger_task(store, tmp_path, target=4)
        advancer = _advancer(store)
        advancer.stopping = lambda: True
        sent = Sent(store)
        assert advancer.advance(Message("t1", 1, "m1"), sent).kind == "requeued"
        [(continuation, _, held)] = sent.messages
        assert held
        assert continuation.after == worker_name("m1")


class _RenewsOnce:
    """A store whose first release of ``holder`` is followed by ``holder`` claiming again,
    as the sender's heartbeat would if it fired just then."""

    def __init__(self, store: Store, holder: str) -> None:
        self._store = store
        self.holder = holder
        self.renewed = 0

    def release(self, task_id: str, worker: str) -> None:
        self._store.release(task_id, worker)
        if worker == self.holder and not self.renewed:
            self.renewed += 1
            self._store.claim(task_id, worker, 300)

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)


def _delivered(message: Message, message_id: str) -> Message:
    """``message`` as a worker receives it: with the broker's id for it."""
    from dataclasses import replace

    return replace(message, message_id=message_id)


def _drain(store: Store, sent: Sent) -> None:
    """Deliver every message sent (and those they send) until none is left."""
    advancer = _advancer(store, slice_steps=2)
    n = 0
    while sent.messages:
        message, _, _ = sent.messages.pop(0)
        n += 1
        advancer.advance(_delivered(message, f"d{n}"), sent)


class TestDeadHolders:
    @pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
    def test_a_zombie_holder_is_taken_over_at_once(self, store: Store, tmp_path: Path) -> None:
        """A worker that exited but was not reaped still answers ``kill(pid, 0)``: its lease
        (300 s to go) is taken over at once by a message and by a resume alike."""
        path = _ledger_task(store, tmp_path, target=4)
        with _zombie() as pid:
            store.claim("t1", f"m1@{_host()}:{pid}", 300)
            began = time.monotonic()
            outcome = _advancer(store, slice_steps=2).advance(Message("t1", 1, "m1"), Sent(store))
            assert outcome.kind == "requeued"
            store.claim("t1", f"m2@{_host()}:{pid}", 300)
            Runtime(ledger.agent, store, lease_ttl=300).run("t1")  # a resume
            assert time.monotonic() - began < 30
        assert _lines(path, "t1") == [f"entry {n}" for n in range(1, 5)]

    def test_a_takeover_is_not_the_first_bad_step(self, store: Store, tmp_path: Path) -> None:
        """A ``worker_lost`` note is a normal takeover after a kill, not where the task
        went wrong (``skillstate log``, ``replay``, the inspector)."""
        from skillstate.engine.replay import attribute, timeline

        _ledger_task(store, tmp_path)
        Runtime(ledger.agent, store, worker="m1@x:1").run("t1", max_steps=2)
        TestCrashes()._crashed(store, "t1", "m1")
        assert _advancer(store).advance(Message("t1", 1, "m1"), Sent(store)).kind == "completed"
        assert [e.kind for e in Runtime(ledger.agent, store).load("t1").errors] == ["worker_lost"]
        assert attribute(store, "t1") is None
        steps, first_bad = timeline(store, "t1")
        assert first_bad is None
        assert any(step.error and "taken over" in step.error for step in steps)

    def test_a_dead_letter_still_is(self, store: Store, tmp_path: Path) -> None:
        from skillstate.engine.replay import attribute

        _ledger_task(store, tmp_path)
        advancer = _advancer(store, max_crashes=1, slice_steps=1)
        TestCrashes()._crashed(store, "t1", "m1")
        assert advancer.advance(Message("t1", 1, "m1"), Sent(store)).kind == "dead_letter"
        found = attribute(store, "t1")
        assert found is not None
        assert "dead letter" in found.reason


@contextmanager
def _zombie() -> Iterator[int]:
    """A child process that has exited and is not reaped (until the block ends)."""
    pid = os.posix_spawn(sys.executable, [sys.executable, "-c", ""], dict(os.environ))
    try:
        end = time.monotonic() + 60
        while _state(pid) != "Z":
            assert time.monotonic() < end, f"child {pid} never became a zombie"
            time.sleep(0.02)
        os.kill(pid, 0)  # what made it look alive
        yield pid
    finally:
        os.waitpid(pid, 0)


def _state(pid: int) -> str:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rfind(")") + 1 :].split()[0]


def test_redis_redelivers_a_killed_workers_message_soon() -> None:
    """Kombu's Redis transport looks for unacknowledged messages past their visibility
    timeout every 100 s by default, under a mutex that a worker killed while holding it
    left in place for 300 s: either stranded a killed worker's task for minutes (seen in
    the chaos runs). The workers look every quarter of the timeout; the mutex lapses
    after two looks."""
    pytest.importorskip("celery", reason="pip install 'skillstate[celery]'")
    from skillstate.workers.celery_app import make_app

    app = make_app("redis://127.0.0.1:6379/9", visibility_timeout=8.0)
    options = app.conf.broker_transport_options
    assert options["visibility_timeout"] == 8.0
    assert (options["unacked_restore_interval"], options["unacked_restore_throttle"]) == (2.0, 1)
    assert options["unacked_mutex_expire"] == 4
    slow = make_app("redis://127.0.0.1:6379/9").conf.broker_transport_options
    assert (slow["unacked_restore_interval"], slow["unacked_mutex_expire"]) == (10.0, 20)
