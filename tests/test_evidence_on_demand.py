"""Evidence on demand (seed 003 §3.3): a decision loads one raw artifact, the next view
shows it bounded and masked, the one after does not, and the card never holds it."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from skillstate import (
    Agent,
    AgentState,
    CallSkill,
    Evidence,
    Finish,
    LoadEvidence,
    NoParams,
    Outcome,
    Runtime,
    ScriptedPolicy,
    SkillContext,
    SkillRegistry,
    StateMachine,
    View,
)
from skillstate.engine.actions import decision_schema, validate_decision
from skillstate.engine.agent import agent_factory
from skillstate.engine.aruntime import AsyncRuntime
from skillstate.engine.policy import StatePolicy
from skillstate.engine.schema import SHORT_REF
from skillstate.errors import ActionRejected
from skillstate.llm.base import Message
from skillstate.llm.replay import ScriptedProvider
from skillstate.state.migrate import validate_state
from skillstate.state.view import PEEK_CHARS
from skillstate.store import open_store
from skillstate.store.base import Store
from skillstate.store.memory import MemoryStore
from tests.test_cli import run_cli, store_url

ROWS = "\n".join(f"row-{i:04d} amount {i * 7 % 100}.50 EUR" for i in range(400))
TOKEN = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"
RAW = f"export of the ledger\npassword: hunter2-secret\ntoken {TOKEN}\n{ROWS}\n"
"""An export a skill attaches as it is (not masked when stored): secrets, then 400 rows."""
SHORT = re.compile(r"\((sha256:[0-9a-f]{12})\)")


class Export(AgentState):
    rows: int = 0
    checked: bool = False


def export_agent() -> Agent[Export]:
    skills = SkillRegistry()

    @skills.skill(outputs=["rows"], step="working")
    def export(state: Export, params: NoParams, ctx: SkillContext) -> Outcome:
        """Export the ledger; the card keeps a count and a one-line summary."""
        ref = ctx.attach(RAW.encode(), media_type="text/plain")
        summary = Evidence(kind="file", source="export", summary="400 rows exported", ref=ref)
        return Outcome(writes={"rows": 400}, summary="exported", evidence=[summary])

    @export.verifier
    def _exported(state: Export, outcome: Outcome) -> bool:
        return state.rows == 400

    @skills.skill(outputs=["checked"], step="working")
    def check(state: Export, params: NoParams, ctx: SkillContext) -> Outcome:
        """Mark the export as checked."""
        return Outcome(writes={"checked": True})

    check.verifier(lambda s, o: s.checked)
    return Agent(
        name="export",
        state_type=Export,
        machine=StateMachine({"init": ["working"], "working": ["working", "done"], "done": []}),
        skills=skills,
        policy=ScriptedPolicy(lambda view: Finish()),
    )


@agent_factory  # `skillstate view --agent tests.test_evidence_on_demand:looking_agent`
def looking_agent() -> Agent[Export]:
    return replace(export_agent(), policy=looker([]))


def looker(seen: list[str]) -> ScriptedPolicy[Export]:
    """Model-like: decides from the view's text alone, and loads the evidence it sees."""

    def decide(view: View[Export]) -> CallSkill | LoadEvidence | Finish:
        text = view.text
        seen.append(text)
        if "400 rows exported" not in text:
            return CallSkill(skill="export")
        if "Raw evidence" in text:
            return CallSkill(skill="check", reason="the rows look right")
        if not view.state.checked:
            found = SHORT.search(text)
            assert found is not None
            return LoadEvidence(ref=found.group(1), reason="the summary is not enough")
        return Finish(reason="checked")

    return ScriptedPolicy(decide)


def _cards(store: Store, task_id: str) -> list[str]:
    """Every committed version of the card, as stored."""
    head = store.load(task_id).version
    return [json.dumps(store.checkpoint(task_id, v).state) for v in range(1, head + 1)]


