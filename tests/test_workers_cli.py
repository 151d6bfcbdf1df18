"""The queue commands on a real broker: ``submit --input``, ``reply --broker``, ``requeue``.

No worker runs here: each test reads the message the command sent straight off its
own RabbitMQ queue (a missing RabbitMQ skips, or fails with
``SKILLSTATE_REQUIRE_SERVICES=1``) and the task from its SQLite store.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skillstate import Runtime
from skillstate.examples import ledger, ticket
from skillstate.store import open_store
from skillstate.workers.crashes import dead_letter, reason_to_fail
from tests.cli_support import run_env
from tests.contract.backends import require_service

pytest.importorskip("celery", reason="pip install 'skillstate[celery]'")

pytestmark = pytest.mark.services

RABBIT = os.environ.get("SKILLSTATE_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")
TICKET = "skillstate.examples.ticket:agent"


@pytest.fixture
def queue() -> Iterator[str]:
    """A queue of this test's own on RabbitMQ, deleted afterwards."""
    from kombu import Connection

    try:
        with Connection(RABBIT, connect_timeout=2) as conn:
            conn.ensure_connection(max_retries=1)
    except Exception as exc:
        require_service("RabbitMQ", False, f"{RABBIT}: {exc}")
    name = f"skillstate-cli-{uuid.uuid4().hex[:8]}"
    yield name
    with Connection(RABBIT) as conn:
        conn.default_channel.queue_delete(name)


def _messages(queue: str) -> list[list[Any]]:
    """The (args, kwargs, embed) bodies waiting in ``queue``, taken off it."""
    from kombu import Connection

    bodies = []
    with Connection(RABBIT) as conn:
        waiting = conn.SimpleQueue(queue)
        while True:
            try:
                message = waiting.get(timeout=2)
            except waiting.Empty:
                break
            assert message.headers["task"] == "skillstate.advance"
            bodies.append(json.loads(message.body))
            message.ack()
        waiting.close()
    return bodies


def _cli(tmp_path: Path, *args: str, broker: str | None = None) -> tuple[int, str, str]:
    """``skillstate ARGS`` on this test's store; ``$SKILLSTATE_BROKER`` set only if given."""
    return run_env(tmp_path, {"SKILLSTATE_BROKER": broker}, *args)


