"""``skillstate cancel`` of a parent, here without a broker: its children's cancels too.

Taking the parent's cancel posts one to each unfinished child
(:mod:`skillstate.engine.family`). A child a live worker holds takes it at its next
step boundary; a child nobody holds would keep it in its inbox until it next runs,
so, as ``cancel`` does for the task it names, the command takes it here at once (no
decision is made), and so on down the tree. A child whose agent cannot be loaded
here keeps its cancel for whoever runs it next, and the command says so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from skillstate.store.base import Store

__all__ = ["take_child_cancels"]

MAX_TAKEN = 1_000
"""The most descendants one command drives to their cancel (the rest take theirs later)."""


def take_child_cancels(db: Store, task_id: str, *, verbose: bool) -> list[str]:
    """Take the cascaded cancels of ``task_id``'s descendants that nobody holds; one
    line per child saying what happened (``cancel cascaded`` lines first)."""
    from skillstate.cli.tree import family_lines

    said: list[str] = []
    todo = [task_id]
    taken = 0
    while todo and taken < MAX_TAKEN:
        parent = todo.pop(0)
        action = _last_cancel(db, parent)
        if not action:
            continue
        said += [f"task {parent}: {line}" for line in family_lines(action)]
        for child in action.get("children") or {}:
            taken += 1
            line = _take(db, str(child), verbose=verbose)
            said.append(line)
            if line.endswith(" cancelled"):
                todo.append(str(child))
    return said


def _last_cancel(db: Store, task_id: str) -> dict[str, Any] | None:
    """The action of the task's latest ``cancel`` event (it lists the cascade)."""
    for event in reversed(db.events(task_id, since=max(0, db.load(task_id).version - 50))):
        if event.action.get("kind") == "cancel":
            return event.action
    return None


def _take(db: Store, child: str, *, verbose: bool) -> str:
    from skillstate._render import StepPrinter
    from skillstate.cli._common import _agent_for
    from skillstate.engine.lease import default_worker
    from skillstate.engine.runtime import Runtime
    from skillstate.errors import SkillstateError

    lease = db.lease(child)
    if lease is not None and lease.live():
        return f"  {child}: {lease.worker} holds it and takes the cancel at its next step"
    try:
        agent = _agent_for(db, child, None)
        runtime = Runtime(
            agent, db, observer=StepPrinter(verbose=verbose, store=db), worker=default_worker()
        )
        state = runtime.run(child, stop=lambda: True).state
    except SkillstateError as exc:
        return f"  {child}: cancel posted; it takes it when it next runs ({exc})"
    return f"  {child}: {state.status.value}"
