"""Transitive staleness (issue 26): a stale step takes every step that used its result with it.

The chain file -> report -> summary -> final: ``build_report`` reads a file (and
fingerprints it) and writes ``report``; ``summarize`` reads ``report`` and writes
``summary``; ``finalize`` reads ``summary`` and writes ``final``. ``note_ticket``
reads only ``ticket``: when the file changes, exactly the first three are redone.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from skillstate import (
    Action,
    Agent,
    AgentState,
    CallSkill,
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
)
from skillstate.state.depends import dependents, depends_on, overlaps, read_overlap
from skillstate.state.migrate import migrate_document
from skillstate.store.memory import MemoryStore


class ChainState(AgentState):
    path: str = ""
    ticket: str = "T-1"
    report: str | None = None
    summary: str | None = None
    final: str | None = None
    note: str | None = None
    audit: str | None = None


PLAN = ("build_report", "note_ticket", "summarize", "finalize")


def chain_agent(
    runs: list[str], *, with_audit: bool = False, state_type: type[ChainState] = ChainState
) -> Agent[ChainState]:
    """The chain; with ``with_audit``, a last step that declares no reads at all."""
    skills: SkillRegistry = SkillRegistry()

    @skills.skill(reads=["path"], outputs=["report"])
    def build_report(state: ChainState, params: NoParams, ctx: SkillContext) -> Outcome:
        """Read the file into a report."""
        runs.append("build_report")
        text = Path(state.path).read_text().strip()
        ctx.fingerprint(state.path)
        return Outcome(writes={"report": f"report({text})"})

    build_report.verifier(lambda s, o: s.report is not None and s.report.startswith("report("))

    @skills.skill(reads=["report"], outputs=["summary"])
    def summarize(state: ChainState, params: NoParams, ctx: SkillContext) -> Outcome:
        """Summarize the report."""
        runs.append("summarize")
        return Outcome(writes={"summary": f"summary({state.report})"})

    summarize.verifier(lambda s, o: s.summary == f"summary({s.report})")

    @skills.skill(reads=["summary"], outputs=["final"])
    def finalize(state: ChainState, params: NoParams, ctx: SkillContext) -> Outcome:
        """Turn the summary into the final answer."""
        runs.append("finalize")
        return Outcome(writes={"final": f"final({state.summary})"})

    finalize.verifier(lambda s, o: s.final == f"final({s.summary})")

    @skills.skill(reads=["ticket"], outputs=["note"])
    def note_ticket(state: ChainState, params: NoParams, ctx: SkillContext) -> Outcome:
        """Note the ticket (nothing to do with the file)."""
        runs.append("note_ticket")
        return Outcome(writes={"note": f"noted {state.ticket}"})

    note_ticket.verifier(lambda s, o: s.note == f"noted {s.ticket}")

    @skills.skill(outputs=["audit"])
    def audit(state: ChainState, params: NoParams, ctx: SkillContext) -> Outcome:
        """Audit everything (declares no reads: it depends on every step before it)."""
        runs.append("audit")
        return Outcome(writes={"audit": f"audited {state.final}"})

    audit.verifier(lambda s, o: s.audit is not None)

    def decide(view: View[ChainState]) -> Action:
        pending = view.state.pending_steps
        return CallSkill(skill=pending[0]) if pending else Finish()

    return Agent(
        name="chain",
        state_type=state_type,
        machine=StateMachine({"init": ["init"]}, final=["init"]),
        skills=skills,
        policy=ScriptedPolicy(decide),
        plan=(*PLAN, "audit") if with_audit else PLAN,
    )


def started(tmp_path: Path, runs: list[str], **kwargs: Any) -> tuple[Runtime[ChainState], Path]:
    source = tmp_path / "data.txt"
    source.write_text("v1")
    runtime = Runtime(chain_agent(runs, **kwargs), MemoryStore())
    runtime.start("t", path=str(source))
    return runtime, source


class TestChain:
    def test_a_changed_file_redoes_exactly_its_dependents(self, tmp_path: Path) -> None:
        """Resume after the file changed: build_report, summarize and finalize run again, in
        that order; note_ticket does not; the final value reflects the new file."""
        runs: list[str] = []
        runtime, source = started(tmp_path, runs)
        runtime.run("t", max_steps=len(PLAN))  # every step, not the finish
        assert runs == ["build_report", "note_ticket", "summarize", "finalize"]
        assert runtime.load("t").final == "final(summary(report(v1)))"

        source.write_text("v2")  # the world moves while the task is stopped
        runs.clear()
        result = Runtime(runtime.agent, runtime.store).run("t")
        assert result.stopped == "completed"
        assert runs == ["build_report", "summarize", "finalize"]
        state = result.state
        assert state.final == "final(summary(report(v2)))"
        assert state.note == "noted T-1"

        recheck = next(e for e in runtime.store.events("t") if e.action["kind"] == "recheck")
        stale_ids = recheck.action["stale"]
        assert [i.split("-", 1)[1] for i in stale_ids] == ["build_report", "summarize", "finalize"]
        # One commit put every write back and the three skills back on the plan, in order.
        undone = {op["path"]: op.get("value") for op in recheck.patch}
        assert undone["/report"] is None
        assert undone["/summary"] is None
        assert undone["/final"] is None
        assert "/note" not in undone
        messages = [e.message for e in state.errors if e.kind == "stale_step"]
        assert "changed since step" in messages[0]
        assert f"it reads report, which stale step {stale_ids[0]} wrote" in messages[1]
        assert f"it reads summary, which stale step {stale_ids[1]} wrote" in messages[2]

    def test_the_finish_rechecks_what_it_rests_on(self, tmp_path: Path) -> None:
        """The file changes after the last step, before the finish: the finish becomes the
        stale commit, and the task completes only once the chain was redone."""
        runs: list[str] = []
        runtime, source = started(tmp_path, runs)
        runtime.run("t", max_steps=len(PLAN))
        source.write_text("v2")
        report = runtime.step("t")  # the policy decides Finish; nothing re-checked it yet
        assert report.event.action == {
            "kind": "recheck",
            "stale": [r.id for r in report.before.completed_steps if r.skill != "note_ticket"],
            "before": "finish",
        }
        assert report.after.status.value == "running"
        assert report.after.pending_steps == ("build_report", "summarize", "finalize")
        runs.clear()
        result = runtime.run("t")
        assert result.stopped == "completed"
        assert runs == ["build_report", "summarize", "finalize"]
        assert result.state.final == "final(summary(report(v2)))"

    def test_an_unchanged_world_finishes_without_a_recheck_commit(self, tmp_path: Path) -> None:
        runs: list[str] = []
        runtime, _ = started(tmp_path, runs)
        result = runtime.run("t")
        assert result.stopped == "completed"
        assert runs == list(PLAN)
        assert all(e.action["kind"] != "recheck" for e in runtime.store.events("t"))

    def test_a_skill_without_reads_depends_on_everything_before_it(self, tmp_path: Path) -> None:
        """audit declares no reads: nothing says it did not use the report, so it is redone."""
        runs: list[str] = []
        runtime, source = started(tmp_path, runs, with_audit=True)
        runtime.run("t", max_steps=len(PLAN) + 1)
        source.write_text("v2")
        stale = runtime.recheck("t")
        assert [r.skill for r in stale] == ["build_report", "summarize", "finalize", "audit"]
        state = runtime.load("t")
        message = next(e.message for e in state.errors if e.skill == "audit")
        assert "it declares no reads and stale step" in message
        assert state.audit is None

    def test_only_steps_that_can_go_stale_keep_undo(self, tmp_path: Path) -> None:
        """note_ticket can never go stale: its record keeps no undo; the chain's do."""
        runs: list[str] = []
        runtime, _ = started(tmp_path, runs)
        runtime.run("t", max_steps=len(PLAN))
        records = {r.skill: r for r in runtime.load("t").completed_steps}
        assert records["note_ticket"].undo is None
        assert records["build_report"].undo == {"report": None}
        assert records["summarize"].undo == {"summary": None}
        assert records["summarize"].reads == ("report",)
        assert records["summarize"].writes == ("summary",)

    def test_a_task_that_fingerprints_nothing_keeps_no_undo(self, tmp_path: Path) -> None:
        """No fingerprint, nothing can go stale: no record pays for an undo."""
        runs: list[str] = []
        agent = chain_agent(runs)
        agent.plan = ("note_ticket",)
        runtime = Runtime(agent, MemoryStore())
        runtime.start("t")
        runtime.run("t")
        assert all(r.undo is None for r in runtime.load("t").completed_steps)


