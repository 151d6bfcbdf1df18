"""``send`` and ``cancel`` to tasks on real Celery workers (Postgres store; Redis broker,
and RabbitMQ for cancel).

A worker holds the task for its whole slice, so a message or a cancel posted while it
runs cannot be committed by the CLI: the worker takes it at its next step boundary.
The tests wait for versions they can see in the store (never a fixed sleep) and count
the tasks that completed and were cancelled.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from skillstate import Runtime
from skillstate.store import open_store
from tests.contract.backends import (
    REDIS_URL,
    drop_postgres_schemas,
    postgres_reachable,
    postgres_url_for,
    redis_reachable,
    require_service,
)
from tests.control_support import interrupting, ticker
from tests.workers_support import ROOT, start_worker

pytest.importorskip("celery", reason="pip install 'skillstate[celery]'")

from skillstate.workers.celery_app import enqueue, make_app
from skillstate.workers.settings import Message

pytestmark = pytest.mark.services

REDIS_BROKER = REDIS_URL.rsplit("/", 1)[0] + "/7"  # the broker's own db, apart from the stores
RABBIT = os.environ.get("SKILLSTATE_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")
AGENTS = ("tests.control_support:ticker", "tests.control_support:interrupting")
LEASE_TTL = "60"
"""Long: a worker stopped by a cancel must not be waiting for its lease to run out."""


class Setup:
    """A Postgres store, a queue on the Redis broker, one worker, the CLI's environment."""

    def __init__(self, tmp_path: Path, broker: str) -> None:
        self.broker = broker
        self.tmp = tmp_path
        self.store_url = postgres_url_for(tmp_path)
        self.store = open_store(self.store_url)
        self.queue = f"skillstate-test-{uuid.uuid4().hex[:8]}"
        self.log = tmp_path / "worker.log"
        agents = [arg for ref in AGENTS for arg in ("--agent", ref)]
        self.worker = start_worker(
            broker, self.store_url, self.queue, self.log, *agents, "--lease-ttl", LEASE_TTL
        )

    def submit(self, agent: Any, task_id: str, **fields: Any) -> Path:
        views = self.tmp / f"{task_id}.jsonl"
        Runtime(agent, self.store).start(task_id, log=str(views), **fields)
        app = make_app(self.broker)
        enqueue(app, Message(task_id, 1, queue=self.queue))
        app.close()
        return views

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "SKILLSTATE_STORE": self.store_url,
            "SKILLSTATE_AGENTS": ",".join(AGENTS),
            "SKILLSTATE_ACTOR": "tester",
        }
        command = [sys.executable, "-m", "skillstate", *args, "--broker", self.broker]
        command += ["--queue", self.queue]
        return subprocess.run(
            command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
        )

    def wait(self, what: str, done: Callable[[], bool], deadline: float = 120.0) -> float:
        """Poll until ``done``; the seconds it took."""
        start = time.monotonic()
        while not done():
            if self.worker.poll() is not None:
                pytest.fail(f"the worker exited before {what}:\n{self.worker_log()}")
            if time.monotonic() - start > deadline:
                pytest.fail(f"timed out waiting for {what}; worker log:\n{self.worker_log()}")
            time.sleep(0.05)
        return time.monotonic() - start

    def version(self, task_id: str) -> int:
        return self.store.load(task_id).version

    def status(self, task_id: str) -> str | None:
        return {h.task_id: h.status for h in self.store.heads()}.get(task_id)

    def statuses(self) -> list[str | None]:
        return sorted(h.status for h in self.store.heads())

    def worker_log(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def close(self) -> None:
        if self.worker.poll() is None:
            self.worker.kill()
        self.worker.wait()
        self.store.close()
        from kombu import Connection

        with Connection(self.broker) as conn:
            conn.default_channel.queue_delete(self.queue)
        drop_postgres_schemas()


def _rabbit_reachable() -> tuple[bool, str]:
    from kombu import Connection

    try:
        with Connection(RABBIT, connect_timeout=2) as conn:
            conn.ensure_connection(max_retries=1)
    except Exception as exc:
        return False, f"{RABBIT}: {exc}"
    return True, ""


@pytest.fixture(params=["redis"])
def setup(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Setup]:
    """One worker on a Postgres store; the broker is Redis unless the test asks for more."""
    require_service("PostgreSQL", *postgres_reachable())
    if request.param == "rabbitmq":
        require_service("RabbitMQ", *_rabbit_reachable())
        broker = RABBIT
    else:
        require_service("Redis", *redis_reachable())
        broker = REDIS_BROKER
    fleet = Setup(tmp_path, broker)
    yield fleet
    fleet.close()


def views(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_send_reaches_the_next_decision_of_a_running_task(setup: Setup) -> None:
    """Steps of 0.2 s on a worker; sent once version 6 is seen: the worker takes it at
    its next step boundary and the decision right after sees it, once."""
    log = setup.submit(ticker, "m1", target=25, delay=0.2)
    setup.wait("the task to run", lambda: setup.version("m1") >= 6)
    sent_at = setup.version("m1")
    out = setup.cli("send", "m1", "mind the gap")
    assert out.returncode == 0, out.stderr
    assert "message 1 posted" in out.stdout
    setup.wait("the task to complete", lambda: setup.status("m1") == "completed")
    events = setup.store.events("m1")
    [taken] = [e for e in events if e.action.get("kind") == "inbox"]
    assert taken.version > sent_at  # taken while the worker ran the task
    assert taken.action["messages"] == [{"seq": 1, "actor": "tester", "text": "mind the gap"}]
    seen = views(log)
    showing = [v for v in seen if v["messages"]]
    assert [v["version"] for v in showing] == [taken.version]
    assert showing[0]["messages"][0]["text"] == "mind the gap"
    assert next(v["version"] for v in seen if v["version"] > sent_at) <= taken.version
    state = Runtime(ticker, setup.store).load("m1")
    assert (state.done, state.inbox_seen, state.messages) == (25, 1, ())
    assert setup.statuses() == ["completed"]


@pytest.mark.parametrize("setup", ["redis", "rabbitmq"], indirect=True)
def test_cancel_stops_a_running_worker_task_at_the_step_boundary(setup: Setup) -> None:
    """Cancelled once version 6 is seen: the worker stops at its next boundary (well
    within its lease's 60 s) and takes no step after the commit that cancels it. A
    task waiting for a reply, cancelled through the broker, is cancelled by a worker
    too; one that runs on completes. Counted: 1 completed, 2 cancelled."""
    log = setup.submit(ticker, "c1", target=200, delay=0.2)
    setup.submit(ticker, "c2", target=3, ask_at=1)
    setup.wait("c2 to ask", lambda: setup.status("c2") == "waiting_user")
    setup.wait("c1 to run", lambda: setup.version("c1") >= 6)
    out = setup.cli("cancel", "c1", "--reason", "not needed any more")
    assert out.returncode == 0, out.stderr
    took = setup.wait("c1 to be cancelled", lambda: setup.status("c1") == "cancelled")
    assert took < 30
    events = setup.store.events("c1")
    last = events[-1]
    assert (last.actor, last.action["kind"], last.action["status"]) == (
        "human",
        "cancel",
        "cancelled",
    )
    assert (last.action["actor"], last.action["reason"]) == ("tester", "not needed any more")
    assert all(e.version < last.version for e in events if e.actor == "policy")
    assert all(v["version"] < last.version for v in views(log))
    assert Runtime(ticker, setup.store).load("c1").done < 200
    out = setup.cli("cancel", "c2")
    assert out.returncode == 0, out.stderr
    setup.wait("c2 to be cancelled", lambda: setup.status("c2") == "cancelled")
    setup.submit(ticker, "c3", target=3)
    setup.wait("c3 to complete", lambda: setup.status("c3") == "completed")
    assert setup.statuses() == ["cancelled", "cancelled", "completed"]
    again = setup.cli("cancel", "c1")
    assert again.returncode == 2
    assert again.stderr.strip().count("\n") == 0
    assert "has ended (cancelled)" in again.stderr


def test_an_interrupt_wakes_a_task_waiting_on_a_worker(setup: Setup) -> None:
    """``messages="interrupt"``: a task waiting for a reply runs again on a worker with
    the message first, without any reply; it then completes."""
    log = setup.submit(interrupting, "i1", target=3, ask_at=1)
    setup.wait("i1 to ask", lambda: setup.status("i1") == "waiting_user")
    out = setup.cli("send", "i1", "never mind the question")
    assert out.returncode == 0, out.stderr
    setup.wait("i1 to complete", lambda: setup.status("i1") == "completed")
    [shown] = [v for v in views(log) if v["messages"]]
    assert shown["messages"][0]["urgent"] is True
    assert shown["messages"][0]["interrupted"] == "tick 1: go on?"
    assert shown["inputs"] == []  # no reply answered the question
    assert setup.statuses() == ["completed"]