def _head(tmp_path: Path, task_id: str) -> dict[str, Any]:
    store = open_store(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        return store.load(task_id).state
    finally:
        store.close()


def _tasks(tmp_path: Path) -> list[str]:
    store = open_store(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        return store.tasks()
    finally:
        store.close()


def _parked_ticket(tmp_path: Path) -> int:
    """Ticket t1 waiting for the user's description; returns its version."""
    store = open_store(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        runtime = Runtime(ticket.agent, store)
        runtime.start("t1")
        result = runtime.run("t1")
        assert result.stopped == "waiting_user"
        return result.state.version
    finally:
        store.close()


class TestSubmit:
    def test_inputs_answer_the_questions_in_turn(self, tmp_path: Path, queue: str) -> None:
        """--input replies wait on the card (the message names only id+version) and each
        question takes the next one, as ``run --input`` gives them."""
        code, out, err = _cli(
            tmp_path, "submit", TICKET, "--task-id", "s1", "--queue", queue,
            "--input", "VPN keeps dropping", "--input", "P2", broker=RABBIT,
        )  # fmt: skip
        assert code == 0, err
        assert "submitted s1 (version 1)" in out
        state = _head(tmp_path, "s1")
        assert state["replies_ahead"] == ["VPN keeps dropping", "P2"]
        assert (state["inputs"], state["inputs_received"]) == ([], 0)
        [(args, kwargs, _)] = _messages(queue)
        assert (args, kwargs) == (["s1", 1], {"attempt": 0})
        # What a worker does with the message: run the task from the store.
        store = open_store(f"sqlite:///{tmp_path / 'state.db'}")
        try:
            result = Runtime(ticket.agent, store).run("s1")
            events = store.events("s1")
        finally:
            store.close()
        assert result.stopped == "completed"
        assert (result.state.ticket_type, result.state.priority) == ("network", "P2")
        assert (result.state.replies_ahead, result.state.inputs_received) == ((), 2)
        replies = [e.action for e in events if e.action.get("kind") == "reply"]
        assert [(r["text"], r["index"], r.get("ahead")) for r in replies] == [
            ("VPN keeps dropping", 0, True),
            ("P2", 1, True),
        ]

    def test_a_reply_given_ahead_is_used_once(self, tmp_path: Path, queue: str) -> None:
        """A reply that did not serve its question is not given again: the task asks."""
        code, _, err = _cli(
            tmp_path, "submit", TICKET, "--task-id", "s3", "--queue", queue,
            "--input", "P3", broker=RABBIT,
        )  # fmt: skip
        assert code == 0, err
        store = open_store(f"sqlite:///{tmp_path / 'state.db'}")
        try:
            runtime = Runtime(ticket.agent, store)
            # "P3" answers the first question (the description): not a ticket type.
            first = runtime.run("s3")
            assert first.state.replies_ahead == ()
            assert first.stopped == "waiting_user"
        finally:
            store.close()

    def test_an_input_the_agent_refuses_writes_nothing(self, tmp_path: Path, queue: str) -> None:
        code, _, err = _cli(
            tmp_path, "submit", TICKET, "--task-id", "s2", "--queue", queue,
            "--input", "x" * 30_000, broker=RABBIT,
        )  # fmt: skip
        assert code == 2, err
        assert "--input refused" in err
        assert _messages(queue) == []

    def test_a_set_value_with_a_control_character_writes_nothing(
        self, tmp_path: Path, queue: str
    ) -> None:
        """``submit --set`` checks values as ``run --set`` and ``set`` do (it did not)."""
        code, _, err = _cli(
            tmp_path, "submit", TICKET, "--task-id", "s3", "--queue", queue,
            "--set", 'description="a\\u001bb"', broker=RABBIT,
        )  # fmt: skip
        assert code == 2, err
        assert "control character" in err
        assert _messages(queue) == []
        assert not (tmp_path / "state.db").exists() or "s3" not in _tasks(tmp_path)


class TestReply:
    def test_with_a_broker_it_commits_and_enqueues(self, tmp_path: Path, queue: str) -> None:
        """The reply is committed here; the rest of the task is the workers' job."""
        parked = _parked_ticket(tmp_path)
        code, out, err = _cli(
            tmp_path, "reply", "t1", "VPN keeps dropping", "--queue", queue, "--broker", RABBIT
        )
        assert code == 0, err
        assert "enqueued" in out
        state = _head(tmp_path, "t1")
        assert (state["status"], state["version"]) == ("running", parked + 1)
        assert state["inputs"][-1]["text"] == "VPN keeps dropping"
        [(args, _, _)] = _messages(queue)
        assert args == ["t1", parked + 1]

    def test_without_a_broker_it_runs_here(self, tmp_path: Path, queue: str) -> None:
        """No --broker and no $SKILLSTATE_BROKER: reply runs the task on, as before."""
        parked = _parked_ticket(tmp_path)
        code, _, err = _cli(tmp_path, "reply", "t1", "VPN keeps dropping", "-q")
        assert code == 0, err
        state = _head(tmp_path, "t1")
        assert state["version"] > parked + 1  # the reply, then decisions taken here
        assert state["question"]  # it went on until its next question (the priority)
        assert _messages(queue) == []


class TestRequeue:
    def test_a_dead_letter_is_reopened_and_sent(self, tmp_path: Path, queue: str) -> None:
        store = open_store(f"sqlite:///{tmp_path / 'state.db'}")
        runtime = Runtime(ledger.agent, store)
        runtime.start("d1", ledger=str(tmp_path / "ledger.txt"), target=2)
        dead_letter(runtime, "d1", reason_to_fail("the provider failed 8 times in a row"))
        store.close()
        assert _head(tmp_path, "d1")["status"] == "failed"
        code, out, err = _cli(tmp_path, "requeue", "d1", "--queue", queue, "--broker", RABBIT)
        assert code == 0, err
        assert "requeued d1" in out
        state = _head(tmp_path, "d1")
        assert state["status"] == "running"
        [(args, _, _)] = _messages(queue)
        assert args == ["d1", state["version"]]

    def test_a_task_that_did_not_dead_letter_is_refused(self, tmp_path: Path, queue: str) -> None:
        parked = _parked_ticket(tmp_path)
        code, _, err = _cli(tmp_path, "requeue", "t1", "--queue", queue, "--broker", RABBIT)
        assert code == 2
        assert "not dead-lettered" in err
        assert _head(tmp_path, "t1")["version"] == parked
        assert _messages(queue) == []


class TestRequeueStranded:
    def _tasks(self, tmp_path: Path) -> None:
        """s1 created and s2 mid-run, both with no lease and no message; t1 waiting."""
        store = open_store(f"sqlite:///{tmp_path / 'state.db'}")
        try:
            runtime = Runtime(ledger.agent, store)
            runtime.start("s1", ledger=str(tmp_path / "ledger.txt"), target=3)
            runtime.start("s2", ledger=str(tmp_path / "ledger.txt"), target=3)
            runtime.run("s2", max_steps=2)
        finally:
            store.close()
        _parked_ticket(tmp_path)

    def test_every_stranded_task_is_sent_and_printed(self, tmp_path: Path, queue: str) -> None:
        self._tasks(tmp_path)
        code, out, err = _cli(
            tmp_path, "requeue", "--stranded", "--older-than", "0", "--queue", queue,
            "--broker", RABBIT,
        )  # fmt: skip
        assert code == 0, err
        assert "requeued s1 (created, v1, no lease" in out
        assert "requeued s2 (running, " in out
        assert "2 stranded task(s) requeued" in out
        sent = sorted((args, kwargs) for args, kwargs, _ in _messages(queue))
        assert [args for args, _ in sent] == [["s1", 1], ["s2", _head(tmp_path, "s2")["version"]]]
        # Each names the sweeper's lease that holds its task until a worker takes it over.
        assert all(kwargs["after"].startswith("sweeper@") for _, kwargs in sent)
        code, out, err = _cli(
            tmp_path, "requeue", "--stranded", "--older-than", "0", "--queue", queue,
            "--broker", RABBIT,
        )  # fmt: skip
        assert code == 0, err
        assert "0 stranded task(s) requeued" in out  # held for their messages: not again
        assert _messages(queue) == []

    def test_json_and_the_threshold(self, tmp_path: Path, queue: str) -> None:
        self._tasks(tmp_path)
        code, out, err = _cli(
            tmp_path, "requeue", "--stranded", "--json", "--queue", queue, "--broker", RABBIT
        )
        assert code == 0, err
        assert json.loads(out) == {"queue": queue, "requeued": []}  # 600 s by default
        assert _messages(queue) == []
        code, out, err = _cli(
            tmp_path, "requeue", "--stranded", "--json", "--older-than", "0", "--queue", queue,
            "--broker", RABBIT,
        )  # fmt: skip
        assert code == 0, err
        found = json.loads(out)["requeued"]
        assert [(t["task_id"], t["status"]) for t in found] == [
            ("s1", "created"),
            ("s2", "running"),
        ]
        assert [t["lease_holder"] for t in found] == [None, None]  # none was left to them
        assert len(_messages(queue)) == 2

    @pytest.mark.parametrize(
        "args",
        [
            ["requeue"],
            ["requeue", "s1", "--stranded"],
            ["requeue", "s1", "--json"],
        ],
    )
    def test_a_task_or_stranded(self, tmp_path: Path, queue: str, args: list[str]) -> None:
        self._tasks(tmp_path)
        code, _, err = _cli(tmp_path, *args, "--queue", queue, "--broker", RABBIT)
        assert code == 2
        assert "Traceback" not in err
        assert len(err.strip().splitlines()) == 1, err
        assert _messages(queue) == []
