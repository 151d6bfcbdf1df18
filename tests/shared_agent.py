"""An agent whose tasks append a note to one shared case file, for the shared-record tests.

Each task's card names its case (``case_id``) and its note; its one skill, ``add_note``,
appends the note to the shared record ``case`` (``ctx.write_shared`` with a function of
the value the decision saw) and marks the card; its verify checks the card. Under
last-writer-wins two tasks appending at once would lose one note; here neither is
lost and neither is applied twice.

``python -m tests.shared_agent URL TASK NOTE BLOCK DIR`` runs one task in a child
process that stops dead at ``BLOCK`` (it writes ``DIR/BLOCK`` and waits forever, so
the test's ``kill -9`` lands exactly there):

* ``in_skill``: the skill ran and asked for its write; nothing is committed;
* ``before_record``: the step is committed with its write pending on the card; the
  record does not have it;
* ``after_record``: the record has the write; the card still has it pending;
* ``none``: no block.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from skillstate import (
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
    View,
    open_store,
)
from skillstate.engine.actions import Action
from skillstate.errors import TaskNotFound
from skillstate.shared import Shared


class CaseFile(BaseModel):
    notes: list[str] = []
    owner: str | None = None


class CaseState(AgentState):
    case_id: str = "C-1"
    note: str = "note"
    added: bool = False


skills = SkillRegistry()
ARRIVED: dict[str, threading.Barrier] = {}
"""Per case: a barrier both racing tasks' first runs of ``add_note`` meet at, after each
has read the record and before either commits (the race test sets it)."""
_met: set[tuple[str, int]] = set()


@skills.skill(outputs=["added"], shares=["case"])
def add_note(state: CaseState, params: NoParams, ctx: SkillContext) -> Outcome:
    """Append this task's note to the shared case file."""
    ctx.write_shared("case", lambda case: case.notes.append(state.note))
    barrier = ARRIVED.get(state.case_id)
    if barrier is not None and (state.task_id, id(barrier)) not in _met:
        _met.add((state.task_id, id(barrier)))  # only the first run waits: not a re-decided one
        barrier.wait(timeout=60)
    _block("in_skill")
    return Outcome(writes={"added": True}, summary=f"added {state.note!r}")


@add_note.verifier
def _(state: CaseState, outcome: Outcome) -> bool:
    return state.added


def decide(view: View[CaseState]) -> Action:
    if not view.state.added:
        return CallSkill(skill="add_note")
    return Finish(summary="noted")


agent = Agent(
    name="case-notes",
    state_type=CaseState,
    machine=StateMachine({"init": []}),
    skills=skills,
    policy=ScriptedPolicy(decide),
    shared={"case": Shared(CaseFile, key="{case_id}")},
)

BLOCK: dict[str, Path] = {}
"""Where this process stops dead: the instant's name -> its marker file."""


def _block(where: str) -> None:
    marker = BLOCK.get(where)
    if marker is None:
        return
    marker.write_text("here")
    while True:  # until the test kills this process
        time.sleep(1)


def _hook_record() -> None:
    """Block right before, or right after, the write reaches the record."""
    from skillstate.shared import runtime

    write = runtime.write_record

    def blocking(*args: Any, **kwargs: Any) -> int:
        _block("before_record")
        version = write(*args, **kwargs)
        _block("after_record")
        return version

    runtime.write_record = blocking  # type: ignore[assignment]


def main(url: str, task: str, note: str, block: str, where: str) -> None:
    if block != "none":
        BLOCK[block] = Path(where) / block
        _hook_record()
    store = open_store(url)
    runtime = Runtime(agent, store)
    try:
        store.load(task)
    except TaskNotFound:
        runtime.start(task, note=note)
    print(runtime.run(task).stopped, flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:6])
