"""Messages to a running task and cancel, in one process (``skillstate.control.inbox``).

Real workers on a real broker are in ``test_control_workers.py``; the store's inbox
itself is in the contract suite (``tests/contract/test_inbox.py``).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from skillstate import Runtime
from skillstate.control.inbox import cancel, has_unread, send
from skillstate.effects import files
from skillstate.engine.aruntime import AsyncRuntime
from skillstate.engine.draft import Draft
from skillstate.engine.results import StepReport
from skillstate.engine.transcript import conversation
from skillstate.errors import CompensationFailed, MessageRefused
from skillstate.examples import ledger
from skillstate.state.model import TaskStatus
from skillstate.store.aio import ThreadedStore
from skillstate.store.base import Store
from skillstate.store.sqlite import SQLiteStore
from tests.control_support import interrupting, rejecting, stamper, ticker
from tests.workers_support import ROOT


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    db = SQLiteStore(tmp_path / "state.db")
    yield db
    db.close()


def views(path: Path) -> list[dict[str, Any]]:
    """What each decision's view showed, in order (tests.control_support.record)."""
    return [json.loads(line) for line in path.read_text().splitlines()]


def set_card(runtime: Runtime[Any], task_id: str, **fields: Any) -> None:
    """Commit runtime-owned card fields as they would be mid-task (a test's shortcut)."""
    head = runtime.load(task_id)
    draft = Draft(after=head.replace(**fields))
    runtime._committer.commit(head, draft, {"kind": "test"}, "runtime")


def kinds(store: Store, task_id: str) -> list[str]:
    return [str(e.action.get("kind")) for e in store.events(task_id)]


class SendAt:
    """An observer that sends a message once the task has committed version ``at``:
    the message arrives while the run is between two steps, as one from another
    process arrives while a worker runs a step."""

    def __init__(self, store: Store, agent: Any, at: int, text: str) -> None:
        self.store, self.agent, self.at, self.text = store, agent, at, text
        self.seq: int | None = None

    def __call__(self, report: StepReport[Any]) -> None:
        if self.seq is None and report.after.version >= self.at:
            self.seq = send(self.store, self.agent, report.after.task_id, self.text, actor="ann")


class TestEnqueue:
    def test_the_next_decision_sees_a_message_once(self, store: Store, tmp_path: Path) -> None:
        """Sent mid-run: taken at the next boundary in one commit, shown to exactly the
        next decision (view field and rendered text), then off the card; the event log
        keeps who sent what."""
        log = tmp_path / "views.jsonl"
        runtime = Runtime(ticker, store, observer=SendAt(store, ticker, 3, "also count sheep"))
        runtime.start("t", target=5, log=str(log))
        result = runtime.run("t")
        assert result.stopped == "completed"
        seen = views(log)
        showing = [v for v in seen if v["messages"]]
        assert len(showing) == 1
        [shown] = showing
        assert shown["messages"] == [
            {"seq": 1, "text": "also count sheep", "urgent": False, "interrupted": None}
        ]
        assert shown["rendered"] == ["also count sheep"]
        assert shown["first_line_urgent"] == []
        events = store.events("t")
        [taken] = [e for e in events if e.action.get("kind") == "inbox"]
        assert (taken.actor, taken.action["read"], taken.action["strategy"]) == (
            "user",
            1,
            "enqueue",
        )
        assert taken.action["messages"] == [{"seq": 1, "actor": "ann", "text": "also count sheep"}]
        # The decision right after the commit that took it is the one that saw it.
        assert shown["version"] == taken.version
        assert seen.index(shown) == len([v for v in seen if v["version"] < taken.version])
        final = runtime.load("t")
        assert (final.messages, final.inbox_seen) == ((), 1)
        # A history-driven policy's conversation has it as a user message too.
        said = [m.content for m in conversation(store, "t") if m.role == "user"]
        assert "also count sheep" in said

    def test_a_message_resets_the_stall_guard(self, store: Store) -> None:
        """Like a reply, a message is new information: no_progress starts over."""
        runtime = Runtime(ticker, store)
        runtime.start("t", target=3)
        set_card(runtime, "t", no_progress=4)
        send(store, ticker, "t", "hello")
        runtime.run("t", max_steps=1)
        [taken] = [e for e in store.events("t") if e.action.get("kind") == "inbox"]
        assert store.checkpoint("t", taken.version - 1).state["no_progress"] == 4
        assert store.checkpoint("t", taken.version).state["no_progress"] == 0

    def test_a_waiting_task_keeps_waiting(self, store: Store, tmp_path: Path) -> None:
        """Enqueued for a task waiting for a reply: taken, the question stays open, and
        the decision after the reply sees both."""
        log = tmp_path / "views.jsonl"
        runtime = Runtime(ticker, store)
        runtime.start("t", target=3, ask_at=1, log=str(log))
        assert runtime.run("t").stopped == "waiting_user"
        send(store, ticker, "t", "by the way: count slowly")
        waiting = runtime.run("t")
        assert waiting.stopped == "waiting_user"
        assert waiting.state.question == "tick 1: go on?"
        assert [m.text for m in waiting.state.messages] == ["by the way: count slowly"]
        assert runtime.run("t", inputs=["yes"], inputs_from=0).stopped == "completed"
        after_reply = [v for v in views(log) if v["inputs"] == ["yes"]]
        assert after_reply[0]["messages"][0]["text"] == "by the way: count slowly"
        assert sum(1 for v in views(log) if v["messages"]) == 1

    def test_a_message_can_revise_the_task(self, store: Store) -> None:
        """A message counts as the user's word for ``revise``, as a reply does."""
        from skillstate import Revise, ScriptedPolicy
        from skillstate.engine.agent import Agent

        def decide(view: Any) -> Any:
            if view.messages:
                return Revise(goal=view.messages[0].text, reason="the user said so")
            from tests.control_support import decide as tick

            return tick(view)

        reviser: Agent[Any] = replace(ticker, name="reviser", policy=ScriptedPolicy(decide))
        runtime = Runtime(reviser, store)
        runtime.start("t", target=2)
        runtime.run("t", max_steps=1)
        send(store, reviser, "t", "count to two, then stop")
        runtime.run("t", max_steps=1)
        assert runtime.load("t").goal == "count to two, then stop"
        assert runtime.load("t").messages == ()


