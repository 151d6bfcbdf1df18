"""Real workers on a real broker and store: kill -9, duplicates, stale messages, SIGTERM.

Each test starts ``skillstate worker`` processes (``tests.workers_support``) on its
own queue and its own Postgres schema or Redis prefix. They wait for progress they
can see (versions in the store, lines in the ledger) with generous deadlines; a
missing service skips the test, or fails it with ``SKILLSTATE_REQUIRE_SERVICES=1``.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from skillstate import Runtime
from skillstate.effects import files
from skillstate.examples import ledger
from skillstate.store import open_store
from skillstate.store.base import Store
from tests.contract.backends import (
    REDIS_URL,
    drop_postgres_schemas,
    drop_redis_data,
    postgres_url_for,
    redis_reachable,
    redis_url_for,
    require_service,
)
from tests.workers_support import ROOT, start_worker

pytest.importorskip("celery", reason="pip install 'skillstate[celery]'")

from skillstate.workers.celery_app import enqueue, make_app
from skillstate.workers.settings import Message

pytestmark = pytest.mark.services

RABBIT = os.environ.get("SKILLSTATE_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")
REDIS_BROKER = REDIS_URL.rsplit("/", 1)[0] + "/7"  # a db of its own, apart from the stores
VISIBILITY = 8.0
"""Redis broker: a killed worker's message comes back after this many seconds."""
TTL = "3"


def _rabbit_reachable() -> tuple[bool, str]:
    from kombu import Connection

    try:
        with Connection(RABBIT, connect_timeout=2) as conn:
            conn.ensure_connection(max_retries=1)
    except Exception as exc:
        return False, f"{RABBIT}: {exc}"
    return True, ""


def _broker(name: str) -> str:
    if name == "rabbitmq":
        require_service("RabbitMQ", *_rabbit_reachable())
        return RABBIT
    require_service("Redis", *redis_reachable())
    return REDIS_BROKER


STORES: dict[str, Callable[[Path], str]] = {"postgres": postgres_url_for, "redis": redis_url_for}


class Fleet:
    """Worker processes on one queue: started, killed with SIGKILL, replaced."""

    def __init__(self, broker: str, store: str, queue: str, logs: Path, *extra: str) -> None:
        self.args = (broker, store, queue)
        self.extra = extra
        self.logs = logs
        self.procs: list[subprocess.Popen[bytes]] = []
        self.kills = 0
        self.started = 0

    def start(self) -> subprocess.Popen[bytes]:
        self.started += 1
        proc = start_worker(*self.args, self.logs / f"w{self.started}.log", *self.extra)
        self.procs.append(proc)
        return proc

    def kill_one(self) -> None:
        victim = random.choice([p for p in self.procs if p.poll() is None])
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait()  # reaped: its pid no longer answers, its lease is seen dead at once
        self.procs.remove(victim)
        self.kills += 1

    def log(self) -> str:
        return "".join(p.read_text(errors="replace") for p in sorted(self.logs.glob("w*.log")))

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


@pytest.fixture
def setup(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str, str]]:
    """(store URL, broker URL, queue) for this test; everything dropped afterwards."""
    store_name, broker_name = request.param
    broker = _broker(broker_name)
    store_url = STORES[store_name](tmp_path)
    queue = f"skillstate-test-{uuid.uuid4().hex[:8]}"
    yield store_url, broker, queue
    from kombu import Connection

    with Connection(broker) as conn:
        conn.default_channel.queue_delete(queue)
    drop_postgres_schemas()
    drop_redis_data()


PAIRS = [("postgres", "rabbitmq"), ("redis", "redis")]


def _wait(what: str, done: Callable[[], bool], deadline: float, fleet: Fleet) -> None:
    end = time.monotonic() + deadline
    while not done():
        if time.monotonic() > end:
            pytest.fail(f"timed out waiting for {what}; worker logs:\n{fleet.log()[-4000:]}")
        time.sleep(0.2)


def _statuses(store: Store) -> dict[str, str | None]:
    return {head.task_id: head.status for head in store.heads()}