class Small(ChainState):
    MAX_STEPS = 2


class TestWindow:
    def test_steps_that_could_go_stale_leave_the_window_last_and_are_counted(
        self, tmp_path: Path
    ) -> None:
        """A card with room for 2 records: an unrelated step leaves first; a step that
        could go stale but had to leave is counted in ``unchecked_steps`` (the honest
        limit: it is no longer re-checked), fingerprinted steps stay longest."""
        runs: list[str] = []
        agent = chain_agent(runs, state_type=Small)
        runtime = Runtime(agent, MemoryStore())
        source = tmp_path / "data.txt"
        source.write_text("v1")
        runtime.start("t", path=str(source))
        runtime.run("t", max_steps=3)  # build_report, note_ticket, summarize
        state = runtime.load("t")
        assert [r.skill for r in state.completed_steps] == ["build_report", "summarize"]
        assert state.unchecked_steps == 0
        runtime.run("t", max_steps=1)  # finalize: summarize must leave now
        state = runtime.load("t")
        assert [r.skill for r in state.completed_steps] == ["build_report", "finalize"]
        assert state.unchecked_steps == 1


class TestRules:
    def test_paths_overlap_by_prefix(self) -> None:
        assert overlaps("report", "report.title")
        assert overlaps("report.title", "report")
        assert not overlaps("report", "reports")
        assert not overlaps("report.title", "report.body")

    def test_a_read_names_a_field_a_path_or_a_fact(self) -> None:
        assert read_overlap(["total"], ["facts.total"]) == "total"
        assert read_overlap(["facts.total"], ["facts"]) == "facts.total"
        assert read_overlap(["report.title"], ["report"]) == "report.title"
        assert read_overlap(["ticket"], ["report", "facts.other"]) is None
        assert read_overlap(["ticket"], ()) is None  # wrote nothing
        assert read_overlap(["ticket"], None) == "*"  # an old record: unknown writes

    def test_who_depends_on_whom(self) -> None:
        def rec(
            i: str, reads: tuple[str, ...] | None, writes: tuple[str, ...] | None
        ) -> StepRecord:
            # Steps that can go stale keep an undo: only those are ever found stale.
            undo = dict.fromkeys(writes or ())
            return StepRecord(
                id=i, step="s", action="call_skill", skill=i, reads=reads, writes=writes, undo=undo
            )

        a = rec("a", ("path",), ("report",))
        b = rec("b", ("report.title",), ("summary",))
        c = rec("c", ("ticket",), ("report.extra",))  # reads nothing of a's, writes under it
        d = rec("d", ("ticket",), ("note",))
        e = rec("e", None, ("audit",))
        ask = StepRecord(id="q", step="s", action="ask_user")
        never = StepRecord(id="n", step="s", action="call_skill", skill="n")  # no undo
        assert depends_on(b, a) == "it reads report.title, which stale step a wrote"
        assert depends_on(c, a) == "it wrote report.extra after stale step a did"
        assert depends_on(d, a) is None
        assert depends_on(ask, a) is None  # a question is not redone
        found = dependents([a, b, c, d, ask, never, e], {"a": "file changed"})
        assert [(r.id, why.split(",")[0]) for r, why in found] == [
            ("a", "file changed"),
            ("b", "it reads report.title"),
            ("c", "it wrote report.extra after stale step a did"),
            ("e", "it declares no reads and stale step a came before it"),
        ]