class TestInterrupt:
    def test_an_interrupt_comes_first(self, store: Store, tmp_path: Path) -> None:
        """The next decision lists it first, marked urgent, above the plan and facts."""
        log = tmp_path / "views.jsonl"
        runtime = Runtime(
            interrupting, store, observer=SendAt(store, interrupting, 2, "stop and report")
        )
        runtime.start("t", target=3, log=str(log))
        assert runtime.run("t").stopped == "completed"
        [shown] = [v for v in views(log) if v["messages"]]
        assert shown["messages"][0]["urgent"] is True
        assert shown["first_line_urgent"] == [
            "URGENT message from ann, read this first: stop and report"
        ]
        assert shown["urgent_at"] == shown["status_at"] + 1

    def test_an_interrupt_ends_a_wait_for_a_reply(self, store: Store, tmp_path: Path) -> None:
        """Waiting for a reply with replies given ahead: the interrupt runs the task at
        once, before any reply answers the question; the question is kept on the message
        and the replies ahead wait for the next question."""
        log = tmp_path / "views.jsonl"
        runtime = Runtime(interrupting, store)
        runtime.start("t", target=2, ask_at=1, log=str(log))
        assert runtime.run("t").stopped == "waiting_user"
        set_card(runtime, "t", replies_ahead=("later",))
        send(store, interrupting, "t", "skip the question", actor="bob")
        send(store, interrupting, "t", "and hurry")
        result = runtime.run("t", max_steps=1)
        assert result.stopped == "max_steps"
        assert result.state.replies_ahead == ("later",)
        last = views(log)[-1]
        assert last["status"] == "running"
        assert [m["text"] for m in last["messages"]] == ["skip the question", "and hurry"]
        assert {m["interrupted"] for m in last["messages"]} == {"tick 1: go on?"}
        assert last["first_line_urgent"][0].startswith(
            "URGENT message from bob, read this first (it interrupts your question: tick 1: "
        )
        [taken] = [e for e in store.events("t") if e.action.get("kind") == "inbox"]
        assert taken.action["interrupted"] == "tick 1: go on?"


