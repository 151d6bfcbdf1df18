"""Workers never run a task under a definition it is not pinned to (issue 26, point 1).

Without routing a worker dead-letters such a task with the reason; with routing it
forwards the task to its definition's queue, where a worker that has that definition
completes it. Judged without a broker first (``Advancer``), then once with real
``skillstate worker`` processes on a Redis broker and a Postgres store.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from skillstate import Agent, Runtime
from skillstate.store.base import Store
from skillstate.store.sqlite import SQLiteStore
from skillstate.workers import Advancer, Message, WorkerSettings
from skillstate.workers.routing import base_queue, definition_queue, worker_queues
from tests import definition_support
from tests.definition_support import RENAME, build
from tests.workers_support import ROOT

REF = "tests.definition_support:agent"


class Sent:
    """The enqueue callback: what a slice sent, and whether it still held the lease."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.messages: list[tuple[Message, bool]] = []

    def __call__(self, message: Message, countdown: float) -> None:
        self.messages.append((message, self.store.lease(message.task_id) is not None))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    db = SQLiteStore(tmp_path / "state.db")
    yield db
    db.close()


def definition(name: str) -> Agent[Any]:
    """A fresh fetcher at one definition, importable as ``REF`` (as one deploy's code is)."""
    made = {
        "v1": build,
        "v2": lambda: build("download"),
        "v2_patched": lambda: build("download", patches=[RENAME]),
    }[name]()
    made.ref = REF
    return made


def worker(
    store: Store, agent: Agent[Any], monkeypatch: pytest.MonkeyPatch, **options: Any
) -> Advancer:
    """An advancer whose import of ``REF`` gives ``agent`` (the code this worker runs)."""
    monkeypatch.setattr(definition_support, "agent", agent)
    settings = WorkerSettings(
        store_url=store.url, lease_ttl=5.0, agents=frozenset({REF}), **options
    )
    return Advancer(store, settings)


def started(store: Store, agent: Agent[Any], task_id: str, steps: int = 1) -> int:
    runtime = Runtime(agent, store)
    runtime.start(task_id)
    return runtime.run(task_id, max_steps=steps).state.version


def ran(store: Store, task_id: str) -> list[str]:
    events = store.events(task_id)
    return [e.skill for e in events if e.skill and e.verdict and e.verdict.ok]


