"""A small agent that asks two questions and records each answer: for the reply tests.

``record`` blocks on its first answer while ``gate`` names a directory without a
``open`` file in it, after writing ``blocked`` there: a test can then ``kill -9`` the
process at a known point (the first reply used, the second one not yet asked for).
``pending`` names per-task tools (``per_task``) so a test can check what a factory with
two parameters receives.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from skillstate import (
    Action,
    Agent,
    AgentState,
    AskUser,
    CallSkill,
    Finish,
    Outcome,
    ScriptedPolicy,
    SkillContext,
    SkillRegistry,
    StateMachine,
    Verdict,
    View,
    per_task,
)


class AskState(AgentState):
    answers: list[str] = Field(default_factory=list)
    gate: str = ""


class Answer(BaseModel):
    answer: str


skills = SkillRegistry()
SEEN: list[tuple[str, str]] = []
"""(task id, step id) of every context a two-parameter tool factory received."""


@skills.skill(outputs=["answers"], tools=["note"], step="work")
def record(state: AskState, params: Answer, ctx: SkillContext) -> Outcome:
    """Record the user's answer."""
    if state.gate and not state.answers:
        gate = Path(state.gate)
        (gate / "blocked").write_text("")
        while not (gate / "open").exists():
            time.sleep(0.02)
    ctx.call("note", text=params.answer)
    return Outcome(writes={"answers": [*state.answers, params.answer]})


@record.verifier
def _recorded(state: AskState, outcome: Outcome) -> Verdict:
    return Verdict.passed() if state.answers else Verdict.failed("nothing recorded")


def rules(view: View[AskState]) -> Action:
    if view.inbox is not None:
        return CallSkill(skill="record", params={"answer": view.inbox})
    if len(view.state.answers) < 2:
        return AskUser(question=f"answer {len(view.state.answers) + 1}?")
    return Finish(summary=", ".join(view.state.answers), next_step="done")


def _note_tool(state: AskState, ctx: SkillContext) -> Any:
    SEEN.append((ctx.task_id, ctx.step_id))

    def note(text: str) -> str:
        return ctx.attach(text.encode())  # the factory's context reaches the artifacts

    return note


agent = Agent(
    name="asking",
    state_type=AskState,
    machine=StateMachine({"init": ["work"], "work": ["work", "done"], "done": []}),
    skills=skills,
    policy=ScriptedPolicy(rules),
    tools={"note": per_task(_note_tool)},
)
