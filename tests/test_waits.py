"""Durable waits and signals (issue 25, point 2): ``WaitUntil``, ``WaitFor``, the run
loop's hook, ``Runtime.signal``, the worker's countdown, the sweeper, the CLI.

Everything here runs in one process on SQLite (or with the CLI in a subprocess); the
broker-backed runs (real Celery workers, kill -9) are in ``test_waits_workers.py``.
Tests that need a deadline to pass wait for the clock to pass it (short deadlines),
never a fixed sleep.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from skillstate import Agent, Runtime, Signal, StateMachine, WaitFor, WaitUntil
from skillstate.control.signals import KIND
from skillstate.control.waits import pending_signal
from skillstate.effects import files
from skillstate.engine.actions import decision_schema, validate_decision
from skillstate.engine.aruntime import AsyncRuntime
from skillstate.errors import ActionRejected, UsageError
from skillstate.events import utcnow
from skillstate.state.model import CARD_VERSION, TaskStatus
from skillstate.store.base import Store
from skillstate.store.sqlite import SQLiteStore
from skillstate.workers import Advancer, Message, WorkerSettings
from skillstate.workers.sweep import stranded
from tests import waiting_agent
from tests.cli_support import run_env
from tests.waiting_agent import PayState, agent

AGENT = "tests.waiting_agent:agent"
ROOT = Path(__file__).resolve().parent.parent
PAID = {"amount": 12.5, "reference": "inv-7"}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    db = SQLiteStore(tmp_path / "state.db")
    yield db
    db.close()


def _until(deadline: datetime | None) -> None:
    """Wait for the wall clock to pass ``deadline`` (polling; never longer than needed)."""
    assert deadline is not None
    while utcnow() < deadline:
        time.sleep(0.01)


def _kinds(store: Store, task_id: str) -> list[str]:
    return [str(e.action.get("kind")) for e in store.events(task_id)]


def _shipped(path: Path, task_id: str) -> list[str]:
    return [line for key, line in files.entries(str(path)) if key.startswith(f"{task_id}:")]


class TestWaitUntil:
    def test_run_returns_waiting_and_a_resume_after_the_deadline_runs_on(
        self, store: Store, tmp_path: Path
    ) -> None:
        """No process sleeps: run returns at once with the deadline; a resume before it
        commits nothing; one after it wakes the task (one ``wake`` commit) and it ends."""
        ledger = tmp_path / "ledger.txt"
        runtime = Runtime(agent, store)
        runtime.start("t", pause=0.4, ledger=str(ledger))
        began = time.monotonic()
        first = runtime.run("t")
        assert time.monotonic() - began < 0.4  # it returned, it did not sleep the pause
        assert first.stopped == "waiting"
        assert first.state.status is TaskStatus.WAITING
        wait = first.state.wait
        assert wait is not None
        assert wait.kind == "until"
        assert wait.reason == "cool-down"
        assert first.resume_at == wait.deadline
        assert wait.deadline is not None
        assert wait.deadline > utcnow()
        early = runtime.run("t")
        assert (early.stopped, early.steps, early.state.version) == ("waiting", 0, 2)
        _until(wait.deadline)
        done = runtime.run("t")
        assert done.stopped == "completed"
        assert done.state.woke
        assert done.state.shipped
        assert done.state.wait is None
        assert _kinds(store, "t").count("wake") == 1
        assert _shipped(ledger, "t") == ["shipped t"]

    def test_the_wait_is_in_the_card_and_the_since_in_the_event(self, store: Store) -> None:
        """The card holds the decided deadline (absolute UTC), not when the wait began;
        the event that committed the wait carries the time."""
        runtime = Runtime(agent, store)
        runtime.start("t", pause=30)
        state = runtime.run("t").state
        stored = store.load("t").state["wait"]
        assert stored["kind"] == "until"
        assert stored["deadline"].endswith("Z")
        assert "since" not in stored
        event = store.events("t")[-1]
        assert event.action["kind"] == "wait_until"
        assert state.wait is not None
        assert state.wait.deadline is not None
        assert abs((state.wait.deadline - event.finished_at).total_seconds() - 30) < 2

    def test_an_absolute_time_in_the_past_wakes_at_once(self, store: Store) -> None:
        """``WaitUntil(at=...)`` already past: the next look wakes the task."""
        past = datetime(2020, 1, 1, tzinfo=timezone.utc)
        rules = agent.policy

        def decide(view: Any) -> Any:
            state = view.state
            if not state.woke and state.last_decision is None:
                return WaitUntil(at=past)
            return rules.decide(view)

        from skillstate import ScriptedPolicy

        patched = _with(agent, policy=ScriptedPolicy(decide))
        runtime = Runtime(patched, store)
        runtime.start("t")
        assert runtime.run("t").stopped == "completed"
        assert "wake" in _kinds(store, "t")

    def test_bad_times_are_refused_before_anything_waits(self) -> None:
        """Exactly one of at and seconds; at must be aware; seconds bounded and finite."""
        for bad in (
            {},
            {"seconds": 1, "at": datetime.now(timezone.utc)},
            {"at": datetime(2030, 1, 1)},
            {"seconds": -1},
            {"seconds": float("inf")},
            {"seconds": 10**9},
        ):
            with pytest.raises(ValidationError):
                WaitUntil(**bad)


class TestSignals:
    def test_a_signal_wakes_the_wait_and_the_next_decision_sees_it_typed(
        self, store: Store, tmp_path: Path
    ) -> None:
        """Delivered to the inbox (card untouched), consumed by the next run: the payload
        lands in ``signals`` and ``View.signal`` gives it as the declared model."""
        runtime = Runtime(agent, store)
        runtime.start("t", expect_payment=True, ledger=str(tmp_path / "l.txt"))
        waiting = runtime.run("t")
        assert waiting.stopped == "waiting"
        assert waiting.resume_at is None
        assert waiting.state.wait is not None
        assert waiting.state.wait.signal == "payment_received"
        seq = runtime.signal("t", "payment_received", PAID)
        assert seq == 1
        assert store.load("t").version == waiting.state.version  # the card is not touched
        done = runtime.run("t")
        assert done.stopped == "completed"
        assert done.state.paid == 12.5
        received = done.state.signals["payment_received"]
        assert (received.seq, received.data) == (1, PAID)
        typed = agent.view(done.state).signal("payment_received")
        assert isinstance(typed, waiting_agent.PaymentReceived)
        assert typed.reference == "inv-7"
        assert 'Signal received: payment_received {"amount": 12.5' in agent.view(done.state).text
        signal_events = [e for e in store.events("t") if e.action.get("kind") == "signal"]
        assert [e.action for e in signal_events] == [
            {"kind": "signal", "name": "payment_received", "seq": 1}
        ]

    def test_a_signal_before_the_wait_is_consumed_when_the_wait_starts(self, store: Store) -> None:
        """It stays in the inbox until a ``WaitFor`` of its name: that wait ends at once."""
        runtime = Runtime(agent, store)
        runtime.start("t", expect_payment=True)
        runtime.signal("t", "payment_received", PAID)
        assert store.load("t").version == 1
        done = runtime.run("t")
        assert done.stopped == "completed"
        assert done.state.paid == 12.5
        assert _kinds(store, "t")[:3] == ["create", "wait_for", "signal"]

    def test_each_wait_consumes_the_next_signal_of_its_name(self, store: Store) -> None:
        """Consumed signals are numbered in the card; a later wait takes a later one."""
        runtime = Runtime(agent, store)
        runtime.start("t", expect_payment=True)
        runtime.signal("t", "payment_received", PAID)
        runtime.signal("t", "payment_received", {"amount": 3, "reference": "second"})
        state = runtime.run("t").state
        assert state.signals["payment_received"].seq == 1
        left = pending_signal(store, state, "payment_received")
        assert left is not None
        assert (left.seq, left.body["data"]["reference"]) == (2, "second")
        assert [m.kind for m in store.inbox("t")] == [KIND, KIND]

    @pytest.mark.parametrize(
        ("name", "data", "says"),
        [
            ("payment_received", {"amount": -1, "reference": "x"}, "amount: Input should be"),
            ("payment_received", {"amount": 1}, "reference: Field required"),
            ("payment_received", {"amount": 1, "reference": "x" * 41}, "reference:"),
            ("payment_received", {"amount": float("nan"), "reference": "x"}, "NaN"),
            ("payment_received", [1, 2], "Input should be"),
            ("refund", {}, "unknown signal 'refund'; the agent declares: payment_received"),
        ],
    )
    def test_a_bad_signal_is_refused_in_one_line_and_nothing_is_written(
        self, store: Store, name: str, data: Any, says: str
    ) -> None:
        runtime = Runtime(agent, store)
        runtime.start("t", expect_payment=True)
        runtime.run("t")
        with pytest.raises(UsageError) as refused:
            runtime.signal("t", name, data)
        assert says in str(refused.value)
        assert "\n" not in str(refused.value)
        assert store.inbox("t") == []
        assert store.load("t").version == 2

    def test_a_signal_to_an_ended_task_is_refused(self, store: Store) -> None:
        runtime = Runtime(agent, store)
        runtime.start("t")
        assert runtime.run("t").stopped == "completed"
        with pytest.raises(UsageError, match="has ended"):
            runtime.signal("t", "payment_received", PAID)
        assert store.inbox("t") == []

    def test_the_inbox_holds_the_payload_masked(self, store: Store) -> None:
        """A value the redaction policy masks never reaches the store in the clear."""
        runtime = Runtime(agent, store)
        runtime.start("t", expect_payment=True)
        runtime.signal("t", "payment_received", {"amount": 1, "reference": "sk-" + "a1" * 18})
        [message] = store.inbox("t")
        assert "a1a1a1" not in json.dumps(message.body)

    def test_a_fork_starts_its_own_inbox_numbering(self, store: Store) -> None:
        """The fork keeps the payloads but not the source's inbox numbers: the first
        signal of its own inbox is the next one its waits consume."""
        from skillstate import fork_task

        runtime = Runtime(agent, store)
        runtime.start("t", expect_payment=True)
        for reference in ("a", "b", "c"):
            runtime.signal("t", "payment_received", {"amount": 1, "reference": reference})
        runtime.run("t")
        [taken] = [e.version for e in store.events("t") if e.action["kind"] == "signal"]
        assert runtime.load("t").signals["payment_received"].seq == 1
        forked = fork_task(store, agent, "t", taken, "f", effects="keep")
        received = forked.signals["payment_received"]
        assert (received.seq, received.data) == (0, {"amount": 1.0, "reference": "a"})
        runtime.signal("f", "payment_received", {"amount": 2, "reference": "fork"})
        first = pending_signal(store, forked, "payment_received")
        assert first is not None
        assert (first.seq, first.body["data"]["reference"]) == (1, "fork")

    def test_async_runtime_waits_and_takes_a_signal(self, store: Store) -> None:
        async def go() -> tuple[str, str, float | None]:
            runtime = AsyncRuntime(agent, store)
            await runtime.start("t", expect_payment=True)
            first = await runtime.run("t")
            await runtime.signal("t", "payment_received", PAID)
            second = await runtime.run("t")
            return first.stopped, second.stopped, second.state.paid

        assert asyncio.run(go()) == ("waiting", "completed", 12.5)


class TestTimeouts:
    def test_a_timeout_fails_the_task_with_the_reason(self, store: Store) -> None:
        runtime = Runtime(agent, store)
        runtime.start("t", expect_payment=True, timeout=0.3)
        first = runtime.run("t")
        assert first.stopped == "waiting"
        assert first.resume_at is not None
        _until(first.resume_at)
        ended = runtime.run("t")
        assert ended.stopped == "failed"
        entry = ended.state.errors[-1]
        assert entry.kind == "wait_timeout"
        assert entry.message == "waited for signal 'payment_received' for 0.3 s"
        assert ended.state.wait is None

    def test_a_timeout_escalates_to_the_declared_step(self, store: Store) -> None:
        runtime = Runtime(agent, store)
        runtime.start("t", expect_payment=True, timeout=0.3, escalate=True)
        first = runtime.run("t")
        assert first.state.wait is not None
        assert first.state.wait.on_timeout == "escalated"
        _until(first.resume_at)
        done = runtime.run("t")
        assert done.stopped == "completed"
        assert done.state.current_step == "done"
        assert "escalated to step 'escalated'" in done.state.errors[-1].message
        assert [e.action for e in store.events("t") if e.action["kind"] == "wait_timeout"] == [
            {"kind": "wait_timeout", "signal": "payment_received", "to": "escalated"}
        ]

    def test_a_signal_posted_after_the_deadline_does_not_beat_the_timeout(
        self, store: Store
    ) -> None:
        """The timeout won; the late signal stays for a later wait."""
        runtime = Runtime(agent, store)
        runtime.start("t", expect_payment=True, timeout=0.2)
        first = runtime.run("t")
        _until(first.resume_at)
        runtime.signal("t", "payment_received", PAID)
        assert runtime.run("t").stopped == "failed"

    def test_the_signals_declared_timeout_and_escalation_apply(self, store: Store) -> None:
        """``Signal(schema, timeout=..., on_timeout=...)``: a ``WaitFor`` that names none."""
        declared = _with(
            agent,
            signals={
                "payment_received": Signal(
                    waiting_agent.PaymentReceived, timeout=0.2, on_timeout="escalated"
                )
            },
        )
        runtime = Runtime(declared, store)
        runtime.start("t", expect_payment=True)
        wait = runtime.run("t").state.wait
        assert wait is not None
        assert (wait.timeout, wait.on_timeout) == (0.2, "escalated")

    def test_an_escalation_the_machine_cannot_take_is_refused(self, store: Store) -> None:
        """Checked when the wait is decided, not when the timeout comes."""
        from skillstate import ScriptedPolicy

        def decide(view: Any) -> Any:
            return WaitFor(signal="payment_received", timeout=5, on_timeout="done")

        refusing = _with(agent, policy=ScriptedPolicy(decide))
        runtime = Runtime(refusing, store, max_stalled=2)
        runtime.start("t")
        result = runtime.run("t", max_steps=1)
        assert result.state.status is not TaskStatus.WAITING
        assert result.state.wait is None
        assert result.state.errors[-1].kind == "illegal_transition"


class TestDeclarations:
    def test_an_agent_with_bad_signals_is_refused_when_built(self) -> None:
        with pytest.raises(UsageError) as refused:
            _with(
                agent,
                signals={
                    "Bad Name": waiting_agent.PaymentReceived,
                    "ok": Signal(dict, on_timeout="nowhere"),  # type: ignore[arg-type]
                },
            )
        text = str(refused.value)
        assert "signal name 'Bad Name'" in text
        assert "signal 'ok' needs a pydantic model" in text
        assert "undeclared step 'nowhere'" in text

    def test_a_model_is_offered_waits_only_when_declared(self) -> None:
        """``wait_until`` with ``can_wait``, ``wait_for`` for the declared names; a reply
        naming what was not offered is refused with the reason (repair prompt)."""
        plain = decision_schema({}, ("done",))
        kinds = {b["properties"]["kind"]["const"] for b in plain["anyOf"]}
        assert kinds == {"ask_user", "finish"}
        offered = decision_schema({}, ("done",), can_wait=True, signals=("paid",))
        branches = {b["properties"]["kind"]["const"]: b for b in offered["anyOf"]}
        assert branches["wait_for"]["properties"]["signal"] == {"enum": ["paid"]}
        assert branches["wait_until"]["required"] == ["reason", "kind", "seconds"]
        ok = validate_decision(
            '{"kind": "wait_for", "signal": "paid", "timeout": 60, "reason": "r"}',
            {},
            (),
            signals=("paid",),
        )
        assert isinstance(ok, WaitFor)
        assert ok.timeout == 60
        for reply, says in (
            ('{"kind": "wait_until", "seconds": 5}', "'wait_until' is not available"),
            ('{"kind": "wait_for", "signal": "other"}', "cannot wait for signal 'other'"),
            ('{"kind": "wait_for", "signal": "paid", "on_timeout": "x"}', "on_timeout"),
        ):
            with pytest.raises(ActionRejected, match=says):
                validate_decision(reply, {}, (), signals=("paid",))

    def test_the_system_prompt_names_waits_only_when_offered(self) -> None:
        from skillstate.engine.policy import StatePolicy
        from skillstate.llm.base import Completion, Usage

        class Never:
            name = "never"

            def complete(self, *args: Any, **kwargs: Any) -> Completion:
                return Completion(text="{}", usage=Usage(), model="never")

        policy = StatePolicy(Never())  # type: ignore[arg-type]
        state = PayState(task_id="t")
        assert "wait_" not in policy.system_prompt(_with(agent, signals={}).view(state))
        prompt = policy.system_prompt(_with(agent, can_wait=True).view(state))
        assert '"wait_until"' in prompt
        assert "(payment_received)" in prompt

    def test_a_card_of_version_4_loads_without_a_wait(self, store: Store) -> None:
        """Card 5 added ``wait`` and ``signals``: an older card loads with none."""
        from skillstate.store.memory import MemoryStore

        runtime = Runtime(agent, store)
        runtime.start("t")
        raw = store.load("t").state
        raw.pop("wait")
        raw.pop("signals")
        raw["card_version"] = 4
        old = MemoryStore()
        old.commit("t", 0, raw, store.events("t")[0])
        loaded = Runtime(agent, old).load("t")
        assert (loaded.card_version, loaded.wait, loaded.signals) == (CARD_VERSION, None, {})


class TestWorkerSlices:
    """A worker's slice (the Advancer, without a broker): requeues, never sleeps."""

    def _advancer(self, store: Store, **options: Any) -> Advancer:
        settings = WorkerSettings(
            store_url=store.url, lease_ttl=5.0, agents=frozenset({AGENT}), **options
        )
        return Advancer(store, settings)

    def test_a_wait_until_requeues_with_its_countdown_under_the_lease(self, store: Store) -> None:
        runtime = Runtime(agent, store)
        runtime.start("t", pause=0.5)
        sent: list[tuple[Message, float, bool]] = []

        def enqueue(message: Message, countdown: float) -> None:
            sent.append((message, countdown, store.lease("t") is not None))

        outcome = self._advancer(store).advance(Message("t", 1, "m1"), enqueue)
        assert outcome.kind == "waiting"
        assert "requeued in" in outcome.detail
        [(later, countdown, held)] = sent
        assert held
        assert later.expected == 2
        assert later.after.startswith("m1@")
        assert 0.3 < countdown <= 0.5
        assert store.lease("t") is None
        sent.clear()
        early = self._advancer(store).advance(Message("t", 2, "m2"), enqueue)
        assert early.kind == "waiting"
        assert len(sent) == 1
        state = runtime.load("t")
        assert state.wait is not None
        _until(state.wait.deadline)
        sent.clear()
        done = self._advancer(store).advance(later, enqueue)
        assert (done.kind, sent) == ("completed", [])

    def test_a_long_wait_hops_within_the_max_countdown(self, store: Store) -> None:
        Runtime(agent, store).start("t", pause=3600)
        sent: list[float] = []
        advancer = self._advancer(store, max_countdown=240.0)
        advancer.advance(Message("t", 1, "m1"), lambda m, countdown: sent.append(countdown))
        assert sent == [240.0]

    def test_a_signal_wait_without_timeout_sends_nothing(self, store: Store) -> None:
        Runtime(agent, store).start("t", expect_payment=True)
        sent: list[Message] = []
        outcome = self._advancer(store).advance(Message("t", 1, "m1"), lambda m, c: sent.append(m))
        assert (outcome.kind, outcome.detail, sent) == ("waiting", "for a signal", [])

    def test_a_signal_posted_during_the_slice_is_not_lost(self, store: Store) -> None:
        """Its own message found the task held and was dropped: the slice, having
        released the lease, finds the signal in the inbox and enqueues the task."""
        runtime = Runtime(agent, store)
        runtime.start("t", expect_payment=True)
        sent: list[tuple[Message, float, bool]] = []

        def enqueue(message: Message, countdown: float) -> None:
            sent.append((message, countdown, store.lease("t") is not None))

        advancer = self._advancer(store)
        real_slice = advancer._slice

        def racing(*args: Any, **kwargs: Any) -> Any:
            outcome = real_slice(*args, **kwargs)
            # The slice ended waiting; a signal arrives before the lease is released.
            Runtime(agent, store).signal("t", "payment_received", PAID)
            return outcome

        advancer._slice = racing  # type: ignore[method-assign]
        outcome = advancer.advance(Message("t", 1, "m1"), enqueue)
        assert outcome.kind == "waiting"
        [(nudge, countdown, held)] = sent
        assert (nudge.expected, countdown, held, nudge.after) == (2, 0.0, False, "")
        done = self._advancer(store).advance(nudge, enqueue)
        assert done.kind == "completed"