def test_an_older_card_loads_with_unknown_paths() -> None:
    """A version 5 card: a record that kept an undo (it was fingerprinted) wrote that
    undo's paths and read anything; one without goes stale no more than it did."""
    doc: dict[str, Any] = ChainState(task_id="t").to_json()
    doc["card_version"] = 5
    for name in ("rejected", "unchecked_steps"):
        doc.pop(name)
    doc["completed_steps"] = [
        {"id": "0002-a", "step": "init", "action": "call_skill", "skill": "a", "summary": "",
         "fingerprints": [], "undo": {"report": None}},
        {"id": "0003-b", "step": "init", "action": "call_skill", "skill": "b", "summary": "",
         "fingerprints": [], "undo": None},
    ]  # fmt: skip
    migrated, _ = migrate_document(ChainState, doc, task_id="t")
    state = ChainState.model_validate(migrated)
    a, b = state.completed_steps
    assert (a.reads, a.writes) == (None, ("report",))
    assert (b.reads, b.writes) == (None, None)
    assert state.rejected == ()
    assert state.unchecked_steps == 0
    assert [r.id for r, _ in dependents(state.completed_steps, {"0002-a": "x"})] == ["0002-a"]
    assert "reads" not in state.to_json()["completed_steps"][0]  # None is not stored