@pytest.mark.parametrize("setup", PAIRS, indirect=True, ids=["postgres+rabbitmq", "redis+redis"])
def test_chaos_kill_9_loses_nothing_and_runs_nothing_twice(
    setup: tuple[str, str, str], tmp_path: Path
) -> None:
    """3 workers, 100 ledger tasks at once, a worker kill -9'd every few seconds."""
    store_url, broker, queue = setup
    store = open_store(store_url)
    path = str(tmp_path / "ledger.txt")
    tasks, target = [f"c{i:03d}" for i in range(100)], 4
    runtime = Runtime(ledger.agent, store)
    for task in tasks:
        # Steps slow enough (100 ms) that the run outlasts several kills even when
        # the workers are fast; the kills then land mid-step, inside effects.
        runtime.start(task, ledger=path, target=target, step_delay=0.1)
    app = make_app(broker, visibility_timeout=VISIBILITY)
    for task in tasks:
        enqueue(app, Message(task, 1, queue=queue))
    app.close()
    fleet = Fleet(broker, store_url, queue, tmp_path, "--lease-ttl", TTL, "--slice", "2",
                  "--max-crashes", "50", "--visibility-timeout", str(VISIBILITY))  # fmt: skip
    for _ in range(3):
        fleet.start()
    began = time.monotonic()
    try:
        next_kill = time.monotonic() + random.uniform(1, 2)
        end = time.monotonic() + 300
        while True:
            statuses = _statuses(store)
            completed = sum(s == "completed" for s in statuses.values())
            if completed == len(tasks):
                break
            assert time.monotonic() < end, f"{completed}/100 completed:\n{fleet.log()[-4000:]}"
            # At least three kills, however fast the workers are; then none in the last 10%.
            if time.monotonic() >= next_kill and (completed < len(tasks) * 0.9 or fleet.kills < 3):
                fleet.kill_one()
                fleet.start()
                next_kill = time.monotonic() + random.uniform(2, 4)
            time.sleep(0.3)
        elapsed = time.monotonic() - began
        _wait("every lease released", lambda: all(store.lease(t) is None for t in tasks), 60, fleet)
    finally:
        fleet.stop()
    lines: dict[str, list[str]] = {task: [] for task in tasks}
    for key, line in files.entries(path):
        lines[key.split(":", 1)[0]].append(line)
    duplicated = sum(len(v) - len(set(v)) for v in lines.values())
    wrong = [t for t, v in lines.items() if sorted(v) != [f"entry {n}" for n in range(1, 5)]]
    takeovers = sum(1 for t in tasks for e in runtime.load(t).errors if e.kind == "worker_lost")
    print(f"\nchaos {setup}: {fleet.kills} kills, {takeovers} takeovers mid-task, "
          f"{duplicated} duplicated lines, {len(wrong)} wrong ledgers, {elapsed:.1f}s")  # fmt: skip
    assert duplicated == 0
    assert wrong == []
    assert fleet.kills >= 3, "the chaos loop must have killed workers"
    assert takeovers >= 1, "some kill must have landed mid-task (a lease left behind)"
    store.close()


