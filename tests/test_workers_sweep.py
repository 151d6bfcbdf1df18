"""The sweeper (``skillstate.workers.sweep``), without a broker: what is stranded, and
why a sweeper message that turns out to be a duplicate does no harm.

The sweeper inside real workers and ``requeue --stranded`` on a broker are in
``test_workers_chaos.py`` and ``test_workers_cli.py``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from skillstate import Runtime
from skillstate.effects import files
from skillstate.examples import ledger
from skillstate.store.base import Store
from skillstate.store.sqlite import SQLiteStore
from skillstate.workers import Advancer, Message, WorkerSettings
from skillstate.workers.sweep import Sweeper, requeue_stranded, rescue, stranded

LATER = timedelta(seconds=120)
"""How far in the future the sweeps here look: every task is 2 minutes idle then."""


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    db = SQLiteStore(tmp_path / "state.db")
    yield db
    db.close()


def _task(store: Store, tmp_path: Path, task_id: str, target: int = 4) -> str:
    path = str(tmp_path / "ledger.txt")
    Runtime(ledger.agent, store).start(task_id, ledger=path, target=target)
    return path


def _later() -> datetime:
    return datetime.now(timezone.utc) + LATER


def _advancer(store: Store, slice_steps: int = 20) -> Advancer:
    return Advancer(store, WorkerSettings(store.url, lease_ttl=5.0, slice_steps=slice_steps))


def _lines(path: str, task_id: str) -> list[str]:
    return [line for key, line in files.entries(path) if key.startswith(f"{task_id}:")]


def _host() -> str:
    import socket

    return socket.gethostname()


class TestWhatIsStranded:
    def test_running_with_no_lease_and_no_commit(self, store: Store, tmp_path: Path) -> None:
        _task(store, tmp_path, "t1")
        [found] = stranded(store, 60, now=_later())
        assert (found.task_id, found.version, found.status, found.holder) == (
            "t1",
            1,
            "created",
            None,
        )
        assert found.idle >= 119
        assert found.agent == "skillstate.examples.ledger:agent"

    def test_not_before_the_threshold(self, store: Store, tmp_path: Path) -> None:
        _task(store, tmp_path, "t1")
        assert stranded(store, 600, now=_later()) == []
        assert stranded(store, 60) == []

    def test_a_live_lease_is_somebodys(self, store: Store, tmp_path: Path) -> None:
        _task(store, tmp_path, "t1")
        store.claim("t1", "m1@elsewhere:1", 3600)
        assert stranded(store, 60, now=_later()) == []

    def test_an_expired_lease_or_a_dead_local_holder_is_nobodys(
        self, store: Store, tmp_path: Path
    ) -> None:
        _task(store, tmp_path, "t1")
        _task(store, tmp_path, "t2")
        store.claim("t1", "m1@elsewhere:1", 60)  # expired two minutes from now
        store.claim("t2", f"m2@{_host()}:999999999", 3600)  # no such process here
        found = {t.task_id: t.holder for t in stranded(store, 60, now=_later())}
        assert found == {"t1": "m1@elsewhere:1", "t2": f"m2@{_host()}:999999999"}

    def test_finished_and_waiting_tasks_are_not(self, store: Store, tmp_path: Path) -> None:
        _task(store, tmp_path, "t1", target=1)
        Runtime(ledger.agent, store).run("t1")
        assert Runtime(ledger.agent, store).load("t1").status.value == "completed"
        assert stranded(store, 60, now=_later()) == []


class TestTheSweepersMessage:
    """With no lease, the sweeper claims the task under its own name and sends a message
    that takes that lease over; with a dead worker's lease, a plain message."""

    def test_it_holds_the_task_for_its_message(self, store: Store, tmp_path: Path) -> None:
        _task(store, tmp_path, "t1")
        sent: list[Message] = []
        [found] = requeue_stranded(store, sent.append, 0, queue="q")
        [message] = sent
        assert (message.task_id, message.expected, message.queue) == ("t1", 1, "q")
        assert message.after.startswith("sweeper@")
        lease = store.lease("t1")
        assert lease is not None
        assert lease.worker == message.after
        assert stranded(store, 0) == []  # somebody's again: no other sweep sends another
        assert requeue_stranded(store, sent.append, 0, queue="q") == []
        assert len(sent) == 1
        assert found.holder is None

    def test_the_original_message_was_only_waiting(self, store: Store, tmp_path: Path) -> None:
        """A false alarm: the task's own message comes first, finds the sweeper's lease and
        is dropped; the sweeper's message runs the task. Each line once."""
        path = _task(store, tmp_path, "t1", target=4)
        sent: list[Message] = []
        requeue_stranded(store, sent.append, 0, queue="q")
        assert _advancer(store).advance(Message("t1", 1, "m1"), _drop).kind == "held"
        assert _advancer(store).advance(_as(sent[0], "s1"), _drop).kind == "completed"
        assert _lines(path, "t1") == [f"entry {n}" for n in range(1, 5)]
        assert Runtime(ledger.agent, store).load("t1").errors == ()

    def test_the_sweepers_message_first(self, store: Store, tmp_path: Path) -> None:
        path = _task(store, tmp_path, "t1", target=4)
        sent: list[Message] = []
        requeue_stranded(store, sent.append, 0, queue="q")
        assert _advancer(store, 2).advance(_as(sent[0], "s1"), _drop).kind == "requeued"
        assert _advancer(store).advance(Message("t1", 1, "m1"), _drop).kind == "stale"
        assert len(_lines(path, "t1")) == 2

    def test_its_lease_lapsed(self, store: Store, tmp_path: Path) -> None:
        """Its message lost too: once the sweeper's lease expires, the next message takes
        the task over without counting a worker's death (no worker died)."""
        path = _task(store, tmp_path, "t1", target=4)
        store.claim("t1", "sweeper@elsewhere:sabc", 0.5)
        end = time.monotonic() + 30
        while not stranded(store, 0):  # the lease expires
            assert time.monotonic() < end
            time.sleep(0.1)
        assert _advancer(store).advance(Message("t1", 1, "m1"), _drop).kind == "completed"
        assert Runtime(ledger.agent, store).load("t1").errors == ()
        assert len(_lines(path, "t1")) == 4

    def test_claimed_between_the_look_and_the_rescue(self, store: Store, tmp_path: Path) -> None:
        _task(store, tmp_path, "t1")
        [found] = stranded(store, 0)
        store.claim("t1", "m1@elsewhere:1", 300)  # a worker got there first
        sent: list[Message] = []
        assert not rescue(store, found, sent.append, queue="q", hold=60)
        assert sent == []
        assert store.lease("t1").worker == "m1@elsewhere:1"  # type: ignore[union-attr]

    def test_moved_on_between_the_look_and_the_rescue(self, store: Store, tmp_path: Path) -> None:
        _task(store, tmp_path, "t1")
        [found] = stranded(store, 0)
        Runtime(ledger.agent, store).run("t1", max_steps=1)  # committed and released
        sent: list[Message] = []
        assert not rescue(store, found, sent.append, queue="q", hold=60)
        assert sent == []
        assert store.lease("t1") is None

    def test_a_failed_send_leaves_no_lease(self, store: Store, tmp_path: Path) -> None:
        _task(store, tmp_path, "t1")
        _task(store, tmp_path, "t2")
        sent: list[str] = []

        def flaky(message: Message) -> None:
            if message.task_id == "t1":
                raise ConnectionError("broker down")
            sent.append(message.task_id)

        with pytest.raises(ConnectionError):
            requeue_stranded(store, flaky, 0, queue="q")
        assert sent == ["t2"]
        assert store.lease("t1") is None  # the next sweep finds it again

    def test_a_dead_workers_task_gets_a_plain_message(self, store: Store, tmp_path: Path) -> None:
        """The message takes the task over as a redelivery would, the death counted; the
        dead worker's own message, back later, is dropped."""
        path = _task(store, tmp_path, "t1", target=4)
        Runtime(ledger.agent, store, worker="m1@x:1").run("t1", max_steps=2)
        store.claim("t1", f"m1@{_host()}:999999999", 300)
        sent: list[Message] = []
        [found] = requeue_stranded(store, sent.append, 0, queue="q")
        assert found.holder == f"m1@{_host()}:999999999"
        assert sent[0].after == ""
        assert _advancer(store).advance(_as(sent[0], "s1"), _drop).kind == "completed"
        redelivered = Message("t1", 1, "m1")  # the version its first delivery saw
        assert _advancer(store).advance(redelivered, _drop).kind == "stale"
        assert _lines(path, "t1") == [f"entry {n}" for n in range(1, 5)]
        errors = Runtime(ledger.agent, store).load("t1").errors
        assert [e.kind for e in errors] == ["worker_lost"]


