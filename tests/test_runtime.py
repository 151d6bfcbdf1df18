"""The step loop: validation, verify gating, retries, rollback, pauses and resume."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from skillstate import (
    Action,
    Agent,
    AgentState,
    AskUser,
    CallSkill,
    Fail,
    Finish,
    NoParams,
    Outcome,
    Runtime,
    ScriptedPolicy,
    SkillContext,
    SkillRegistry,
    StaleState,
    StateMachine,
    TaskStatus,
    UsageError,
    Verdict,
    View,
    rollback_task,
)
from skillstate.state.diff import apply_patch
from skillstate.store.memory import MemoryStore
from skillstate.store.sqlite import SQLiteStore


class CounterState(AgentState):
    count: int = 0
    note: str | None = None


class AddParams(BaseModel):
    n: int


MACHINE = StateMachine(
    {"init": ["counting"], "counting": ["counting", "done"], "done": []}, initial="init"
)


def make_agent(
    decide: Callable[[View], Action],
    *,
    verify_ok: bool = True,
    fail_runs: int = 0,
    log: list[str] | None = None,
) -> Agent:
    """A counter agent whose skill can be made to fail ``fail_runs`` times or always."""
    calls = log if log is not None else []
    skills = SkillRegistry()
    remaining = {"fails": fail_runs}

    @skills.skill(step="counting", outputs=["count"], tools=["adder"], max_retries=2, version="7")
    def add(state: CounterState, params: AddParams, ctx: SkillContext) -> Outcome:
        """Add n to the count."""
        total = ctx.call("adder", a=state.count, b=params.n)
        if remaining["fails"] > 0:
            remaining["fails"] -= 1
            raise RuntimeError("flaky backend")
        return Outcome(writes={"count": total}, summary=f"count={total}", value=total)

    @add.verifier
    def _check(state: CounterState, outcome: Outcome) -> Verdict:
        if not verify_ok:
            return Verdict.failed("count does not match the adder")
        return Verdict(ok=state.count == outcome.value, reason="count matches the adder")

    @add.rollbacker
    def _undo(state: CounterState, outcome: Outcome | None, ctx: SkillContext) -> None:
        calls.append("rollback")

    @skills.skill(outputs=["count"])
    def sneaky(state: CounterState, params: NoParams, ctx: SkillContext) -> Outcome:
        """Writes a field it did not declare."""
        return Outcome(writes={"count": 1, "note": "not mine"})

    sneaky.verifier(lambda state, outcome: state.count == outcome.writes["count"])

    @skills.skill(outputs=["note"])
    def borrow(state: CounterState, params: NoParams, ctx: SkillContext) -> Outcome:
        """Calls a tool it did not declare."""
        ctx.call("adder", a=1, b=2)
        return Outcome(writes={"note": "x"})

    borrow.verifier(lambda state, outcome: state.note == "x")

    @skills.skill(outputs=["note"], when=lambda s: s.count > 100)
    def late(state: CounterState, params: NoParams, ctx: SkillContext) -> Outcome:
        """Only applies to big counts."""
        return Outcome(writes={"note": "late"})

    late.verifier(lambda state, outcome: state.note == "late")

    def adder(a: int, b: int) -> int:
        calls.append(f"adder({a},{b})")
        return a + b

    return Agent(
        name="counter",
        state_type=CounterState,
        machine=MACHINE,
        skills=skills,
        policy=ScriptedPolicy(decide),
        tools={"adder": adder},
        goal="count to three",
        constraints=("never exceed 3",),
        plan=("add",),
    )


def count_to(target: int) -> Callable[[View], Action]:
    def decide(view: View) -> Action:
        state = view.state
        assert isinstance(state, CounterState)
        if state.count < target:
            return CallSkill(skill="add", params={"n": 1}, reason="below target")
        return Finish(reason="reached target")

    return decide


def once(action: Action) -> Callable[[View], Action]:
    return lambda view: action


def bookkeeping_free(state: AgentState) -> dict[str, Any]:
    """The state minus what every decision touches (version, errors, usage, the stall guard)."""
    data = state.to_json()
    for key in ("version", "errors", "usage", "no_progress", "tried"):
        data.pop(key)
    return data


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


class TestHappyPath:
    def test_runs_to_completion(self, store: MemoryStore) -> None:
        """The loop decides, verifies and commits until the policy finishes."""
        result = Runtime(make_agent(count_to(3)), store).run("t", create=True)
        assert result.stopped == "completed"
        state = result.state
        assert isinstance(state, CounterState)
        assert state.count == 3
        assert state.status is TaskStatus.COMPLETED
        assert state.current_step == "done"
        assert [s.id for s in state.completed_steps] == [
            "0002-add",
            "0003-add",
            "0004-add",
            "0005-finish",
        ]
        assert state.pending_steps == ()
        assert state.constraints == ("never exceed 3",)

    def test_events_record_skill_version_tools_and_transition(self, store: MemoryStore) -> None:
        """Each step's event names the skill and version, its tool calls, and skill switches."""
        Runtime(make_agent(count_to(2)), store).run("t", create=True)
        events = store.events("t")
        first_add = events[1]
        assert (first_add.skill, first_add.skill_version) == ("add", "7")
        assert first_add.verdict is not None
        assert first_add.verdict.ok
        assert [c.tool for c in first_add.tool_calls] == ["adder"]
        assert store.get_artifact(first_add.tool_calls[0].ref or "") == b"1"
        assert first_add.skill_transition is not None
        assert (first_add.skill_transition.from_skill, first_add.skill_transition.to_skill) == (
            None,
            "add",
        )
        assert events[2].skill_transition is None  # same skill again: no switch
        assert events[-1].skill_transition is not None  # finishing leaves the skill

    def test_patches_replay_to_every_checkpoint(self, store: MemoryStore) -> None:
        """Folding the events' JSON Patches reproduces every stored version exactly."""
        Runtime(make_agent(count_to(3)), store).run("t", create=True)
        document: dict[str, Any] = {}
        for event in store.events("t"):
            document = apply_patch(document, event.patch)
            assert document == store.checkpoint("t", event.version).state


