"""Carrying a card across a definition change: renames applied where they point ahead.

A renamed skill (or step) is renamed in what the task will still act on: its plan,
the effect in flight, the call waiting for approval, the queued compensations, the
active skill, the "already tried" list, and the current step and the targets of
its intents for a renamed step. History stays as it ran: completed step records,
the last decision, the error log and the events keep the old names (an effect's
idempotency key too: it names what already reached the world).

:func:`blockers` then says what no declaration can carry: a card that still needs
something the new definition does not have.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from skillstate.definitions.compare import Comparison
from skillstate.state.model import AgentState, Compensation, FailedAttempt, Intent

__all__ = ["blockers", "carry_card"]

S = TypeVar("S", bound=AgentState)


def carry_card(state: S, comparison: Comparison, *, ref: str, patches: tuple[str, ...]) -> S:
    """``state`` pinned to ``ref``, with ``comparison``'s renames applied and ``patches``
    recorded in ``carried_patches`` (runtime fields: built from typed records, so no
    validation of the whole card)."""
    skills, steps = dict(comparison.renamed), dict(comparison.steps)
    changes: dict[str, Any] = {"definition": ref}
    carried = tuple(dict.fromkeys((*state.carried_patches, *patches)))
    if carried != state.carried_patches:
        changes["carried_patches"] = carried
    if skills or steps:
        changes.update(_renamed(state, skills, steps))
    return state.replace(**changes)


def _renamed(state: AgentState, skills: dict[str, str], steps: dict[str, str]) -> dict[str, Any]:
    def label(name: str) -> str:
        return skills.get(name) or steps.get(name) or name

    def intent(found: Intent | None) -> Intent | None:
        if found is None:
            return None
        update = {"skill": skills.get(found.skill, found.skill), "target": label(found.target)}
        return found.model_copy(update=update)

    def compensation(found: Compensation) -> Compensation:
        return found.model_copy(update={"skill": skills.get(found.skill, found.skill)})

    def tried(found: FailedAttempt) -> FailedAttempt:
        head, space, rest = found.action.partition(" ")  # a signature: "fetch {...}"
        return found.model_copy(update={"action": skills.get(head, head) + space + rest})

    changes: dict[str, Any] = {
        "pending_steps": tuple(label(s) for s in state.pending_steps),
        "pending_effect": intent(state.pending_effect),
        "pending_approval": intent(state.pending_approval),
        "compensations": tuple(compensation(c) for c in state.compensations),
        "tried": tuple(tried(t) for t in state.tried),
        "current_step": steps.get(state.current_step, state.current_step),
    }
    if state.active_skill is not None:
        changes["active_skill"] = skills.get(state.active_skill, state.active_skill)
    if state.wait is not None and state.wait.on_timeout in steps:
        changes["wait"] = state.wait.model_copy(update={"on_timeout": steps[state.wait.on_timeout]})
    # Unchanged values stay the same objects: the commit re-serializes only what moved.
    return {k: v for k, v in changes.items() if v != getattr(state, k)}


def blockers(state: AgentState, manifest: Mapping[str, Any], comparison: Comparison) -> list[str]:
    """What the (carried) card needs that ``manifest`` lacks: no patch or accept helps."""
    skills = manifest.get("skills") or {}
    steps = (manifest.get("machine") or {}).get("transitions") or {}
    found: list[str] = []
    if state.current_step not in steps:
        found.append(f"its current step {state.current_step!r} is not a step of this definition")
    calls = [
        ("its effect in flight calls", state.pending_effect),
        ("the call waiting for approval is to", state.pending_approval),
    ]
    for what, intent in calls:
        if intent is not None and intent.skill not in skills:
            found.append(f"{what} skill {intent.skill!r}, which this definition does not have")
    for queued in state.compensations:
        if queued.skill not in skills:
            found.append(
                f"a queued compensation needs skill {queued.skill!r}, which this "
                "definition does not have"
            )
    for entry in state.pending_steps:
        if entry in comparison.old_skills and entry not in skills and entry not in steps:
            found.append(f"its plan names skill {entry!r}, which this definition does not have")
    return found
