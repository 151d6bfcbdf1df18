"""Approval gates in one process (``skillstate.control.approvals``): ask, approve, edit,
reject, race, on every store that several processes can share.

The agent (``tests.approval_agent``) pays through a ledger file under an idempotency
key; a payment over 100 needs approval. Each test counts what reached the world (the
ledger's lines) and what the store says (status, events). The kill -9, CLI and worker
versions are in ``test_approvals_processes.py``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skillstate import Runtime
from skillstate.effects import files
from skillstate.engine.aruntime import AsyncRuntime
from skillstate.engine.effects import known_effects
from skillstate.errors import ApprovalNotPending, SkillstateError, UsageError
from skillstate.state.model import TaskStatus
from skillstate.state.secrets import generate_key
from skillstate.store import open_store
from skillstate.store.base import Store
from skillstate.workers import Advancer, Message, WorkerSettings
from skillstate.workers.sweep import stranded
from tests import approval_agent
from tests.approval_agent import PASSWORD
from tests.contract.backends import URLS, drop_postgres_schemas, drop_redis_data
from tests.leaks import stored_bytes

AGENT = approval_agent.agent
SHARED = ["sqlite", "files", pytest.param("postgres", marks=pytest.mark.services)]
SHARED.append(pytest.param("redis", marks=pytest.mark.services))


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    """The payee's password is a secret param: kept sealed, so a key is needed."""
    monkeypatch.setenv("SKILLSTATE_KEY", generate_key())


@pytest.fixture(params=SHARED)
def shared(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Store]]:
    url = URLS[request.param](tmp_path)
    store = open_store(url)
    yield url, store
    store.close()
    drop_postgres_schemas()
    drop_redis_data()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    db = open_store(f"sqlite:///{tmp_path / 'state.db'}")
    yield db
    db.close()


def _parked(store: Store, tmp_path: Path, task_id: str = "t1", **fields: Any) -> Runtime[Any]:
    """A task waiting for approval of ``pay`` (amount 250 unless ``fields`` say otherwise)."""
    runtime = Runtime(AGENT, store)
    runtime.start(task_id, ledger=str(tmp_path / "ledger.txt"), **fields)
    result = runtime.run(task_id)
    assert result.stopped == "waiting_approval", result.state.errors
    return runtime


def _payments(tmp_path: Path, task_id: str = "t1") -> list[str]:
    path = str(tmp_path / "ledger.txt")
    return [line for key, line in files.entries(path) if key.startswith(f"{task_id}:")]


def _kinds(store: Store, task_id: str = "t1") -> list[str]:
    return [str(e.action.get("kind")) for e in store.events(task_id)]


