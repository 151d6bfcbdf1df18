"""The state card, its view and the bundled demos."""

from __future__ import annotations

import pytest

import skillstate
from skillstate import AgentState, Evidence, Runtime, StateError, StepRecord
from skillstate.examples import orders, ticket
from skillstate.state.view import render_view
from skillstate.store.memory import MemoryStore


class TestCard:
    def test_card_is_immutable(self) -> None:
        """Assigning to a field is refused; changes go through evolve/with_writes."""
        state = AgentState(task_id="t")
        with pytest.raises(Exception, match="frozen"):
            state.goal = "x"  # type: ignore[misc]

    def test_with_writes_validates(self) -> None:
        """Writes are validated against the typed fields."""
        state = ticket.TicketState(task_id="t")
        assert state.with_writes({"priority": "P2"}).priority == "P2"  # type: ignore[attr-defined]
        with pytest.raises(StateError, match="priority"):
            state.with_writes({"priority": "urgent"})

    def test_dotted_writes_into_facts(self) -> None:
        """facts.x writes one key and leaves the others."""
        state = AgentState(task_id="t", facts={"a": 1})
        assert state.with_writes({"facts.b": 2}).facts == {"a": 1, "b": 2}

    def test_reapplying_a_step_is_a_noop(self) -> None:
        """A step id already recorded is not recorded twice."""
        record = StepRecord(id="0002-x", step="init", action="call_skill", skill="x")
        once = AgentState(task_id="t").with_step(record)
        assert once.with_step(record) is once
        assert len(once.completed_steps) == 1

    def test_evidence_is_bounded(self) -> None:
        """Only the newest MAX_EVIDENCE summaries stay in the card."""
        state = AgentState(task_id="t")
        items = [Evidence(kind="k", source="s", summary=str(i)) for i in range(50)]
        kept = state.with_evidence(items).evidence
        assert len(kept) == AgentState.MAX_EVIDENCE
        assert kept[-1].summary == "49"

    def test_schema_version_defaults_to_class(self) -> None:
        """New cards carry their class's schema version; stored ones keep theirs."""

        class V2(AgentState):
            SCHEMA_VERSION = 2

        assert V2(task_id="t").schema_version == 2
        assert V2(task_id="t", schema_version=1).schema_version == 1


class TestView:
    def _long_state(self) -> AgentState:
        state = AgentState(
            task_id="t",
            goal="ship the report",
            constraints=("never touch prod", "EUR only"),
        )
        evidence = [Evidence(kind="k", source="tool", summary="x" * 150) for _ in range(20)]
        return state.with_evidence(evidence)

    def test_deterministic(self) -> None:
        """The same state renders to the same text."""
        state = self._long_state()
        assert render_view(state).text == render_view(state).text

    def test_budget_drops_evidence_but_never_constraints(self) -> None:
        """Under a tight budget evidence goes first; goal and constraints stay."""
        state = self._long_state()
        full = render_view(state)
        tight = render_view(state, budget=60)
        assert tight.tokens < full.tokens
        assert "evidence" in tight.dropped
        for text in ("ship the report", "never touch prod", "EUR only"):
            assert text in tight.text

    def test_view_size_does_not_grow_with_steps(self) -> None:
        """Recording many more steps does not grow the view past its recent window."""
        state = AgentState(task_id="t")
        sizes = []
        for n in range(1, 61):
            state = state.with_step(StepRecord(id=f"{n:04d}-s", step="init", action="call_skill"))
            if n in (10, 60):
                sizes.append(render_view(state).tokens)
        assert sizes[1] <= sizes[0] + 2


class TestDemos:
    def test_ticket_demo_completes(self) -> None:
        """The seed 000 ticket flow ends completed with type and priority in state."""
        agent = ticket.agent
        result = Runtime(agent, MemoryStore()).run(
            "t", inputs=list(agent.sample_inputs), create=True
        )
        state = result.state
        assert isinstance(state, ticket.TicketState)
        assert result.stopped == "completed"
        assert (state.ticket_type, state.priority, state.current_step) == ("network", "P1", "done")
        steps = [s.step for s in state.completed_steps]
        assert steps[0] == "gathering_info"
        assert "deciding" in steps
        assert "resolving" in steps

    def test_orders_demo_keeps_raw_output_out_of_state(self) -> None:
        """Seed 001: the largest July order is found; the raw payload stays an artifact."""
        store = MemoryStore()
        result = Runtime(orders.agent, store).run("o", create=True)
        state = result.state
        assert isinstance(state, orders.OrdersState)
        assert result.stopped == "completed"
        payload = orders.query_orders("U123456", "2025-07")
        best = max(payload, key=lambda o: o["amount"])
        assert (state.max_order_id, state.max_amount) == (best["order_id"], 3299.0)
        assert state.orders_ref is not None
        raw = store.get_artifact(state.orders_ref)
        assert len(raw) > 2000
        assert len(state.model_dump_json()) < len(raw)
        assert payload[0]["shipping"]["carrier"] not in state.model_dump_json()


def test_public_api_is_complete() -> None:
    """Every public name is in __all__, and every name in __all__ exists."""
    public = {n for n in dir(skillstate) if not n.startswith("_")}
    modules = {"cli", "engine", "errors", "events", "examples", "llm", "skills", "state", "store"}
    modules.add("annotations")  # from __future__ import annotations
    assert set(skillstate.__all__) - {"__version__"} == public - modules


def test_every_public_name_resolves() -> None:
    """Each lazily exported name imports and is what its module defines."""
    for name in skillstate.__all__:
        assert getattr(skillstate, name) is not None
    assert set(skillstate._EXPORTS) == set(skillstate.__all__) - {"__version__"}


def test_cli_import_stays_light() -> None:
    """Importing the CLI does not import pydantic models or the runtime."""
    import subprocess
    import sys

    code = (
        "import sys, skillstate.cli; "
        "print(sorted(m for m in sys.modules if m.startswith(('skillstate.engine', 'pydantic'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
