"""Durable waits on real Celery workers (issue 25, point 2): no worker sleeps through a
wait, a wait survives ``kill -9`` of its worker, a timeout escalates, the sweeper
wakes a waiting task whose message was lost.

Workers are real ``skillstate worker`` processes on a real broker and store (see
``test_workers_chaos.py`` for the helpers). Each test waits for what it can observe
(a status in the store, a line in a worker's log) with generous deadlines, and counts
the tasks that completed and the effects they made, not only duplicates. A missing
service skips the test (fails it with ``SKILLSTATE_REQUIRE_SERVICES=1``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from skillstate import Runtime
from skillstate.effects import files
from skillstate.events import utcnow
from skillstate.store import open_store
from skillstate.store.base import Store
from tests.contract.backends import drop_postgres_schemas, drop_redis_data
from tests.test_workers_chaos import PAIRS, STORES, Fleet, _broker, _statuses, _wait
from tests.waiting_agent import agent
from tests.workers_support import ROOT

pytest.importorskip("celery", reason="pip install 'skillstate[celery]'")

pytestmark = pytest.mark.services

AGENT = "tests.waiting_agent:agent"
TTL = "3"
PAID = '{"amount": 9.5, "reference": "wire-1"}'


@pytest.fixture
def setup(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str, str]]:
    """(store URL, broker URL, queue) for this test; everything dropped afterwards
    (as in ``test_workers_chaos``)."""
    store_name, broker_name = request.param
    broker = _broker(broker_name)
    queue = f"skillstate-test-{uuid.uuid4().hex[:8]}"
    yield STORES[store_name](tmp_path), broker, queue
    from kombu import Connection

    with Connection(broker) as conn:
        conn.default_channel.queue_delete(queue)
    drop_postgres_schemas()
    drop_redis_data()


def _cli(store_url: str, broker: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SKILLSTATE_BROKER": broker, "SKILLSTATE_STORE": store_url,
           "SKILLSTATE_AGENTS": AGENT, "PYTHONPATH": str(ROOT)}  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "skillstate", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _submit(store_url: str, broker: str, queue: str, task_id: str, *sets: str) -> None:
    fields = [a for s in sets for a in ("--set", s)]
    out = _cli(store_url, broker, "submit", AGENT, "--task-id", task_id, "--queue", queue, *fields)
    assert out.returncode == 0, out.stderr


def _ended(store: Store, *tasks: str) -> bool:
    statuses = _statuses(store)
    return all(statuses.get(t) in {"completed", "failed"} for t in tasks)


def _shipped(path: Path, task_id: str) -> list[str]:
    return [line for key, line in files.entries(str(path)) if key.startswith(f"{task_id}:")]


def _kinds(store: Store, task_id: str) -> list[str]:
    return [str(e.action.get("kind")) for e in store.events(task_id)]


def _fleet(store_url: str, broker: str, queue: str, tmp_path: Path, *extra: str) -> Fleet:
    return Fleet(broker, store_url, queue, tmp_path, "--agent", AGENT, "--lease-ttl", TTL,
                 "--visibility-timeout", "20", *extra)  # fmt: skip


@pytest.mark.parametrize("setup", [("postgres", "redis")], indirect=True, ids=["pg+redis"])
def test_a_wait_until_of_5s_fires_once_and_no_worker_sleeps(
    setup: tuple[str, str, str], tmp_path: Path
) -> None:
    """One worker (one slot). The waiting task's slice returns and sends a countdown
    message; while it waits, the same worker runs another task to its end; at the
    deadline the countdown wakes the task once and it completes once."""
    store_url, broker, queue = setup
    store = open_store(store_url)
    ledger = tmp_path / "ledger.txt"
    fleet = _fleet(store_url, broker, queue, tmp_path, "--sweep-every", "0")
    fleet.start()
    try:
        _submit(store_url, broker, queue, "w", "pause=5", f"ledger={ledger}")
        _wait("w waiting", lambda: _statuses(store).get("w") == "waiting", 120, fleet)
        deadline = Runtime(agent, store).load("w").wait.deadline  # type: ignore[union-attr]
        assert deadline is not None
        _wait("the slice's log line", lambda: "task w (message v1): waiting" in fleet.log(),
              60, fleet)  # fmt: skip
        countdown = re.search(
            r"task w \(message v1\): waiting .* requeued in ([\d.]+)s", fleet.log()
        )
        assert countdown is not None, fleet.log()[-2000:]
        assert 0.0 < float(countdown.group(1)) <= 5.0
        # The only worker is free while w waits: another task runs to its end meanwhile.
        _submit(store_url, broker, queue, "quick", f"ledger={ledger}")
        _wait("quick completed", lambda: _statuses(store).get("quick") == "completed", 60, fleet)
        if utcnow() < deadline:  # (on a very slow machine the deadline may have passed)
            assert _statuses(store)["w"] == "waiting"
        _wait("w completed", lambda: _statuses(store).get("w") == "completed", 120, fleet)
        _wait("w's countdown judged", lambda: "task w (message v2): completed" in fleet.log(),
              30, fleet)  # fmt: skip
    finally:
        fleet.stop()
    events = store.events("w")
    [wake] = [e for e in events if e.action.get("kind") == "wake"]
    assert wake.started_at >= deadline  # not a moment early
    assert _kinds(store, "w").count("finish") == 1
    assert _shipped(ledger, "w") == ["shipped w"]
    assert _shipped(ledger, "quick") == ["shipped quick"]
    assert sum(1 for s in _statuses(store).values() if s == "completed") == 2
    # The countdown ran the task once. A broker may deliver it again (a Redis worker
    # with a shorter visibility timeout restores every unacknowledged message of the
    # database): such a copy finds the task past it and does nothing.
    judged = re.findall(r"task w \(message v2\): (\w+)", fleet.log())
    assert judged.count("completed") == 1, judged
    assert set(judged) <= {"completed", "stale", "held"}, judged
    store.close()


@pytest.mark.parametrize("setup", PAIRS, indirect=True, ids=["pg+rabbitmq", "redis+redis"])
def test_a_wait_for_survives_a_worker_kill_and_resumes_on_the_signal(
    setup: tuple[str, str, str], tmp_path: Path
) -> None:
    """Three tasks wait for their payment; their worker is killed with SIGKILL; the
    signals are delivered with ``--broker`` while no worker runs; a new worker
    completes each task once, each shipping once."""
    store_url, broker, queue = setup
    store = open_store(store_url)
    ledger = tmp_path / "ledger.txt"
    tasks = ("a", "b", "c")
    fleet = _fleet(store_url, broker, queue, tmp_path, "--sweep-every", "0")
    fleet.start()
    try:
        for task in tasks:
            _submit(store_url, broker, queue, task, "expect_payment=true", f"ledger={ledger}")
        _wait("all waiting", lambda: all(_statuses(store).get(t) == "waiting" for t in tasks),
              120, fleet)  # fmt: skip
        fleet.kill_one()
        assert all(_statuses(store)[t] == "waiting" for t in tasks)
        for task in tasks:
            out = _cli(store_url, broker, "signal", task, "payment_received", "--data", PAID,
                       "--queue", queue)  # fmt: skip
            assert out.returncode == 0, out.stderr
            assert "delivered signal payment_received" in out.stdout
            assert f"{task} (version 2) enqueued to {queue}" in out.stdout
        assert all(_statuses(store)[t] == "waiting" for t in tasks)  # nobody ran them yet
        fleet.start()
        _wait("all completed", lambda: all(_statuses(store).get(t) == "completed" for t in tasks),
              180, fleet)  # fmt: skip
    finally:
        fleet.stop()
    assert fleet.kills == 1
    for task in tasks:
        assert _shipped(ledger, task) == [f"shipped {task}"]
        assert _kinds(store, task).count("signal") == 1
        assert Runtime(agent, store).load(task).paid == 9.5
    assert sorted(t for t, s in _statuses(store).items() if s == "completed") == list(tasks)
    store.close()


@pytest.mark.parametrize("setup", [("redis", "redis")], indirect=True, ids=["redis+redis"])
def test_a_wait_for_timeout_on_a_worker_escalates(
    setup: tuple[str, str, str], tmp_path: Path
) -> None:
    """No signal comes: the countdown at the timeout escalates one task to its declared
    step (it completes) and fails the other with the reason."""
    store_url, broker, queue = setup
    store = open_store(store_url)
    fleet = _fleet(store_url, broker, queue, tmp_path, "--sweep-every", "0")
    fleet.start()
    try:
        _submit(store_url, broker, queue, "up", "expect_payment=true", "timeout=2",
                "escalate=true")  # fmt: skip
        _submit(store_url, broker, queue, "out", "expect_payment=true", "timeout=2")
        _wait("both ended", lambda: _ended(store, "up", "out"), 120, fleet)
    finally:
        fleet.stop()
    assert _statuses(store)["up"] == "completed"
    assert _statuses(store)["out"] == "failed"
    up, out = (Runtime(agent, store).load(t) for t in ("up", "out"))
    assert "escalated to step 'escalated'" in up.errors[-1].message
    assert out.errors[-1].message == "waited for signal 'payment_received' for 2 s"
    store.close()


@pytest.mark.parametrize("setup", [("postgres", "redis")], indirect=True, ids=["pg+redis"])
def test_the_sweeper_wakes_a_waiting_task_whose_message_was_lost(
    setup: tuple[str, str, str], tmp_path: Path
) -> None:
    """Left waiting by a process (no message anywhere): past its deadline (and the
    threshold) a worker's sweeper requeues it; before it, it is left alone."""
    store_url, broker, queue = setup
    store = open_store(store_url)
    runtime = Runtime(agent, store)
    runtime.start("lost", pause=1)
    runtime.start("later", pause=3600)
    assert runtime.run("lost").stopped == "waiting"
    assert runtime.run("later").stopped == "waiting"
    fleet = _fleet(store_url, broker, queue, tmp_path, "--sweep-every", "0.5", "--sweep-after", "1")
    fleet.start()
    try:
        _wait("lost rescued", lambda: _statuses(store).get("lost") == "completed", 120, fleet)
    finally:
        fleet.stop()
    log = fleet.log()
    assert re.search(r"WARNING.*rescued stranded task lost \(waiting", log), log[-3000:]
    assert "stranded task later" not in log
    assert _statuses(store)["later"] == "waiting"
    store.close()
