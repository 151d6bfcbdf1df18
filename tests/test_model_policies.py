"""Model-driven decisions: the per-state action schema, repairs, baselines, usage, budgets.

Models here are :class:`ScriptedProvider` rules (deterministic, offline); the
providers themselves are tested in ``test_providers.py``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field

from skillstate import (
    Agent,
    AgentState,
    Outcome,
    ScriptedPolicy,
    SkillContext,
    SkillRegistry,
    StateMachine,
)
from skillstate.bench.tokens import compare
from skillstate.engine.actions import CallSkill, Finish, decision_schema, validate_decision
from skillstate.engine.agent import agent_factory
from skillstate.engine.policy import (
    STATE_HEADER,
    HistoryPolicy,
    HybridPolicy,
    StatePolicy,
    WindowPolicy,
    policy_for,
)
from skillstate.engine.runtime import Runtime
from skillstate.errors import ActionRejected, DecisionFailed, UsageError
from skillstate.llm.base import Message, Prices
from skillstate.llm.replay import ScriptedProvider
from skillstate.store.memory import MemoryStore

# ---------------------------------------------------------------- a small agent


class Amount(BaseModel):
    value: int = Field(ge=0, le=100)


class Item(BaseModel):
    name: str
    qty: int = 1


class Order(BaseModel):
    items: list[Item]


class ShopState(AgentState):
    total: int = 0
    ordered: bool = False


@agent_factory  # `skillstate run tests.test_model_policies:shop_agent` builds it
def shop_agent() -> Agent:
    skills = SkillRegistry()

    @skills.skill(outputs=["total"], step="adding", verify=lambda s, o: s.total <= 300)
    def add(state: ShopState, params: Amount, ctx: SkillContext) -> Outcome:
        """Add an amount to the total."""
        return Outcome(writes={"total": state.total + params.value}, summary=f"+{params.value}")

    @skills.skill(outputs=["ordered"], step="ordering", verify=lambda s, o: s.ordered)
    def order(state: ShopState, params: Order, ctx: SkillContext) -> Outcome:
        """Place the order."""
        return Outcome(writes={"ordered": True}, summary=f"{len(params.items)} items")

    @order.precondition
    def _has_total(state: ShopState) -> bool:
        return state.total > 0

    return Agent(
        name="shop",
        description="Adds amounts, then orders.",
        state_type=ShopState,
        machine=StateMachine(
            {
                "init": ["adding"],
                "adding": ["adding", "ordering"],
                "ordering": ["done"],
                "done": [],
            },
            initial="init",
        ),
        skills=skills,
        policy=ScriptedPolicy(lambda view: Finish()),
        goal="Add 10 three times, then order.",
        constraints=("Never order more than 5 items.",),
    )


Rule = Callable[[Sequence[Message], dict[str, Any] | None], str]


def with_model(rule: Rule, kind: str = "state", **options: Any) -> Agent:
    from dataclasses import replace

    provider = ScriptedProvider(rule)
    policy = policy_for(kind, provider, **options)
    return replace(shop_agent(), policy=policy)


def follow_plan(messages: Sequence[Message], schema: dict[str, Any] | None) -> str:
    """A well-behaved model: add 10 until 30, then order, then finish."""
    assert schema is not None
    branches = schema["anyOf"]
    skills = {b["properties"]["skill"]["const"] for b in branches if "skill" in b["properties"]}
    last = messages[-1].content
    if "add" in skills and "total: 30" not in last and "ordered: true" not in last:
        return json.dumps(
            {"kind": "call_skill", "skill": "add", "params": {"value": 10}, "reason": "r"}
        )
    if "order" in skills and "ordered: true" not in last:
        return json.dumps(
            {
                "kind": "call_skill",
                "skill": "order",
                "params": {"items": [{"name": "a"}]},
                "reason": "r",
            }
        )
    return json.dumps({"kind": "finish", "summary": "done", "reason": "r"})


# ---------------------------------------------------------------- the schema


class TestDecisionSchema:
    def test_only_applicable_skills_and_reachable_steps(self) -> None:
        """One branch per applicable skill with its params schema; next_step is an enum."""
        schema = decision_schema({"add": Amount}, ["adding", "ordering"])
        skills = [
            b["properties"]["skill"]["const"] for b in schema["anyOf"] if "skill" in b["properties"]
        ]
        assert skills == ["add"]
        kinds = [b["properties"]["kind"]["const"] for b in schema["anyOf"]]
        assert kinds == ["call_skill", "ask_user", "finish"]
        params = schema["anyOf"][0]["properties"]["params"]
        assert params["properties"]["value"]["maximum"] == 100
        step = schema["anyOf"][0]["properties"]["next_step"]
        assert step["anyOf"][0]["enum"] == ["adding", "ordering"]

    def test_nested_models_are_hoisted(self) -> None:
        """A params model with nested models keeps valid $refs in the combined schema."""
        schema = decision_schema({"order": Order, "add": Amount}, [])
        assert "order__Item" in schema["$defs"]
        text = json.dumps(schema)
        assert '"#/$defs/order__Item"' in text

    def test_view_schema_follows_when(self) -> None:
        """The view's schema offers `order` only once its `when` holds."""
        agent = shop_agent()
        state = agent.new_state("t")
        assert "order" not in json.dumps(agent.view(state).action_schema)
        later = state.evolve(total=10, current_step="adding")
        assert '"const": "order"' in json.dumps(agent.view(later).action_schema)


