"""Cross-task memory in the runtime: verified writes out, other tasks' facts in the view.

Task A of one run remembers a fact through a verified skill; task B of another run
(another Runtime, another agent object) sees it in its view with its provenance.
A failing verify writes nothing, an undeclared scope is refused, secrets never reach
the memory record or a prompt, expired facts are not shown, and a flush that did
not happen (or happened and was not recorded) is completed exactly once.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from pydantic import BaseModel

from skillstate import (
    Agent,
    AgentState,
    CallSkill,
    Finish,
    NoParams,
    Outcome,
    Runtime,
    ScriptedPolicy,
    Sensitive,
    SkillContext,
    SkillRegistry,
    StateMachine,
    View,
    render_view,
)
from skillstate.engine.actions import Action
from skillstate.errors import LeaseLost, UsageError
from skillstate.memory import Recalled, Remembered, load_memory, memory_scopes, record_id
from skillstate.memory import record as memory_record
from skillstate.state.secrets import generate_key
from skillstate.store.base import Store
from skillstate.store.memory import MemoryStore
from skillstate.store.sqlite import SQLiteStore
from tests import memory_agent
from tests.leaks import stored_bytes

SCOPE = memory_agent.SCOPE


def fresh_agent(**options: Any) -> Agent[memory_agent.MemState]:
    """Another run's agent: the same definition, a new object."""
    given: dict[str, Any] = {
        "policy": ScriptedPolicy(memory_agent.decide),
        "memory": [SCOPE],
        **options,
    }
    return Agent(
        name="orders-memory",
        state_type=memory_agent.MemState,
        machine=StateMachine({"init": []}),
        skills=memory_agent.skills,
        **given,
    )


def actions(store: Store, task: str) -> list[str]:
    return [str(e.action.get("kind")) for e in store.events(task)]


class TestAcrossTasks:
    def test_task_b_of_another_run_sees_task_as_fact_with_provenance(self) -> None:
        store = MemoryStore()
        first = Runtime(memory_agent.agent, store)
        first.start("A")
        assert first.run("A").stopped == "completed"
        assert actions(store, "A") == ["create", "call_skill", "memory_flush", "finish"]
        flush = store.events("A")[2]
        assert flush.action == {"kind": "memory_flush", "scopes": {SCOPE: 1}}
        (fact,) = load_memory(store, SCOPE).facts
        assert (fact.key, fact.value, fact.provenance, fact.skill) == (
            "preferred_carrier",
            "DHL",
            "A@2",
            "learn",
        )
        assert first.load("A").memory_outbox == ()

        seen: list[View[Any]] = []
        agent = fresh_agent(
            policy=ScriptedPolicy(lambda v: seen.append(v) or memory_agent.decide(v))
        )
        second = Runtime(agent, store)
        second.start("B", key="zone", wanted="EU")
        result = second.run("B")
        assert result.stopped == "completed"
        text = seen[0].text
        assert "Memory (from other tasks; verified there, may be out of date):" in text
        assert '- preferred_carrier: "DHL" [agent:orders; A@2 by learn]' in text
        card = second.load("B")
        assert card.recalled == (
            Recalled(
                scope=SCOPE,
                key="preferred_carrier",
                value="DHL",
                task="A",
                version=2,
                skill="learn",
            ),
        )
        assert card.recalled_from == {SCOPE: 1}
        assert actions(store, "B")[:2] == ["create", "memory_read"]
        # B's own write moved the record, but what B's views show did not change: no
        # second memory_read.
        assert actions(store, "B").count("memory_read") == 1
        assert "preferred_carrier=DHL@A@2" in str(card.completed_steps[-1].summary)

    def test_the_view_is_a_function_of_the_card(self) -> None:
        """Rendered again from the stored version the decision saw, the view is the same."""
        store = MemoryStore()
        runtime = Runtime(memory_agent.agent, store)
        runtime.start("A")
        runtime.run("A")
        texts: list[str] = []
        agent = fresh_agent(
            policy=ScriptedPolicy(lambda v: texts.append(v.text) or memory_agent.decide(v))
        )
        second = Runtime(agent, store)
        second.start("B", key="zone", wanted="EU")
        second.run("B")
        decided_at = store.checkpoint("B", 2).state  # the memory_read version
        again = agent.view(agent.parse_state(decided_at)).text
        assert again == texts[0]
        # ... even after the memory moved on.
        memory_record.forget(store, SCOPE, "preferred_carrier", reason="test", actor="t")
        assert agent.view(agent.parse_state(decided_at)).text == texts[0]

    def test_a_forgotten_fact_leaves_the_next_view(self) -> None:
        store = MemoryStore()
        runtime = Runtime(memory_agent.agent, store)
        runtime.start("A")
        runtime.run("A")
        runtime.start("B", key="zone", wanted="EU")
        runtime.step("B")  # memory_read, then learn
        assert runtime.load("B").recalled
        memory_record.forget(store, SCOPE, "preferred_carrier", reason="wrong", actor="ana")
        runtime.run("B")
        assert runtime.load("B").recalled == ()
        assert actions(store, "B").count("memory_read") == 2

    def test_a_user_scope_is_bound_per_task_from_a_card_field(self) -> None:
        store = MemoryStore()
        agent = _user_agent()
        runtime = Runtime(agent, store)
        for task, user, lang in (("A", "alice", "fr"), ("B", "bob", "de")):
            runtime.start(task, user=user, lang=lang)
            runtime.run(task)
        assert memory_scopes(store) == ["user:alice", "user:bob"]
        runtime.start("A2", user="alice", lang="fr")
        runtime.run("A2")
        read = next(e for e in store.events("A2") if e.action["kind"] == "memory_read")
        seen = agent.parse_state(store.checkpoint("A2", read.version).state).recalled
        assert [(f.key, f.value, f.task) for f in seen] == [("lang", "fr", "A")]
        # A2 then replaced A's fact with its own: its next views show none of it.
        assert runtime.load("A2").recalled == ()
        runtime.start("N")  # no user: no scope to read, nothing to write
        runtime.run("N")
        assert runtime.load("N").recalled == ()
        assert (
            runtime.load("N")
            .errors[-1]
            .message.startswith(
                "remember_lang failed after 1 attempt(s): UsageError: memory scope 'user:{user}' "
                "names no scope in task 'N'"
            )
        )