@pytest.mark.parametrize("setup", [("redis", "rabbitmq")], indirect=True, ids=["redis+rabbitmq"])
def test_stale_and_duplicate_messages_are_dropped(
    setup: tuple[str, str, str], tmp_path: Path
) -> None:
    """Submitted by the CLI, sent three times more, then a stale one: each line once."""
    store_url, broker, queue = setup
    path = str(tmp_path / "ledger.txt")
    env = {**os.environ, "SKILLSTATE_BROKER": broker, "SKILLSTATE_STORE": store_url}
    submit = [sys.executable, "-m", "skillstate", "submit", "skillstate.examples.ledger:agent",
              "--task-id", "d1", "--queue", queue, "--set", f"ledger={path}", "--set", "target=6",
              "--set", "step_delay=0.05"]  # fmt: skip
    out = subprocess.run(
        submit, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    app = make_app(broker)
    for _ in range(3):  # duplicates of the first message
        enqueue(app, Message("d1", 1, queue=queue))
    store = open_store(store_url)
    fleet = Fleet(broker, store_url, queue, tmp_path, "--slice", "2", "--lease-ttl", TTL)
    fleet.start()
    fleet.start()
    try:
        _wait("d1 completed", lambda: _statuses(store).get("d1") == "completed", 120, fleet)
        version = store.load("d1").version
        enqueue(app, Message("d1", 1, queue=queue))  # stale: the task is far past version 1
        # Five messages at v1 (submit, three copies, the stale one), each judged once;
        # whether a copy finds the task held or already moved on is a matter of timing.
        _wait(
            "the messages judged",
            lambda: fleet.log().count("task d1 (message v1): ") >= 5,
            60,
            fleet,
        )
    finally:
        fleet.stop()
        app.close()
    log = fleet.log()
    assert store.load("d1").version == version
    assert [line for _, line in files.entries(path)] == [f"entry {n}" for n in range(1, 7)]
    dropped = log.count("task d1 (message v1): stale") + log.count("task d1 (message v1): held")
    assert dropped == 4  # every v1 message but the one that ran the first slice
    store.close()


@pytest.mark.parametrize("setup", [("redis", "rabbitmq")], indirect=True, ids=["redis+rabbitmq"])
def test_a_task_that_keeps_killing_its_worker_is_dead_lettered(
    setup: tuple[str, str, str], tmp_path: Path
) -> None:
    """After 3 deaths in a row it fails with the reason; requeue by hand reopens it."""
    from tests.workers_support import crasher

    store_url, broker, queue = setup
    store = open_store(store_url)
    Runtime(crasher, store).start("x1", ledger=str(tmp_path / "l.txt"))
    app = make_app(broker)
    enqueue(app, Message("x1", 1, queue=queue))
    app.close()
    fleet = Fleet(broker, store_url, queue, tmp_path, "--agent", "tests.workers_support:crasher",
                  "--max-crashes", "3", "--lease-ttl", TTL)  # fmt: skip
    fleet.start()
    deaths = 0
    try:
        end = time.monotonic() + 180
        while _statuses(store).get("x1") != "failed":
            assert time.monotonic() < end, fleet.log()[-4000:]
            for proc in list(fleet.procs):
                if proc.poll() is not None:  # the skill killed it: start another
                    deaths += 1
                    fleet.procs.remove(proc)
                    fleet.start()
            time.sleep(0.2)
    finally:
        fleet.stop()
    state = Runtime(crasher, store).load("x1")
    assert state.errors[-1].kind == "dead_letter"
    assert "3 workers in a row" in state.errors[-1].message
    assert [e.attempt for e in state.errors if e.kind == "worker_lost"] == [1, 2]
    assert deaths == 3
    store.close()


@pytest.mark.parametrize("setup", [("postgres", "rabbitmq")], indirect=True, ids=["pg+rabbitmq"])
def test_sigterm_finishes_the_step_and_releases_the_lease(
    setup: tuple[str, str, str], tmp_path: Path
) -> None:
    """A warm shutdown mid-task: lease released, task requeued, the next worker ends it."""
    store_url, broker, queue = setup
    store = open_store(store_url)
    path = str(tmp_path / "ledger.txt")
    Runtime(ledger.agent, store).start("s1", ledger=path, target=30, step_delay=0.1)
    app = make_app(broker)
    enqueue(app, Message("s1", 1, queue=queue))
    app.close()
    fleet = Fleet(broker, store_url, queue, tmp_path, "--slice", "1000", "--lease-ttl", "60")
    first = fleet.start()
    try:
        _wait("a few lines", lambda: len(files.entries(path)) >= 3, 120, fleet)
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=60) == 0
        written = len(files.entries(path))
        assert 3 <= written < 30
        assert store.lease("s1") is None
        fleet.start()
        _wait("s1 completed", lambda: _statuses(store).get("s1") == "completed", 120, fleet)
    finally:
        fleet.stop()
    assert [line for _, line in files.entries(path)] == [f"entry {n}" for n in range(1, 31)]
    store.close()
