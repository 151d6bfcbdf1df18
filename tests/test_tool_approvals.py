"""Approval of one tool call of a skill (``gated`` tools, ``skillstate.control.gates`` and
``skillstate.control.tool_approvals``): ask, approve, edit, reject, race, kill -9.

The agent (``tests.tool_approval_agent``) reads an invoice, then pays it through a
gated ``send_payment`` tool that appends a keyed line to a ledger file; a payment over
100 waits for a person. Each test counts what reached the world (ledger lines, reads)
and what the store says (status, pending approval, events).
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
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
    Runtime,
    ScriptedPolicy,
    SkillContext,
    SkillRegistry,
    StateMachine,
    ToolApprovalNeeded,
    View,
    gated,
    per_task,
)
from skillstate.control.gates import ToolGate
from skillstate.effects import files
from skillstate.engine.actions import Action
from skillstate.engine.aruntime import AsyncRuntime
from skillstate.errors import SkillstateError, UsageError
from skillstate.state.model import TaskStatus, ToolApproval
from skillstate.state.secrets import generate_key
from skillstate.store import open_store
from skillstate.store.base import Store
from tests import tool_approval_agent
from tests.contract.backends import URLS, drop_postgres_schemas, drop_redis_data
from tests.leaks import stored_bytes
from tests.test_approvals_processes import python_blocks_of

ROOT = Path(__file__).resolve().parent.parent
REF = "tests.tool_approval_agent:agent"
AGENT = tool_approval_agent.agent
PASSWORD = tool_approval_agent.PASSWORD
SHARED = ["sqlite", "files", pytest.param("postgres", marks=pytest.mark.services)]
SHARED.append(pytest.param("redis", marks=pytest.mark.services))
STORES = ["sqlite", pytest.param("postgres", marks=pytest.mark.services)]
STORES.append(pytest.param("redis", marks=pytest.mark.services))


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The bank password is a secret tool argument: kept sealed, so a key is needed
    (subprocesses inherit it)."""
    monkeypatch.setenv("SKILLSTATE_KEY", generate_key())
    for name in ("SKILLSTATE_STORE", "SKILLSTATE_BROKER", "SKILLSTATE_ACTOR"):
        monkeypatch.delenv(name, raising=False)
    yield
    drop_postgres_schemas()
    drop_redis_data()


@pytest.fixture(params=SHARED)
def shared(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Store]]:
    url = URLS[request.param](tmp_path)
    store = open_store(url)
    yield url, store
    store.close()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    db = open_store(f"sqlite:///{tmp_path / 'state.db'}")
    yield db
    db.close()


def _parked(store: Store, tmp_path: Path, task_id: str = "t1", **fields: Any) -> Runtime[Any]:
    """A task whose ``pay`` stopped at the 250 payment, waiting for approval."""
    runtime = Runtime(AGENT, store)
    runtime.start(task_id, ledger=str(tmp_path / "ledger.txt"), **fields)
    result = runtime.run(task_id)
    assert result.stopped == "waiting_approval", result.state.errors
    return runtime


def _payments(tmp_path: Path, task_id: str = "t1") -> list[str]:
    path = str(tmp_path / "ledger.txt")
    return [line for key, line in files.entries(path) if key.startswith(f"{task_id}:")]


def _reads(tmp_path: Path) -> int:
    path = tmp_path / "ledger.txt.reads"
    return len(path.read_text().splitlines()) if path.exists() else 0


def _kinds(store: Store, task_id: str = "t1") -> list[str]:
    return [str(e.action.get("kind")) for e in store.events(task_id)]