class UserState(AgentState):
    user: str | None = None
    lang: str | None = None
    noted: bool = False


def _user_agent() -> Agent[UserState]:
    skills = SkillRegistry()

    @skills.skill(outputs=["noted"], remembers=["user:{user}"], max_retries=0)
    def remember_lang(state: UserState, params: NoParams, ctx: SkillContext) -> Outcome:
        ctx.remember("lang", state.lang)
        return Outcome(writes={"noted": True})

    @remember_lang.verifier
    def _(state: UserState, outcome: Outcome) -> bool:
        return state.noted

    def decide(view: View[UserState]) -> Action:
        if not view.state.noted and not view.state.errors:
            return CallSkill(skill="remember_lang")
        return Finish(summary="done")

    return Agent(
        name="langs",
        state_type=UserState,
        machine=StateMachine({"init": []}),
        skills=skills,
        policy=ScriptedPolicy(decide),
        memory=["user:{user}"],
    )


# ---------------------------------------------------------------- only verified writes


class Carrier(BaseModel):
    carrier: str
    scope: str | None = None
    size: int = 0


class CarrierState(AgentState):
    carrier: str | None = None
    api_key: Sensitive[str] | None = None


def _carrier_agent(verify_ok: Any = None, **skill: Any) -> tuple[Agent[CarrierState], list[str]]:
    """An agent whose ``set_carrier`` remembers; ``verify_ok(state)`` decides its verify."""
    skills = SkillRegistry()
    decided: list[str] = []

    @skills.skill(outputs=["carrier"], **{"remembers": [SCOPE], "max_retries": 1, **skill})
    def set_carrier(state: CarrierState, params: Carrier, ctx: SkillContext) -> Outcome:
        ctx.remember("carrier", params.carrier + "x" * params.size, scope=params.scope)
        return Outcome(writes={"carrier": params.carrier})

    @set_carrier.verifier
    def _(state: CarrierState, outcome: Outcome) -> bool:
        return state.carrier is not None and (verify_ok is None or verify_ok(state))

    def decide(view: View[CarrierState]) -> Action:
        if not decided:
            decided.append("call")
            return CallSkill(skill="set_carrier", params=view.state.facts.get("params", {}))
        return Finish(summary="done")

    agent = Agent(
        name="carriers",
        state_type=CarrierState,
        machine=StateMachine({"init": []}),
        skills=skills,
        policy=ScriptedPolicy(decide),
    )
    return agent, decided


