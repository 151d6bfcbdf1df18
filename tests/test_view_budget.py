"""The view keeps its promise: a budgeted view fits its budget, hides by declared priority
(markers say what), never hides goal or constraints, and reports what it cannot fit."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import Field

from skillstate import (
    Agent,
    AgentState,
    CallSkill,
    Evidence,
    Finish,
    NoParams,
    Outcome,
    Runtime,
    ScriptedPolicy,
    SkillContext,
    SkillRegistry,
    StateMachine,
    StepRecord,
    View,
    ViewPriority,
)
from skillstate.engine.policy import StatePolicy
from skillstate.errors import UsageError
from skillstate.llm.replay import ScriptedProvider
from skillstate.llm.tokens import count_tokens
from skillstate.state import budget as budget_module
from skillstate.state.budget import DEFAULT_VIEW_BUDGET, field_priorities
from skillstate.state.model import FailedAttempt
from skillstate.state.view import render_view
from skillstate.store import open_store
from skillstate.store.memory import MemoryStore
from skillstate.ui.data import step_rows
from skillstate.ui.masking import Masker
from tests.test_cli import run_cli, store_url

GOAL = "ship the quarterly report"
CONSTRAINTS = ("never touch prod", "amounts in EUR only")


class Report(AgentState):
    draft: str | None = None
    reviewer: Annotated[str | None, ViewPriority(60)] = None
    """Declared to stay longer than the other typed fields."""
    scratch: str | None = Field(default=None, json_schema_extra={"view_priority": 5})
    """Declared to go first, before evidence."""


def long_card(facts: int = 12) -> Report:
    """A card whose view is several times a tight budget (the issue's 657 tokens for 120)."""
    state = Report(
        task_id="t",
        goal=GOAL,
        constraints=CONSTRAINTS,
        draft="d" * 300,
        reviewer="ana@example.org",
        scratch="s" * 150,
        facts={f"fact_{i}": "value " * 40 for i in range(facts)},
    )
    state = state.with_evidence(
        Evidence(kind="tool_output", source="fetch", summary=f"page {i} " * 20, ref=None)
        for i in range(8)
    )
    for n in range(8):
        state = state.with_step(StepRecord(id=f"{n:04d}-s", step="init", action="call_skill"))
    tried = tuple(FailedAttempt(action=f"a{i}", reason="r" * 60) for i in range(3))
    return state.replace(tried=tried)


class TestFit:
    def test_a_tight_budget_is_kept_with_goal_and_constraints(self) -> None:
        """Budget 120 on a view several times that: at most 120 tokens, goal and
        constraints whole, and a marker for each kind of thing hidden."""
        state = long_card()
        whole = render_view(state)
        tight = render_view(state, budget=120)
        assert whole.tokens > 4 * 120
        assert tight.tokens <= 120
        assert tight.tokens == count_tokens(tight.text)
        assert tight.overrun == 0
        assert GOAL in tight.text
        assert all(c in tight.text for c in CONSTRAINTS)
        assert "hidden by the view budget" in tight.text
        assert "more facts" in tight.text
        assert "older hidden by the view budget" in tight.text  # evidence

    def test_priority_order(self) -> None:
        """Lower priority goes first: the declared-low field, evidence, tried, steps, facts
        (oldest first), typed fields (last declared first), the declared-high field last."""
        state = long_card(facts=3)
        dropped = render_view(state, budget=70).dropped
        assert dropped[0] == "scratch"  # ViewPriority 5 (json_schema_extra)
        order = [d if not d.startswith("facts.") else "facts" for d in dropped]
        firsts = [order.index(kind) for kind in ("evidence", "tried", "steps", "facts")]
        assert firsts == sorted(firsts)
        facts = [d for d in dropped if d.startswith("facts.")]
        assert facts == ["facts.fact_0", "facts.fact_1", "facts.fact_2"][: len(facts)]
        if "reviewer" in dropped:
            assert dropped.index("reviewer") > dropped.index("draft")

    def test_a_declared_priority_keeps_a_field_longer(self) -> None:
        """At a budget that keeps only one typed field, it is the ViewPriority(60) one."""
        state = long_card(facts=0)
        for budget in range(40, 400, 10):
            view = render_view(state, budget=budget)
            if "draft" in view.dropped and "reviewer" not in view.dropped:
                assert "ana@example.org" in view.text
                assert "- draft:" not in view.text
                assert "2 more fields hidden" in view.text  # draft and scratch
                return
        pytest.fail("no budget kept the reviewer without the draft")

    def test_priorities_are_read_from_both_declarations(self) -> None:
        assert field_priorities(Report) == {"reviewer": 60, "scratch": 5}

    def test_what_fits_is_not_trimmed(self) -> None:
        """A budget the whole view fits in renders it exactly as without a budget."""
        state = long_card()
        whole = render_view(state)
        roomy = render_view(state, budget=whole.tokens)
        assert roomy.text == whole.text
        assert roomy.dropped == ()
        assert roomy.overrun == 0
        assert whole.overrun is None  # no budget: nothing to overrun

    def test_an_overrun_is_reported_not_hidden(self) -> None:
        """Constraints alone over the budget: everything hideable is hidden, the rest stays,
        and the view says by how much it is over."""
        rules = tuple(f"rule {i}: " + "never do this particular thing " * 4 for i in range(12))
        state = long_card().replace(constraints=rules)
        view = render_view(state, budget=100)
        assert view.tokens > 100
        assert view.overrun == view.tokens - 100
        assert all(rule in view.text for rule in rules)
        assert "- draft:" not in view.text
        assert "fact_0" not in view.text

    def test_fitting_is_not_quadratic(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Hundreds of hideable lines: each is counted once and the whole view only a few
        times (an estimate, then a binary search), not once per line hidden."""
        state = long_card(facts=400)
        wholes: list[int] = []
        counted = budget_module.count_tokens

        def counting(text: str) -> int:
            if text.startswith("## Task"):
                wholes.append(len(text))
            return counted(text)

        monkeypatch.setattr(budget_module, "count_tokens", counting)
        view = render_view(state, budget=DEFAULT_VIEW_BUDGET)
        assert view.tokens <= DEFAULT_VIEW_BUDGET
        assert len(view.dropped) > 300
        assert len(wholes) <= 2 + len(view.dropped).bit_length()


# ---------------------------------------------------------------- the agent and the runtime


class Counter(AgentState):
    count: int = 0
    notes: str = ""


def counter_agent(**options: Any) -> Agent[Counter]:
    skills = SkillRegistry()

    @skills.skill(outputs=["count", "facts"], step="counting")
    def tick(state: Counter, params: NoParams, ctx: SkillContext) -> Outcome:
        """Count one, noting a long line."""
        return Outcome(
            writes={"count": state.count + 1, f"facts.note_{state.count}": "n" * 180},
            summary=f"count {state.count + 1}",
        )

    @tick.verifier
    def _counted(state: Counter, outcome: Outcome) -> bool:
        return state.count == outcome.writes["count"]

    def decide(view: View[Counter]) -> CallSkill | Finish:
        assert view.text  # a model reads the text: render it, as a model policy would
        return Finish(reason="done") if view.state.count >= 3 else CallSkill(skill="tick")

    return Agent(
        name="counter",
        state_type=Counter,
        machine=StateMachine({"init": ["counting"], "counting": ["counting", "done"], "done": []}),
        skills=skills,
        policy=ScriptedPolicy(decide),
        goal="count to three",
        constraints=tuple(f"constraint {i} " + "x" * 40 for i in range(3)),
        **options,
    )


class TestAgentBudget:
    def test_on_by_default_for_model_policies_only(self) -> None:
        """'auto': the default budget for a model policy, the whole view for a scripted one."""
        scripted = counter_agent()
        assert scripted.view_budget == "auto"
        assert scripted.effective_view_budget is None
        model = replace(scripted, policy=StatePolicy(ScriptedProvider(lambda m, s: "{}")))
        assert model.effective_view_budget == DEFAULT_VIEW_BUDGET
        state = model.new_state("t")
        assert model.view(state).budget == DEFAULT_VIEW_BUDGET
        assert replace(model, view_budget=None).effective_view_budget is None
        assert replace(scripted, view_budget=300).effective_view_budget == 300

    @pytest.mark.parametrize("bad", [0, -5, "big", 1.5, True])
    def test_a_bad_budget_is_refused(self, bad: object) -> None:
        with pytest.raises(UsageError, match="view_budget"):
            counter_agent(view_budget=bad)

    def test_the_overrun_is_recorded_on_the_decision(self, tmp_path: Path) -> None:
        """A budget the constraints alone exceed: each decision's event records the budget
        and the overrun; a decision that fit records its budget and no overrun."""
        store = MemoryStore()
        agent = counter_agent(view_budget=40)
        result = Runtime(agent, store).run("t", create=True)
        assert result.stopped == "completed"
        decisions = [e for e in store.events("t") if e.actor == "policy"]
        assert decisions
        for event in decisions:
            assert event.view_budget == 40
            assert event.view_tokens is not None
            assert event.view_overrun == event.view_tokens - 40 > 0
        roomy = MemoryStore()
        Runtime(counter_agent(view_budget=5000), roomy).run("t", create=True)
        fitted = [e for e in roomy.events("t") if e.actor == "policy"]
        assert all(e.view_budget == 5000 and e.view_overrun is None for e in fitted)
        # The inspector's timeline rows carry it.
        rows = step_rows(store.events("t"), Masker())
        assert all(r.view_overrun == r.view_tokens - 40 for r in rows if r.actor == "policy")

    def test_the_inspector_marks_the_overrun(self, tmp_path: Path) -> None:
        """The timeline marks a step whose view overran; the step page shows the budget."""
        from starlette.testclient import TestClient

        from skillstate.ui import UIConfig, create_app

        url = store_url(tmp_path)
        store = open_store(url)
        try:
            Runtime(counter_agent(view_budget=40), store).run("t", create=True)
            first = next(e for e in store.events("t") if e.actor == "policy")
        finally:
            store.close()
        client = TestClient(create_app(UIConfig(store_url=url, hosts=())))
        rows = client.get("/api/tasks/t").json()["timeline"]["rows"]
        assert all(r["view_overrun"] == r["view_tokens"] - 40 for r in rows if r["decision"])
        page = client.get("/tasks/t").text
        assert f"view {first.view_overrun} tokens over budget" in page
        step = client.get(f"/steps/{first.version}/t").text
        assert f"{first.view_tokens} of a budget of 40" in step

    def test_tokens_shows_the_overrun(self, tmp_path: Path) -> None:
        """`skillstate tokens` shows each model decision's view against its budget and
        flags the overrun (text and --json)."""
        calls: list[int] = []

        def model(messages: Any, schema: Any) -> str:
            calls.append(1)
            if len(calls) > 3:
                return json.dumps({"kind": "finish", "reason": "counted"})
            return json.dumps({"kind": "call_skill", "skill": "tick", "params": {}, "reason": "r"})

        url = store_url(tmp_path)
        store = open_store(url)
        try:
            policy = StatePolicy(ScriptedProvider(model))
            agent = replace(counter_agent(view_budget=40), policy=policy)
            assert Runtime(agent, store).run("t", create=True).stopped == "completed"
            events = [e for e in store.events("t") if e.actor == "policy"]
        finally:
            store.close()
        assert all(e.view_budget == 40 and e.view_overrun for e in events)
        worst = max(e.view_overrun or 0 for e in events)
        code, out, err = run_cli(tmp_path, "tokens", "t", "--store", url)
        assert code == 0, err
        assert "view / budget" in out
        assert f"(+{worst:,} over)" in out
        assert "over its budget" in out
        code, out, err = run_cli(tmp_path, "tokens", "t", "--store", url, "--json")
        assert code == 0, err
        rows = json.loads(out)
        assert len(rows) == len(events)
        assert {r["view_budget"] for r in rows} == {40}
        assert all(r["view_overrun"] == r["view_tokens"] - 40 for r in rows)


# ---------------------------------------------------------------- the how-to

HOWTO = Path(__file__).resolve().parents[1] / "docs" / "howto.md"


def howto_block(heading: str) -> str:
    """The python block of the how-to section ``heading``."""
    section = HOWTO.read_text(encoding="utf-8").split(f"\n## {heading}\n", 1)[1]
    section = section.split("\n## ", 1)[0]
    [block] = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    return block


@pytest.mark.parametrize(
    ("heading", "expected"),
    [
        (
            "Keep the view within its budget",
            [
                "True 0 scratch",
                "['- (2 more fields and 6 more facts hidden by the view budget)']",
                "True True",
                "True True",
            ],
        ),
        ("Let a decision look at raw evidence", ["completed failing: test_7 FAILED", "False None"]),
    ],
)
def test_the_howto_examples_run(
    heading: str, expected: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The how-to's examples run as written and print what their comments say."""
    namespace: dict[str, object] = {"__name__": "howto_example"}
    exec(compile(howto_block(heading), f"{HOWTO}:{heading}", "exec"), namespace)
    assert capsys.readouterr().out.splitlines() == expected