class TestValidateDecision:
    params: dict[str, type[BaseModel]] = {"add": Amount}  # noqa: RUF012

    @pytest.mark.parametrize(
        ("reply", "message"),
        [
            ("not json", "not JSON"),
            ("[1, 2]", "one JSON object"),
            ('{"kind": "fail", "reason": "x"}', "not available"),
            ('{"kind": "call_skill", "skill": "order", "params": {}}', "cannot be called now"),
            ('{"kind": "call_skill", "skill": "add", "params": {"value": 101}}', "value"),
            ('{"kind": "finish", "next_step": "moon"}', "not reachable"),
            ('{"kind": "teleport"}', "invalid action"),
            ("[" * 100_000, "nested too deeply"),
        ],
    )
    def test_invalid_replies_say_why(self, reply: str, message: str) -> None:
        """Each kind of invalid reply is rejected with a message the model can act on."""
        with pytest.raises(ActionRejected, match=message):
            validate_decision(reply, self.params, ["adding"])

    def test_fenced_json_is_accepted(self) -> None:
        """A ```json fenced reply is read as its content."""
        reply = '```json\n{"kind": "call_skill", "skill": "add", "params": {"value": 3}}\n```'
        action = validate_decision(reply, self.params, ["adding"])
        assert isinstance(action, CallSkill)
        assert action.params == {"value": 3}