def _run(agent: Agent[Any], params: dict[str, Any], store: Store | None = None) -> Any:
    store = store or MemoryStore()
    runtime = Runtime(agent, store)
    runtime.start("T", facts={"params": params})
    runtime.run("T")
    return runtime.load("T"), store


class TestOnlyVerifiedWrites:
    def test_a_failing_verify_writes_nothing(self) -> None:
        agent, _ = _carrier_agent(verify_ok=lambda s: s.carrier != "bad")
        card, store = _run(agent, {"carrier": "bad"})
        assert [e.kind for e in card.errors][-1] == "step_failed"
        assert card.memory_outbox == ()
        assert memory_scopes(store) == []
        assert "memory_flush" not in actions(store, "T")

    def test_only_the_attempt_that_verified_is_remembered(self) -> None:
        """The first attempt remembers and fails its verify; the retry's write is kept."""
        attempts: list[int] = []

        def second_time(state: CarrierState) -> bool:
            attempts.append(1)
            return len(attempts) > 1

        agent, _ = _carrier_agent(verify_ok=second_time)
        _, store = _run(agent, {"carrier": "DHL"})
        assert len(attempts) == 2
        assert [(f.value, f.version) for f in load_memory(store, SCOPE).facts] == [("DHL", 2)]

    def test_an_undeclared_scope_fails_the_step_at_once(self) -> None:
        agent, _ = _carrier_agent()
        card, store = _run(agent, {"carrier": "DHL", "scope": "team:ops"})
        entry = [e for e in card.errors if e.kind == "output_not_declared"]
        assert len(entry) == 1  # not retried
        assert entry[0].message == (
            "skill 'set_carrier' remembered into memory scope 'team:ops'; it declares "
            "remembers=(agent:orders)"
        )
        assert memory_scopes(store) == []

    def test_a_skill_that_declares_no_scope_cannot_remember(self) -> None:
        agent, _ = _carrier_agent(remembers=())
        card, store = _run(agent, {"carrier": "DHL"})
        assert card.errors[0].kind == "output_not_declared"
        assert (
            "without naming a memory scope; it declares remembers=(none)" in card.errors[0].message
        )
        assert memory_scopes(store) == []

    def test_a_value_too_big_for_memory_is_refused(self) -> None:
        agent, _ = _carrier_agent()
        card, store = _run(agent, {"carrier": "DHL", "size": 3000})
        assert card.errors[0].kind == "invalid_output"
        assert "it is 3,005 characters long (the limit is 2,000)" in card.errors[0].message
        assert memory_scopes(store) == []


class TestDeclarations:
    def test_bad_scopes_are_refused_when_the_agent_is_built(self) -> None:
        with pytest.raises(UsageError, match="invalid memory scope 'orders'"):
            fresh_agent(memory=["orders"])
        with pytest.raises(UsageError, match="reads 'owner', but the card has no field 'owner'"):
            fresh_agent(memory=["user:{owner}"])
        with pytest.raises(UsageError, match="memory_facts must be an integer >= 1"):
            fresh_agent(memory_facts=0)
        with pytest.raises(UsageError, match="memory scopes take a list"):
            fresh_agent(memory="agent:orders")
        with pytest.raises(UsageError, match="skill 'x': remembers takes a list"):
            SkillRegistry().skill(name="x", remembers="agent:orders")(lambda s, p, c: Outcome())
        with pytest.raises(UsageError, match="skill 'x': invalid memory scope 'crew:a'"):
            SkillRegistry().skill(name="x", remembers=["crew:a"])(lambda s, p, c: Outcome())


# ---------------------------------------------------------------- secrets