class TestSweeper:
    def test_a_waiting_task_is_stranded_only_past_its_deadline(self, store: Store) -> None:
        runtime = Runtime(agent, store)
        runtime.start("soon", pause=0.2)
        runtime.start("later", pause=3600)
        runtime.start("signal", expect_payment=True)
        for task in ("soon", "later", "signal"):
            assert runtime.run(task).stopped == "waiting"
        now = utcnow()
        assert stranded(store, 0.0, now=now) == []  # nobody's deadline has passed
        found = stranded(store, 60.0, now=now + timedelta(seconds=120))
        assert [(t.task_id, t.status) for t in found] == [("soon", "waiting")]
        assert "deadline" in found[0].describe()
        assert stranded(store, 60.0, now=now + timedelta(seconds=30)) == []


CLI_ENV = {"PYTHONPATH": str(ROOT), "SKILLSTATE_AGENTS": AGENT}
"""The CLI finds the test agent (repository root on the path) and may import it."""


class TestCommandLine:
    def _cli(self, tmp_path: Path, *args: str) -> tuple[int, str, str]:
        return run_env(tmp_path, CLI_ENV, *args)

    def test_signal_help(self, tmp_path: Path) -> None:
        code, out, _ = self._cli(tmp_path, "signal", "--help")
        assert code == 0
        for option in ("--data", "--broker", "--queue", "--store"):
            assert option in out

    def test_run_waits_then_a_signal_drives_the_task_here(self, tmp_path: Path) -> None:
        code, out, err = self._cli(tmp_path, "run", AGENT, "--task-id", "p", "-q",
                                   "--set", "expect_payment=true",
                                   "--set", "timeout=600")  # fmt: skip
        assert code == 0, err
        assert "waiting for signal payment_received, until" in out
        assert "skillstate signal p payment_received --data" in out
        code, out, err = self._cli(tmp_path, "signal", "p", "payment_received",
                                   "--data", '{"amount": 0, "reference": "r"}')  # fmt: skip
        assert code == 2
        assert "amount: Input should be greater than 0" in err
        assert "Traceback" not in err
        assert err.count("\n") == 1
        code, out, err = self._cli(tmp_path, "signal", "p", "payment_received", "--data", "[1]")
        assert code == 2
        assert "--data must be a JSON object" in err
        code, out, err = self._cli(tmp_path, "signal", "p", "payment_received", "-q",
                                   "--data", '{"amount": 4, "reference": "r"}')  # fmt: skip
        assert code == 0, err
        assert "delivered signal payment_received to p (inbox #1)" in out
        assert "completed · task p" in out

    def test_a_signal_for_a_task_not_waiting_for_it_is_kept(self, tmp_path: Path) -> None:
        code, _, err = self._cli(tmp_path, "run", AGENT, "--task-id", "p", "-q",
                                 "--set", "pause=600", "--set", "expect_payment=true")  # fmt: skip
        assert code == 0, err
        code, out, err = self._cli(tmp_path, "signal", "p", "payment_received",
                                   "--data", '{"amount": 4, "reference": "r"}')  # fmt: skip
        assert code == 0, err
        assert "it is waiting: its next wait for 'payment_received' consumes it" in out
        code, out, err = self._cli(tmp_path, "resume", "p", "-q")
        assert code == 0, err
        assert "waiting until " in out
        assert "nothing sleeps meanwhile; after that time: skillstate resume p" in out

    def test_tasks_waiting_lists_who_waits_and_filters_by_how_long(
        self, tmp_path: Path, store: Store
    ) -> None:
        runtime = Runtime(agent, SQLiteStore(tmp_path / "state.db"))
        runtime.start("sig", expect_payment=True)
        runtime.start("sleep", pause=600)
        runtime.start("done")
        for task in ("sig", "sleep", "done"):
            runtime.run(task)
        runtime.store.close()  # type: ignore[attr-defined]
        code, out, err = self._cli(tmp_path, "tasks", "--waiting")
        assert code == 0, err
        lines = out.splitlines()
        assert lines[0].split()[:5] == ["TASK", "STATUS", "WAITED", "SINCE", "(UTC)"]
        assert {line.split()[0] for line in lines[1:3]} == {"sig", "sleep"}
        assert "done" not in out
        assert lines[-1].startswith("2 waiting tasks in ")
        code, out, _ = self._cli(tmp_path, "tasks", "--waiting", "--json")
        rows = {row["task_id"]: row for row in json.loads(out)}
        assert set(rows) == {"sig", "sleep"}
        assert rows["sleep"]["wait_until"] is not None
        assert rows["sig"]["wait_until"] is None
        assert all(row["waited_s"] >= 0 for row in rows.values())
        code, out, _ = self._cli(tmp_path, "tasks", "--longer-than", "3600")
        assert code == 0
        assert out.startswith("no waiting tasks match")
        # Observed progress, not a fixed sleep: wait until both have waited 1 s.
        oldest = max(row["waited_s"] for row in rows.values())
        time.sleep(max(0.0, 1.05 - oldest))
        code, out, _ = self._cli(tmp_path, "tasks", "--longer-than", "1", "--json")
        assert {row["task_id"] for row in json.loads(out)} == {"sig", "sleep"}