def test_a_sensitive_value_a_step_replaced_is_sealed_in_undo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The old value of a sensitive field sits sealed in the record, never in the clear,
    and a stale step puts the plaintext back."""
    pytest.importorskip("cryptography")
    from skillstate import Sensitive
    from skillstate.state.secrets import generate_key

    monkeypatch.setenv("SKILLSTATE_KEY", generate_key())

    class Vault(AgentState):
        path: str = ""
        api_token: Sensitive[str] | None = None

    skills: SkillRegistry = SkillRegistry()

    @skills.skill(reads=["path"], outputs=["api_token"])
    def rotate(state: Vault, params: NoParams, ctx: SkillContext) -> Outcome:
        """Rotate the token from a file."""
        ctx.fingerprint(state.path)
        return Outcome(writes={"api_token": Path(state.path).read_text()})

    rotate.verifier(lambda s, o: bool(s.api_token))
    agent = Agent(
        name="vault",
        state_type=Vault,
        machine=StateMachine({"init": ["init"]}, final=["init"]),
        skills=skills,
        policy=ScriptedPolicy(
            lambda v: CallSkill(skill="rotate") if v.state.pending_steps else Finish()
        ),
        plan=("rotate",),
    )
    source = tmp_path / "token.txt"
    source.write_text("new-token-2")
    store = MemoryStore()
    runtime = Runtime(agent, store, max_steps=1)
    runtime.start("t", path=str(source), api_token="old-token-1")
    runtime.run("t")
    stored = json.dumps(store.load("t").state)
    assert "old-token-1" not in stored
    assert "new-token-2" not in stored
    assert all("old-token-1" not in json.dumps(e.patch) for e in store.events("t"))
    source.write_text("newer-token-3")
    assert [r.skill for r in runtime.recheck("t")] == ["rotate"]
    assert runtime.load("t").api_token == "old-token-1"  # type: ignore[attr-defined]


HOWTO = Path(__file__).resolve().parents[1] / "docs" / "howto.md"


def howto_lines(section: str, tmp_path: Path) -> list[str]:
    """Run the python block of ``section`` in docs/howto.md as a script; its output lines."""
    text = HOWTO.read_text(encoding="utf-8")
    part = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    [example] = re.findall(r"```python\n(.*?)```", part, re.DOTALL)
    script = tmp_path / "example.py"
    script.write_text(example, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("SKILLSTATE_STORE", "SKILLSTATE_KEY")}
    ran = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    return ran.stdout.splitlines()


def test_the_how_to_runs(tmp_path: Path) -> None:
    """docs/howto.md, "Trust a step only while its world is unchanged": it prints what
    its comments say (only the dependents are redone; the finish re-checks)."""
    assert howto_lines("Trust a step only while its world is unchanged", tmp_path) == [
        "completed ['build_report', 'summarize']",
        "13 chars: Q3 SALES DOWN",
        "finish ('build_report', 'summarize')",
        "13 chars: Q4 SALES FLAT",
    ]