class TestAsk:
    def test_the_skill_stops_at_the_tool_call(
        self, shared: tuple[str, Store], tmp_path: Path
    ) -> None:
        """The read ran, the payment did not; the card names the skill call and the tool
        call (the password sealed); nothing of the attempt was written back."""
        url, store = shared
        runtime = _parked(store, tmp_path)
        head = runtime.load("t1")
        pending = head.pending_approval
        assert pending is not None
        assert (head.status, head.pending_effect, head.paid) == (
            TaskStatus.WAITING_APPROVAL,
            None,
            None,
        )
        assert (pending.skill, pending.params, pending.target) == ("pay", {"amount": 250}, "paying")
        assert pending.tool is not None
        assert pending.tool.tool == "send_payment"
        assert {k: pending.tool.args[k] for k in ("amount", "to")} == {"amount": 250, "to": "bob"}
        assert str(pending.tool.args["password"]).startswith("enc:v1:")  # sealed, not masked
        assert pending.approved_tools == ()
        assert (_payments(tmp_path), _reads(tmp_path)) == ([], 1)
        request = store.events("t1")[-1]
        assert (request.actor, request.action["kind"], request.action["approval"]) == (
            "runtime",
            "approval",
            "requested",
        )
        assert request.action["tool"] == "send_payment"
        assert request.action["args"]["password"] == "***"
        assert request.action["key"] == pending.key
        assert [c.tool for c in request.tool_calls] == ["lookup_invoice"]  # it ran
        assert runtime.run("t1").stopped == "waiting_approval"  # a run does not move it
        assert _reads(tmp_path) == 1
        assert PASSWORD.encode() not in stored_bytes(url)

    def test_a_small_payment_runs_without_asking(self, store: Store, tmp_path: Path) -> None:
        """``approval=`` is a predicate on the arguments: 80 is paid at once."""
        runtime = Runtime(AGENT, store)
        runtime.start("t1", ledger=str(tmp_path / "ledger.txt"), amount=80)
        result = runtime.run("t1")
        assert (result.stopped, result.state.paid) == ("completed", 80)
        assert _payments(tmp_path) == ["pay 80 to bob"]
        assert all(e.action.get("approval") is None for e in store.events("t1"))

    def test_except_exception_cannot_swallow_the_pause(self, store: Store, tmp_path: Path) -> None:
        """A skill that wraps the call in ``try/except Exception`` still stops (it would
        have written ``paid = 0``); approved, the call runs inside that ``try``."""
        runtime = _parked(store, tmp_path, mode="swallow")
        head = runtime.load("t1")
        assert (head.status, head.paid) == (TaskStatus.WAITING_APPROVAL, None)
        assert _payments(tmp_path) == []
        runtime.approve("t1", actor="alice")
        result = runtime.run("t1")
        assert (result.stopped, result.state.paid) == ("completed", 250)
        assert _payments(tmp_path) == ["pay 250 to bob"]