def _with(base: Agent[Any], **changes: Any) -> Agent[Any]:
    """A copy of ``base`` with ``changes`` (validated again, as a new agent)."""
    from dataclasses import fields

    values = {f.name: getattr(base, f.name) for f in fields(base) if f.init}
    values.update(changes)
    return Agent(**values)


def test_machine_of_the_test_agent_escalates_from_work() -> None:
    """The escalation step used above is reachable from where the wait is decided."""
    machine: StateMachine = agent.machine
    assert machine.can("init", "escalated")
    assert machine.can("work", "escalated")


class TestInspector:
    """The task page shows the wait; a token-guarded write delivers a signal."""

    TOKEN = "waits-token-5e1f"

    @pytest.fixture
    def client(self, tmp_path: Path) -> Iterator[Any]:
        pytest.importorskip("starlette", reason="the ui extra is not installed")
        from tests.ui_support import ui_client

        db = SQLiteStore(tmp_path / "state.db")
        runtime = Runtime(agent, db)
        runtime.start("sig", expect_payment=True, timeout=600, escalate=True)
        runtime.start("done")
        for task in ("sig", "done"):
            runtime.run(task)
        db.close()
        url = f"sqlite:///{tmp_path / 'state.db'}"
        with ui_client(url, allow_edit=True, token=self.TOKEN, agents=(AGENT,)) as opened:
            yield opened

    def _auth(self) -> dict[str, str]:
        return {"X-Skillstate-Token": self.TOKEN}

    def test_the_task_page_and_api_show_the_wait(self, client: Any) -> None:
        page = client.get("/tasks/sig")
        assert page.status_code == 200
        assert 'id="wait"' in page.text
        assert "for signal <strong>payment_received</strong>" in page.text
        assert "then step <strong>escalated</strong>" in page.text
        assert 'id="signal-form"' in page.text
        wait = client.get("/api/tasks/sig").json()["wait"]
        assert (wait["kind"], wait["signal"], wait["on_timeout"]) == (
            "signal",
            "payment_received",
            "escalated",
        )
        assert wait["deadline"].endswith("Z")
        assert client.get("/api/tasks/done").json()["wait"] is None

    def test_the_task_list_filters_waiting_tasks(self, client: Any) -> None:
        found = client.get("/api/tasks", params={"status": "waiting-any", "sort": "waited"})
        rows = found.json()["rows"]
        assert [row["task_id"] for row in rows] == ["sig"]
        assert rows[0]["waited_text"] is not None
        page = client.get("/", params={"status": "waiting-any"})
        assert "waiting on someone (any)" in page.text
        assert "/tasks/done" not in page.text

    def test_the_token_is_checked_before_the_body(self, client: Any) -> None:
        """No token: 401 even for a body that is not JSON (it is never read)."""
        refused = client.post(
            "/api/actions/signal/sig",
            content=b"{not json",
            headers={"Content-Type": "application/json"},
        )
        assert refused.status_code == 401
        wrong = client.post(
            "/api/actions/signal/sig",
            json={"name": "payment_received", "data": PAID},
            headers={"X-Skillstate-Token": "nope"},
        )
        assert wrong.status_code == 401
        assert client.get("/api/tasks/sig").json()["card"]["status"] == "waiting"

    def test_a_bad_payload_is_a_400_and_nothing_is_written(
        self, client: Any, tmp_path: Path
    ) -> None:
        bad = client.post(
            "/api/actions/signal/sig",
            json={"name": "payment_received", "data": {"amount": -1, "reference": "r"}},
            headers=self._auth(),
        )
        assert bad.status_code == 400, bad.text
        assert "amount: Input should be greater than 0" in bad.json()["error"]
        huge = client.post(
            "/api/actions/signal/sig",
            content=b'{"name": "payment_received", "data": "' + b"x" * 2_000_000 + b'"}',
            headers={**self._auth(), "Content-Type": "application/json"},
        )
        assert huge.status_code == 413
        db = SQLiteStore(tmp_path / "state.db")
        assert db.inbox("sig") == []
        db.close()

    def test_a_signal_through_the_api_runs_the_task_on(self, client: Any) -> None:
        sent = client.post(
            "/api/actions/signal/sig",
            json={"name": "payment_received", "data": PAID},
            headers=self._auth(),
        )
        assert sent.status_code == 200, sent.text
        assert (
            "delivered signal payment_received (inbox #1); the task continues"
            in sent.json()["message"]
        )
        end = time.monotonic() + 60
        while client.get("/api/head/sig").json()["status"] != "completed":
            assert time.monotonic() < end, "the task did not run on after the signal"
            time.sleep(0.05)
        assert client.get("/api/tasks/sig").json()["card"]["paid"] == 12.5

    def test_the_form_delivers_a_signal(self, client: Any) -> None:
        sent = client.post(
            "/actions/signal/sig",
            data={"name": "payment_received", "data": json.dumps(PAID), "token": self.TOKEN},
            follow_redirects=False,
        )
        assert sent.status_code == 303, sent.text
        end = time.monotonic() + 60
        while client.get("/api/head/sig").json()["status"] != "completed":
            assert time.monotonic() < end
            time.sleep(0.05)


def test_the_docs_example_runs_as_written(tmp_path: Path) -> None:
    """docs/control.md, section "Durable waits and signals": its example prints what its
    comments say (a fresh interpreter in an empty directory, as a reader would run it)."""
    import re
    import subprocess
    import sys

    text = (ROOT / "docs" / "control.md").read_text(encoding="utf-8")
    section = text.split("## Durable waits and signals", 1)[1].split("\n## ", 1)[0]
    [code] = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    (tmp_path / "orders.py").write_text(code, encoding="utf-8")
    ran = subprocess.run(
        [sys.executable, "orders.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.splitlines() == [
        "waiting payment",
        "signal 'payment' refused: amount: Input should be greater than 0; nothing was delivered",
        "1",
        "40.0",
        "completed waited for signal 'payment' for 0.5 s; escalated to step 'chasing'",
        "waiting until",
        "12.0",
        "['create', 'wait_until', 'wake', 'wait_for', 'signal']",
    ]