class TestLoad:
    def test_the_next_view_shows_it_once_and_the_card_never_holds_it(self) -> None:
        store = MemoryStore()
        seen: list[str] = []
        agent = replace(export_agent(), policy=looker(seen))
        result = Runtime(agent, store).run("t", create=True)
        assert result.stopped == "completed"
        assert len(seen) == 4  # export, load, check (sees it), finish (does not)
        shown, after = seen[2], seen[3]
        # Shown to the decision after the load: raw, bounded, masked.
        assert "row-0000 amount" in shown
        assert re.search(rf"the first {PEEK_CHARS:,} of 10,[0-9]{{3}} characters", shown)
        block = shown.split("shown to this decision only:\n", 1)[1].split("\n(end of raw")[0]
        assert len(block) == PEEK_CHARS
        assert "row-0399" not in shown  # past the bound
        # Shown to that decision only.
        assert "Raw evidence" not in after
        assert "row-0000" not in after
        assert "Raw evidence" not in seen[1]
        # Never in the card: its ref only, cleared by the decision that saw it.
        for card in _cards(store, "t"):
            assert "row-0000" not in card
        assert result.state.peek is None
        events = store.events("t")
        load = next(e for e in events if e.action.get("kind") == "load_evidence")
        ref = result.state.evidence[0].ref
        assert ref is not None
        assert load.action["ref"] == ref  # the short ref the policy gave, made whole
        assert load.error is None
        assert store.checkpoint("t", load.version).state["peek"] == ref
        saw = next(e for e in events if e.version == load.version + 1)
        assert saw.view_peek == ref
        assert [e.version for e in events if e.view_peek] == [saw.version]
        assert all("row-0000" not in e.model_dump_json() for e in events)

    def test_what_is_shown_is_masked(self) -> None:
        """Secrets in the artifact (stored as attached, unmasked) are masked when shown."""
        store = MemoryStore()
        seen: list[str] = []
        Runtime(replace(export_agent(), policy=looker(seen)), store).run("t", create=True)
        ref = store.load("t").state["evidence"][0]["ref"]
        assert TOKEN.encode() in store.get_artifact(ref)  # stored as given
        assert "password: ***" in seen[2]
        assert "token ***" in seen[2]
        assert "hunter2-secret" not in seen[2]
        assert TOKEN not in seen[2]

    def test_a_budget_bounds_it_further(self) -> None:
        """A budgeted view shows at most twice its budget in characters, and fits the rest."""
        seen: list[str] = []
        agent = replace(export_agent(), policy=looker(seen), view_budget=500)
        Runtime(agent, MemoryStore()).run("t", create=True)
        assert re.search(r"the first 1,000 of 10,[0-9]{3} characters", seen[2])

    def test_a_ref_that_is_not_the_tasks_is_refused(self) -> None:
        """Another task's artifact in the same store: refused in one line, nothing loaded."""
        store = MemoryStore()
        other = store.put_artifact(b"another task's secret export")
        policy = ScriptedPolicy(lambda view: LoadEvidence(ref=other, reason="peek"))
        agent = replace(export_agent(), policy=policy)
        runtime = Runtime(agent, store)
        runtime.start("t")
        report = runtime.step("t")
        assert report.after.peek is None
        error = report.after.errors[-1]
        assert error.kind == "action_rejected"
        assert "is not evidence of this task" in error.message
        assert "\n" not in error.message
        assert report.event.error == error.message

    def test_a_ref_from_the_event_log_is_the_tasks(self) -> None:
        """Evidence that left the card's window is still the task's: its tool call logged it."""
        store = MemoryStore()
        skills = SkillRegistry()

        @skills.skill(outputs=["rows"], tools=["dump"], step="working")
        def dump(state: Export, params: NoParams, ctx: SkillContext) -> Outcome:
            """Dump the ledger through a tool."""
            ctx.call("dump")
            return Outcome(writes={"rows": state.rows + 1})

        dump.verifier(lambda s, o: s.rows == o.writes["rows"])
        refs: list[str] = []

        def decide(view: View[Export]) -> CallSkill | LoadEvidence | Finish:
            if view.state.rows == 0:
                return CallSkill(skill="dump")
            if not refs:
                step = view.step(view.state.completed_steps[-1].id)
                assert step is not None
                logged = [c.ref for e in store.events("t") for c in e.tool_calls if c.ref]
                refs.append(logged[0])
                return LoadEvidence(ref=logged[0])
            return Finish()

        agent = replace(
            export_agent(),
            skills=skills,
            tools={"dump": lambda: ROWS},
            policy=ScriptedPolicy(decide),
        )
        runtime = Runtime(agent, store)
        runtime.start("t")
        runtime.step("t")
        report = runtime.step("t")
        assert report.after.evidence == ()  # not in the card's evidence
        assert report.after.peek == refs[0]
        assert "row-0000" in runtime.step("t").view.text


