"""``skillstate extract`` without the command line: citations, the rules, the model path
with its repairs, the proposal file and the proposed schema."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from skillstate.engine.agent import load_agent
from skillstate.errors import ExtractionFailed, UsageError
from skillstate.extract import (
    Extraction,
    Target,
    check,
    dump_proposal,
    extract,
    load_proposal,
    parse_transcript,
    propose_schema,
)
from skillstate.extract.proposal import Constraint, Fact, Goal, Step
from skillstate.llm.base import Message
from skillstate.llm.replay import ScriptedProvider
from skillstate.state.model import AgentState

TICKET = "skillstate.examples.ticket:agent"
SECRET = "sk-live-4f9a8b7c6d5e4f3a2b1c"
CHAT = f"""\
system: You are the helpdesk assistant. Never promise a refund.
user: Hi. My VPN connection keeps dropping since this morning. I need it fixed today.
Do not reset my password. My api_key={SECRET}
The priority is P2.
assistant: Looking into it.
[tool call] record_ticket_type({{"text": "VPN keeps dropping"}})
tool: ticket_type: network
user: Thanks. Then plan solution, and only use the knowledge base.
"""


@pytest.fixture(scope="module")
def agent() -> Any:
    return load_agent(TICKET)


def _transcript() -> Any:
    return parse_transcript(CHAT, source="chat.txt")


class TestCitations:
    def test_a_fabricated_citation_is_rejected_with_a_note(self, agent: Any) -> None:
        """A turn that does not exist, a quote its turn does not hold, a value its quote
        does not hold: each item is dropped and says why; the good ones are kept."""
        items = Extraction(
            goal=Goal(text="Fix the VPN", quote="keeps dropping", turns=(2,)),
            constraints=(
                Constraint(
                    text="Never promise a refund.", quote="never promise a REFUND", turns=(1,)
                ),
                Constraint(text="Be polite", quote="be polite", turns=(9,)),
                Constraint(text="Escalate", quote="escalate to level 2", turns=(2,)),
                Constraint(text="No quote", quote="", turns=(2,)),
                Constraint(text="No turn", quote="Never promise", turns=()),
            ),
            facts=(
                Fact(key="priority", value="P2", quote="The priority is P2", turns=(2,)),
                Fact(key="priority", value="P1", quote="Looking into it", turns=(3,)),
                Fact(key="facts.city", value="Lisbon", quote="keeps dropping", turns=(2,)),
            ),
        )
        kept, problems = check(items, _transcript(), Target.of(agent))
        assert kept.goal is not None
        assert kept.goal.text == "Fix the VPN"
        assert [c.text for c in kept.constraints] == ["Never promise a refund."]
        assert [(f.key, f.value) for f in kept.facts] == [("priority", "P2")]
        assert [str(p) for p in problems] == [
            "constraints[1]: 'Be polite': cites turn 9, which does not exist "
            "(the transcript has 5)",
            "constraints[2]: 'Escalate': its quote 'escalate to level 2' does not occur in turn 2",
            "constraints[3]: 'No quote': quotes nothing from its turns",
            "constraints[4]: 'No turn': cites no turn",
            "facts[1]: fact 'priority': its value 'P1' does not occur in its quote",
            "facts[2]: fact 'facts.city': its value 'Lisbon' does not occur in its quote",
        ]

    def test_keys_and_steps_the_agent_does_not_know(self, agent: Any) -> None:
        items = Extraction(
            facts=(
                Fact(key="status", value="done", quote="Thanks", turns=(5,)),
                Fact(key="priority", value="urgent", quote="priority", turns=(2,)),
                Fact(key="facts.a.b", value=1, quote="Thanks", turns=(5,)),
            ),
            completed_steps=(
                Step(name="record_ticket_type", quote="record_ticket_type(", turns=(3,)),
                Step(name="reboot_router", quote="Looking into it", turns=(3,)),
            ),
            pending_steps=(
                Step(name="deciding", quote="plan solution", turns=(5,)),
                Step(name="deciding", quote="plan solution", turns=(5,)),
            ),
        )
        kept, problems = check(items, _transcript(), Target.of(agent))
        assert kept.facts == ()
        assert [s.name for s in kept.completed_steps] == ["record_ticket_type"]
        assert [s.name for s in kept.pending_steps] == ["deciding", "deciding"]
        messages = [str(p) for p in problems]
        assert (
            messages[0]
            == "facts[0]: fact 'status': 'status' is a field of the base card, not a fact"
        )
        assert messages[1].startswith("facts[1]: fact 'priority': priority: Input should be 'P1'")
        assert messages[2].startswith("facts[2]: fact 'facts.a.b': 'facts.a.b' is not a fact key")
        assert messages[3] == (
            "completed_steps[1]: step 'reboot_router' is not a skill of the agent"
        )

    def test_a_reviewed_item_without_turns_is_the_reviewers(self, agent: Any) -> None:
        items = Extraction(constraints=(Constraint(text="Reply in French."),))
        kept, problems = check(items, _transcript(), Target.of(agent), reviewed=True)
        assert problems == []
        assert kept.constraints[0].text == "Reply in French."


class TestHeuristic:
    def test_the_rules_on_a_known_transcript(self, agent: Any) -> None:
        """Goal, constraints, typed facts, a completed and a pending step, evidence;
        the secret masked before anything read it."""
        proposal = extract(_transcript(), agent)
        assert proposal.extractor.name == "heuristic"
        assert proposal.goal is not None
        assert proposal.goal.text == (
            "My VPN connection keeps dropping since this morning. I need it fixed today."
        )
        assert proposal.goal.turns == (2,)
        assert [(c.text, c.turns) for c in proposal.constraints] == [
            ("Never promise a refund.", (1,)),
            ("Do not reset my password.", (2,)),
            ("Then plan solution, and only use the knowledge base.", (5,)),
        ]
        assert [(f.key, f.value, f.turns) for f in proposal.facts] == [
            ("priority", "P2", (2,)),
            ("ticket_type", "network", (4,)),
        ]
        assert [(s.name, s.turns) for s in proposal.completed_steps] == [
            ("record_ticket_type", (3,))
        ]
        assert [(s.name, s.turns) for s in proposal.pending_steps] == [("plan_solution", (5,))]
        assert [e.turns for e in proposal.evidence] == [(1,), (2,), (3,), (4,), (5,)]
        assert proposal.notes == ()
        assert SECRET not in dump_proposal(proposal)
        assert "api_key=***" in proposal.transcript.turns[1].text

    def test_a_free_fact_on_the_base_card(self) -> None:
        transcript = parse_transcript(
            "user: Please book a hotel in Lisbon.\nCity: Lisbon\n", source="t"
        )
        proposal = extract(transcript, None)
        assert [(f.key, f.value) for f in proposal.facts] == [("facts.city", "Lisbon")]
        assert proposal.agent is None
        assert proposal.state_class == "AgentState"


def _reply(**items: Any) -> str:
    base: dict[str, Any] = {
        "goal": {"text": "", "quote": "", "turns": []},
        "constraints": [],
        "facts": [],
        "completed_steps": [],
        "pending_steps": [],
        "evidence": [],
    }
    return json.dumps({**base, **items})


GOOD = _reply(
    goal={"text": "Fix the VPN", "quote": "VPN connection keeps dropping", "turns": [2]},
    constraints=[
        {"text": "Never promise a refund", "quote": "Never promise a refund", "turns": [1]}
    ],
    facts=[{"key": "priority", "value": "P2", "quote": "The priority is P2", "turns": [2]}],
    evidence=[{"summary": "the tool said network", "quote": "", "turns": [4]}],
)
FABRICATED = _reply(
    constraints=[{"text": "Refund the user", "quote": "refund the user", "turns": [12]}],
)


class TestModelPath:
    def test_one_repair_then_a_good_extraction(self, agent: Any) -> None:
        """The fabricated citation goes back to the model with why; its second reply is
        kept, and what it cost is recorded."""
        sent: list[list[Message]] = []

        def rule(messages: Sequence[Message], schema: dict[str, Any] | None) -> str:
            sent.append(list(messages))
            assert schema is not None
            assert schema["required"][0] == "goal"
            return FABRICATED if len(sent) == 1 else GOOD

        provider = ScriptedProvider(rule, name="scripted")
        proposal = extract(_transcript(), agent, provider=provider, max_repairs=2)
        assert (proposal.extractor.calls, proposal.extractor.repairs) == (2, 1)
        assert proposal.extractor.name == "scripted"
        assert [c.text for c in proposal.constraints] == ["Never promise a refund"]
        assert [(f.key, f.value) for f in proposal.facts] == [("priority", "P2")]
        assert proposal.notes == ()
        repair = sent[1][-1]
        assert repair.role == "user"
        assert "cites turn 12, which does not exist (the transcript has 5)" in repair.content
        assert sent[1][-2] == Message("assistant", FABRICATED)
        for messages in sent:  # the prompt never held the secret
            assert all(SECRET not in m.content for m in messages)
        assert "[turn 2] user: Hi. My VPN" in sent[0][1].content

    def test_a_reply_that_is_not_json_is_repaired(self, agent: Any) -> None:
        replies = iter(["```json\n{not json", GOOD])
        provider = ScriptedProvider(lambda m, s: next(replies))
        proposal = extract(_transcript(), agent, provider=provider, max_repairs=1)
        assert proposal.extractor.repairs == 1
        assert proposal.goal is not None

    def test_items_still_wrong_after_the_repairs_are_dropped_with_notes(self, agent: Any) -> None:
        provider = ScriptedProvider(lambda m, s: FABRICATED)
        proposal = extract(_transcript(), agent, provider=provider, max_repairs=1)
        assert proposal.constraints == ()
        assert proposal.notes == (
            "constraints[0]: 'Refund the user': cites turn 12, which does not exist "
            "(the transcript has 5)",
        )
        assert proposal.extractor.calls == 2

    def test_never_an_extraction_is_a_failure(self, agent: Any) -> None:
        provider = ScriptedProvider(lambda m, s: '{"goal": 3}')
        with pytest.raises(ExtractionFailed, match=r"no valid extraction after 3 model call\(s\)"):
            extract(_transcript(), agent, provider=provider, max_repairs=2)


class TestProposalFile:
    def test_it_round_trips_and_keeps_the_transcript_pinned(self, agent: Any) -> None:
        proposal = extract(_transcript(), agent)
        text = dump_proposal(proposal)
        assert text.startswith("# skillstate extract: a proposed state card")
        assert "turns: [2]" in text
        assert load_proposal(text, what="p.yaml") == proposal

    def test_a_proposal_that_does_not_parse_names_the_field(self) -> None:
        text = dump_proposal(extract(_transcript(), None)).replace(
            "- text: Never promise a refund.", "- txt: Never promise a refund."
        )
        with pytest.raises(
            UsageError, match=r"^p.yaml refused: constraints.0.text: Field required"
        ):
            load_proposal(text, what="p.yaml")
        with pytest.raises(UsageError, match="is not a proposal"):
            load_proposal("- a\n- b\n", what="p.yaml")


class TestProposedSchema:
    def test_a_state_class_that_imports_and_validates(self, tmp_path: Path) -> None:
        transcript = parse_transcript(
            "user: Plan my trip to Lisbon, please.\nCity: Lisbon\nNights: 3\nBudget: 412.5\n"
            "Vegetarian: true\n",
            source="trip.txt",
        )
        proposal = extract(transcript, None)
        source = propose_schema(proposal, class_name="TripState")
        path = tmp_path / "trip_state.py"
        path.write_text(source, encoding="utf-8")
        spec = importlib.util.spec_from_file_location("trip_state", path)
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        cls = module.TripState
        assert issubclass(cls, AgentState)
        assert cls.custom_fields() == ("city", "nights", "budget", "vegetarian")
        state = cls.model_validate(
            {"task_id": "t", "city": "Lisbon", "nights": 3, "budget": 412.5, "vegetarian": True}
        )
        assert state.nights == 3
        with pytest.raises(ValueError, match="nights"):
            cls.model_validate({"task_id": "t", "nights": "three"})

    def test_a_bad_class_name(self) -> None:
        with pytest.raises(UsageError, match="not a Python class name"):
            propose_schema(extract(_transcript(), None), class_name="not a name")


class TestTypedFields:
    def test_a_fields_constraints_validate_a_fact(self) -> None:
        """``Field(ge=1)`` on the state class refuses a fact of 0, as the card would."""
        from pydantic import Field

        class TripState(AgentState):
            nights: int | None = Field(default=None, ge=1)

        target = Target.of(None, TripState)
        assert target.fact_value("nights", "3") == 3
        items = Extraction(facts=(Fact(key="nights", value=0, quote="0 nights", turns=(1,)),))
        transcript = parse_transcript("user: book 0 nights", source="t")
        _, problems = check(items, transcript, target)
        assert [str(p) for p in problems] == [
            "facts[0]: fact 'nights': nights: Input should be greater than or equal to 1"
        ]

    def test_list_and_object_facts_get_typed_fields(self) -> None:
        proposal = extract(parse_transcript("user: Plan my trip, please.", source="t"), None)
        proposal = proposal.model_copy(
            update={
                "facts": (
                    Fact(key="facts.tags", value=["a", "b"], turns=()),
                    Fact(key="facts.meta", value={"a": 1}, turns=()),
                    Fact(key="facts.status", value="x", turns=()),
                )
            }
        )
        source = propose_schema(proposal)
        assert "from typing import Any\n" in source
        assert "    tags: list[str] | None = None  # turn the review: " in source
        assert "    meta: dict[str, Any] | None = None" in source
        assert "status" not in source.split("class ")[1]  # a base card field stays a fact


def test_reviewed_evidence_still_needs_its_turn(agent: Any) -> None:
    """Evidence is a pointer at a turn: one added without turns is refused, not dropped."""
    from skillstate.extract.proposal import Evidence

    items = Extraction(evidence=(Evidence(summary="my own note"),))
    _, problems = check(items, _transcript(), Target.of(agent), reviewed=True)
    assert [str(p) for p in problems] == ["evidence[0]: 'my own note': cites no turn"]