class TestRefusals:
    def test_illegal_transition_only_logs(self, store: MemoryStore) -> None:
        """A transition the machine does not declare is refused and logged; nothing else moves."""
        runtime = Runtime(
            make_agent(once(CallSkill(skill="add", params={"n": 1}, next_step="done"))), store
        )
        before = runtime.start("t")
        report = runtime.step("t")
        after = report.after
        assert bookkeeping_free(after) == bookkeeping_free(before)
        assert after.version == before.version + 1
        error = after.errors[-1]
        assert error.kind == "illegal_transition"
        assert "init -> done" in error.message
        assert "allowed from init: counting" in error.message

    def test_self_loop_only_where_declared(self) -> None:
        """gathering_info-style self-loops are legal only if declared."""
        assert MACHINE.can("counting", "counting")
        assert not MACHINE.can("init", "init")

    @pytest.mark.parametrize(
        ("action", "fragment"),
        [
            (CallSkill(skill="nope"), "unknown skill 'nope'"),
            (CallSkill(skill="add", params={"n": "many"}), "invalid params for 'add'"),
            (CallSkill(skill="add", params={}), "invalid params for 'add'"),
            (CallSkill(skill="late"), "does not apply now"),
        ],
    )
    def test_rejected_actions_only_log(
        self, store: MemoryStore, action: Action, fragment: str
    ) -> None:
        """Unknown skills, bad params and a false `when` are refused without running anything."""
        log: list[str] = []
        runtime = Runtime(make_agent(once(action), log=log), store)
        before = runtime.start("t")
        after = runtime.step("t").after
        assert bookkeeping_free(after) == bookkeeping_free(before)
        assert after.errors[-1].kind == "action_rejected"
        assert fragment in after.errors[-1].message
        assert log == []

    def test_failing_verify_writes_nothing(self, store: MemoryStore) -> None:
        """When verify fails on every attempt the skill's outputs never reach the state."""
        log: list[str] = []
        agent = make_agent(once(CallSkill(skill="add", params={"n": 5})), verify_ok=False, log=log)
        runtime = Runtime(agent, store)
        before = runtime.start("t")
        after = runtime.step("t").after
        assert isinstance(after, CounterState)
        assert after.count == 0
        assert after.current_step == before.current_step
        assert after.completed_steps == ()
        kinds = [e.kind for e in after.errors]
        assert kinds == ["verify_failed"] * 3 + ["step_failed"]
        assert [e.attempt for e in after.errors[:3]] == [1, 2, 3]
        assert after.errors[0].max_attempts == 3

    def test_retry_exhaustion_rolls_back_and_says_why(self, store: MemoryStore) -> None:
        """After max_retries+1 failures the step is failed, rollback runs once, the log says why."""
        log: list[str] = []
        agent = make_agent(once(CallSkill(skill="add", params={"n": 1})), fail_runs=10, log=log)
        runtime = Runtime(agent, store)
        runtime.start("t")
        report = runtime.step("t")
        assert log.count("rollback") == 1
        assert log.count("adder(0,1)") == 3
        final = report.after.errors[-1]
        assert final.kind == "step_failed"
        assert "failed after 3 attempt(s)" in final.message
        assert "RuntimeError: flaky backend" in final.message
        assert "rolled back" in final.message
        assert report.event.attempts == 3
        assert len(report.event.tool_calls) == 3
        assert report.event.verdict is not None
        assert not report.event.verdict.ok

    def test_retry_recovers_from_a_transient_failure(self, store: MemoryStore) -> None:
        """A skill that fails once and then succeeds commits on its second attempt."""
        agent = make_agent(count_to(1), fail_runs=1)
        result = Runtime(agent, store).run("t", create=True)
        assert result.stopped == "completed"
        add_event = store.events("t")[1]
        assert add_event.attempts == 2
        assert add_event.verdict is not None
        assert add_event.verdict.ok

    def test_writing_outside_outputs_is_refused(self, store: MemoryStore) -> None:
        """A skill writing an undeclared key is refused at once (no retry) and writes nothing."""
        runtime = Runtime(make_agent(once(CallSkill(skill="sneaky"))), store)
        before = runtime.start("t")
        after = runtime.step("t").after
        assert isinstance(after, CounterState)
        assert (after.count, after.note) == (0, None)
        assert after.completed_steps == before.completed_steps
        assert after.errors[0].kind == "output_not_declared"
        assert "note" in after.errors[0].message
        assert after.errors[-1].kind == "step_failed"
        assert len(after.errors) == 2

    def test_undeclared_tool_is_not_reachable(self, store: MemoryStore) -> None:
        """ctx only exposes the tools a skill declared."""
        runtime = Runtime(make_agent(once(CallSkill(skill="borrow"))), store)
        runtime.start("t")
        after = runtime.step("t").after
        assert after.errors[0].kind == "tool_not_allowed"
        assert "may not call tool 'adder'" in after.errors[0].message

    def test_finish_needs_an_adjacent_final_step(self, store: MemoryStore) -> None:
        """Finishing from a step with no edge to a final step is an illegal transition."""
        runtime = Runtime(make_agent(once(Finish())), store)
        runtime.start("t")
        after = runtime.step("t").after
        assert after.status is TaskStatus.CREATED
        assert after.errors[-1].kind == "illegal_transition"

    def test_fail_ends_the_task(self, store: MemoryStore) -> None:
        """A Fail action ends the task failed with the reason in the error log."""
        result = Runtime(make_agent(once(Fail(reason="cannot reach the API"))), store).run(
            "t", create=True
        )
        assert result.stopped == "failed"
        assert result.state.errors[-1].message == "cannot reach the API"


