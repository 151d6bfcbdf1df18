"""Params bound from the state (issue 16, point 4): the model decides only what needs judgment.

Reproduced before: a small model asked for ``process_record(i)`` repeated an index
that verify refused, until the step budget ran out; nothing let a skill say "i is
the state's next_record" or "category is one of these".
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field

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
    View,
)
from skillstate.engine.policy import StatePolicy
from skillstate.errors import UsageError
from skillstate.llm.base import Message
from skillstate.llm.replay import ScriptedProvider
from skillstate.skills.binding import FromState, OneOf, bindings, decided
from skillstate.store.memory import MemoryStore


class Queue(AgentState):
    next_item: int = 0
    done: list[int] = Field(default_factory=list)
    labels: list[str] = Field(default_factory=lambda: ["bug", "question"])
    labelled: dict[str, str] = Field(default_factory=dict)


class TakeParams(BaseModel):
    i: Annotated[int, FromState("next_item")] = Field(ge=0, le=9)


class LabelParams(BaseModel):
    label: Annotated[str, OneOf(lambda s: s.labels)]
    note: str = ""


MACHINE = StateMachine({"init": ["init"]}, final=["init"])


def queue_agent(decide: Any = None, *, bind: bool = True, n: int = 3) -> tuple[Agent, list[Any]]:
    ran: list[Any] = []
    skills = SkillRegistry()

    @skills.skill(outputs=["next_item", "done"], when=lambda s: s.next_item < n)
    def take(state: Queue, params: TakeParams, ctx: SkillContext) -> Outcome:
        """Take item i (the next one)."""
        ran.append(("take", params.i))
        return Outcome(writes={"next_item": params.i + 1, "done": [*state.done, params.i]})

    @take.verifier
    def _in_order(state: Queue, outcome: Outcome) -> bool:
        return state.done == list(range(len(state.done)))

    @skills.skill(outputs=["labelled"], when=lambda s: s.next_item >= n)
    def label(state: Queue, params: LabelParams, ctx: SkillContext) -> Outcome:
        """Label the queue."""
        ran.append(("label", params.label))
        return Outcome(writes={"labelled": {"queue": params.label}})

    @label.verifier
    def _labelled(state: Queue, outcome: Outcome) -> bool:
        return state.labelled.get("queue") in state.labels

    agent = Agent(
        name="queue",
        state_type=Queue,
        machine=MACHINE,
        skills=skills,
        policy=ScriptedPolicy(decide or (lambda view: Finish())),
        bind_params=bind,
    )
    return agent, ran


def branches(schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        b["properties"]["skill"]["const"]: b["properties"]["params"]
        for b in schema["anyOf"]
        if "skill" in b["properties"]
    }


class TestFromState:
    def test_the_bound_param_leaves_the_schema_and_shows_its_value(self) -> None:
        """The decision schema has no `i`; the view says what it is bound to."""
        agent, _ = queue_agent()
        view = agent.view(Queue(task_id="t", next_item=2))
        params = branches(view.action_schema)["take"]
        assert "i" not in params.get("properties", {})
        assert "- take(i=2 (from next_item)): Take item i (the next one)." in view.text
        assert ("take()", "Take item i (the next one).") in view.skill_catalog

    def test_a_model_that_leaves_it_out_runs_with_the_state_value(self) -> None:
        """The reply `{}` runs take(i=next_item) every step; the events record the filled params."""
        agent, ran = queue_agent()
        reply = {"kind": "call_skill", "skill": "take", "params": {}, "reason": "next"}

        def model(messages: Sequence[Message], schema: dict[str, Any] | None) -> str:
            assert schema is not None
            if "take" in branches(schema):
                return json.dumps(reply)
            return json.dumps({"kind": "finish", "summary": "all taken"})

        agent = replace(agent, policy=StatePolicy(ScriptedProvider(model)))
        store = MemoryStore()
        result = Runtime(agent, store).run("t", max_steps=4, create=True)
        assert [r for r in ran if r[0] == "take"] == [("take", 0), ("take", 1), ("take", 2)]
        assert result.state.done == [0, 1, 2]
        recorded = [e.action["params"] for e in store.events("t") if e.skill == "take"]
        assert recorded == [{"i": 0}, {"i": 1}, {"i": 2}]

    def test_spelled_out_it_must_match_the_state(self) -> None:
        """The same value is accepted; another is refused for every policy, a scripted one too."""
        calls = iter(
            [CallSkill(skill="take", params={"i": 0}), CallSkill(skill="take", params={"i": 5})]
        )
        agent, ran = queue_agent(lambda view: next(calls))
        store = MemoryStore()
        runtime = Runtime(agent, store)
        runtime.start("t")
        runtime.step("t")
        report = runtime.step("t")
        assert ran == [("take", 0)]
        assert report.after.next_item == 1
        assert "bound to next_item (1), not 5" in report.after.errors[-1].message

    def test_no_value_at_the_path_means_the_skill_does_not_apply(self) -> None:
        class Maybe(BaseModel):
            ref: Annotated[str, FromState("facts.order")]

        assert decided(Maybe, Queue(task_id="t")) is None
        assert decided(Maybe, Queue(task_id="t", facts={"order": "A-1"})).values == {"ref": "A-1"}

    def test_a_path_into_a_field_the_state_lacks_is_refused_when_the_agent_is_built(self) -> None:
        class Typo(BaseModel):
            i: Annotated[int, FromState("next_itme")]

        skills = SkillRegistry()

        @skills.skill(outputs=["done"], params=Typo, verify=lambda s, o: s.done == [])
        def take(state: Queue, params: Typo, ctx: SkillContext) -> Outcome:
            return Outcome()

        with pytest.raises(UsageError, match="binds param 'i' to 'next_itme'"):
            Agent(
                name="q", state_type=Queue, machine=MACHINE, skills=skills,
                policy=ScriptedPolicy(lambda view: Finish()),
            )  # fmt: skip

    def test_two_bindings_on_one_param_are_refused(self) -> None:
        class Both(BaseModel):
            i: Annotated[int, FromState("next_item"), OneOf(lambda s: [1, 2])]

        with pytest.raises(UsageError, match="one binding per parameter"):
            bindings(Both)


class TestOneOf:
    def test_the_choices_are_the_schema_enum(self) -> None:
        agent, _ = queue_agent()
        view = agent.view(Queue(task_id="t", next_item=3))
        params = branches(view.action_schema)["label"]
        assert params["properties"]["label"]["enum"] == ["bug", "question"]
        assert "label one of ['bug', 'question']" in view.text

    def test_a_value_outside_the_choices_is_refused(self) -> None:
        calls = iter([CallSkill(skill="label", params={"label": "feature"})])
        agent, ran = queue_agent(lambda view: next(calls))
        runtime = Runtime(agent, MemoryStore())
        runtime.start("t", next_item=3)
        report = runtime.step("t")
        assert ran == []
        assert "must be one of ['bug', 'question']" in report.after.errors[-1].message

    def test_one_choice_is_filled_and_none_means_not_offered(self) -> None:
        calls = iter([CallSkill(skill="label", params={})])
        agent, ran = queue_agent(lambda view: next(calls))
        view = agent.view(Queue(task_id="t", next_item=3, labels=["bug"]))
        assert "label" not in branches(view.action_schema)["label"].get("properties", {})
        assert agent.view(Queue(task_id="t", next_item=3, labels=[])).skills == ()
        runtime = Runtime(agent, MemoryStore())
        runtime.start("t", next_item=3, labels=["bug"])
        after = runtime.step("t").after
        assert ran == [("label", "bug")]
        assert after.labelled == {"queue": "bug"}


class TestBindingOff:
    def test_every_param_is_the_models_again(self) -> None:
        """`bind_params=False` (eval --no-bind): `i` is in the schema and must be given."""
        agent, ran = queue_agent(
            lambda view: CallSkill(skill="take", params={"i": view.state.next_item}), bind=False
        )
        view = agent.view(Queue(task_id="t", next_item=1))
        assert "i" in branches(view.action_schema)["take"]["properties"]
        assert "- take(i): " in view.text
        label = branches(agent.view(Queue(task_id="t", next_item=3)).action_schema)["label"]
        assert "enum" not in label["properties"]["label"]
        result = Runtime(agent, MemoryStore()).run("t", max_steps=3, create=True)
        assert result.state.done == [0, 1, 2]
        assert ran == [("take", 0), ("take", 1), ("take", 2)]


def test_view_is_typed_and_bound_values_come_from_the_state() -> None:
    """A policy sees what the decision leaves to it: `view.params` is the decided model."""
    seen: list[set[str]] = []

    def decide(view: View[Queue]) -> Finish:
        seen.append(set(view.params["take"].model_fields))
        return Finish()

    agent, _ = queue_agent(decide)
    Runtime(agent, MemoryStore()).run("t", max_steps=1, create=True)
    assert seen == [set()]


class TestOwnStep:
    """A skill that declares its step is not given a `next_step` by a model: Gemma wrote
    `"next_step": "processing"` on `summarize`, the task stayed in `processing` and could
    never finish."""

    def agent(self, *, bind: bool = True) -> Agent:
        skills = SkillRegistry()

        @skills.skill(outputs=["done"], step="wrapping", verify=lambda s, o: s.done == [1])
        def wrap(state: Queue, params: Any, ctx: SkillContext) -> Outcome:
            return Outcome(writes={"done": [1]})

        machine = StateMachine(
            {"init": ["working"], "working": ["working", "wrapping"], "wrapping": []},
            initial="init",
        )
        return Agent(
            name="own", state_type=Queue, machine=machine, skills=skills,
            policy=ScriptedPolicy(lambda view: Finish()), bind_params=bind,
        )  # fmt: skip

    def reply(self, messages: Sequence[Message], schema: dict[str, Any] | None) -> str:
        action = {"kind": "call_skill", "skill": "wrap", "params": {}, "next_step": "working"}
        if "That reply was invalid" in messages[-1].content:
            action.pop("next_step")
        return json.dumps(action)

    def test_the_schema_offers_no_next_step_and_a_reply_with_one_is_repaired(self) -> None:
        agent = self.agent()
        state = Queue(task_id="t", current_step="working")
        branch = next(
            b for b in agent.view(state).action_schema["anyOf"] if "skill" in b["properties"]
        )
        assert branch["properties"]["next_step"] == {"type": "null"}
        provider = ScriptedProvider(self.reply)
        agent = replace(agent, policy=StatePolicy(provider, max_repairs=1))
        runtime = Runtime(agent, MemoryStore())
        runtime.start("t", current_step="working")
        report = runtime.step("t")
        assert report.event.usage is not None
        assert report.event.usage.repairs == 1
        assert report.after.current_step == "wrapping"

    def test_unbound_the_old_next_step_is_offered(self) -> None:
        agent = self.agent(bind=False)
        state = Queue(task_id="t", current_step="working")
        branch = next(
            b for b in agent.view(state).action_schema["anyOf"] if "skill" in b["properties"]
        )
        assert branch["properties"]["next_step"] != {"type": "null"}