# ---------------------------------------------------------------- fuzzing

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=15,
)
_actionish = st.fixed_dictionaries(
    {},
    optional={
        "kind": st.sampled_from(["call_skill", "ask_user", "finish", "fail", "x", ""])
        | _json_values,
        "skill": st.sampled_from(["add", "order", "", "ADD"]) | _json_values,
        "params": st.fixed_dictionaries({}, optional={"value": _json_values}) | _json_values,
        "question": _json_values,
        "next_step": st.sampled_from(["adding", "ordering", "done"]) | _json_values,
        "reason": _json_values,
        "extra": _json_values,
    },
)
_replies = (
    st.text(max_size=200)
    | st.binary(max_size=100).map(lambda b: b.decode("latin-1"))
    | _actionish.map(json.dumps)
    | _json_values.map(lambda v: json.dumps(v, allow_nan=True))
    | _actionish.map(lambda d: "```json\n" + json.dumps(d) + "\n```")
    | _actionish.map(lambda d: json.dumps(d)[: max(1, len(json.dumps(d)) // 2)])
)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_replies)
def test_fuzz_the_action_parser(reply: str) -> None:
    """1,500 malformed or adversarial replies: each is an action or ActionRejected, nothing else."""
    try:
        action = validate_decision(reply, {"add": Amount}, ["adding"])
    except ActionRejected:
        return
    if isinstance(action, CallSkill):
        assert action.skill == "add"
        Amount.model_validate(action.params)


def test_fuzz_through_the_runtime() -> None:
    """A model that only ever says garbage: every decision is logged as failed, the card
    stays valid, and a good model can pick the task up afterwards."""
    garbage = iter(
        [
            "",
            "{",
            "null",
            '{"kind": "call_skill", "skill": "add", "params": {"value": -1}}',
            '{"kind": "call_skill", "skill": "order", "params": {"items": []}}',
            '{"kind": "finish", "next_step": "nowhere"}',
            "\u0000\uffff",
            '{"kind": "fail", "reason": "bored"}',
            "[" * 5000,
        ]
        * 20
    )
    agent = with_model(lambda m, s: next(garbage), max_repairs=2)
    store = MemoryStore()
    # The stall guard would stop this after 10 (tests/test_guard.py): off, to fuzz 20.
    runtime = Runtime(agent, store, max_steps=20, max_stalled=None, max_repeats=None)
    result = runtime.run("t", create=True)
    assert result.stopped == "max_steps"
    state = result.state
    assert state.total == 0
    assert state.status.value in {"created", "running"}
    assert all(e.kind == "decision_failed" for e in state.errors)
    assert state.usage.calls == 60
    assert state.usage.repairs == 40
    good = Runtime(with_model(follow_plan), store).run("t")
    assert good.stopped == "completed"
    assert good.state.total == 30


# ---------------------------------------------------------------- repairs and usage


class TestRepairs:
    def test_an_invalid_reply_is_sent_back_with_the_error(self) -> None:
        """The second call sees the bad reply and why it was refused; the step then succeeds."""
        seen: list[list[Message]] = []

        def rule(messages: Sequence[Message], schema: dict[str, Any] | None) -> str:
            seen.append(list(messages))
            if len(seen) == 1:
                return '{"kind": "call_skill", "skill": "add", "params": {"value": 500}}'
            return follow_plan(messages, schema)

        store = MemoryStore()
        Runtime(with_model(rule), store, max_steps=1).run("t", create=True)
        assert len(seen[1]) == len(seen[0]) + 2
        assert seen[1][-1].role == "user"
        assert "value" in seen[1][-1].content
        assert "invalid" in seen[1][-1].content
        event = store.events("t")[-1]
        assert event.usage is not None
        assert (event.usage.calls, event.usage.repairs) == (2, 1)
        assert store.load("t").state["usage"]["repairs"] == 1

    def test_usage_is_recorded_per_decision_and_summed(self) -> None:
        """Each decision's event carries its tokens; the card keeps the running totals."""
        store = MemoryStore()
        result = Runtime(with_model(follow_plan), store, prices=Prices(1.0, 2.0)).run(
            "t", create=True
        )
        assert result.stopped == "completed"
        decided = [e for e in store.events("t") if e.usage]
        assert all(e.usage and e.usage.calls == 1 and e.usage.prompt > 0 for e in decided)
        totals = result.state.usage
        assert totals.calls == len(decided)
        assert totals.prompt == sum(e.usage.prompt for e in decided if e.usage)
        assert totals.cost == pytest.approx(sum(e.usage.cost or 0 for e in decided if e.usage))
        assert totals.cost > 0

    def test_scripted_policies_count_nothing_until_a_report_asks(self) -> None:
        """No model, no spend: a scripted decision records no usage and renders no view
        text it does not read; the tokens report estimates it from the stored versions."""
        from dataclasses import replace

        from skillstate.engine.actions import Action
        from skillstate.engine.transcript import decision_usage
        from skillstate.state.view import View

        rendered: list[int] = []
        original = View._rendered

        def counting(view: View[Any]) -> Any:
            rendered.append(1)
            return original.func(view)  # type: ignore[attr-defined]

        def plan(view: View[Any]) -> Action:
            if view.state.total < 30:
                return CallSkill(skill="add", params={"value": 10})
            if not view.state.ordered:
                return CallSkill(skill="order", params={"items": [{"name": "a"}]})
            return Finish()

        store = MemoryStore()
        agent = replace(shop_agent(), policy=ScriptedPolicy(plan))
        try:
            View._rendered = cached_property(counting)  # type: ignore[assignment,method-assign]
            View._rendered.__set_name__(View, "_rendered")
            result = Runtime(agent, store).run("t", create=True)
        finally:
            View._rendered = original  # type: ignore[method-assign]
        assert result.stopped == "completed"
        decisions = [e for e in store.events("t") if e.actor == "policy"]
        assert len(decisions) == 5
        assert rendered == []
        assert all(e.usage is None and e.view_tokens is None for e in decisions)
        assert result.state.usage.prompt == 0
        estimated = [e for e in decision_usage(store, "t", agent) if e.actor == "policy"]
        assert len(estimated) == len(decisions)
        for event in estimated:
            assert event.usage is not None
            assert event.usage.estimated
            assert event.usage.calls == 0
            before = agent.parse_state(store.checkpoint("t", event.version - 1).state)
            assert event.usage.prompt == agent.view(before).tokens > 0


# ---------------------------------------------------------------- baselines


class TestBaselines:
    def _prompts(self, kind: str, **options: Any) -> list[list[Message]]:
        seen: list[list[Message]] = []

        def rule(messages: Sequence[Message], schema: dict[str, Any] | None) -> str:
            seen.append(list(messages))
            return follow_plan(messages, schema) if kind == "state" else _plan_by_count(len(seen))

        Runtime(with_model(rule, kind, **options), MemoryStore()).run("t", create=True)
        return seen

    def test_state_policy_sends_two_messages(self) -> None:
        """System prompt + the state view, every time."""
        assert {len(p) for p in self._prompts("state")} == {2}

    def test_history_grows_and_keeps_the_constraints(self) -> None:
        """History: the whole conversation, every time; the opening constraints stay."""
        prompts = self._prompts("history")
        sizes = [len(p) for p in prompts]
        assert sizes == sorted(sizes)
        assert sizes[-1] > sizes[0]
        assert all("Never order more than 5 items." in p[1].content for p in prompts)

    def test_window_drops_the_opening(self) -> None:
        """window:2 keeps two messages: once the task is long, the constraints are gone."""
        prompts = self._prompts("window:2")
        assert max(len(p) for p in prompts) == 3
        assert not any("Never order" in m.content for m in prompts[-1])

    def test_hybrid_sends_the_last_n_then_the_state_that_wins(self) -> None:
        """hybrid:2: the system prompt saying the state wins, at most two raw messages, then
        the state view under a header saying it is verified; the constraints stay in it."""
        prompts = self._prompts("hybrid:2")
        assert len(prompts) > 3
        for prompt in prompts:
            assert "If the messages and the state disagree, the state is right" in prompt[0].content
            assert 2 <= len(prompt) <= 4
            assert prompt[-1].role == "user"
            assert prompt[-1].content.startswith(STATE_HEADER + "## Task t\n")
            assert "Never order more than 5 items." in prompt[-1].content
        history = self._prompts("history")
        assert [p[1:-1] for p in prompts] == [h[1:][-2:] for h in history]

    def test_the_eval_baseline_is_the_shipped_policy(self) -> None:
        """The eval harness's hybrid baseline is the engine's policy, not a copy."""
        from skillstate.eval.baselines import HybridPolicy as EvalHybrid

        assert EvalHybrid is HybridPolicy

    def test_bad_policy_specs(self) -> None:
        """Unknown policy specs are refused."""
        provider = ScriptedProvider(follow_plan)
        for spec in ("window", "window:0", "window:x", "all", "state:3", "hybrid", "hybrid:0"):
            with pytest.raises(UsageError):
                policy_for(spec, provider)
        hybrid = policy_for("hybrid:3", provider)
        assert isinstance(hybrid, HybridPolicy)
        assert hybrid.n == 3
        assert isinstance(policy_for("window:3", provider), WindowPolicy)
        assert isinstance(policy_for("history", provider), HistoryPolicy)
        assert isinstance(policy_for("state", provider), StatePolicy)


def _plan_by_count(n: int) -> str:
    if n <= 3:
        return json.dumps(
            {"kind": "call_skill", "skill": "add", "params": {"value": 10}, "reason": "r"}
        )
    if n == 4:
        return json.dumps(
            {
                "kind": "call_skill",
                "skill": "order",
                "params": {"items": [{"name": "a"}]},
                "reason": "r",
            }
        )
    return json.dumps({"kind": "finish", "summary": "done", "reason": "r"})


# ---------------------------------------------------------------- budgets


class TestBudgets:
    def test_call_budget_stops_resumably(self) -> None:
        """--max-calls: the task stops with the reason logged once, and resumes with more."""
        store = MemoryStore()
        agent = with_model(follow_plan)
        first = Runtime(agent, store, max_calls=2).run("t", create=True)
        assert first.stopped == "budget"
        assert first.state.usage.calls == 2
        assert first.state.errors[-1].kind == "budget"
        version = first.state.version
        again = Runtime(agent, store, max_calls=2).run("t")
        assert again.stopped == "budget"
        assert again.state.version == version  # the reason is not logged twice
        done = Runtime(agent, store, max_calls=10).run("t")
        assert done.stopped == "completed"

    def test_token_and_cost_budgets(self) -> None:
        """Prompt-token and cost budgets stop the task before the next decision."""
        store = MemoryStore()
        result = Runtime(with_model(follow_plan), store, max_tokens=1).run("t", create=True)
        assert result.stopped == "budget"
        assert result.state.usage.calls == 1
        assert "prompt token budget" in result.state.errors[-1].message
        store = MemoryStore()
        prices = Prices(input=1_000_000.0, output=0.0)  # one currency unit per prompt token
        result = Runtime(with_model(follow_plan), store, max_cost=50.0, prices=prices).run(
            "t", create=True
        )
        assert result.stopped == "budget"
        assert "cost budget" in result.state.errors[-1].message


# ---------------------------------------------------------------- the token benchmark


def test_token_benchmark_targets() -> None:
    """50 steps: the state prompt is <= 5% of the history prompt at step 50, and flat."""
    report = compare(50)
    state50, history50 = report.state.at(50), report.history.at(50)
    state10 = report.state.at(10)
    assert state50 is not None
    assert history50 is not None
    assert state10 is not None
    assert state50 <= 0.05 * history50
    assert abs(state50 - state10) <= 0.15 * state10
    assert report.history.at(50) > 4 * report.history.at(10)  # type: ignore[operator]
    assert len(report.state.prompts) == len(report.history.prompts) == 50


def test_decision_failed_carries_its_cost() -> None:
    """DecisionFailed reports the calls and repairs it made."""
    agent = with_model(lambda m, s: "nope", max_repairs=1)
    with pytest.raises(DecisionFailed) as info:
        agent.policy.decide(agent.view(agent.new_state("t")))
    assert (info.value.calls, info.value.repairs) == (2, 1)


def test_the_reply_budget_fits_the_longest_reply_the_schema_allows() -> None:
    """A grammar-constrained model may fill every string: max_tokens must leave room."""
    from pydantic import BaseModel, Field

    from skillstate.engine.schema import (
        REPLY_TOKENS_MAX,
        REPLY_TOKENS_MIN,
        decision_schema,
        reply_budget,
    )

    class Short(BaseModel):
        n: int

    class Long(BaseModel):
        query: str = Field(max_length=2000)

    small = reply_budget(decision_schema({"s": Short}, ["done"]))
    large = reply_budget(decision_schema({"s": Short, "q": Long}, ["done"]))
    assert REPLY_TOKENS_MIN <= small < large <= REPLY_TOKENS_MAX
    # finish's summary (500 chars) + reason (200 chars) at <= 2.5 chars per token
    assert small >= (500 + 200) / 2.5


def test_the_decision_schema_bounds_every_string_array_and_free_value() -> None:
    """A grammar built from {} or an unbounded array admits an endless reply."""

    from pydantic import BaseModel

    from skillstate.engine.schema import MAX_ITEMS, TEXT_CHARS, decision_schema

    class Params(BaseModel):
        names: list[str]
        value: Any = None
        kept: list[int] = Field(max_length=3)

    schema = decision_schema({"s": Params}, [])
    branch = next(
        b for b in schema["anyOf"] if b["properties"]["kind"].get("const") == "call_skill"
    )
    props = branch["properties"]["params"]["properties"]
    assert props["names"]["maxItems"] == MAX_ITEMS
    assert props["names"]["items"]["maxLength"] == TEXT_CHARS
    assert props["kept"]["maxItems"] == 3  # an explicit bound is kept
    kinds = [b.get("type") for b in props["value"]["anyOf"]]
    assert kinds == ["string", "number", "boolean", "null", "array", "object"]
    assert props["value"]["anyOf"][0]["maxLength"] == TEXT_CHARS
    assert props["value"]["anyOf"][4]["maxItems"] == MAX_ITEMS


def test_small_integer_ranges_are_spelled_out_as_an_enum() -> None:
    """Grammar engines ignore minimum/maximum; an enum keeps a constrained model in range."""
    from pydantic import BaseModel

    from skillstate.engine.actions import decision_schema

    class Params(BaseModel):
        i: int = Field(ge=0, le=4)
        k: int = Field(gt=0, lt=3)
        big: int = Field(ge=0, le=10_000)
        free: int

    schema = decision_schema({"s": Params}, [])
    branch = next(b for b in schema["anyOf"] if "skill" in b["properties"])
    props = branch["properties"]["params"]["properties"]
    assert props["i"]["enum"] == [0, 1, 2, 3, 4]
    assert props["k"]["enum"] == [1, 2]
    assert "enum" not in props["big"]
    assert "enum" not in props["free"]
