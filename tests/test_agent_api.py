"""What an agent's author needs, without reading our source (issue: agents you write yourself).

Reproduced before:
* ``verify`` saw only ``(state, outcome)``: not the params, not the state before.
* A skill's params reached ``run`` through a JSON round trip on the resumed path
  (unset optional fields came back set).
* A plan could not name the same skill twice (``with_step`` removed every entry).
* Tools could not be bound to a task's own resources; an agent built in a module did
  not record its import reference unless loaded by name.
* Replies lived in one ``inbox`` slot that any successful decision cleared: a reply a
  failed skill could not use disappeared; ``run(inputs=...)`` after a crash gave a
  reply twice; a user could not change the task's goal or constraints.
* A skill's exception was one line in the error log, its traceback lost.
"""

from __future__ import annotations

import json
import subprocess
import sys
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
    Finish,
    Outcome,
    Revise,
    Runtime,
    ScriptedPolicy,
    SkillContext,
    SkillRegistry,
    StateMachine,
    Verdict,
    VerifyContext,
    View,
    per_task,
)
from skillstate.store.memory import MemoryStore
from skillstate.store.sealing import read_artifact
from tests.test_cli import run_cli, store_url


class Counter(AgentState):
    total: int = 0
    label: str | None = None
    db: str = ""
    snapshot_ref: str | None = None


class Add(BaseModel):
    n: int
    note: str | None = None


MACHINE = StateMachine({"init": ["init"]}, final=["init"])


def counter_agent(decide: Any, **skill_options: Any) -> tuple[Agent[Counter], list[Any]]:
    seen: list[Any] = []
    skills = SkillRegistry()

    @skills.skill(outputs=["total"], **skill_options)
    def add(state: Counter, params: Add, ctx: SkillContext) -> Outcome:
        """Add n."""
        seen.append(("run", params.n, params.model_fields_set))
        return Outcome(writes={"total": state.total + params.n})

    @add.verifier
    def _grew_by_n(state: Counter, outcome: Outcome, ctx: VerifyContext[Counter, Add]) -> Verdict:
        seen.append(("verify", ctx.before.total, ctx.params.n))
        return Verdict(ok=state.total == ctx.before.total + ctx.params.n)

    if skill_options.get("effects"):
        add.prober(lambda state, params, ctx: None)
    agent = Agent(
        name="counter",
        state_type=Counter,
        machine=MACHINE,
        skills=skills,
        policy=ScriptedPolicy(decide),
    )
    return agent, seen


