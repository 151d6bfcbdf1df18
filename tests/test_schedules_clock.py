"""Celery beat's scheduler over the store's schedules, driven by a controlled clock.

Each test runs :class:`~skillstate.workers.beat.StoreScheduler` (Celery's
``Scheduler.tick``, heap and ``crontab``; only the clock is ours) against a SQLite
store, "kills" it (drops it without a word, as ``kill -9`` would) and starts a new
one, then runs every message it sent through a worker's :class:`Advancer` and counts
the tasks created and completed, and each task's ledger entries (effects).
"""

from __future__ import annotations

import itertools
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from skillstate import Runtime
from skillstate.control.schedule_registry import REGISTRY, add_schedule, remove_schedule
from skillstate.control.schedules import Schedule, card_fields_for
from skillstate.effects import files
from skillstate.examples import ledger
from skillstate.store.base import Store
from skillstate.store.sqlite import SQLiteStore
from skillstate.workers import Advancer, Message, WorkerSettings

pytest.importorskip("celery", reason="pip install 'skillstate[celery]'")

from skillstate.workers.beat import StoreScheduler
from skillstate.workers.celery_app import make_app

UTC = timezone.utc
LEDGER = "skillstate.examples.ledger:agent"
FLAKY = "tests.no_such_module:agent"
START = datetime(2026, 12, 3, 5, 0, 5, tzinfo=UTC)


class Clock:
    """The time beat sees; tests move it."""

    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now


class Sent(list[Message]):
    fail = False

    def __call__(self, message: Message) -> None:
        if self.fail:
            raise ConnectionError("broker down")
        self.append(message)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    db = SQLiteStore(tmp_path / "state.db")
    yield db
    db.close()


@pytest.fixture
def app() -> Iterator[Any]:
    celery_app = make_app("memory://")
    celery_app.conf.update(timezone="UTC", enable_utc=True)
    yield celery_app
    celery_app.close()


def start_beat(app: Any, store: Store, clock: Clock, sent: Sent, **options: Any) -> StoreScheduler:
    return StoreScheduler(
        app=app,
        store=store,
        allowed=options.pop("allowed", lambda ref: True),
        send=sent,
        clock=clock,
        refresh=0,
        **options,
    )


def run_for(beat: StoreScheduler, clock: Clock, seconds: float, step: float = 0.5) -> None:
    """Let beat tick for ``seconds`` of the clock, looking every ``step`` seconds."""
    end = clock.now + timedelta(seconds=seconds)
    while clock.now < end:
        beat.tick()
        clock.now += timedelta(seconds=step)


def register(
    store: Store, tmp_path: Path, clock: Clock, name: str = "tick", agent: str = LEDGER, **when: Any
) -> None:
    fields = card_fields_for(ledger.agent, {"ledger": str(tmp_path / "ledger.txt"), "target": 2})
    add_schedule(
        store,
        Schedule(name=name, agent=agent, fields=fields, queue="q", created_at=clock.now, **when),
    )


def work(store: Store, sent: Sent) -> dict[str, str]:
    """A worker's job: run every message beat sent (and what the slices send on) to
    the end; returns each message's outcome kind by task."""
    advancer = Advancer(store, WorkerSettings(store_url=store.url, lease_ttl=5.0))
    queue = list(sent)
    kinds: dict[str, list[str]] = {}
    while queue:
        message = queue.pop(0)
        outcome = advancer.advance(message, lambda m, wait: queue.append(m))
        kinds.setdefault(message.task_id, []).append(outcome.kind)
    return {task: ",".join(k) for task, k in kinds.items()}


def made(store: Store) -> list[str]:
    return sorted(t for t in store.tasks() if t != REGISTRY)


def check_each_completed_once(store: Store, tmp_path: Path, tasks: list[str]) -> None:
    """Every task completed, its two ledger entries written exactly once."""
    runtime = Runtime(ledger.agent, store)
    assert [runtime.load(t).status.value for t in tasks] == ["completed"] * len(tasks)
    entries = [key.split(":")[0] for key, _ in files.entries(tmp_path / "ledger.txt")]
    assert sorted(entries) == sorted(t for t in tasks for _ in range(2))


