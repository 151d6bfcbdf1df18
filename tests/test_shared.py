"""Shared records in one process: declaration errors, views, a write and its audit, the CLI.

The racing writers and ``kill -9`` are in ``test_shared_race.py`` and
``test_shared_crash.py``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from skillstate import (
    Agent,
    CallSkill,
    Finish,
    NoParams,
    Outcome,
    Runtime,
    ScriptedPolicy,
    SkillContext,
    SkillRegistry,
    StateMachine,
    View,
)
from skillstate.cli import _main
from skillstate.engine.actions import Action
from skillstate.errors import UsageError
from skillstate.shared import Shared, load_record, record_id
from skillstate.state.redact import RedactionPolicy
from skillstate.store.memory import MemoryStore
from skillstate.store.sqlite import SQLiteStore
from tests import shared_agent
from tests.shared_agent import CaseFile, CaseState

RID = record_id("case", "C-1")


def _agent(*skills_: Any, shared: Any = None, **kw: Any) -> Agent[Any]:
    registry = SkillRegistry()
    for s in skills_:
        registry.register(s)
    return Agent(
        name="cases",
        state_type=CaseState,
        machine=StateMachine({"init": []}),
        skills=registry,
        shared={"case": Shared(CaseFile, key="{case_id}")} if shared is None else shared,
        **{"policy": ScriptedPolicy(shared_agent.decide), **kw},
    )


class Strict(BaseModel):
    owner: str


class TestDeclaration:
    """A bad declaration is refused when the agent is built, one phrase per problem."""

    @pytest.mark.parametrize(
        ("shared", "phrase"),
        [
            ({"Case!": Shared(CaseFile, key="x")}, "invalid shared record name 'Case!'"),
            ({"case": CaseFile}, "expected Shared(Model, key=...)"),
            ({"case": Shared(dict, key="x")}, "must be a pydantic model class"),  # type: ignore[arg-type]
            ({"case": Shared(CaseFile, key="{nope}")}, "the card has no field 'nope'"),
            ({"case": Shared(CaseFile, key="a b")}, "invalid key template 'a b'"),
            ({"case": Shared(Strict, key="x")}, "its default does not validate against Strict"),
            (["case"], "shared takes a dict"),
        ],
    )
    def test_bad_declarations_are_refused(self, shared: Any, phrase: str) -> None:
        with pytest.raises(UsageError, match="is invalid") as exc:
            _agent(shared_agent.add_note, shared=shared)
        assert phrase in str(exc.value)

    def test_a_skill_sharing_an_undeclared_record_is_refused(self) -> None:
        with pytest.raises(UsageError, match="shares undeclared records: case"):
            _agent(shared_agent.add_note, shared={})

    def test_a_skill_with_effects_cannot_share(self) -> None:
        registry = SkillRegistry()

        @registry.skill(shares=["case"], effects=True, outputs=["added"])
        def risky(state: CaseState, params: NoParams, ctx: SkillContext) -> Outcome:
            """Both."""
            return Outcome(writes={"added": True})

        risky.verifier(lambda state, outcome: state.added)
        risky.prober(lambda state, params, ctx: None)
        with pytest.raises(UsageError, match="declares effects and shares"):
            _agent(risky)

    def test_shares_takes_a_list(self) -> None:
        registry = SkillRegistry()
        with pytest.raises(UsageError, match="shares takes a list"):
            registry.skill(shares="case")(lambda state, params, ctx: Outcome())


def _writer(name: str, **options: Any) -> Any:
    """A skill ``name`` that writes the record ``case`` (declared or not)."""
    registry = SkillRegistry()

    def run(state: CaseState, params: NoParams, ctx: SkillContext) -> Outcome:
        ctx.write_shared("case", {"notes": ["x"]})
        return Outcome(writes={"added": True})

    run.__name__ = name
    skill = registry.skill(outputs=["added"], **options)(run)
    skill.verifier(lambda state, outcome: state.added)
    return skill


def test_an_undeclared_write_fails_the_step_loudly_and_writes_nothing() -> None:
    store = MemoryStore()
    rt = Runtime(_agent(_writer("add_note")), store, max_steps=1)
    rt.start("t")
    state = rt.run("t").state
    assert not state.added
    kinds = [e.kind for e in state.errors]
    assert kinds == ["output_not_declared", "step_failed"]  # not retried: a contract bug
    assert "wrote shared record 'case', which it does not declare" in state.errors[0].message
    assert load_record(store, "case", "C-1").version == 0


def test_a_value_that_does_not_fit_the_schema_is_refused() -> None:
    registry = SkillRegistry()

    @registry.skill(outputs=["added"], shares=["case"], max_retries=0)
    def add_note(state: CaseState, params: NoParams, ctx: SkillContext) -> Outcome:
        """Bad value."""
        ctx.write_shared("case", {"notes": "not a list"})
        return Outcome(writes={"added": True})

    add_note.verifier(lambda state, outcome: state.added)
    store = MemoryStore()
    rt = Runtime(_agent(add_note), store, max_steps=1)
    rt.start("t")
    errors = rt.run("t").state.errors
    assert "shared 'case' refused: notes" in errors[0].message
    assert load_record(store, "case", "C-1").version == 0


def test_views_show_the_record_other_tasks_wrote_with_its_version() -> None:
    store = MemoryStore()
    rt = Runtime(shared_agent.agent, store)
    rt.start("a", note="refund approved")
    rt.run("a")
    seen: list[str] = []

    def decide(view: View[CaseState]) -> Action:
        seen.append(view.text)
        return Finish(summary="read")

    reader = _agent(shared_agent.add_note, policy=ScriptedPolicy(decide))
    Runtime(reader, store).run("b", create=True)
    (text,) = seen
    assert "Shared: case (v1, key C-1; other tasks write it too)" in text
    assert '- notes: ["refund approved"]' in text
    # The view is a function of the card: the snapshot with its version is on it.
    (snap,) = Runtime(reader, store).load("b").shared_snapshots
    assert (snap.name, snap.key, snap.version, snap.writer) == ("case", "C-1", 1, "a@3")


def test_a_task_with_an_empty_key_field_has_no_record() -> None:
    store = MemoryStore()
    rt = Runtime(shared_agent.agent, store, max_steps=1)
    rt.start("t", case_id="")
    rt.run("t")
    assert rt.load("t").shared_snapshots == ()


def test_the_view_budget_hides_a_records_lines_and_keeps_its_header() -> None:
    store = MemoryStore()
    Runtime(shared_agent.agent, store).run("a", create=True)
    budgeted = _agent(shared_agent.add_note, view_budget=60)
    rt = Runtime(budgeted, store, max_steps=1)
    rt.start("b")
    rt.run("b")
    text = budgeted.view(rt.load("b")).text
    assert "Shared: case (v2, key C-1; other tasks write it too)\n- (2 more hidden" in text
    assert "- notes:" in shared_agent.agent.view(rt.load("b")).text  # unbudgeted: shown


def test_a_write_lands_once_with_its_audit_and_the_writer_sees_its_own_version(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = SQLiteStore(tmp_path / "state.db")
    rt = Runtime(shared_agent.agent, store)
    rt.start("a", note="first")
    assert rt.run("a").stopped == "completed"
    head = load_record(store, "case", "C-1")
    assert (head.version, head.value["notes"], head.writer) == (1, ["first"], "a@3")
    (write,) = store.events(RID)
    assert write.action == {
        "kind": "shared_write",
        "task": "a",
        "tag": "a@3",
        "skill": "add_note",
        "step": "0003-add_note",
        "base": 0,
    }
    kinds = [e.action["kind"] for e in store.events("a")]
    assert kinds == ["create", "shared_read", "call_skill", "shared_flush", "finish"]
    card = rt.load("a")
    assert card.shared_pending == ()
    assert card.shared_snapshots[0].version == 1
    store.close()

    url = f"sqlite:///{tmp_path / 'state.db'}"
    assert _main(["log", RID, "--store", url, "--json"]) == 0
    (logged,) = json.loads(capsys.readouterr().out)
    assert (logged["action"]["task"], logged["action"]["tag"], logged["skill"]) == (
        "a",
        "a@3",
        "add_note",
    )
    assert _main(["shared", "case:C-1", "--store", url, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["version"] == 1
    assert shown["value"]["notes"] == ["first"]
    assert [(w["task"], w["version"], w["skill"]) for w in shown["writes"]] == [
        ("a", 1, "add_note")
    ]
    assert _main(["shared", "--store", url]) == 0
    assert capsys.readouterr().out.strip() == "case:C-1  version 1  last written by a@3"
    assert _main(["shared", "case:no such", "--store", url]) == 2
    assert "invalid shared record key" in capsys.readouterr().err


def test_values_are_masked_like_card_values() -> None:
    registry = SkillRegistry()

    @registry.skill(outputs=["added"], shares=["case"])
    def add_note(state: CaseState, params: NoParams, ctx: SkillContext) -> Outcome:
        """Leaks a token into the note."""
        ctx.write_shared("case", lambda c: c.notes.append("token sk-live-abcdefghijklmnop1234"))
        return Outcome(writes={"added": True})

    add_note.verifier(lambda state, outcome: state.added)
    policy = RedactionPolicy(extra_values=(re.compile(r"sk-live-[A-Za-z0-9]+"),))
    store = MemoryStore()
    rt = Runtime(_agent(add_note, redaction=policy), store)
    rt.start("t")
    rt.run("t")
    stored = json.dumps(
        [store.load(RID).state, [e.model_dump(mode="json") for e in store.events(RID)]]
    )
    assert "sk-live" not in stored
    assert "sk-live" not in json.dumps([e.model_dump(mode="json") for e in store.events("t")])


def test_a_step_writes_one_record_and_reads_only_declared_ones() -> None:
    registry = SkillRegistry()

    @registry.skill(outputs=["added"], shares=["case", "tally"], max_retries=0)
    def add_note(state: CaseState, params: NoParams, ctx: SkillContext) -> Outcome:
        """Writes two records."""
        ctx.write_shared("case", {"notes": ["x"]})
        ctx.write_shared("tally", {"notes": ["y"]})
        return Outcome(writes={"added": True})

    add_note.verifier(lambda state, outcome: state.added)
    two = {"case": Shared(CaseFile, key="{case_id}"), "tally": Shared(CaseFile, key="all")}
    store = MemoryStore()
    rt = Runtime(_agent(add_note, shared=two), store, max_steps=1)
    rt.start("t")
    errors = rt.run("t").state.errors
    assert "writes shared records 'case' and 'tally' in one step" in errors[0].message
    assert load_record(store, "case", "C-1").version == 0

    @registry.skill(outputs=["added"], max_retries=0, name="peek")
    def peek(state: CaseState, params: NoParams, ctx: SkillContext) -> Outcome:
        """Reads a record the agent does not declare."""
        ctx.shared("elsewhere")
        return Outcome(writes={"added": True})

    peek.verifier(lambda state, outcome: state.added)
    rt = Runtime(_agent(peek, policy=ScriptedPolicy(lambda v: CallSkill(skill="peek"))), store)
    rt.start("u")
    state = rt.run("u", max_steps=1).state
    assert state.errors[0].kind == "output_not_declared"
    assert "read shared record 'elsewhere', which the agent does not declare" in (
        state.errors[0].message
    )


def test_a_skill_reads_what_its_decision_saw_and_its_own_write() -> None:
    store = MemoryStore()
    Runtime(shared_agent.agent, store).run("a", create=True)  # the record is at v1
    seen: list[Any] = []
    registry = SkillRegistry()

    @registry.skill(outputs=["added"], shares=["case"])
    def add_note(state: CaseState, params: NoParams, ctx: SkillContext) -> Outcome:
        """Reads, writes, reads again."""
        seen.append(ctx.shared("case").notes)
        ctx.write_shared("case", CaseFile(notes=[*seen[0], "b"], owner="ana"))
        seen.append(ctx.shared("case").owner)
        return Outcome(writes={"added": True})

    add_note.verifier(lambda state, outcome: state.added)
    rt = Runtime(_agent(add_note), store)
    rt.start("b", note="b")
    assert rt.run("b").stopped == "completed"
    assert seen == [["note"], "ana"]
    assert load_record(store, "case", "C-1").value == {"notes": ["note", "b"], "owner": "ana"}