def test_secrets_never_reach_the_memory_record_its_events_or_a_prompt(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sealed field's value, a phone number and a value under a token-like key are
    masked in the card's outbox, the memory record, both event logs and B's view."""
    monkeypatch.setenv("SKILLSTATE_KEY", generate_key())
    secret, phone = "sk-live-9f8e7d6c5b4a", "+1 415 555 0100"
    skills = SkillRegistry()

    @skills.skill(outputs=["carrier"], remembers=[SCOPE])
    def leak(state: CarrierState, params: NoParams, ctx: SkillContext) -> Outcome:
        ctx.remember("key_used", f"logged in with {state.api_key}")
        ctx.remember("callback", f"call {phone}")
        ctx.remember("api_token", "plain-looking-value-123")
        return Outcome(writes={"carrier": "DHL"})

    @leak.verifier
    def _(state: CarrierState, outcome: Outcome) -> bool:
        return state.carrier == "DHL"

    texts: list[str] = []

    def decide(view: View[CarrierState]) -> Action:
        texts.append(view.text)
        if view.state.carrier is None and view.state.task_id == "A":
            return CallSkill(skill="leak")
        return Finish(summary="done")

    agent = Agent(
        name="leaky",
        state_type=CarrierState,
        machine=StateMachine({"init": []}),
        skills=skills,
        policy=ScriptedPolicy(decide),
        memory=[SCOPE],
    )
    url = f"sqlite:///{tmp_path / 'state.db'}"
    store = SQLiteStore(tmp_path / "state.db")
    runtime = Runtime(agent, store)
    runtime.start("A", api_key=secret)
    runtime.run("A")
    runtime.start("B")
    runtime.run("B")
    facts = {f.key: f.value for f in load_memory(store, SCOPE).facts}
    assert facts == {
        "key_used": "logged in with ***",
        "callback": "call ***",
        "api_token": "***",
    }
    store.close()
    raw = stored_bytes(url)
    for plain in (secret, phone, "plain-looking-value-123"):
        assert plain.encode() not in raw
        assert all(plain not in text for text in texts)
    assert "api_token" in texts[-1]  # B's view shows the fact, masked


# ---------------------------------------------------------------- expiry


def test_an_expired_fact_is_not_shown_and_prune_drops_it(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [datetime(2026, 12, 3, 5, 0, tzinfo=timezone.utc)]
    monkeypatch.setattr(memory_record, "now", lambda: now[0])
    skills = SkillRegistry()

    @skills.skill(outputs=["carrier"], remembers=[SCOPE])
    def brief(state: CarrierState, params: NoParams, ctx: SkillContext) -> Outcome:
        ctx.remember("window", "09:00-10:00", ttl=timedelta(minutes=5))
        ctx.remember("carrier", "DHL")
        return Outcome(writes={"carrier": "DHL"})

    @brief.verifier
    def _(state: CarrierState, outcome: Outcome) -> bool:
        return state.carrier == "DHL"

    def decide(view: View[CarrierState]) -> Action:
        if view.state.carrier is None and view.state.task_id == "A":
            return CallSkill(skill="brief")
        return Finish(summary="done")

    agent = Agent(
        name="brief",
        state_type=CarrierState,
        machine=StateMachine({"init": []}),
        skills=skills,
        policy=ScriptedPolicy(decide),
        memory=[SCOPE],
    )
    store = MemoryStore()
    runtime = Runtime(agent, store)
    runtime.start("A")
    runtime.run("A")
    runtime.start("B")
    runtime.run("B")
    assert {f.key for f in runtime.load("B").recalled} == {"window", "carrier"}
    now[0] += timedelta(minutes=6)
    runtime.start("C")
    runtime.run("C")
    assert {f.key for f in runtime.load("C").recalled} == {"carrier"}
    assert memory_record.prune(store, actor="ops") == {SCOPE: ["window"]}


# ---------------------------------------------------------------- the view budget


def test_the_budget_hides_memory_before_the_tasks_own_facts() -> None:
    recalled = tuple(
        Recalled(scope=SCOPE, key=f"k{i}", value="v" * 40, task=f"t{i}", version=2, skill="s")
        for i in range(6)
    )
    state = memory_agent.MemState(
        task_id="T",
        goal="ship the order",
        constraints=("never ship to a PO box",),
        facts={f"own{i}": "w" * 40 for i in range(6)},
        recalled=recalled,
    )
    whole = render_view(state)
    assert whole.text.count("[agent:orders; ") == 6
    view = render_view(state, budget=whole.tokens - 40)
    assert view.dropped
    assert set(view.dropped) == {"memory"}
    assert "- k0: " in view.text  # the most recent stays longest
    assert "- k5: " not in view.text
    assert "more hidden by the view budget" in view.text
    tight = render_view(state, budget=60)
    first_fact = next(i for i, d in enumerate(tight.dropped) if d.startswith("facts."))
    assert tight.dropped[:6] == ("memory",) * 6
    assert first_fact >= 6
    assert "never ship to a PO box" in tight.text
    assert "ship the order" in tight.text


# ---------------------------------------------------------------- a flush that did not finish


class TestFlushRecovery:
    def test_a_flush_that_failed_is_finished_before_the_next_write(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        store = MemoryStore()
        runtime = Runtime(memory_agent.agent, store)
        runtime.start("A")
        write = memory_record.remember

        def down(*args: Any, **kwargs: Any) -> int:
            raise ConnectionError("memory store down")

        monkeypatch.setattr(memory_record, "remember", down)
        with pytest.raises(ConnectionError):
            runtime.run("A")
        head = runtime.load("A")
        assert [e.key for e in head.memory_outbox] == ["preferred_carrier"]
        assert memory_scopes(store) == []
        monkeypatch.setattr(memory_record, "remember", write)
        assert runtime.run("A").stopped == "completed"
        assert len(load_memory(store, SCOPE).facts) == 1
        flush = next(e for e in store.events("A") if e.action["kind"] == "memory_flush")
        assert flush.action == {"kind": "memory_flush", "scopes": {SCOPE: 1}, "resumed": True}

    def test_a_write_that_landed_is_not_written_again_even_when_replaced_since(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A crash after the record was written, before the outbox was emptied; another
        task replaced the fact meanwhile: the resume must not write the old value back."""
        store = MemoryStore()
        runtime = Runtime(memory_agent.agent, store)
        runtime.start("A")
        write = memory_record.remember

        def lands_then_fails(*args: Any, **kwargs: Any) -> int:
            write(*args, **kwargs)
            raise ConnectionError("lost the answer")

        monkeypatch.setattr(memory_record, "remember", lands_then_fails)
        with pytest.raises(ConnectionError):
            runtime.run("A")
        monkeypatch.setattr(memory_record, "remember", write)
        newer = Remembered(
            scope=SCOPE, key="preferred_carrier", value="UPS", version=9, skill="learn", step="x"
        )
        write(store, SCOPE, [newer], task="Z")
        assert runtime.run("A").stopped == "completed"
        (fact,) = load_memory(store, SCOPE).facts
        assert (fact.value, fact.provenance) == ("UPS", "Z@9")
        assert len(store.events(record_id(SCOPE))) == 2  # A's write, Z's: nothing more
        flush = next(e for e in store.events("A") if e.action["kind"] == "memory_flush")
        assert flush.action == {"kind": "memory_flush", "scopes": {SCOPE: None}, "resumed": True}

    def test_a_worker_taken_over_after_its_commit_leaves_the_flush_to_the_new_holder(
        self,
    ) -> None:
        """Between the step's commit and its flush another worker took the task over: the
        old worker writes nothing to the memory (LeaseLost); the new holder flushes once."""
        store = MemoryStore()
        runtime = Runtime(memory_agent.agent, store)
        runtime.start("A")

        def taken_over(report: Any) -> None:
            if report.event.skill == "learn":
                store.force_release("A")
                store.claim("A", "elsewhere:1", 60)

        runtime.observer = taken_over
        with pytest.raises(LeaseLost, match="taken over by another worker"):
            runtime.run("A")
        assert memory_scopes(store) == []
        assert runtime.load("A").memory_outbox
        store.release("A", "elsewhere:1")
        assert Runtime(memory_agent.agent, store).run("A").stopped == "completed"
        assert [f.provenance for f in load_memory(store, SCOPE).facts] == ["A@2"]
