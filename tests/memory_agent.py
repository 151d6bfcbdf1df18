"""An agent that remembers one fact per task in ``agent:orders``, for the memory tests.

Each task's card names the fact (``key``, ``wanted``); its one skill, ``learn``,
writes the value into the card and remembers it; its verify checks the card. The
scripted policy calls ``learn`` once, then finishes, its finish summary naming the
facts its view recalled from other tasks.

``python -m tests.memory_agent URL TASK KILL`` runs one task in a child process for
the crash tests; ``KILL`` says where it ``kill -9``\\ s itself:

* ``after_commit``: right after the step that remembered is committed (its observer),
  before anything reaches the memory record;
* ``after_record``: right after the memory record is written, before the card's
  outbox is committed empty;
* ``none``: no kill.

:func:`race` runs tasks back to back for the racing-writers test.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

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
from skillstate.engine.results import StepReport
from skillstate.errors import TaskNotFound

SCOPE = "agent:orders"


class MemState(AgentState):
    key: str = "preferred_carrier"
    wanted: str = "DHL"
    carrier: str | None = None


skills = SkillRegistry()


@skills.skill(outputs=["carrier"], remembers=[SCOPE])
def learn(state: MemState, params: NoParams, ctx: SkillContext) -> Outcome:
    """Record the carrier, and remember it for the other tasks."""
    ctx.remember(state.key, state.wanted)
    return Outcome(writes={"carrier": state.wanted}, summary=f"carrier {state.wanted}")


@learn.verifier
def _(state: MemState, outcome: Outcome) -> bool:
    return state.carrier == state.wanted


def decide(view: View[MemState]) -> Action:
    if view.state.carrier is None:
        return CallSkill(skill="learn")
    seen = ", ".join(f"{f.key}={f.value}@{f.provenance}" for f in view.state.recalled)
    return Finish(summary=f"recalled: {seen or 'nothing'}")


agent = Agent(
    name="orders-memory",
    state_type=MemState,
    machine=StateMachine({"init": []}),
    skills=skills,
    policy=ScriptedPolicy(decide),
    memory=[SCOPE],
)


def _kill(where: str, runtime: Runtime[Any]) -> None:
    """Arrange for this process to SIGKILL itself at ``where``."""
    if where == "after_commit":

        def observe(report: StepReport[Any]) -> None:
            if report.event.skill == "learn" and report.event.verdict is not None:
                os.kill(os.getpid(), signal.SIGKILL)

        runtime.observer = observe
    elif where == "after_record":
        from skillstate.memory import record

        write = record.remember

        def remember_then_die(*args: Any, **kwargs: Any) -> int:
            version = write(*args, **kwargs)
            os.kill(os.getpid(), signal.SIGKILL)
            return version

        record.remember = remember_then_die  # type: ignore[assignment]


def main(url: str, task: str, kill: str) -> None:
    store = open_store(url)
    runtime = Runtime(agent, store)
    _kill(kill, runtime)
    try:
        store.load(task)
    except TaskNotFound:
        runtime.start(task)
    print(runtime.run(task).stopped, flush=True)


def race(url: str, worker: int, tasks: int, barrier: Any, results: Any) -> None:
    """Run ``tasks`` tasks of this worker, each remembering its own key; report how many
    completed."""
    store = open_store(url)
    runtime = Runtime(agent, store)
    completed = 0
    try:
        barrier.wait(timeout=120)
        for i in range(tasks):
            task = f"w{worker}-{i}"
            runtime.start(task, key=f"carrier-{task}", wanted=f"C{worker}.{i}")
            completed += runtime.run(task).stopped == "completed"
    finally:
        store.close()
    results.put(completed)


if __name__ == "__main__":
    main(*sys.argv[1:4])