class TestBeatTicks:
    def test_a_minute_cron_over_three_minutes_with_restarts_makes_three_tasks(
        self, app: Any, store: Store, tmp_path: Path
    ) -> None:
        """The done-when property on a controlled clock: beat killed and restarted
        mid-way, a worker killed mid-task and its task taken over: 3 ticks, 3 tasks,
        each completed once."""
        clock = Clock(START)
        register(store, tmp_path, clock, cron="* * * * *")
        sent = Sent()
        beat = start_beat(app, store, clock, sent)
        run_for(beat, clock, 85)  # to 05:01:30: the 05:01 tick fired
        assert [m.task_id for m in sent] == ["tick-20261203T0501Z"]
        # A worker takes the first task, commits a step and is killed.
        Runtime(ledger.agent, store, worker="m1@x:1").run("tick-20261203T0501Z", max_steps=2)
        store.claim("tick-20261203T0501Z", f"m1@{socket.gethostname()}:999999999", 30)
        del beat  # kill -9: nothing saved, nothing closed
        clock.now += timedelta(seconds=10)
        beat = start_beat(app, store, clock, sent)
        run_for(beat, clock, 120)  # to 05:03:40
        assert made(store) == [
            "tick-20261203T0501Z",
            "tick-20261203T0502Z",
            "tick-20261203T0503Z",
        ]
        kinds = work(store, sent)
        assert kinds["tick-20261203T0502Z"] == kinds["tick-20261203T0503Z"] == "completed"
        assert kinds["tick-20261203T0501Z"].endswith("completed")
        check_each_completed_once(store, tmp_path, made(store))

    def test_every_few_seconds_with_beat_killed_three_times(
        self, app: Any, store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Once between create and send: the restarted beat sends the task it finds."""
        caplog.set_level(logging.INFO, logger="skillstate.schedules")
        clock = Clock(START)
        register(store, tmp_path, clock, every=2)
        sent = Sent()
        beat = start_beat(app, store, clock, sent)
        for round_ in range(3):
            run_for(beat, clock, 7)
            if round_ == 1:
                sent.fail = True  # the next tick commits its task, then beat dies
                run_for(beat, clock, 2.5)
                sent.fail = False
            beat = start_beat(app, store, clock, sent)  # killed and restarted in the slot
        run_for(beat, clock, 6)
        tasks = made(store)
        slots = [datetime.strptime(t[len("tick-") :], "%Y%m%dT%H%M%SZ") for t in tasks]
        assert [(b - a).total_seconds() for a, b in itertools.pairwise(slots)] == [2.0] * (
            len(slots) - 1
        )
        # Beat looked from 05:00:05 to 05:00:34: the ticks of :06, :08, ... :34.
        assert (tasks[0], tasks[-1], len(tasks)) == (
            "tick-20261203T050006Z",
            "tick-20261203T050034Z",
            15,
        )
        assert "schedule tick: tick at 2026-12-03T05:00:20+00:00 failed: broker down" in caplog.text
        assert "tick-20261203T050020Z existed unstarted and unheld: sent it again" in caplog.text
        assert {m.task_id for m in sent} == set(tasks)  # every one sent, the orphan too
        work(store, sent)
        check_each_completed_once(store, tmp_path, tasks)

    def test_a_beat_down_for_ticks_runs_the_latest_once(
        self, app: Any, store: Store, tmp_path: Path
    ) -> None:
        """Celery beat's catch-up: the most recent missed tick, at start; not the others."""
        clock = Clock(datetime(2026, 12, 3, 5, 0, 1, tzinfo=UTC))
        register(store, tmp_path, clock, every=10)
        sent = Sent()
        run_for(start_beat(app, store, clock, sent), clock, 12)  # the 05:00:10 tick
        clock.now = datetime(2026, 12, 3, 5, 0, 47, tzinfo=UTC)  # 20, 30 and 40 missed
        beat = start_beat(app, store, clock, sent)
        beat.tick()
        assert made(store) == ["tick-20261203T050010Z", "tick-20261203T050040Z"]
        run_for(beat, clock, 5)
        assert made(store)[-1] == "tick-20261203T050050Z"
        work(store, sent)
        check_each_completed_once(store, tmp_path, made(store))

    def test_schedules_come_and_go_while_beat_runs(
        self, app: Any, store: Store, tmp_path: Path
    ) -> None:
        """Beat reads the store again: a schedule added ticks, a removed one stops."""
        clock = Clock(START)
        sent = Sent()
        beat = start_beat(app, store, clock, sent)
        run_for(beat, clock, 3)
        register(store, tmp_path, clock, every=2)
        run_for(beat, clock, 4.5)
        assert len(made(store)) == 2
        remove_schedule(store, "tick", by="test")
        run_for(beat, clock, 6)
        assert len(made(store)) == 2

    def test_an_agent_not_allowed_is_never_imported(
        self, app: Any, store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A schedule's agent is data in the store: this beat refuses it and goes on."""
        clock = Clock(START)
        register(store, tmp_path, clock, name="other", agent=FLAKY, every=2)
        register(store, tmp_path, clock, name="fine", every=2)
        sent = Sent()
        beat = start_beat(app, store, clock, sent, allowed=lambda ref: ref == LEDGER)
        with caplog.at_level(logging.WARNING, logger="skillstate.schedules"):
            run_for(beat, clock, 3)
        assert [t.split("-")[0] for t in made(store)] == ["fine"]
        # Refused before any import: importing it would have failed otherwise.
        assert f"skipped, nothing created: agent {FLAKY!r} is not allowed on this beat" in (
            caplog.text
        )

    def test_a_stop_signal_mid_tick_lands_after_the_send(
        self, app: Any, store: Store, tmp_path: Path
    ) -> None:
        """SIGTERM between a tick's commit and its send (the instant a polite stop
        used to strand the task for the sweeper) is held back: the tick is sent, then
        beat stops, as Celery's handler makes it (``SystemExit``)."""
        clock = Clock(START)
        register(store, tmp_path, clock, every=2)
        stops: list[str] = []

        def stop(signum: int, frame: Any) -> None:
            stops.append(f"stopped after {len(sent)} sent")
            raise SystemExit()

        class StoppedMidTick(Sent):
            def __call__(self, message: Message) -> None:
                assert made(store) == [message.task_id]  # committed, not yet sent
                os.kill(os.getpid(), signal.SIGTERM)
                self.append(message)

        sent = StoppedMidTick()
        beat = start_beat(app, store, clock, sent)
        before = signal.signal(signal.SIGTERM, stop)
        try:
            with pytest.raises(SystemExit):
                run_for(beat, clock, 3)
        finally:
            signal.signal(signal.SIGTERM, before)
        assert stops == ["stopped after 1 sent"]
        assert [m.task_id for m in sent] == made(store)
        assert work(store, sent) == {made(store)[0]: "completed"}

    def test_a_stop_signal_another_thread_receives_is_held_too(
        self, app: Any, store: Store, tmp_path: Path
    ) -> None:
        """A process-directed signal may be handed to any thread that does not block it
        (a store's pool or checkpoint thread); Python then runs the handler in the main
        thread all the same. Held all the same: the tick is sent, then beat stops, and
        no signal is left blocked for the processes started after it."""
        clock = Clock(START)
        register(store, tmp_path, clock, every=2)
        stops: list[str] = []
        parked = threading.Event()
        other = threading.Thread(target=parked.wait, daemon=True)
        other.start()

        def stop(signum: int, frame: Any) -> None:
            stops.append(f"stopped after {len(sent)} sent")
            raise SystemExit()

        class StoppedFromAnotherThread(Sent):
            def __call__(self, message: Message) -> None:
                signal.pthread_kill(other.ident or 0, signal.SIGTERM)
                deadline = time.monotonic() + 2.0
                while time.monotonic() < deadline and not stops:  # the handler's chance
                    time.sleep(0.01)
                self.append(message)

        sent = StoppedFromAnotherThread()
        beat = start_beat(app, store, clock, sent)
        before = signal.signal(signal.SIGTERM, stop)
        try:
            with pytest.raises(SystemExit):
                run_for(beat, clock, 3)
        finally:
            signal.signal(signal.SIGTERM, before)
            parked.set()
        assert stops == ["stopped after 1 sent"]
        assert [m.task_id for m in sent] == made(store)
        assert not signal.pthread_sigmask(signal.SIG_BLOCK, []) & {signal.SIGTERM, signal.SIGINT}
