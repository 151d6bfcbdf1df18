"""Stale world, stale facts: a step whose fingerprint changed loses its writes too.

Reproduced before: when a fingerprint no longer matched on resume, the step went
back to pending but its writes stayed, so the task finished "completed" with the
file still broken (the writes satisfied the next skills' ``when`` and the finish).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from skillstate import (
    Action,
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
from skillstate.store.memory import MemoryStore


class FixState(AgentState):
    path: str = ""
    fixed: bool = False
    published: bool = False


class NoArgs(BaseModel):
    pass


def fix_agent(*, recheck_publish: bool = False, runs: list[str] | None = None) -> Agent:
    """fix (make the file say OK; fingerprint it), then publish (needs the fix), then finish."""
    skills = SkillRegistry()
    log = runs if runs is not None else []

    @skills.skill(outputs=["fixed"], when=lambda s: not s.fixed)
    def fix(state: FixState, params: NoArgs, ctx: SkillContext) -> Outcome:
        """Repair the file."""
        log.append("fix")
        Path(state.path).write_text("OK\n")
        ctx.fingerprint(state.path)
        return Outcome(writes={"fixed": True}, summary="file repaired")

    fix.verifier(lambda s, o: Path(s.path).read_text() == "OK\n")

    @skills.skill(outputs=["published"], when=lambda s: s.fixed and not s.published,
                  recheck=recheck_publish)  # fmt: skip
    def publish(state: FixState, params: NoArgs, ctx: SkillContext) -> Outcome:
        """Publish the repaired file."""
        log.append("publish")
        return Outcome(writes={"published": True})

    publish.verifier(lambda s, o: s.published)

    def decide(view: View) -> Action:
        state = view.state
        assert isinstance(state, FixState)
        if not state.fixed:
            return CallSkill(skill="fix")
        if not state.published:
            return CallSkill(skill="publish")
        return Finish()

    return Agent(
        name="fixer",
        state_type=FixState,
        machine=StateMachine({"init": ["init"]}, final=["init"]),
        skills=skills,
        policy=ScriptedPolicy(decide),
        plan=("fix", "publish"),
    )


def test_a_stale_step_loses_its_writes_and_is_done_again(tmp_path: Path) -> None:
    """The file broke again after the fix: on resume ``fixed`` is False, fix runs again."""
    target = tmp_path / "app.txt"
    target.write_text("BROKEN\n")
    runs: list[str] = []
    agent = fix_agent(runs=runs)
    store = MemoryStore()
    runtime = Runtime(agent, store, max_steps=1)
    runtime.start("t", path=str(target))
    runtime.run("t")  # fix only
    assert runtime.load("t").fixed  # type: ignore[attr-defined]
    target.write_text("BROKEN AGAIN\n")  # the world moved while the task was stopped
    result = Runtime(agent, store).run("t")
    assert result.stopped == "completed"
    assert runs == ["fix", "fix", "publish"]
    assert target.read_text() == "OK\n"
    stale = [e for e in result.state.errors if e.kind == "stale_step"]
    assert len(stale) == 1
    assert "its writes were undone" in stale[0].message
    recheck = next(e for e in store.events("t") if e.action["kind"] == "recheck")
    assert {"op": "replace", "path": "/fixed", "value": False} in recheck.patch


def test_without_the_undo_the_task_could_not_finish_on_a_broken_file(tmp_path: Path) -> None:
    """The stale step is pending again, so Finish is refused until it has run again."""
    target = tmp_path / "app.txt"
    target.write_text("BROKEN\n")
    agent = fix_agent()
    store = MemoryStore()
    runtime = Runtime(agent, store, max_steps=2)
    runtime.start("t", path=str(target))
    runtime.run("t")  # fix and publish
    target.write_text("BROKEN AGAIN\n")
    stale = runtime.recheck("t")
    # publish declares no reads: it may have used the fix, so it is not trusted either.
    assert [r.skill for r in stale] == ["fix", "publish"]
    state = runtime.load("t")
    assert state.pending_steps == ("fix", "publish")
    assert not state.fixed  # type: ignore[attr-defined]
    assert not state.published  # type: ignore[attr-defined]
    runtime.agent.policy = ScriptedPolicy(lambda view: Finish())
    refused = runtime.step("t")
    assert "steps still pending (fix, publish)" in refused.after.errors[-1].message


def test_a_recheck_skill_looks_at_the_world_right_before_it_runs(tmp_path: Path) -> None:
    """recheck=True: the world changed mid-run, so publish does not run on a stale fix."""
    target = tmp_path / "app.txt"
    target.write_text("BROKEN\n")
    runs: list[str] = []
    agent = fix_agent(recheck_publish=True, runs=runs)
    store = MemoryStore()
    runtime = Runtime(agent, store)
    runtime.start("t", path=str(target))
    runtime.step("t")  # fix
    target.write_text("BROKEN AGAIN\n")  # no resume in between: only recheck=True sees it
    report = runtime.step("t")  # decides publish; the recheck comes first
    assert report.event.action["kind"] == "recheck"
    assert report.event.action["before"] == "publish"
    assert runs == ["fix"]
    result = runtime.run("t")
    assert result.stopped == "completed"
    assert runs == ["fix", "fix", "publish"]
