"""Durable-state behaviour of the runtime: effects, fingerprints, leases, human edits, doctor.

The process-level versions (kill -9 of the CLI, racing processes) live in
``test_crash.py`` and the backends' own test files; here each behaviour is pinned
down in-process, where a crash is an exception that escapes the runtime.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from skillstate import (
    Agent,
    AgentState,
    CallSkill,
    Finish,
    Outcome,
    ScriptedPolicy,
    SkillContext,
    SkillRegistry,
    StateMachine,
    UsageError,
    Verdict,
    View,
)
from skillstate.engine.actions import Action
from skillstate.engine.doctor import diagnose
from skillstate.engine.edits import replace_state, set_fields
from skillstate.engine.lease import default_worker
from skillstate.engine.rewind import fork_task
from skillstate.engine.runtime import Runtime
from skillstate.errors import EffectsCrossed, LeaseHeld, StaleState
from skillstate.store.memory import MemoryStore
from skillstate.store.sqlite import SQLiteStore


class Crash(BaseException):
    """Stands in for kill -9: not an Exception, so nothing in the runtime catches it."""


# ---------------------------------------------------------------- an effectful agent


class SendState(AgentState):
    sent: int = 0
    target: int = 2


class Message(BaseModel):
    n: int


class Outbox:
    """The outside world: messages keyed by idempotency key, and a crash switch."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.crash_before: set[int] = set()
        self.crash_after: set[int] = set()
        self.fail_after_send: set[int] = set()
        self.keys: list[str] = []
        self.runs = 0

    def send(self, key: str, n: int) -> None:
        self.sent.append(f"{key} #{n}")


def send_key(position: int, n: int) -> str:
    """The idempotency key of sending message ``n`` as the task's step ``position``."""
    digest = hashlib.sha256(json.dumps({"n": n}, separators=(",", ":")).encode()).hexdigest()
    return f"t:{position}-send-{digest[:8]}"


K1, K2 = send_key(1, 1), send_key(2, 2)
SENT = [f"{K1} #1", f"{K2} #2"]


def send_agent(outbox: Outbox) -> Agent:
    skills = SkillRegistry()

    @skills.skill(outputs=["sent"], tools=["send"], step="sending", effects=True)
    def send(state: SendState, params: Message, ctx: SkillContext) -> Outcome:
        outbox.runs += 1
        assert ctx.idempotency_key is not None
        outbox.keys.append(ctx.idempotency_key)
        if params.n in outbox.crash_before:
            outbox.crash_before.discard(params.n)
            raise Crash
        ctx.call("send", key=ctx.idempotency_key, n=params.n)
        if params.n in outbox.crash_after:
            outbox.crash_after.discard(params.n)
            raise Crash
        if params.n in outbox.fail_after_send:
            outbox.fail_after_send.discard(params.n)
            raise ConnectionError("the reply was lost")
        return Outcome(writes={"sent": params.n}, summary=f"message {params.n} sent")

    @send.prober
    def _probe(state: SendState, params: Message, ctx: SkillContext) -> Outcome | None:
        if f"{ctx.idempotency_key} #{params.n}" in outbox.sent:
            return Outcome(writes={"sent": params.n}, summary=f"message {params.n} sent")
        return None

    @send.verifier
    def _verify(state: SendState, outcome: Outcome) -> Verdict:
        mine = [m for m in outbox.sent if m.startswith(f"{state.task_id}:")]
        matching = [m for m in mine if m.endswith(f" #{state.sent}")]
        return Verdict(ok=len(matching) == 1, reason=f"{len(matching)} copies sent")

    def decide(view: View) -> Action:
        state = view.state
        assert isinstance(state, SendState)
        if state.sent < state.target:
            return CallSkill(skill="send", params={"n": state.sent + 1})
        return Finish(summary="all sent")

    return Agent(
        name="send",
        state_type=SendState,
        machine=StateMachine(
            {"init": ["sending"], "sending": ["sending", "done"], "done": []}, initial="init"
        ),
        skills=skills,
        policy=ScriptedPolicy(decide),
        tools={"send": outbox.send},
    )