class TestTheWorkersSweeper:
    def test_a_rescue_is_a_warning_naming_the_task(
        self, store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        _task(store, tmp_path, "t1")
        _task(store, tmp_path, "other")
        sent: list[Message] = []
        sweeper = Sweeper(
            store,
            sent.append,
            every=60,
            older_than=0,
            queue="q",
            allowed=lambda agent: agent == "skillstate.examples.ledger:agent",
            stopped=threading.Event(),
        )
        with caplog.at_level(logging.WARNING, logger="skillstate.workers"):
            found = sweeper.sweep()
        assert sorted(t.task_id for t in found) == ["other", "t1"]
        assert sorted(m.task_id for m in sent) == ["other", "t1"]
        assert {m.queue for m in sent} == {"q"}
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any("rescued stranded task t1 " in w for w in warnings)
        assert sweeper.rescued == 2
        assert sweeper.sweep() == []  # both are held by the sweeper's lease now

    def test_a_dead_workers_task_is_sent_once_a_threshold(
        self, store: Store, tmp_path: Path
    ) -> None:
        _task(store, tmp_path, "t1")
        store.claim("t1", f"m1@{_host()}:999999999", 300)
        sent: list[Message] = []
        sweeper = Sweeper(store, sent.append, every=60, older_than=0.0, queue="q",
                          allowed=lambda agent: True, stopped=threading.Event())  # fmt: skip
        assert len(sweeper.sweep()) == 1
        assert stranded(store, 0) != []  # still looks stranded (its message is on its way)
        assert sweeper.sweep() == []  # but this sweeper sent one a moment ago
        assert len(sent) == 1

    def test_tasks_of_agents_it_may_not_run_are_left_to_others(
        self, store: Store, tmp_path: Path
    ) -> None:
        _task(store, tmp_path, "t1")
        sent: list[Message] = []
        sweeper = Sweeper(
            store,
            sent.append,
            every=60,
            older_than=0,
            queue="q",
            allowed=lambda agent: False,
            stopped=threading.Event(),
        )
        assert sweeper.sweep() == []
        assert sent == []


def _drop(message: Message, countdown: float) -> None:
    """An enqueue that loses what it is given (the tests judge messages one by one)."""


def _as(message: Message, message_id: str) -> Message:
    from dataclasses import replace

    return replace(message, message_id=message_id)