class TestApprove:
    def test_the_tool_runs_once_and_the_outputs_are_verified(
        self, shared: tuple[str, Store], tmp_path: Path
    ) -> None:
        """Approved, the skill runs again from the start under the same key: the read runs
        again, the payment once; verify passes; who approved is in the event."""
        url, store = shared
        runtime = _parked(store, tmp_path)
        pending = runtime.load("t1").pending_approval
        assert pending is not None
        approved = runtime.approve("t1", actor="alice", reason="invoice checked")
        assert (approved.status, approved.pending_approval) == (TaskStatus.RUNNING, None)
        effect = approved.pending_effect
        assert effect is not None
        assert (effect.key, effect.tool) == (pending.key, None)  # the step's key stays
        assert [a.tool for a in effect.approved_tools] == ["send_payment"]
        result = runtime.run("t1")
        assert (result.stopped, result.state.paid) == ("completed", 250)
        assert _payments(tmp_path) == ["pay 250 to bob"]
        assert _reads(tmp_path) == 2  # the read before the gated call ran again
        events = store.events("t1")
        decided = next(e for e in events if e.action.get("kind") == "approve")
        assert (decided.actor, decided.action["actor"], decided.action["reason"]) == (
            "human",
            "alice",
            "invoice checked",
        )
        assert (decided.action["tool"], decided.action["args"]["password"]) == (
            "send_payment",
            "***",
        )
        assert "edited" not in decided.action
        settled = next(e for e in events if e.action.get("kind") == "effect")
        assert settled.action["key"] == pending.key
        assert settled.verdict is not None
        assert settled.verdict.ok
        paid = [c for c in settled.tool_calls if c.tool == "send_payment"]
        assert [c.args["password"] for c in paid] == ["***"]
        assert _kinds(store)[-3:] == ["approve", "effect", "finish"]
        assert PASSWORD.encode() not in stored_bytes(url)

    def test_an_edit_reaches_the_tool(self, store: Store, tmp_path: Path) -> None:
        """The approved arguments replace those the skill passes, for the matching call."""
        runtime = _parked(store, tmp_path)
        key = runtime.load("t1").pending_approval.key  # type: ignore[union-attr]
        approved = runtime.approve("t1", edits={"amount": 120, "to": "carol"}, actor="bob")
        assert approved.pending_effect is not None
        assert approved.pending_effect.key == key
        assert approved.pending_effect.approved_tools[0].edits == {"amount": 120, "to": "carol"}
        result = runtime.run("t1")
        assert (result.stopped, result.state.paid) == ("completed", 120)
        assert _payments(tmp_path) == ["pay 120 to carol"]
        decided = next(e for e in store.events("t1") if e.action.get("kind") == "approve")
        assert decided.action["edited"] == {"amount": 120, "to": "carol"}
        assert decided.action["args"]["amount"] == 250  # what was asked

    def test_an_edited_secret_is_sealed_and_reaches_the_tool(self, tmp_path: Path) -> None:
        url = f"sqlite:///{tmp_path / 'state.db'}"
        store = open_store(url)
        try:
            runtime = _parked(store, tmp_path)
            approved = runtime.approve("t1", edits={"password": "wrong-pass-77"}, actor="al")
            assert approved.pending_effect is not None
            edits = approved.pending_effect.approved_tools[0].edits
            assert str(edits["password"]).startswith("enc:v1:")
            assert store.events("t1")[-1].action["edited"] == {"password": "***"}
            result = runtime.run("t1")  # the bank refuses the wrong password: it got it
            assert result.state.paid is None
            messages = " ".join(e.message for e in result.state.errors)
            assert "the bank refused the password" in messages
            assert _payments(tmp_path) == []
            assert b"wrong-pass-77" not in stored_bytes(url)
        finally:
            store.close()

    @pytest.mark.parametrize(
        ("edits", "message"),
        [
            ({"amount": 5000}, "edit refused: invalid arguments for tool 'send_payment': amount"),
            ({"amont": 5}, "edit refused: tool 'send_payment' has no argument 'amont'"),
            ({"to": "x\x1b[2J"}, "edit of 'to' refused"),
        ],
    )
    def test_an_invalid_edit_writes_nothing(
        self, store: Store, tmp_path: Path, edits: dict[str, Any], message: str
    ) -> None:
        runtime = _parked(store, tmp_path)
        version = store.load("t1").version
        with pytest.raises(UsageError, match="nothing was written") as refused:
            runtime.approve("t1", edits=edits, actor="alice")
        assert message in str(refused.value)
        assert "\n" not in str(refused.value)
        assert store.load("t1").version == version
        assert runtime.load("t1").status is TaskStatus.WAITING_APPROVAL

    def test_other_arguments_ask_again(self, store: Store, tmp_path: Path) -> None:
        """The invoice changed between the approval and the re-run: the call now pays
        carol, which nobody approved, so the run stops again; nothing was paid."""
        runtime = _parked(store, tmp_path)
        runtime.approve("t1", actor="alice")
        (tmp_path / "ledger.txt.payee").write_text("carol")
        again = runtime.run("t1")
        assert again.stopped == "waiting_approval"
        pending = again.state.pending_approval
        assert pending is not None
        assert pending.tool is not None
        assert pending.tool.args["to"] == "carol"
        assert [a.args["to"] for a in pending.approved_tools] == ["bob"]
        assert _payments(tmp_path) == []
        assert [e.action.get("approval") for e in store.events("t1")].count("requested") == 2
        runtime.approve("t1", actor="alice", reason="carol it is")
        result = runtime.run("t1")
        assert (result.stopped, result.state.paid) == ("completed", 250)
        assert _payments(tmp_path) == ["pay 250 to carol"]


class TestReject:
    def test_the_next_decision_sees_the_reason(
        self, shared: tuple[str, Store], tmp_path: Path
    ) -> None:
        """The rejection names the tool call; the view's "already tried" line and
        ``last_failure`` show it; the policy reads it and pays 50, which needs none."""
        _, store = shared
        runtime = _parked(store, tmp_path)
        rejected = runtime.reject("t1", reason="over the monthly limit", actor="bob")
        assert (rejected.status, rejected.pending_approval) == (TaskStatus.RUNNING, None)
        assert rejected.pending_effect is None
        entry = rejected.errors[-1]
        assert entry.kind == "approval_rejected"
        assert entry.message == (
            "pay: its call of tool send_payment was rejected by bob: over the monthly limit"
        )
        view = AGENT.view(rejected)
        assert view.last_failure is not None
        reason = "tool send_payment rejected by bob: over the monthly limit"
        assert view.last_failure.reason == reason
        assert (
            'Already tried without progress: pay {"amount": 250} -> tool send_payment '
            "rejected by bob: over the monthly limit"
        ) in view.render(4000)[0]
        decided = store.events("t1")[-1]
        assert (decided.action["kind"], decided.action["tool"]) == ("reject", "send_payment")
        assert decided.action["args"]["password"] == "***"
        result = runtime.run("t1")
        assert (result.stopped, result.state.paid) == ("completed", 50)
        assert _payments(tmp_path) == ["pay 50 to bob"]