class TestEffects:
    def test_effects_need_a_probe(self) -> None:
        """A skill that declares effects without a probe is refused when the agent is built."""
        skills = SkillRegistry()

        @skills.skill(effects=True, verify=lambda s, o: o.value is not None)
        def act(state: AgentState, params: Any, ctx: SkillContext) -> Outcome:
            return Outcome(value="sent")

        with pytest.raises(UsageError, match="effects but no probe"):
            Agent(
                name="x",
                state_type=AgentState,
                machine=StateMachine({"init": []}, initial="init"),
                skills=skills,
                policy=ScriptedPolicy(lambda v: Finish()),
            )

    def test_intent_is_committed_before_the_effect_runs(self) -> None:
        """The version before the effect records the intent with its idempotency key."""
        outbox = Outbox()
        store = MemoryStore()
        Runtime(send_agent(outbox), store).run("t", create=True)
        events = store.events("t")
        assert [e.action["kind"] for e in events] == [
            "create",
            "call_skill",
            "effect",
            "call_skill",
            "effect",
            "finish",
        ]
        intent = store.checkpoint("t", 2).state["pending_effect"]
        assert intent["key"] == K1
        assert intent["params"] == {"n": 1}
        assert store.checkpoint("t", 3).state["pending_effect"] is None
        assert outbox.sent == SENT

    def test_crash_after_the_effect_is_not_repeated(self) -> None:
        """Killed between the effect and its commit: resume finds it by probe, runs nothing."""
        outbox = Outbox()
        outbox.crash_after.add(1)
        store = MemoryStore()
        agent = send_agent(outbox)
        with pytest.raises(Crash):
            Runtime(agent, store).run("t", create=True)
        assert store.load("t").state["pending_effect"]["key"] == K1
        runs = outbox.runs
        result = Runtime(agent, store).run("t")
        assert result.stopped == "completed"
        assert outbox.sent == SENT
        assert outbox.runs == runs + 1  # only message 2 ran; message 1 was probed
        resumed = [e for e in store.events("t") if e.action["kind"] == "effect_resumed"]
        assert len(resumed) == 1
        assert resumed[0].action["found_by_probe"] is True

    def test_crash_before_the_effect_runs_it_once(self) -> None:
        """Killed after the intent but before the effect: resume runs it, once."""
        outbox = Outbox()
        outbox.crash_before.add(2)
        store = MemoryStore()
        agent = send_agent(outbox)
        with pytest.raises(Crash):
            Runtime(agent, store).run("t", create=True)
        Runtime(agent, store).run("t")
        assert outbox.sent == SENT
        assert outbox.keys.count(K2) == 2  # same key on the retry after resume

    def test_failed_attempt_is_probed_before_retry(self) -> None:
        """An error after the effect happened: the retry probes and does not send again."""
        outbox = Outbox()
        outbox.fail_after_send.add(1)
        store = MemoryStore()
        result = Runtime(send_agent(outbox), store).run("t", create=True)
        assert result.stopped == "completed"
        assert outbox.sent == SENT

    def test_resumed_state_equals_uninterrupted(self) -> None:
        """Crashes anywhere leave the same final state as a run without them."""
        clean = MemoryStore()
        Runtime(send_agent(Outbox()), clean).run("t", create=True)
        outbox = Outbox()
        outbox.crash_after.add(1)
        outbox.crash_before.add(2)
        crashed = MemoryStore()
        agent = send_agent(outbox)
        for _ in range(3):
            try:
                Runtime(agent, crashed).run("t", create=True)
            except Crash:
                continue
        assert crashed.load("t").state == clean.load("t").state


# ---------------------------------------------------------------- fingerprints


class FileState(AgentState):
    path: str = ""
    content: str = ""
    written: bool = False


def file_agent() -> Agent:
    skills = SkillRegistry()

    @skills.skill(outputs=["written"], step="writing")
    def write_file(state: FileState, params: Any, ctx: SkillContext) -> Outcome:
        Path(state.path).write_text(state.content)
        ctx.fingerprint(state.path)
        return Outcome(writes={"written": True}, summary="file written")

    @write_file.verifier
    def _check(state: FileState, outcome: Outcome) -> bool:
        return Path(state.path).read_text() == state.content

    def decide(view: View) -> Action:
        if "write_file" in view.state.pending_steps:
            return CallSkill(skill="write_file")
        return CallSkill(skill="nothing") if False else _wait()

    def _wait() -> Action:
        from skillstate.engine.actions import AskUser

        return AskUser(question="anything else?")

    return Agent(
        name="files",
        state_type=FileState,
        machine=StateMachine({"init": ["writing"], "writing": ["writing"]}, initial="init"),
        skills=skills,
        policy=ScriptedPolicy(decide),
        plan=("write_file",),
    )