class TestModel:
    def test_offered_only_with_evidence_refs(self) -> None:
        """The schema and the system prompt offer load_evidence only when there is evidence."""
        none = decision_schema({}, ())
        assert not any(
            b["properties"]["kind"].get("const") == "load_evidence" for b in none["anyOf"]
        )
        refs = ("sha256:" + "a" * 64, "sha256:" + "b" * 64)
        schema = decision_schema({}, (), evidence=refs)
        [branch] = [
            b for b in schema["anyOf"] if b["properties"]["kind"].get("const") == "load_evidence"
        ]
        assert branch["properties"]["ref"]["enum"] == [r[:SHORT_REF] for r in refs]
        assert decision_schema({}, (), evidence=refs) is schema  # shared, like the rest

    def test_replies_are_checked_against_the_cards_refs(self) -> None:
        """A shown (short) ref is made whole; an unknown one goes back with the refs."""
        refs = ("sha256:" + "a" * 64,)
        reply = json.dumps({"kind": "load_evidence", "ref": refs[0][:SHORT_REF], "reason": "r"})
        action = validate_decision(reply, {}, (), evidence=refs)
        assert isinstance(action, LoadEvidence)
        assert action.ref == refs[0]
        bad = json.dumps({"kind": "load_evidence", "ref": "sha256:" + "c" * 12, "reason": "r"})
        with pytest.raises(ActionRejected, match="no evidence with ref"):
            validate_decision(bad, {}, (), evidence=refs)
        with pytest.raises(ActionRejected, match="not available"):
            validate_decision(reply, {}, ())

    def test_a_model_loads_evidence_and_reads_it(self) -> None:
        """Through a model policy: the prompt offers it, the next prompt holds the raw text."""
        prompts: list[Sequence[Message]] = []

        def model(messages: Sequence[Message], schema: dict[str, Any] | None) -> str:
            prompts.append(messages)
            text = messages[-1].content
            if "400 rows exported" not in text:
                return json.dumps({"kind": "call_skill", "skill": "export", "params": {}})
            if "Raw evidence" in text or len(prompts) > 3:
                return json.dumps({"kind": "finish", "reason": "seen"})
            found = SHORT.search(text)
            assert found is not None
            return json.dumps({"kind": "load_evidence", "ref": found.group(1), "reason": "look"})

        store = MemoryStore()
        agent = replace(export_agent(), policy=StatePolicy(ScriptedProvider(model)))
        result = Runtime(agent, store).run("t", create=True)
        assert result.stopped == "completed", result.state.errors
        assert "load_evidence" not in prompts[0][0].content  # no evidence yet
        assert "load_evidence" in prompts[1][0].content
        assert "row-0000" in prompts[2][-1].content
        assert result.state.peek is None

    def test_async_runtime(self) -> None:
        """AsyncRuntime drives the same step logic: the same views, the same card."""
        seen: list[str] = []
        agent = replace(export_agent(), policy=looker(seen))
        store = MemoryStore()

        async def main() -> Any:
            return await AsyncRuntime(agent, store).run("t", create=True)

        result = asyncio.run(main())
        assert result.stopped == "completed"
        assert "row-0000" in seen[2]
        assert "row-0000" not in seen[3]
        assert all("row-0000" not in card for card in _cards(store, "t"))


def test_loading_is_not_progress() -> None:
    """A policy that only loads evidence is stopped by the stall guard, not left looping."""
    store = MemoryStore()

    def decide(view: View[Export]) -> CallSkill | LoadEvidence:
        if not view.state.evidence:
            return CallSkill(skill="export")
        # The card's ref, not view.evidence_refs: a model is no longer offered the ref
        # its view already shows raw, but a Python policy can still name it.
        return LoadEvidence(ref=view.state.evidence[0].ref or "")

    agent = replace(export_agent(), policy=ScriptedPolicy(decide))
    result = Runtime(agent, store, max_steps=20).run("t", create=True)
    assert result.stopped == "stalled"
    assert result.state.errors[-1].kind == "stalled"
    assert "load_evidence" in result.state.errors[-1].message