class TestAdvancer:
    def test_a_worker_of_another_definition_dead_letters_the_task(
        self, store: Store, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """No routing: the task fails with the reason in its error log; nothing runs."""
        version = started(store, definition("v1"), "t1")
        sent = Sent(store)
        outcome = worker(store, definition("v2"), monkeypatch).advance(
            Message("t1", version, "m1"), sent
        )
        assert outcome.kind == "dead_letter"
        assert "skill 'fetch' removed" in outcome.detail
        state = Runtime(definition("v1"), store).load("t1")
        assert state.status.value == "failed"
        assert state.errors[-1].kind == "dead_letter"
        assert "skill 'fetch' removed, skill 'download' added" in state.errors[-1].message
        assert state.definition == definition("v1").definition.ref  # still pinned to v1
        assert ran(store, "t1") == ["prepare"]
        assert sent.messages == []
        assert store.lease("t1") is None

    def test_the_worker_log_says_why(self, caplog: pytest.LogCaptureFixture) -> None:
        pytest.importorskip("celery", reason="pip install 'skillstate[celery]'")
        from skillstate.workers.advance import Outcome
        from skillstate.workers.celery_app import _log

        with caplog.at_level(logging.INFO, logger="skillstate.workers"):
            _log(Message("t1", 2), Outcome("dead_letter", 3, detail="skill 'fetch' removed"))
        [record] = caplog.records
        assert record.levelno == logging.WARNING
        assert "dead_letter" in record.getMessage()
        assert "skill 'fetch' removed" in record.getMessage()

    def test_routing_sends_tasks_to_a_worker_with_their_definition(
        self, store: Store, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Two tasks of v1 and one of v2 on one queue; the v2 worker runs its own and
        forwards the others, which the v1 worker completes. 3 completed."""
        v1, v2 = definition("v1"), definition("v2")
        versions = {"a": started(store, v1, "a"), "b": started(store, v1, "b")}
        versions["c"] = _created(store, v2, "c")  # a v2 task, not started yet
        new = worker(store, v2, monkeypatch, route_definitions=True)
        sent = Sent(store)
        outcomes = {t: new.advance(Message(t, v, f"m-{t}"), sent).kind for t, v in versions.items()}
        assert outcomes == {"a": "rerouted", "b": "rerouted", "c": "completed"}
        queue = f"skillstate.def-{v1.definition.short}"
        assert [(m.task_id, m.queue, held) for m, held in sent.messages] == [
            ("a", queue, True),
            ("b", queue, True),
        ]
        assert all(m.after.startswith("m-") for m, _ in sent.messages)  # a hand-over
        old = worker(store, definition("v1"), monkeypatch, route_definitions=True)
        for message, _ in sent.messages:
            assert old.advance(message, Sent(store)).kind == "completed"
        statuses = [Runtime(v1, store).load(t).status.value for t in "abc"]
        assert statuses.count("completed") == 3
        assert ran(store, "a") == ran(store, "b") == ["prepare", "fetch", "summarize"]
        assert ran(store, "c") == ["prepare", "download", "summarize"]

    def test_a_message_on_its_definitions_queue_is_not_bounced(
        self, store: Store, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A worker without the definition, consuming its queue by mistake: dead letter."""
        v1 = definition("v1")
        version = started(store, v1, "t1")
        queue = definition_queue("skillstate", v1.definition.ref)
        routing = worker(store, definition("v2"), monkeypatch, route_definitions=True)
        sent = Sent(store)
        outcome = routing.advance(Message("t1", version, "m1", queue=queue), sent)
        assert (outcome.kind, sent.messages) == ("dead_letter", [])

    def test_a_worker_that_declares_the_change_runs_the_task(
        self, store: Store, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        version = started(store, definition("v1"), "t1")
        patched = worker(store, definition("v2_patched"), monkeypatch)
        assert patched.advance(Message("t1", version, "m1"), Sent(store)).kind == "completed"
        assert ran(store, "t1") == ["prepare", "download", "summarize"]


@pytest.mark.services
def test_requeue_accepts_the_definition_of_a_dead_letter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``skillstate requeue ID --accept-definition``: re-pinned by a person, reopened, sent;
    a worker of that definition then completes it."""
    pytest.importorskip("celery", reason="pip install 'skillstate[celery]'")
    from tests.contract.backends import REDIS_URL, redis_reachable, require_service

    require_service("Redis", *redis_reachable())
    broker = REDIS_URL.rsplit("/", 1)[0] + "/7"
    queue = f"skillstate-def-test-{uuid.uuid4().hex[:8]}"
    db_path = tmp_path / "state.db"
    store = SQLiteStore(db_path)
    try:
        version = started(store, definition("v1"), "t1")
        bumped = build(fetch_version="2")
        bumped.ref = REF
        assert (
            worker(store, bumped, monkeypatch)
            .advance(Message("t1", version, "m1"), Sent(store))
            .kind
            == "dead_letter"
        )
        env = {
            **os.environ,
            "SKILLSTATE_TEST_DEFINITION": "v1_fetch2",
            "SKILLSTATE_AGENTS": REF,
            "SKILLSTATE_ACTOR": "ops-bob",
        }
        command = [
            sys.executable, "-m", "skillstate", "requeue", "t1", "--accept-definition",
            "--broker", broker, "--queue", queue, "--store", f"sqlite:///{db_path}",
        ]  # fmt: skip
        done = subprocess.run(
            command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, done.stderr
        # dead letter (+1), accepted (+2), reopened (+3)
        assert f"requeued t1 (version {version + 3}, running)" in done.stdout
        accepted = [e for e in store.events("t1") if e.action.get("kind") == "definition"]
        assert [(e.actor, e.action["actor"]) for e in accepted] == [("human", "ops-bob")]
        message = Message("t1", version + 3, "m2", queue=queue)
        assert worker(store, bumped, monkeypatch).advance(message, Sent(store)).kind == "completed"
        assert ran(store, "t1") == ["prepare", "fetch", "summarize"]
    finally:
        store.close()
        from kombu import Connection

        with Connection(broker) as conn:
            conn.default_channel.queue_delete(queue)


def _created(store: Store, agent: Agent[Any], task_id: str) -> int:
    return Runtime(agent, store).start(task_id).version


def test_queue_names() -> None:
    ref = "sha256:" + "0123456789abcdef" * 4
    assert definition_queue("skillstate", ref) == "skillstate.def-0123456789ab"
    assert definition_queue("skillstate.def-0123456789ab", ref) == "skillstate.def-0123456789ab"
    assert base_queue("jobs.def-0123456789ab") == "jobs"
    assert base_queue("jobs.def-short") == "jobs.def-short"
    assert worker_queues(["a", "b"], [ref, ref]) == [
        "a",
        "b",
        "a.def-0123456789ab",
        "b.def-0123456789ab",
    ]


# ---------------------------------------------------------------- real workers


@pytest.mark.services
def test_real_workers_route_a_task_to_its_definition(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A v2 worker with --route-definitions forwards a v1 task; a v1 worker started
    later completes it (Redis broker, Postgres store)."""
    pytest.importorskip("celery", reason="pip install 'skillstate[celery]'")
    from skillstate.store import open_store
    from skillstate.workers.celery_app import enqueue, make_app
    from tests.contract.backends import (
        REDIS_URL,
        drop_postgres_schemas,
        postgres_url_for,
        redis_reachable,
        require_service,
    )

    require_service("Redis", *redis_reachable())
    broker = REDIS_URL.rsplit("/", 1)[0] + "/7"
    url = postgres_url_for(tmp_path)
    db = open_store(url)
    queue = f"skillstate-def-test-{uuid.uuid4().hex[:8]}"
    workers: list[subprocess.Popen[bytes]] = []

    def start(definition_name: str) -> Path:
        log = tmp_path / f"worker-{definition_name}.log"
        env = {"SKILLSTATE_TEST_DEFINITION": definition_name}
        command = [
            sys.executable, "-m", "skillstate", "worker", "--broker", broker, "--store", url,
            "--queues", queue, "--agent", REF, "--route-definitions", "--sweep-every", "0",
        ]  # fmt: skip
        with log.open("ab") as out:
            workers.append(
                subprocess.Popen(
                    command,
                    cwd=ROOT,
                    env={**os.environ, **env},
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            )
        return log

    def wait(what: str, done: Callable[[], bool], log: Path) -> None:
        deadline = time.monotonic() + 120
        while not done():
            if any(w.poll() is not None for w in workers):
                pytest.fail(f"a worker exited before {what}:\n{log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"timed out waiting for {what}:\n{log.read_text()[-3000:]}")
            time.sleep(0.05)

    try:
        v1 = definition("v1")
        version = started(db, v1, "r1")
        new_log = start("v2")
        app = make_app(broker)
        enqueue(app, Message("r1", version, queue=queue))
        app.close()
        wait(
            "the v2 worker to forward the task", lambda: "rerouted" in new_log.read_text(), new_log
        )
        assert db.load("r1").version == version  # it ran nothing
        old_log = start("v1")
        wait("the v1 worker to complete it", lambda: _status(db, "r1") == "completed", old_log)
        assert ran(db, "r1") == ["prepare", "fetch", "summarize"]
        assert f"{queue}.def-{v1.definition.short}" in new_log.read_text()
    finally:
        for process in workers:
            if process.poll() is None:
                process.terminate()
        for process in workers:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        db.close()
        from kombu import Connection

        with Connection(broker) as conn:
            for name in (queue, f"{queue}.def-{definition('v1').definition.short}"):
                conn.default_channel.queue_delete(name)
        drop_postgres_schemas()


def _status(store: Store, task_id: str) -> str | None:
    return {h.task_id: h.status for h in store.heads()}.get(task_id)