class TestFingerprints:
    def test_changed_world_makes_the_step_stale_and_pending(self, tmp_path: Path) -> None:
        """A file edited behind the task's back: on resume the step is redone, not trusted."""
        target = tmp_path / "out.txt"
        store = MemoryStore()
        agent = file_agent()
        runtime = Runtime(agent, store)
        runtime.start("t", path=str(target), content="v1")
        first = runtime.run("t")
        assert first.stopped == "waiting_user"
        step = first.state.completed_steps[-2]
        assert step.skill == "write_file"
        assert step.fingerprints[0].target == str(target)

        version = first.state.version
        assert Runtime(agent, store).recheck("t") == []  # unchanged world: nothing committed
        assert store.load("t").version == version

        target.write_text("someone else's edit")
        stale = Runtime(agent, store).recheck("t")
        assert [r.skill for r in stale] == ["write_file"]
        state = store.load("t").state
        assert "write_file" in state["pending_steps"]
        assert all(r["skill"] != "write_file" for r in state["completed_steps"])
        assert state["errors"][-1]["kind"] == "stale_step"
        assert str(target) in state["errors"][-1]["message"]
        assert store.events("t")[-1].action == {"kind": "recheck", "stale": [step.id]}

    def test_resume_rechecks_and_redoes_the_step(self, tmp_path: Path) -> None:
        """run() on an existing task rechecks first; the policy then redoes the stale step."""
        target = tmp_path / "out.txt"
        store = MemoryStore()
        agent = file_agent()
        runtime = Runtime(agent, store)
        runtime.start("t", path=str(target), content="v1")
        runtime.run("t")
        runtime.reply("t", "carry on")
        target.unlink()
        Runtime(agent, store).run("t")
        assert target.read_text() == "v1"
        kinds = [e.action["kind"] for e in store.events("t")]
        assert "recheck" in kinds
        assert kinds.count("call_skill") == 2


# ---------------------------------------------------------------- leases


def _finished_pid() -> int:
    proc = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(proc.stdout)


class TestLeases:
    def test_a_live_holder_blocks_another_worker(self) -> None:
        """While another live worker holds the task, run() raises LeaseHeld and writes nothing."""
        store = MemoryStore()
        outbox = Outbox()
        Runtime(send_agent(outbox), store, max_steps=1).run("t", create=True)
        version = store.load("t").version
        store.claim("t", "other-host:1", 30)
        with pytest.raises(LeaseHeld):
            Runtime(send_agent(outbox), store, worker="me").run("t")
        assert store.load("t").version == version

    def test_a_dead_local_holder_is_taken_over(self) -> None:
        """A holder that was a process of this host and is gone does not block resume."""
        import socket

        store = MemoryStore()
        dead = f"{socket.gethostname()}:{_finished_pid()}"
        store.claim("t", dead, 3600)
        result = Runtime(send_agent(Outbox()), store, worker=default_worker()).run("t", create=True)
        assert result.stopped == "completed"
        store.claim("t", "next", 1)  # released at the end of run()


# ---------------------------------------------------------------- human edits


class TestHumanEdits:
    def _task(self) -> tuple[MemoryStore, Agent]:
        store = MemoryStore()
        agent = send_agent(Outbox())
        Runtime(agent, store).run("t", create=True)
        return store, agent

    def test_set_validates_and_logs_as_human(self) -> None:
        """set writes validated values as one commit by actor human."""
        store, agent = self._task()
        state = set_fields(store, agent, "t", {"target": 5, "facts.note": "by hand"})
        assert state.version == store.load("t").version
        event = store.events("t")[-1]
        assert event.actor == "human"
        assert event.action["kind"] == "set"
        assert store.load("t").state["facts"] == {"note": "by hand"}

    @pytest.mark.parametrize(
        "writes",
        [{"target": "many"}, {"nosuchfield": 1}, {"version": 99}, {"task_id": "x"}, {}],
    )
    def test_set_refuses_bad_input_and_writes_nothing(self, writes: dict[str, Any]) -> None:
        """A value that does not validate, or a protected field, changes nothing."""
        store, agent = self._task()
        before = store.load("t")
        with pytest.raises(UsageError):
            set_fields(store, agent, "t", writes)
        assert store.load("t") == before

    def test_replace_state_detects_no_change_and_conflicts(self) -> None:
        """An unchanged edit commits nothing; an edit of an old version is stale."""
        store, agent = self._task()
        head = agent.parse_state(store.load("t").state)
        assert replace_state(store, agent, "t", head.version, head.model_dump(mode="json")) is None
        with pytest.raises(StaleState):
            replace_state(store, agent, "t", head.version - 1, head.model_dump(mode="json"))

    def test_fork_starts_a_new_task_from_any_version(self) -> None:
        """fork copies a kept version into a new task at version 1; the source is untouched."""
        store, agent = self._task()
        source_head = store.load("t")
        with pytest.raises(EffectsCrossed, match="t:2-send"):
            fork_task(store, agent, "t", 3, "t2")  # "t" sent message 2 after version 3
        forked = fork_task(store, agent, "t", 3, "t2", effects="keep")
        assert forked.task_id == "t2"
        assert forked.version == 1
        assert forked.sent == 1
        assert store.events("t2")[0].action == {
            "kind": "fork",
            "from_task": "t",
            "from_version": 3,
            "effects": "keep",
            "crossed": [K2],
        }
        assert store.load("t") == source_head
        result = Runtime(agent, store).run("t2")
        assert result.stopped == "completed"

    def test_fork_refuses_an_effect_in_flight_and_existing_ids(self) -> None:
        """Forking mid-effect could repeat it under a new key; an existing id is refused."""
        store, agent = self._task()
        with pytest.raises(UsageError, match="effect in flight"):
            fork_task(store, agent, "t", 2, "t2")
        with pytest.raises(UsageError, match="already exists"):
            fork_task(store, agent, "t", 3, "t")