class TestPausesAndResume:
    def test_waiting_user_then_reply(self, store: MemoryStore) -> None:
        """ask_user pauses with the question; a reply lands in the inbox and the run goes on."""

        def decide(view: View) -> Action:
            state = view.state
            assert isinstance(state, CounterState)
            if state.count == 0 and view.inbox is None:
                return AskUser(question="How much?", next_step="counting")
            if state.count == 0 and view.inbox is not None:
                return CallSkill(skill="add", params={"n": int(view.inbox)})
            return Finish()

        runtime = Runtime(make_agent(decide), store)
        paused = runtime.run("t", create=True)
        assert paused.stopped == "waiting_user"
        assert paused.state.question == "How much?"
        with pytest.raises(UsageError):
            runtime.step("t")
        runtime.reply("t", "2")
        assert runtime.load("t").inbox == "2"
        done = runtime.run("t")
        assert done.stopped == "completed"
        assert isinstance(done.state, CounterState)
        assert done.state.count == 2
        assert done.state.inbox is None
        with pytest.raises(UsageError):
            runtime.reply("t", "again")

    def test_inputs_answer_questions_in_order(self, store: MemoryStore) -> None:
        """run(inputs=...) feeds replies as the task asks for them."""

        def decide(view: View) -> Action:
            state = view.state
            assert isinstance(state, CounterState)
            if view.inbox is not None:
                return CallSkill(skill="add", params={"n": int(view.inbox)})
            if state.count < 5:
                return AskUser(question="More?", next_step="counting")
            return Finish()

        result = Runtime(make_agent(decide), store).run("t", inputs=["2", "3"], create=True)
        assert result.stopped == "completed"
        assert isinstance(result.state, CounterState)
        assert result.state.count == 5

    def test_resume_after_stop_equals_uninterrupted_run(self, tmp_path: Path) -> None:
        """Stopping mid-task and resuming in a fresh runtime ends in the same state."""
        whole = Runtime(make_agent(count_to(3)), MemoryStore()).run("t", create=True).state

        db = tmp_path / "s.db"
        first = Runtime(make_agent(count_to(3)), SQLiteStore(db))
        stopped = first.run("t", max_steps=2, create=True)
        assert stopped.stopped == "max_steps"
        assert isinstance(stopped.state, CounterState)
        assert stopped.state.count == 2
        # A new process: new store connection, new agent objects, same file.
        resumed = Runtime(make_agent(count_to(3)), SQLiteStore(db)).run("t")
        assert resumed.stopped == "completed"
        assert resumed.state == whole

    def test_stale_commit_between_two_runtimes(self, store: MemoryStore) -> None:
        """Two runtimes deciding on the same version: the second commit loses and writes nothing."""
        a = Runtime(make_agent(count_to(3)), store)
        b = Runtime(make_agent(count_to(3)), store)
        a.start("t")
        state = b.load("t")
        a.step("t")
        head_before = store.load("t")
        draft = state.evolve(version=state.version + 1)
        with pytest.raises(StaleState):
            store.commit(
                "t",
                state.version,
                draft.to_json(),
                store.events("t")[-1].model_copy(update={"version": state.version + 1}),
            )
        assert store.load("t") == head_before

    def test_rollback_is_a_new_commit(self, store: MemoryStore) -> None:
        """rollback_task restores an old state as a new version; history is kept."""
        Runtime(make_agent(count_to(3)), store).run("t", create=True)
        head = store.load("t").version
        new_version = rollback_task(store, "t", 2)
        assert new_version == head + 1
        restored = store.load("t").state
        old = store.checkpoint("t", 2).state
        assert {**restored, "version": 0} == {**old, "version": 0}
        assert store.events("t")[-1].action == {"kind": "rollback", "to_version": 2}
        with pytest.raises(UsageError):
            rollback_task(store, "t", new_version)