class TestRaces:
    def test_two_approvers_at_once(self, shared: tuple[str, Store], tmp_path: Path) -> None:
        """Two runtimes approve at the same instant, several tasks over: one decision
        lands each time, the other is ApprovalNotPending; one payment per task, every
        task completes."""
        url, store = shared
        rounds = 3
        for n in range(rounds):
            _parked(store, tmp_path, f"r{n}")
        for n in range(rounds):
            task = f"r{n}"
            results = _race(url, task)
            assert results == ["ApprovalNotPending", "ok"], (task, results)
            assert [k for k in _kinds(store, task) if k in ("approve", "reject")] == ["approve"]
            assert Runtime(AGENT, store).run(task).stopped == "completed"
            assert len(_payments(tmp_path, task)) == 1
        done = [h.task_id for h in store.heads() if h.status == "completed"]
        assert sorted(done) == [f"r{n}" for n in range(rounds)]


def _race(url: str, task: str) -> list[str]:
    barrier = threading.Barrier(2)
    results: list[str] = []

    def decide(who: str) -> None:
        db = open_store(url)
        runtime = Runtime(AGENT, db, worker=f"{who}-{task}")
        barrier.wait()
        try:
            runtime.approve(task, actor=who)
            results.append("ok")
        except SkillstateError as exc:
            results.append(type(exc).__name__)
        finally:
            db.close()

    threads = [threading.Thread(target=decide, args=(who,)) for who in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sorted(results)


# ---------------------------------------------------------------- a skill without effects


class NoteState(AgentState):
    sent: int = 0
    asynchronous: bool = False


class Note(BaseModel):
    text: str


def send_note(text: str, urgent: bool = False) -> str:
    """A plain function: approving an edit checks it against this signature."""
    return text


def _note_agent(tool: Any) -> Agent[NoteState]:
    """``notify`` (no effects) sends a note through a gated tool; ``anotify`` is the
    same skill as ``async def`` (``ctx.acall``)."""
    skills = SkillRegistry()

    @skills.skill(outputs=["sent"], tools=["send_note"], when=lambda s: not s.asynchronous)
    def notify(state: NoteState, params: Note, ctx: SkillContext) -> Outcome:
        ctx.call("send_note", text=params.text)
        return Outcome(writes={"sent": state.sent + 1})

    @skills.skill(outputs=["sent"], tools=["send_note"], when=lambda s: s.asynchronous)
    async def anotify(state: NoteState, params: Note, ctx: SkillContext) -> Outcome:
        await ctx.acall("send_note", text=params.text)
        return Outcome(writes={"sent": state.sent + 1})

    for skill in (notify, anotify):
        skill.verifier(lambda state, outcome: state.sent == 1)

    def decide(view: View[NoteState]) -> Action:
        if view.state.sent:
            return Finish(summary="sent")
        name = "anotify" if view.state.asynchronous else "notify"
        return CallSkill(skill=name, params={"text": "hello"})

    return Agent(
        name="notes",
        state_type=NoteState,
        machine=StateMachine({"init": ["done"], "done": []}),
        skills=skills,
        policy=ScriptedPolicy(decide),
        tools={"send_note": tool},
    )


def _note_tool(path: Path) -> Any:
    def send_note(text: str, urgent: bool = False) -> str:
        with path.open("a", encoding="utf-8") as out:
            out.write(f"{text}{' !' if urgent else ''}\n")
        return text

    return send_note


class TestWithoutEffects:
    @pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
    def test_the_decision_waits_and_the_edit_is_checked_by_the_signature(
        self, store: Store, tmp_path: Path, asynchronous: bool
    ) -> None:
        """A skill without effects stops in the act phase: the decision's event asks;
        an edit is checked against the plain function's signature; approved, the
        skill runs once from the intent (a ``call``, not an effect)."""
        sent = tmp_path / "sent.txt"
        agent = _note_agent(gated(_note_tool(sent)))
        runtime = Runtime(agent, store)
        runtime.start("n1", asynchronous=asynchronous)
        assert runtime.run("n1").stopped == "waiting_approval"
        request = store.events("n1")[-1]
        assert (request.actor, request.action["kind"], request.action["approval"]) == (
            "policy",
            "call_skill",
            "requested",
        )
        assert (request.action["tool"], request.action["args"]) == ("send_note", {"text": "hello"})
        assert not sent.exists()
        for edits, message in (
            ({"urgent": "maybe"}, "invalid arguments for tool 'send_note': urgent"),
            ({"txt": "x"}, "tool 'send_note' has no argument 'txt'"),
        ):
            with pytest.raises(UsageError, match=re.escape(message)):
                runtime.approve("n1", edits=edits, actor="alice")
        runtime.approve("n1", edits={"text": "hi there", "urgent": True}, actor="alice")
        result = runtime.run("n1")
        assert (result.stopped, result.state.sent) == ("completed", 1)
        assert sent.read_text().splitlines() == ["hi there !"]
        assert "call" in _kinds(store, "n1")
        assert not {"effect", "effect_resumed"} & set(_kinds(store, "n1"))

    def test_a_per_task_tool_without_a_schema_refuses_edits(
        self, store: Store, tmp_path: Path
    ) -> None:
        sent = tmp_path / "sent.txt"
        agent = _note_agent(gated(per_task(lambda state: _note_tool(sent))))
        runtime = Runtime(agent, store)
        runtime.start("n1")
        runtime.run("n1")
        version = store.load("n1").version
        with pytest.raises(UsageError) as refused:
            runtime.approve("n1", edits={"text": "x"}, actor="alice")
        assert str(refused.value) == (
            "edit refused: tool 'send_note' declares no argument schema "
            "(gated(..., params=Model)); approve the call as asked, or reject it; "
            "nothing was written"
        )
        assert store.load("n1").version == version
        runtime.approve("n1", actor="alice")
        assert runtime.run("n1").stopped == "completed"
        assert sent.read_text().splitlines() == ["hello"]


class TestDrivers:
    def test_async_runtime(self, store: Store, tmp_path: Path) -> None:
        async def main() -> tuple[str, str, int | None]:
            runtime = AsyncRuntime(AGENT, store)
            await runtime.start("t1", ledger=str(tmp_path / "ledger.txt"))
            first = await runtime.run("t1")
            await runtime.approve("t1", edits={"amount": 110}, actor="alice")
            second = await runtime.run("t1")
            return first.stopped, second.stopped, second.state.paid

        assert asyncio.run(main()) == ("waiting_approval", "completed", 110)
        assert _payments(tmp_path) == ["pay 110 to bob"]

    def test_async_runtime_and_async_skill(self, store: Store, tmp_path: Path) -> None:
        """An ``async def`` skill awaiting ``ctx.acall`` on the AsyncRuntime's loop stops
        at the gated call and, approved, runs it once."""
        sent = tmp_path / "sent.txt"
        agent = _note_agent(gated(_note_tool(sent)))

        async def main() -> tuple[str, str]:
            runtime = AsyncRuntime(agent, store)
            await runtime.start("n1", asynchronous=True)
            first = await runtime.run("n1")
            await runtime.approve("n1", actor="alice")
            second = await runtime.run("n1")
            return first.stopped, second.stopped

        assert asyncio.run(main()) == ("waiting_approval", "completed")
        assert sent.read_text().splitlines() == ["hello"]


class TestTheDeclaration:
    def test_refused_at_definition(self) -> None:
        with pytest.raises(UsageError, match="approval must be True, False or a function"):
            gated(send_note, approval="yes")  # type: ignore[arg-type]
        with pytest.raises(UsageError, match="gated already"):
            gated(gated(send_note))  # type: ignore[arg-type]
        with pytest.raises(UsageError, match="must be a callable or per_task"):
            gated("send_note")  # type: ignore[arg-type]
        with pytest.raises(UsageError, match="params must be a pydantic model class"):
            gated(send_note, params=dict)  # type: ignore[arg-type]

    def test_the_gate(self) -> None:
        """A predicate that raises asks a person; an approved call matches on exact JSON
        arguments (``1`` is not ``True``) and gets the edits; others stop the run."""

        def broken(state: Any, args: dict[str, Any]) -> bool:
            raise KeyError("limit")

        assert gated(send_note, approval=broken).needs_approval(None, {}) is True  # type: ignore[arg-type]
        assert gated(send_note, approval=False).needs_approval(None, {}) is False  # type: ignore[arg-type]
        approved = ToolApproval(tool="send_note", args={"text": "a", "n": 1}, edits={"text": "b"})
        gate = ToolGate("s", None, {"send_note": gated(send_note)}, [approved])  # type: ignore[arg-type]
        assert gate.args_for("send_note", {"n": 1, "text": "a"}) == {"n": 1, "text": "b"}
        assert gate.args_for("other", {"x": 1}) == {"x": 1}  # not gated
        for args in ({"text": "a", "n": True}, {"text": "a", "n": 1.0}, {"text": "a"}):
            with pytest.raises(ToolApprovalNeeded) as stopped:
                gate.args_for("send_note", args)
            assert (stopped.value.tool, stopped.value.arguments) == ("send_note", args)
        assert not isinstance(stopped.value, Exception)  # no `except Exception` eats it

    def test_the_schema_of_a_plain_function(self) -> None:
        schema = gated(send_note).schema()
        assert schema is not None
        assert schema.model_validate({"text": "x"}).model_dump() == {"text": "x", "urgent": False}
        with pytest.raises(ValueError, match="loud"):
            schema.model_validate({"text": "x", "loud": 1})


# ---------------------------------------------------------------- across processes


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``skillstate ARGS`` from the repository root (so ``tests.`` imports)."""
    return subprocess.run(
        [sys.executable, "-m", "skillstate", *args],
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "200", **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _park_at(url: str, tmp_path: Path, task_id: str = "t1") -> None:
    store = open_store(url)
    try:
        _parked(store, tmp_path, task_id)
    finally:
        store.close()


def _head(url: str, task_id: str = "t1") -> dict[str, Any]:
    store = open_store(url)
    try:
        return store.load(task_id).state
    finally:
        store.close()


def _url_kinds(url: str, task_id: str = "t1") -> list[str]:
    store = open_store(url)
    try:
        return _kinds(store, task_id)
    finally:
        store.close()


class TestProcesses:
    @pytest.mark.parametrize("when", ["before", "after"])
    @pytest.mark.parametrize("name", STORES)
    def test_one_payment_after_a_kill(self, tmp_path: Path, name: str, when: str) -> None:
        """``approve`` commits and re-runs the skill, whose approved payment SIGKILLs the
        process before it touches the ledger (``before``) or right after (``after``):
        ``resume`` makes the payment exist exactly once and completes the task."""
        url = URLS[name](tmp_path)
        _park_at(url, tmp_path)
        killed = _cli("approve", "t1", "--store", url, "--agent", REF, "--actor", "alice",
                      "--reason", "ok", "-q", APPROVAL_KILL=when)  # fmt: skip
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        head = _head(url)
        assert (head["status"], head["pending_approval"]) == ("running", None)
        assert [a["tool"] for a in head["pending_effect"]["approved_tools"]] == ["send_payment"]
        assert _url_kinds(url)[-1] == "approve"
        assert _payments(tmp_path) == ([] if when == "before" else ["pay 250 to bob"])
        resumed = _cli("resume", "t1", "--store", url, "--agent", REF, "-q")
        assert resumed.returncode == 0, resumed.stderr
        assert _head(url)["status"] == "completed"
        assert _payments(tmp_path) == ["pay 250 to bob"]
        assert _url_kinds(url).count("effect_resumed") == 1
        assert PASSWORD.encode() not in stored_bytes(url)

    @pytest.mark.parametrize("name", STORES)
    def test_two_approver_processes_one_payment(self, tmp_path: Path, name: str) -> None:
        url = URLS[name](tmp_path)
        _park_at(url, tmp_path)
        command = [sys.executable, "-m", "skillstate", "approve", "t1", "--store", url,
                   "--agent", REF, "-q", "--actor"]  # fmt: skip
        out = subprocess.PIPE
        procs = {
            who: subprocess.Popen([*command, who], cwd=ROOT, text=True, stdout=out, stderr=out)
            for who in ("alice", "bob")
        }
        done = {who: (p.wait(timeout=300), p.communicate()) for who, p in procs.items()}
        assert sorted(code for code, _ in done.values()) == [0, 3], done
        loser = next(out[1] for code, out in done.values() if code == 3)
        assert "has no pending approval (approved by" in loser
        assert _url_kinds(url).count("approve") == 1
        assert _head(url)["status"] == "completed"
        assert _payments(tmp_path) == ["pay 250 to bob"]

    def test_the_commands_show_the_tool_call(self, tmp_path: Path) -> None:
        url = f"sqlite:///{tmp_path / 'state.db'}"
        ran = _cli("run", REF, "--task-id", "r1", "--store", url, "--set",
                   f"ledger={tmp_path / 'ledger.txt'}", "-q")  # fmt: skip
        assert ran.returncode == 0, ran.stderr
        assert "waiting for approval" in ran.stdout
        assert 'tool call: send_payment {"amount": 250, "to": "bob", "password": "***"}' in (
            ran.stdout
        )
        assert "skillstate approve r1 [--edit ARG=VALUE]" in ran.stdout
        shown = _cli("show", "r1", "--store", url)
        assert "tool call" in shown.stdout
        assert "send_payment" in shown.stdout
        assert PASSWORD not in ran.stdout + ran.stderr + shown.stdout
        bad = _cli("approve", "r1", "--store", url, "--agent", REF, "--edit", "amount=5000")
        assert (bad.returncode, bad.stderr.count("\n")) == (2, 1)
        assert bad.stderr.startswith(
            "error: edit refused: invalid arguments for tool 'send_payment': amount"
        )
        approved = _cli("approve", "r1", "--store", url, "--agent", REF, "--edit",
                        "amount=130", "--actor", "alice", "-q")  # fmt: skip
        assert approved.returncode == 0, approved.stderr
        assert _payments(tmp_path, "r1") == ["pay 130 to bob"]
        assert "approve:pay by alice" in _cli("log", "r1", "--store", url).stdout


def test_the_how_to_runs(tmp_path: Path) -> None:
    """docs/control.md, "One tool of a skill": its example prints what its comments say."""
    text = (ROOT / "docs" / "control.md").read_text(encoding="utf-8")
    section = text.split("### One tool of a skill", 1)[1].split("\n## ", 1)[0]
    [example, *_] = python_blocks_of(section)
    script = tmp_path / "payouts.py"
    script.write_text(example, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "SKILLSTATE_KEY"}
    ran = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.splitlines() == [
        "waiting_approval",
        "payout transfer {'amount': 300, 'to': 'acme'}",
        "250",
        "1",
        "tool transfer rejected by bob: not this month",
    ]


class TestInspector:
    TOKEN = "tool-approvals-token-5e1"

    def test_the_page_shows_the_tool_call_and_approves_it(self, tmp_path: Path) -> None:
        """The task page names the tool call (masked), the edit form asks for its
        arguments; the token-guarded API approves with an edit of the tool's argument."""
        pytest.importorskip("starlette", reason="pip install '.[ui]'")
        from tests.cli_support import wait_for
        from tests.ui_support import ui_client

        url = f"sqlite:///{tmp_path / 'state.db'}"
        _park_at(url, tmp_path)
        with ui_client(url, allow_edit=True, token=self.TOKEN, agents=(REF,)) as client:
            page = client.get("/tasks/t1").text
            assert "its call of tool <strong>send_payment</strong>" in page
            assert "ARG=VALUE" in page
            assert PASSWORD not in page
            shown = client.get("/api/tasks/t1").json()["approval"]
            assert shown["tool"]["tool"] == "send_payment"
            assert shown["tool"]["args"]["password"] == "***"
            approved = client.post(
                "/api/actions/approve/t1",
                json={"edits": {"amount": 140}, "actor": "dana"},
                headers={"X-Skillstate-Token": self.TOKEN},
            )
            assert approved.status_code == 200, approved.text
            wait_for(lambda: client.get("/api/head/t1").json()["status"] == "completed",
                     timeout=60, what="t1 completed")  # fmt: skip
        assert _payments(tmp_path) == ["pay 140 to bob"]