# ---------------------------------------------------------------- doctor


class TestDoctor:
    def _task(self, tmp_path: Path) -> tuple[SQLiteStore, Agent]:
        store = SQLiteStore(tmp_path / "s.db", max_chain=4)
        agent = send_agent(Outbox())
        runtime = Runtime(agent, store)
        runtime.start("t", target=6)
        runtime.run("t")
        return store, agent

    def test_healthy_chain(self, tmp_path: Path) -> None:
        """A task written by the runtime replays to its head and validates."""
        store, agent = self._task(tmp_path)
        report = diagnose(store, "t", agent)
        assert report.healthy, report.findings
        assert report.checked == store.load("t").version
        assert 1 < report.snapshots < report.checked

    def test_broken_delta_and_snapshot_are_found(self, tmp_path: Path) -> None:
        """A hand-edited snapshot and a broken delta are reported with their versions."""
        store, agent = self._task(tmp_path)
        infos = store.checkpoints("t")
        snapshot = next(i.version for i in infos if i.snapshot and i.version > 1)
        delta = max(i.version for i in infos if not i.snapshot and i.version != snapshot - 1)
        conn = sqlite3.connect(tmp_path / "s.db")
        # A snapshot of 768 characters or more is stored compressed: edit its text.
        (stored,) = conn.execute(
            "SELECT snapshot FROM versions WHERE task_id = 't' AND version = ?", (snapshot,)
        ).fetchone()
        text = zlib.decompress(stored).decode() if isinstance(stored, bytes) else stored
        edited = json.dumps({**json.loads(text), "sent": 99})
        conn.execute(
            "UPDATE versions SET snapshot = ? WHERE task_id = 't' AND version = ?",
            (zlib.compress(edited.encode()) if isinstance(stored, bytes) else edited, snapshot),
        )
        conn.execute(
            'UPDATE versions SET patch = \'[{"op":"remove","path":"/nope"}]\' '
            "WHERE task_id = 't' AND version = ?",
            (delta,),
        )
        conn.commit()
        conn.close()
        report = diagnose(store, "t", agent)
        versions = {f.version for f in report.findings}
        assert snapshot in versions
        assert delta in versions
        assert not report.healthy

    def test_invalid_state_is_named(self, tmp_path: Path) -> None:
        """A snapshot that no longer validates against the agent's class names the field."""
        store, agent = self._task(tmp_path)
        conn = sqlite3.connect(tmp_path / "s.db")
        (stored,) = conn.execute(
            "SELECT snapshot FROM versions WHERE task_id = 't' AND version = 1"
        ).fetchone()
        # A card of 768 bytes or more is stored compressed (card version 6 is past that).
        text = zlib.decompress(stored).decode() if isinstance(stored, bytes) else stored
        edited = json.dumps({**json.loads(text), "sent": "lots"})
        conn.execute(
            # digest = NULL: a record from before checksums, so the schema check is reached
            "UPDATE versions SET snapshot = ?, digest = NULL WHERE task_id = 't' AND version = 1",
            (zlib.compress(edited.encode()) if isinstance(stored, bytes) else edited,),
        )
        conn.commit()
        conn.close()
        report = diagnose(store, "t", agent)
        assert any(f.version == 1 and "sent" in f.message for f in report.findings)