def test_the_ref_a_view_shows_raw_is_not_offered_again() -> None:
    """After a load, the next view shows that artifact raw and offers only the others:
    a model cannot spend its decisions loading the same artifact over and over."""
    store = MemoryStore()
    seen: list[tuple[str, ...]] = []

    def decide(view: View[Export]) -> CallSkill | LoadEvidence | Finish:
        seen.append(view.evidence_refs)
        if not view.state.evidence:
            return CallSkill(skill="export")
        if view.state.peek is None:
            return LoadEvidence(ref=view.evidence_refs[0])
        return Finish(summary="seen")

    agent = replace(export_agent(), policy=ScriptedPolicy(decide))
    result = Runtime(agent, store, max_steps=10).run("t", create=True)
    ref = result.state.evidence[0].ref
    assert ref is not None
    assert seen[1] == (ref,)  # offered while the view shows only its summary
    assert seen[2] == ()  # the view shows it raw: not offered again


def test_an_older_card_loads_without_a_peek() -> None:
    """A card from before evidence on demand (no ``peek``) migrates to none."""
    document = Export(task_id="t").to_json()
    del document["peek"]
    document["card_version"] = 5
    assert validate_state(Export, document).peek is None


def test_skillstate_view_shows_what_the_next_decision_will_see(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`skillstate view` after a load: the raw evidence, masked, as the next view has it."""
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[1]))
    url = store_url(tmp_path)
    store = open_store(url)
    try:
        runtime = Runtime(looking_agent(), store)
        runtime.start("t")
        runtime.step("t")
        assert runtime.step("t").after.peek is not None
    finally:
        store.close()
    agent = "tests.test_evidence_on_demand:looking_agent"
    code, out, err = run_cli(tmp_path, "view", "t", "--store", url, "--agent", agent)
    assert code == 0, err
    assert "row-0000 amount" in out
    assert "password: ***" in out
    assert TOKEN not in out


def test_a_refused_load_still_uses_up_what_was_shown() -> None:
    """The decision that saw the raw evidence clears it even when its own load is refused."""
    store = MemoryStore()
    other = store.put_artifact(b"not this task's")
    seen: list[str] = []

    def decide(view: View[Export]) -> CallSkill | LoadEvidence | Finish:
        seen.append(view.text)
        if not view.state.evidence:
            return CallSkill(skill="export")
        if len(seen) == 2:
            return LoadEvidence(ref=view.evidence_refs[0])
        if len(seen) == 3:
            return LoadEvidence(ref=other)
        return Finish()

    runtime = Runtime(replace(export_agent(), policy=ScriptedPolicy(decide)), store)
    runtime.start("t")
    runtime.step("t")
    assert runtime.step("t").after.peek is not None
    refused = runtime.step("t")
    assert "row-0000" in seen[2]
    assert refused.after.errors[-1].kind == "action_rejected"
    assert refused.after.peek is None
    runtime.step("t")
    assert "row-0000" not in seen[3]


def test_evidence_loaded_since_the_last_progress_is_not_offered_again() -> None:
    """A model that loads two artifacts in turn is left, once it saw both, with none to
    load: it acts on them. Progress (which clears ``tried``) offers them all again."""
    from skillstate.state.records import FailedAttempt
    from skillstate.state.view import View

    first, second = "sha256:" + "a" * 64, "sha256:" + "b" * 64
    evidence = tuple(
        Evidence(kind="file", source="export", summary=f"part {i}", ref=ref)
        for i, ref in enumerate((first, second))
    )

    def offered(**fields: Any) -> tuple[str, ...]:
        state = Export(task_id="t", evidence=evidence, **fields)
        return View(state=state, skills=(), next_steps=()).evidence_refs

    loaded_first = FailedAttempt(action=f"load_evidence {first[:SHORT_REF]}", reason="none")
    assert offered() == (first, second)
    assert offered(peek=first) == (second,)
    assert offered(peek=second, tried=(loaded_first,)) == ()
    assert offered(tried=(loaded_first,)) == (second,)
    with pytest.raises(ActionRejected, match="loaded since the last progress"):
        validate_decision(
            json.dumps({"kind": "load_evidence", "ref": first[:SHORT_REF], "reason": "again"}),
            {},
            (),
            evidence=(),
        )