class TestSkills:
    def test_verify_sees_the_params_and_the_state_before(self) -> None:
        """A three-argument verify gets VerifyContext(before=..., params=...)."""

        def decide(view: View[Counter]) -> Action:
            return CallSkill(skill="add", params={"n": 5}) if view.state.total == 0 else Finish()

        agent, seen = counter_agent(decide)
        result = Runtime(agent, MemoryStore()).run("t", create=True)
        assert result.state.total == 5
        assert ("verify", 0, 5) in seen

    def test_params_reach_run_as_decided_on_the_resumed_path(self) -> None:
        """An effect settled after a crash runs with exactly the params a fresh run would."""

        class Crash(BaseException):
            pass

        crashed = {"once": False}

        def decide(view: View[Counter]) -> Action:
            return CallSkill(skill="add", params={"n": 2}) if view.state.total == 0 else Finish()

        agent, seen = counter_agent(decide, effects=True)
        original = agent.skills["add"]._run

        def crash_first(state: Counter, params: Add, ctx: SkillContext) -> Outcome:
            if not crashed["once"]:
                crashed["once"] = True
                raise Crash
            return original(state, params, ctx)

        agent.skills["add"]._run = crash_first
        store = MemoryStore()
        with pytest.raises(Crash):
            Runtime(agent, store).run("t", create=True)
        assert store.load("t").state["pending_effect"]["params"] == {"n": 2}  # as decided
        Runtime(agent, store).run("t")
        runs = [entry for entry in seen if entry[0] == "run"]
        assert runs == [("run", 2, {"n"})]  # `note` stays unset; 2 stays an int

    def test_a_plan_may_name_the_same_skill_twice(self) -> None:
        """Each completed step removes one plan entry, not every entry with its name."""
        calls = iter(range(10))

        def decide(view: View[Counter]) -> Action:
            if view.state.pending_steps:
                return CallSkill(skill="add", params={"n": next(calls) + 1})
            return Finish()

        agent, _ = counter_agent(decide)
        agent.plan = ("add", "add")
        runtime = Runtime(agent, MemoryStore())
        runtime.start("t")
        assert runtime.step("t").after.pending_steps == ("add",)
        assert runtime.run("t").state.total == 3

    def test_a_skill_can_attach_a_blob_that_survives_a_new_process(self) -> None:
        """ctx.attach stores bytes as an artifact; the ref in the card reads them back."""
        skills = SkillRegistry()

        @skills.skill(outputs=["snapshot_ref"])
        def save(state: Counter, params: BaseModel, ctx: SkillContext) -> Outcome:
            """Snapshot the simulator."""
            return Outcome(writes={"snapshot_ref": ctx.attach(b"\x00sim-state\xff")})

        save.verifier(lambda s, o: s.snapshot_ref is not None)
        agent = Agent(
            name="sim",
            state_type=Counter,
            machine=MACHINE,
            skills=skills,
            policy=ScriptedPolicy(
                lambda v: CallSkill(skill="save") if v.state.snapshot_ref is None else Finish()
            ),
        )
        store = MemoryStore()
        state = Runtime(agent, store).run("t", create=True).state
        assert state.snapshot_ref is not None
        assert read_artifact(store, state.snapshot_ref) == b"\x00sim-state\xff"

    def test_tools_per_task_are_built_from_its_state(self) -> None:
        """per_task(factory): one agent, each task with its own database."""
        skills = SkillRegistry()

        @skills.skill(outputs=["label"], tools=["db"])
        def read(state: Counter, params: BaseModel, ctx: SkillContext) -> Outcome:
            """Read the task's own database."""
            return Outcome(writes={"label": ctx.call("db", key="name")})

        read.verifier(lambda s, o: s.label is not None)
        databases = {"a.db": {"name": "alpha"}, "b.db": {"name": "beta"}}
        agent = Agent(
            name="db",
            state_type=Counter,
            machine=MACHINE,
            skills=skills,
            policy=ScriptedPolicy(
                lambda v: CallSkill(skill="read") if v.state.label is None else Finish()
            ),
            tools={"db": per_task(lambda state: lambda key: databases[state.db][key])},
        )
        store = MemoryStore()
        runtime = Runtime(agent, store)
        for task, path in (("A", "a.db"), ("B", "b.db")):
            runtime.start(task, db=path)
            runtime.run(task)
        assert (runtime.load("A").label, runtime.load("B").label) == ("alpha", "beta")

    def test_a_skill_exception_keeps_its_traceback(self) -> None:
        """The error log has one line; the traceback is an artifact the entry points at."""
        skills = SkillRegistry()

        @skills.skill(outputs=["label"], max_retries=0)
        def boom(state: Counter, params: BaseModel, ctx: SkillContext) -> Outcome:
            """Fail deep inside."""
            return {"label": _deep_failure()}  # type: ignore[return-value]

        boom.verifier(lambda s, o: s.label is not None)
        agent = Agent(
            name="boom",
            state_type=Counter,
            machine=MACHINE,
            skills=skills,
            policy=ScriptedPolicy(lambda v: CallSkill(skill="boom")),
        )
        store = MemoryStore()
        runtime = Runtime(agent, store)
        runtime.start("t")
        error = runtime.step("t").after.errors[0]
        assert error.kind == "skill_error"
        assert error.trace is not None
        trace = read_artifact(store, error.trace).decode()
        assert "_deep_failure" in trace
        assert "ZeroDivisionError" in trace


def _deep_failure() -> str:
    return str(1 / 0)


class TestReplies:
    def test_a_reply_a_failing_skill_could_not_use_stays(self) -> None:
        """The reply is still there after the failed attempt; the next decision uses it."""

        def decide(view: View[Counter]) -> Action:
            if view.state.total:
                return Finish()
            if view.inbox is None:
                return AskUser(question="How many?")
            return CallSkill(skill="add", params={"n": int(view.inbox)})

        agent, _ = counter_agent(decide)
        flaky = {"fail": True}
        original = agent.skills["add"]._run

        def fail_once(state: Counter, params: Add, ctx: SkillContext) -> Outcome:
            if flaky.pop("fail", False):
                raise ConnectionError("try again")
            return original(state, params, ctx)

        agent.skills["add"]._run = fail_once
        agent.skills["add"].max_retries = 0
        store = MemoryStore()
        result = Runtime(agent, store).run("t", inputs=["4"], create=True)
        assert result.stopped == "completed"
        assert result.state.total == 4
        assert [e.kind for e in result.state.errors][:1] == ["skill_error"]

    def test_run_with_inputs_is_idempotent_per_index(self) -> None:
        """Running again with the same inputs after a stop never gives a reply twice."""
        asked: list[str] = []

        def decide(view: View[Counter]) -> Action:
            if view.inbox is not None:
                asked.append(view.inbox)
                return CallSkill(skill="add", params={"n": int(view.inbox)})
            if view.state.total >= 30:
                return Finish()
            return AskUser(question="more?")

        agent, _ = counter_agent(decide)
        store = MemoryStore()
        first = Runtime(agent, store, max_steps=2).run("t", inputs=["10", "20"], create=True)
        assert first.stopped == "max_steps"
        again = Runtime(agent, store).run("t", inputs=["10", "20"])  # the driver's retry
        assert again.stopped == "completed"
        assert asked == ["10", "20"]
        assert again.state.total == 30
        assert again.state.inputs_received == 2

    def test_a_user_message_can_revise_the_task(self) -> None:
        """Revise: a new goal and constraints, a moot plan entry dropped, the reply used."""

        def decide(view: View[Counter]) -> Action:
            if view.inbox == "actually, just count to 1":
                return Revise(
                    goal="count to 1", constraints=["never exceed 1"], drop_pending=["report"]
                )
            if view.state.total == 0:
                return CallSkill(skill="add", params={"n": 1})
            return Finish()

        agent, _ = counter_agent(decide)
        agent.plan = ("add", "report")
        store = MemoryStore()
        runtime = Runtime(agent, store)
        runtime.start("t")
        state = runtime.load("t")
        runtime._committer.commit(  # a reply arriving while the task runs
            state,
            _draft(state.replace(inputs=(_reply("actually, just count to 1"),), inputs_received=1)),
            {"kind": "reply", "text": "actually, just count to 1", "index": 0},
            "user",
        )
        revised = runtime.step("t").after
        assert revised.goal == "count to 1"
        assert revised.constraints == ("never exceed 1",)
        assert revised.pending_steps == ("add",)
        assert revised.inputs == ()
        assert runtime.run("t").stopped == "completed"

    def test_revise_without_a_reply_is_refused(self) -> None:
        """The change must come from the user: with no reply waiting, revise is refused."""
        agent, _ = counter_agent(lambda view: Revise(goal="something else"))
        runtime = Runtime(agent, MemoryStore())
        runtime.start("t")
        after = runtime.step("t").after
        assert after.goal == ""
        assert "needs a user's reply" in after.errors[-1].message