class TestAgentDefinition:
    def test_skill_without_verify_is_refused(self) -> None:
        """An agent cannot be built with a skill nobody checks."""
        skills = SkillRegistry()

        @skills.skill()
        def unchecked(state: AgentState, params: NoParams, ctx: SkillContext) -> Outcome:
            return Outcome()

        with pytest.raises(UsageError, match="has no verify"):
            Agent("a", AgentState, MACHINE, skills, ScriptedPolicy(count_to(1)))

    def test_runtime_owned_outputs_are_refused(self) -> None:
        """A skill may not declare the fields only the runtime writes."""
        skills = SkillRegistry()
        with pytest.raises(UsageError, match="runtime-owned"):

            @skills.skill(outputs=["status"])
            def cheat(state: AgentState, params: NoParams, ctx: SkillContext) -> Outcome:
                return Outcome()

    def test_unknown_tools_steps_and_outputs_are_refused(self) -> None:
        """Every name a skill declares must exist in the agent."""
        skills = SkillRegistry()

        @skills.skill(tools=["ghost"], step="nowhere", outputs=["missing_field"])
        def odd(state: AgentState, params: NoParams, ctx: SkillContext) -> Outcome:
            return Outcome()

        odd.verifier(lambda s, o: not o.writes)
        with pytest.raises(UsageError) as info:
            Agent("a", AgentState, MACHINE, skills, ScriptedPolicy(count_to(1)))
        message = str(info.value)
        assert "ghost" in message
        assert "nowhere" in message
        assert "missing_field" in message

    def test_machine_refuses_undeclared_targets(self) -> None:
        """Transitions must lead to declared steps."""
        with pytest.raises(UsageError, match="undeclared steps: b"):
            StateMachine({"a": ["b"]})