class TestApprove:
    def test_the_call_waits_then_runs_once(self, shared: tuple[str, Store], tmp_path: Path) -> None:
        """Nothing runs before the approval; after it, the call runs once and the task
        completes; who approved and why is in the event; the password never is."""
        url, store = shared
        runtime = _parked(store, tmp_path)
        head = runtime.load("t1")
        assert head.status is TaskStatus.WAITING_APPROVAL
        pending = head.pending_approval
        assert pending is not None
        assert (pending.skill, pending.params["amount"], pending.target) == ("pay", 250, "paying")
        assert str(pending.params["password"]).startswith("enc:v1:")  # sealed, not masked
        assert head.pending_effect is None
        assert _payments(tmp_path) == []
        assert runtime.run("t1").stopped == "waiting_approval"  # a run does not move it
        approved = runtime.approve("t1", actor="alice", reason="invoice checked")
        assert (approved.status, approved.pending_approval) == (TaskStatus.RUNNING, None)
        assert approved.pending_effect is not None
        assert approved.pending_effect.key == pending.key  # no edit: the same call
        result = runtime.run("t1")
        assert (result.stopped, result.state.paid) == ("completed", 250)
        assert _payments(tmp_path) == ["pay 250 to bob"]
        events = store.events("t1")
        request = next(e for e in events if e.action.get("approval") == "requested")
        decided = next(e for e in events if e.action.get("kind") == "approve")
        assert (request.actor, decided.actor) == ("policy", "human")
        assert decided.action["actor"] == "alice"
        assert decided.action["reason"] == "invoice checked"
        assert decided.action["params"]["password"] == "***"
        assert "edited" not in decided.action
        assert _kinds(store)[-2:] == ["effect", "finish"]  # its first run, not a resume
        assert PASSWORD.encode() not in stored_bytes(url)

    def test_an_edit_changes_the_call_under_the_schema(
        self, shared: tuple[str, Store], tmp_path: Path
    ) -> None:
        """``edits`` replace params; the effect's key is made over the final params."""
        _, store = shared
        runtime = _parked(store, tmp_path)
        before = runtime.load("t1").pending_approval
        assert before is not None
        approved = runtime.approve("t1", edits={"amount": 120, "to": "carol"}, actor="bob")
        assert approved.pending_effect is not None
        assert approved.pending_effect.key != before.key
        assert approved.pending_effect.params["amount"] == 120
        assert runtime.run("t1").state.paid == 120
        assert _payments(tmp_path) == ["pay 120 to carol"]
        decided = next(e for e in store.events("t1") if e.action.get("kind") == "approve")
        assert decided.action["edited"] == {"amount": 120, "to": "carol"}

    def test_an_edited_secret_is_sealed_and_masked(self, tmp_path: Path) -> None:
        """A secret given in an edit reaches the effect, never the store in plaintext."""
        url = f"sqlite:///{tmp_path / 'state.db'}"
        store = open_store(url)
        try:
            runtime = _parked(store, tmp_path)
            approved = runtime.approve("t1", edits={"password": "wrong-pass-77"}, actor="al")
            assert approved.pending_effect is not None
            assert str(approved.pending_effect.params["password"]).startswith("enc:v1:")
            decided = store.events("t1")[-1]
            assert decided.action["edited"] == {"password": "***"}
            result = runtime.run("t1")  # the bank refuses the wrong password: it got it
            assert result.state.paid is None
            assert "the bank refused the password" in " ".join(
                e.message for e in result.state.errors
            )
            assert b"wrong-pass-77" not in stored_bytes(url)
        finally:
            store.close()

    @pytest.mark.parametrize(
        ("edits", "message"),
        [
            ({"amount": 5000}, "edit refused: invalid params for 'pay': amount"),
            ({"amont": 5}, "edit refused: 'pay' has no param 'amont'"),
            ({"to": "x\x1b[2J"}, "edit of 'to' refused"),
            ({"to.name": "x"}, "is not a param name"),
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

    def test_a_bad_actor_or_reason_writes_nothing(self, store: Store, tmp_path: Path) -> None:
        runtime = _parked(store, tmp_path)
        version = store.load("t1").version
        for kwargs in ({"actor": ""}, {"actor": "a\nb"}, {"reason": "\x07"}):
            with pytest.raises(UsageError, match="refused"):
                runtime.approve("t1", **kwargs)
        with pytest.raises(UsageError, match="needs a reason"):
            runtime.reject("t1", reason="  ", actor="alice")
        assert store.load("t1").version == version

    def test_the_actor_defaults_to_the_environment(
        self, store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("SKILLSTATE_ACTOR", "ops-bot")
        runtime = _parked(store, tmp_path)
        runtime.approve("t1")
        assert store.events("t1")[-1].action["actor"] == "ops-bot"

    def test_a_predicate_asks_only_when_it_holds(self, store: Store, tmp_path: Path) -> None:
        """``approval=lambda state, params: params.amount > 100``: 80 runs at once."""
        runtime = Runtime(AGENT, store)
        runtime.start("t1", ledger=str(tmp_path / "ledger.txt"), amount=80)
        result = runtime.run("t1")
        assert (result.stopped, result.state.paid) == ("completed", 80)
        assert "approve" not in _kinds(store)
        assert all(e.action.get("approval") is None for e in store.events("t1"))

    def test_an_invalid_call_is_refused_not_asked(self, store: Store, tmp_path: Path) -> None:
        """A call that could not run (params out of range) is logged, never put to a person."""
        runtime = Runtime(AGENT, store, max_repeats=2)
        runtime.start("t1", ledger=str(tmp_path / "ledger.txt"), amount=5000)
        result = runtime.run("t1")
        assert result.stopped == "stalled"
        assert all(e.action.get("approval") is None for e in store.events("t1"))
        assert result.state.errors[0].kind == "action_rejected"

    def test_a_skill_without_effects_runs_once(
        self, shared: tuple[str, Store], tmp_path: Path
    ) -> None:
        """An approved ``note`` runs once from its intent; it is a ``call``, not an effect,
        so the ledger of effects (what rollback and fork read) does not list it."""
        _, store = shared
        runtime = _parked(store, tmp_path, mode="note")
        runtime.approve("t1", actor="alice")
        result = runtime.run("t1")
        assert (result.stopped, result.state.noted) == ("completed", 1)
        notes = (tmp_path / "ledger.txt.notes").read_text().splitlines()
        assert notes == ["t1 hello"]
        assert "call" in _kinds(store)
        assert not {"effect", "effect_resumed"} & set(_kinds(store))
        assert known_effects(store.events("t1"), result.state.version) == {}


class TestReject:
    def test_the_next_decision_sees_the_reason(
        self, shared: tuple[str, Store], tmp_path: Path
    ) -> None:
        """The rejection is in the error log and in the view's "already tried" line; the
        policy reads it and proposes 50, which needs no approval."""
        _, store = shared
        runtime = _parked(store, tmp_path)
        rejected = runtime.reject("t1", reason="over the monthly limit", actor="alice")
        assert (rejected.status, rejected.pending_approval) == (TaskStatus.RUNNING, None)
        assert rejected.errors[-1].kind == "approval_rejected"
        assert rejected.errors[-1].message == "pay was rejected by alice: over the monthly limit"
        view = AGENT.view(rejected)
        assert view.last_failure is not None
        assert view.last_failure.reason == "rejected by alice: over the monthly limit"
        assert "-> rejected by alice: over the monthly limit" in view.text
        assert _payments(tmp_path) == []
        result = runtime.run("t1")
        assert (result.stopped, result.state.paid) == ("completed", 50)
        assert _payments(tmp_path) == ["pay 50 to bob"]
        decided = next(e for e in store.events("t1") if e.action.get("kind") == "reject")
        assert (decided.actor, decided.action["actor"]) == ("human", "alice")
        assert decided.action["reason"] == "over the monthly limit"

    def test_the_same_call_rejected_again_stalls(self, store: Store, tmp_path: Path) -> None:
        """A policy that proposes the rejected call again is refused without asking the
        person again (a rejected call stays rejected until what it read changes, issue
        26), and stalls: the guard counts the refusal as a repeat of the rejection."""
        from dataclasses import replace

        from skillstate import CallSkill, ScriptedPolicy

        stubborn = replace(
            AGENT,
            policy=ScriptedPolicy(
                lambda view: CallSkill(skill="pay", params={"amount": 300, "to": "bob"})
            ),
        )
        runtime = Runtime(stubborn, store, max_repeats=2)
        runtime.start("t1", ledger=str(tmp_path / "ledger.txt"))
        assert runtime.run("t1").stopped == "waiting_approval"
        runtime.reject("t1", reason="no", actor="alice")
        last = runtime.run("t1").state  # not put to alice again
        assert last.status is TaskStatus.FAILED
        assert last.errors[-1].kind == "stalled"
        refused = last.errors[-2]
        assert refused.kind == "action_rejected"
        assert "was rejected at step" in refused.message
        assert "rejected by alice: no" in refused.message
        assert _payments(tmp_path) == []


class TestRaces:
    def test_a_second_decision_names_the_first(self, store: Store, tmp_path: Path) -> None:
        runtime = _parked(store, tmp_path)
        runtime.approve("t1", actor="alice", reason="ok")
        version = store.events("t1")[-1].version
        for decide in (
            lambda: runtime.approve("t1", actor="bob"),
            lambda: runtime.reject("t1", reason="no", actor="bob"),
        ):
            with pytest.raises(ApprovalNotPending) as late:
                decide()
            assert str(late.value) == (
                f"task 't1' has no pending approval (approved by alice at version {version})"
            )
        runtime.run("t1")
        assert _payments(tmp_path) == ["pay 250 to bob"]

    def test_a_task_that_never_asked(self, store: Store, tmp_path: Path) -> None:
        runtime = Runtime(AGENT, store)
        runtime.start("t1", ledger=str(tmp_path / "ledger.txt"))
        with pytest.raises(ApprovalNotPending, match="it is created and asked for none"):
            runtime.approve("t1", actor="alice")

    @pytest.mark.parametrize("second", ["approve", "reject"])
    def test_two_approvers_at_once(
        self, shared: tuple[str, Store], tmp_path: Path, second: str
    ) -> None:
        """Two runtimes (two lease holders) decide at the same instant, many times over:
        exactly one decision lands each time, the other is ApprovalNotPending; every
        approved payment is made once and every task completes."""
        url, store = shared
        rounds = 4
        for n in range(rounds):
            _parked(store, tmp_path, f"r{n}")
        outcomes = {f"r{n}": _race(url, f"r{n}", second) for n in range(rounds)}
        for task, results in outcomes.items():
            assert [r.split(": ")[1] for r in results].count("ok") == 1, (task, results)
            assert [r.split(": ")[1] for r in results].count("ApprovalNotPending") == 1
            decisions = [k for k in _kinds(store, task) if k in ("approve", "reject")]
            assert len(decisions) == 1
            runtime = Runtime(AGENT, store)
            assert runtime.run(task).stopped == "completed"
            assert len(_payments(tmp_path, task)) == 1
        completed = [t for t in outcomes if Runtime(AGENT, store).load(t).paid is not None]
        assert len(completed) == rounds


def _race(url: str, task: str, second: str) -> list[str]:
    """``a`` approves and ``b`` approves (or rejects) ``task`` at the same instant, each
    with its own store connection and lease holder name: what each got, sorted."""
    barrier = threading.Barrier(2)
    results: list[str] = []

    def decide(who: str) -> None:
        db = open_store(url)
        runtime = Runtime(AGENT, db, worker=f"{who}-{task}")
        barrier.wait()
        try:
            if who == "a" or second == "approve":
                runtime.approve(task, actor=who)
            else:
                runtime.reject(task, reason="no", actor=who)
            results.append(f"{who}: ok")
        except SkillstateError as exc:
            results.append(f"{who}: {type(exc).__name__}")
        finally:
            db.close()

    threads = [threading.Thread(target=decide, args=(who,)) for who in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sorted(results)


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

    def test_a_worker_slice_stops_and_the_sweeper_waits(self, store: Store, tmp_path: Path) -> None:
        """A slice ending in ``waiting_approval`` sends no continuation; a message for it
        is stale; the sweeper never finds it stranded; after the approval a new message
        completes it."""
        Runtime(AGENT, store).start("t1", ledger=str(tmp_path / "ledger.txt"))
        sent: list[Message] = []
        settings = WorkerSettings(store_url=store.url, lease_ttl=5.0)
        advancer = Advancer(store, settings, allowed=frozenset({AGENT.reference() or ""}))
        outcome = advancer.advance(Message("t1", 1, "m1"), lambda m, _: sent.append(m))
        assert (outcome.kind, sent) == ("waiting_approval", [])
        head = store.load("t1").version
        again = advancer.advance(Message("t1", head, "m2"), lambda m, _: sent.append(m))
        assert (again.kind, sent) == ("stale", [])
        assert stranded(store, 0.0) == []
        approved = Runtime(AGENT, store).approve("t1", actor="alice")
        done = advancer.advance(Message("t1", approved.version, "m3"), lambda m, _: None)
        assert done.kind == "completed"
        assert _payments(tmp_path) == ["pay 250 to bob"]

    def test_tasks_lists_the_status(self, store: Store, tmp_path: Path) -> None:
        _parked(store, tmp_path)
        assert [(h.task_id, h.status) for h in store.heads()] == [("t1", "waiting_approval")]


class TestTheOption:
    def test_a_predicate_that_raises_asks_a_person(self) -> None:
        """When in doubt, a person looks: a raising predicate counts as "needs approval"."""
        from skillstate import Skill

        def broken(state: Any, params: Any) -> bool:
            raise KeyError("limit")

        skill = Skill(lambda s, p, c: {}, name="s", approval=broken)
        assert skill.needs_approval(None, None) is True
        assert Skill(lambda s, p, c: {}, name="t").needs_approval(None, None) is False

    def test_a_wrong_value_is_refused_at_definition(self) -> None:
        from skillstate import Skill

        with pytest.raises(UsageError, match="approval must be True, False or a function"):
            Skill(lambda s, p, c: {}, name="s", approval="yes")  # type: ignore[arg-type]