def _draft(state: AgentState) -> Any:
    from skillstate.engine.draft import Draft

    return Draft(after=state)


def _reply(text: str) -> Any:
    from skillstate.state.model import UserInput

    return UserInput(index=0, text=text)


class TestReferences:
    def test_an_agent_built_in_a_module_records_where_to_find_it(self, tmp_path: Path) -> None:
        """A task created through the API names the agent's module:attr; resume can use it."""
        (tmp_path / "my_agents.py").write_text(
            "from skillstate import Agent\n"
            "from skillstate.examples import ledger\n"
            "counter = Agent(name='counter', state_type=ledger.LedgerState,\n"
            "    machine=ledger.machine, skills=ledger.skills, policy=ledger.agent.policy,\n"
            "    tools=ledger.agent.tools)\n"
        )
        url = store_url(tmp_path)
        code = (
            "import sys; sys.path.insert(0, '.')\n"
            "from dataclasses import replace\n"
            "import my_agents\n"
            "from skillstate import Runtime, Agent\n"
            "from skillstate.store import open_store\n"
            "from skillstate.examples.ledger import agent\n"
            f"store = open_store({url!r})\n"
            "Runtime(my_agents.counter, store, max_steps=1).run('T', create=True)\n"
            "print(store.load('T').state['agent'])\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == "my_agents:counter"

    def test_unused_inputs_are_reported(self, tmp_path: Path) -> None:
        """demo ledger --input x: the task never asks, and the CLI says the input was unused."""
        code, out, err = run_cli(
            tmp_path, "demo", "ledger", "--steps", "1", "--input", "hello",
            "--ledger", str(tmp_path / "l.txt"), "--store", store_url(tmp_path),
        )  # fmt: skip
        assert code == 0, err
        assert "1 of 1 --input value(s) not used" in out


def test_view_and_failures_are_typed(tmp_path: Path) -> None:
    """mypy --strict knows the user's fields through View[S], and the kinds of failures."""
    source = """
from skillstate import Action, AgentState, Finish, View

class Trip(AgentState):
    city: str | None = None

def decide(view: View[Trip]) -> Action:
    failure = view.last_failure
    if failure is not None and failure.times > 2:
        return Finish()
    for entry in view.state.errors:
        if entry.kind == "verify_faild":
            return Finish()
    return Finish(summary=view.state.citty or "")
"""
    from mypy import api

    (tmp_path / "decide.py").write_text(source)
    (tmp_path / "mypy.ini").write_text("[mypy]\nplugins = pydantic.mypy\n")
    out, _, status = api.run(
        ["--strict", "--config-file", str(tmp_path / "mypy.ini"), str(tmp_path / "decide.py")]
    )
    assert status == 1
    assert 'Non-overlapping equality check (left operand type: "Literal[' in out
    assert '"Trip" has no attribute "citty"' in out
    assert out.count("error:") == 2, out


def test_json_of_a_reply_event_names_its_index() -> None:
    """Each reply's event records its index (what run(inputs=...) is idempotent by)."""

    def decide(view: View[Counter]) -> Action:
        if view.inbox is not None:
            return CallSkill(skill="add", params={"n": int(view.inbox)})
        return Finish() if view.state.total else AskUser(question="n?")

    agent, _ = counter_agent(decide)
    store = MemoryStore()
    Runtime(agent, store).run("t", inputs=["7"], create=True)
    replies = [e.action for e in store.events("t") if e.action["kind"] == "reply"]
    assert json.loads(json.dumps(replies)) == [
        {"kind": "reply", "text": "7", "index": 0, "question": "n?"}
    ]