class TestReject:
    def test_send_refuses_at_once(self, store: Store) -> None:
        """The agent rejects messages: one line, nothing posted."""
        Runtime(rejecting, store).start("t")
        with pytest.raises(MessageRefused, match="rejects messages") as info:
            send(store, rejecting, "t", "hello?")
        assert "\n" not in str(info.value)
        assert store.inbox("t") == []

    def test_a_message_that_arrives_anyway_is_recorded_rejected(
        self, store: Store, tmp_path: Path
    ) -> None:
        """Posted straight to the store: taken, never shown, recorded as rejected."""
        log = tmp_path / "views.jsonl"
        runtime = Runtime(rejecting, store)
        runtime.start("t", target=2, log=str(log))
        store.post("t", "message", {"text": "sneaky", "actor": "eve"})
        assert runtime.run("t").stopped == "completed"
        assert all(v["messages"] == [] for v in views(log))
        [taken] = [e for e in store.events("t") if e.action.get("kind") == "inbox"]
        assert taken.action["rejected"] == [{"seq": 1, "actor": "eve", "text": "sneaky"}]
        assert runtime.load("t").inbox_seen == 1


class TestCancel:
    def test_cancel_stops_at_the_boundary(self, store: Store, tmp_path: Path) -> None:
        """A cancel posted mid-run: no decision after the boundary that takes it."""
        log = tmp_path / "views.jsonl"

        def cancel_at_3(report: StepReport[Any]) -> None:
            if report.after.version == 3:
                cancel(store, ticker, "t", reason="not needed", actor="ops")

        runtime = Runtime(ticker, store, observer=cancel_at_3)
        runtime.start("t", target=10, log=str(log))
        result = runtime.run("t")
        assert result.stopped == "cancelled"
        assert result.state.status is TaskStatus.CANCELLED
        assert result.state.status.is_terminal
        events = store.events("t")
        last = events[-1]
        assert (last.actor, last.action["kind"], last.action["status"]) == (
            "human",
            "cancel",
            "cancelled",
        )
        assert (last.action["reason"], last.action["actor"]) == ("not needed", "ops")
        assert last.version == 4
        assert all(v["version"] < last.version for v in views(log))
        assert result.state.done == 2

    def test_cancel_of_an_ended_task_is_refused(self, store: Store) -> None:
        """One line, nothing posted, for a completed task (and a cancelled one)."""
        runtime = Runtime(ticker, store)
        runtime.start("t", target=1)
        runtime.run("t")
        with pytest.raises(MessageRefused, match="has ended \\(completed\\)"):
            cancel(store, ticker, "t")
        with pytest.raises(MessageRefused, match="has ended"):
            send(store, ticker, "t", "too late")
        assert store.inbox("t") == []

    def test_a_cancel_wins_over_messages_and_ends_a_wait(self, store: Store) -> None:
        """A task waiting for a reply, a message and a cancel: cancelled, message dropped."""
        runtime = Runtime(ticker, store)
        runtime.start("t", target=3, ask_at=0)
        assert runtime.run("t").stopped == "waiting_user"
        send(store, ticker, "t", "one more thing")
        cancel(store, ticker, "t", reason="user left")
        assert has_unread(store, "t")
        result = runtime.run("t")
        assert result.stopped == "cancelled"
        assert result.state.question is None
        assert result.state.messages == ()
        assert store.events("t")[-1].action["dropped"] == [1]
        assert not has_unread(store, "t")

    def test_cancel_compensate_leaves_no_live_entry(self, store: Store, tmp_path: Path) -> None:
        """The ledger demo, 4 of 8 entries written: every entry retracted, newest first,
        and only then cancelled."""
        path = str(tmp_path / "ledger.txt")
        runtime = Runtime(ledger.agent, store)
        runtime.start("L", ledger=path, target=8)
        runtime.run("L", max_steps=4)
        assert len(files.entries(path)) == 4
        cancel(store, ledger.agent, "L", compensate=True, reason="wrong file", actor="ops")
        result = runtime.run("L")
        assert result.stopped == "cancelled"
        assert files.entries(path) == []
        events = store.events("L")
        undone = [e.action["key"] for e in events if e.action.get("kind") == "compensate"]
        assert [int(k.split(":")[1].split("-")[0]) for k in undone] == [4, 3, 2, 1]
        assert [e.action.get("status") for e in events if e.action.get("kind") == "cancel"] == [
            "cancelling",
            "cancelled",
        ]
        assert result.state.compensations == ()

    def test_compensate_is_refused_without_rollback_hooks(self, store: Store) -> None:
        """An effect nobody can undo: refused before anything is posted."""
        runtime = Runtime(stamper, store)
        runtime.start("s", target=3)
        runtime.run("s", max_steps=2)
        assert "effect" in kinds(store, "s")
        with pytest.raises(MessageRefused, match=r"stamp .* has no rollback hook"):
            cancel(store, stamper, "s", compensate=True)
        assert store.inbox("s") == []
        cancel(store, stamper, "s")  # without undoing: the effect stays
        assert Runtime(stamper, store).run("s").stopped == "cancelled"

    def test_a_failed_compensation_stays_queued(
        self, store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The rollback hook fails: the task stays running with the queue, and says so;
        once the cause is fixed a resume finishes the cancel."""
        path = str(tmp_path / "ledger.txt")
        runtime = Runtime(ledger.agent, store)
        runtime.start("L", ledger=path, target=5)
        runtime.run("L", max_steps=2)
        cancel(store, ledger.agent, "L", compensate=True)
        real = files.retract

        def broken(*args: Any, **kwargs: Any) -> bool:
            raise OSError("disk full")

        monkeypatch.setattr(files, "retract", broken)
        with pytest.raises(CompensationFailed, match="stays queued"):
            runtime.run("L")
        stuck = runtime.load("L")
        assert stuck.status is TaskStatus.RUNNING
        assert len(stuck.compensations) == 2
        assert stuck.cancelling is not None
        monkeypatch.setattr(files, "retract", real)
        assert runtime.run("L").stopped == "cancelled"
        assert files.entries(path) == []


_KILLER = """
import os, signal, sys
from skillstate.effects import files
from skillstate.engine.runtime import Runtime
from skillstate.examples import ledger
from skillstate.store.sqlite import SQLiteStore

real, count = files.retract, [0]

def retract(*args, **kwargs):
    done = real(*args, **kwargs)
    count[0] += 1
    if count[0] == int(sys.argv[2]):
        os.kill(os.getpid(), signal.SIGKILL)  # undone, not yet committed
    return done

files.retract = retract
Runtime(ledger.agent, SQLiteStore(sys.argv[1])).run("L")
"""


def test_kill_9_during_cancel_compensation(store: Store, tmp_path: Path) -> None:
    """kill -9 right after the 2nd of 4 undos, before its commit: the resume goes on
    with the queue; every entry is retracted exactly once and the cancel lands once."""
    path = str(tmp_path / "ledger.txt")
    runtime = Runtime(ledger.agent, store)
    runtime.start("L", ledger=path, target=6)
    runtime.run("L", max_steps=4)
    cancel(store, ledger.agent, "L", compensate=True, reason="kill test")
    db = str(tmp_path / "state.db")
    killed = subprocess.run(
        [sys.executable, "-c", _KILLER, db, "2"],
        cwd=ROOT,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert killed.returncode == -9, killed.stderr.decode()
    halfway = runtime.load("L")
    assert len(halfway.compensations) == 3  # the 2nd undo ran, its commit did not
    assert runtime.run("L").stopped == "cancelled"
    assert files.entries(path) == []
    raw = Path(path).read_text().splitlines()
    retractions = [line.split("\t")[0] for line in raw if line.startswith("-")]
    assert len(retractions) == 4
    assert len(set(retractions)) == 4
    events = store.events("L")
    undone = [e.action["key"] for e in events if e.action.get("kind") == "compensate"]
    assert len(undone) == len(set(undone)) == 4
    assert [e.action.get("status") for e in events if e.action.get("kind") == "cancel"] == [
        "cancelling",
        "cancelled",
    ]


def test_the_async_runtime_takes_messages_and_cancels(tmp_path: Path) -> None:
    """AsyncRuntime runs the same loop: a message is seen, then a cancel stops it."""
    log = tmp_path / "views.jsonl"
    sync = SQLiteStore(tmp_path / "state.db")
    Runtime(ticker, sync).start("t", target=20, log=str(log))

    async def go() -> str:
        runtime = AsyncRuntime(ticker, ThreadedStore(sync))
        await runtime.run("t", max_steps=2)
        assert await runtime.send("t", "async hello") == 1
        await runtime.run("t", max_steps=2)
        assert await runtime.cancel("t", reason="done with it") == 2
        return (await runtime.run("t")).stopped

    assert asyncio.run(go()) == "cancelled"
    assert sum(1 for v in views(log) if v["messages"]) == 1
    assert kinds(sync, "t")[-1] == "cancel"
    sync.close()


def test_the_environment_names_the_actor(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without an actor, $SKILLSTATE_ACTOR is who sent it."""
    monkeypatch.setenv("SKILLSTATE_ACTOR", "robot-7")
    Runtime(ticker, store).start("t")
    send(store, ticker, "t", "hi")
    assert store.inbox("t")[0].body["actor"] == "robot-7"
    monkeypatch.delenv("SKILLSTATE_ACTOR")
    cancel(store, ticker, "t")
    import getpass

    assert store.inbox("t")[1].body["actor"] == getpass.getuser()


DOCS = ROOT / "docs" / "control.md"


def _how_to(section: str, tmp_path: Path) -> list[str]:
    """Run the python block of ``section`` in docs/control.md as a script; its lines."""
    text = DOCS.read_text(encoding="utf-8")
    part = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    [example] = re.findall(r"```python\n(.*?)```", part, re.DOTALL)
    script = tmp_path / "example.py"
    script.write_text(example, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("SKILLSTATE_STORE", "SKILLSTATE_KEY")}
    ran = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    return ran.stdout.splitlines()


def test_the_messages_how_to_runs(tmp_path: Path) -> None:
    """docs/control.md, "Messages to a running task": it prints what its comments say."""
    assert _how_to("Messages to a running task", tmp_path) == [
        "1",
        "v3 saw ann: use the eco program",
        "waiting_user",
        "completed",
        "waiting_user",
        "v4 saw bo: yes, all of them (urgent)",
        "completed",
        "agent 'chores' rejects messages to running tasks (Agent(messages='reject')); "
        "nothing was sent",
    ]


def test_the_cancel_how_to_runs(tmp_path: Path) -> None:
    """docs/control.md, "Cancel": no live ledger entry is left, as its comments say."""
    assert _how_to("Cancel", tmp_path) == [
        "4",
        "cancelled cancelled",
        "[]",
        "['L1:4', 'L1:3', 'L1:2', 'L1:1']",
        "human ops wrong ledger",
        "cancelled",
        "task 'L2' has ended (cancelled); a cancel was not sent",
    ]


def test_step_takes_a_cancel_before_deciding(store: Store, tmp_path: Path) -> None:
    """``Runtime.step`` takes what the inbox holds first: that commit is the step."""
    log = tmp_path / "views.jsonl"
    runtime = Runtime(ticker, store)
    runtime.start("t", target=3, log=str(log))
    runtime.step("t")
    runtime.cancel("t", reason="stop")
    report = runtime.step("t")
    assert report.after.status is TaskStatus.CANCELLED
    assert report.event.action["kind"] == "cancel"
    assert len(views(log)) == 1


class TestRewinds:
    """How far a task read its inbox is a fact about the world, as undone effects are."""

    def test_a_rollback_reopens_a_cancelled_task_without_cancelling_it_again(
        self, store: Store
    ) -> None:
        from skillstate.engine.rewind import rollback_task

        runtime = Runtime(ticker, store)
        runtime.start("t", target=4)
        runtime.run("t", max_steps=2)
        cancel(store, ticker, "t", reason="paused", actor="ops")
        assert runtime.run("t").stopped == "cancelled"
        cancelled = runtime.load("t").version
        rollback_task(store, "t", cancelled - 1)
        result = runtime.run("t")
        assert result.stopped == "completed", kinds(store, "t")
        assert result.state.done == 4
        assert kinds(store, "t").count("cancel") == 1

    def test_a_fork_reads_its_own_inbox_from_the_start(self, store: Store, tmp_path: Path) -> None:
        from skillstate.engine.rewind import fork_task

        log = tmp_path / "views.jsonl"
        runtime = Runtime(ticker, store)
        runtime.start("t", target=6, log=str(log))
        runtime.run("t", max_steps=1)
        for text in ("one", "two", "three"):
            send(store, ticker, "t", text, actor="ann")
        runtime.run("t", max_steps=1)
        assert runtime.load("t").inbox_seen == 3
        forked = fork_task(store, ticker, "t", runtime.load("t").version, "f")
        assert forked.inbox_seen == 0
        send(store, ticker, "f", "for the fork", actor="ann")
        runtime.run("f", max_steps=1)
        seen = [m["text"] for v in views(log) for m in v["messages"]]
        assert seen.count("for the fork") == 1, seen
