"""Going back: ``rollback`` (restore an earlier version) and ``fork`` (branch from one).

The card can go back; the world cannot. Effects that reached the world after
the target version (a ledger line, an e-mail, a charge) are still there, and
the old version does not know about them. So both operations first list the
effects they would cross (:func:`~skillstate.engine.effects.crossed_effects`)
and, when there are any, do what the caller chose:

* ``refuse`` (the default): nothing is written; the error names the effects.
* ``keep``: restore anyway and leave the effects in the world. Effect keys
  belong to the logical step, so when the task re-does one of those steps its
  probe finds the effect by its key instead of running it again.
* ``compensate`` (rollback only): restore, and queue each crossed effect for its
  skill's ``rollback`` hook, newest first. The restore and the queue are one
  commit; the runtime then runs the queue before anything else, committing after
  each compensation, so a crash in the middle resumes where it stopped.

History is kept either way: the rollback is itself a version with its own event.
"""

from __future__ import annotations

from typing import Any, Literal

from skillstate.audit import who
from skillstate.engine.agent import Agent
from skillstate.engine.effects import EffectRecord, crossed_effects, describe
from skillstate.engine.family import ChildrenChoice, forked_children, rollback_children
from skillstate.engine.lease import human_lease
from skillstate.errors import EffectsCrossed, TaskNotFound, UsageError
from skillstate.events import Event
from skillstate.state.diff import make_patch
from skillstate.state.model import AgentState
from skillstate.store.base import RESERVED, Checkpoint, Store, is_reserved

__all__ = ["EffectChoice", "fork_task", "rollback_task"]

EffectChoice = Literal["refuse", "keep", "compensate"]


def rollback_task(
    store: Store,
    task_id: str,
    to_version: int,
    *,
    effects: EffectChoice = "refuse",
    agent: Agent[Any] | None = None,
    children: ChildrenChoice = "refuse",
) -> int:
    """Make the state of ``to_version`` the new head, as a new commit; returns its version.

    Going back before a spawn whose child tasks exist is refused unless ``children``
    is ``detach`` or ``cascade`` (:mod:`skillstate.engine.family`).

    With ``effects="compensate"`` the crossed effects are queued in the new head;
    run them with ``Runtime(agent, store).compensate(task_id)`` (or any ``run``,
    which settles them first). Compensating needs ``agent`` to check that every
    crossed effect's skill has a rollback hook. Holds the task's lease throughout.
    """
    with human_lease(store, task_id) as fence:
        return _rollback(
            store,
            task_id,
            to_version,
            effects=effects,
            agent=agent,
            fence=fence,
            children=children,
        )


def _rollback(
    store: Store,
    task_id: str,
    to_version: int,
    *,
    effects: EffectChoice,
    agent: Agent[Any] | None,
    fence: int | None,
    children: ChildrenChoice = "refuse",
) -> int:
    """The rollback itself (the caller holds the lease)."""
    head = store.load(task_id)
    if not 1 <= to_version < head.version:
        raise UsageError(
            f"--to must be between 1 and {head.version - 1} (task {task_id!r} is at "
            f"version {head.version})"
        )
    _check_settled(head.state, task_id)
    target = _kept(store, task_id, to_version)
    crossed = crossed_effects(store.events(task_id), head.version, to_version)
    if crossed and effects == "refuse":
        raise EffectsCrossed(
            f"rolling back task {task_id!r} to version {to_version} would cross "
            f"{len(crossed)} effect(s) that reached the world: {describe(crossed)}; "
            "choose --compensate (undo them with each skill's rollback, newest first) or "
            "--keep-effects (keep them; re-done steps find them by their keys)",
            crossed,
        )
    queue: list[dict[str, Any]] = []
    if crossed and effects == "compensate":
        _check_compensable(agent, crossed)
        queue = [
            {"key": r.key, "skill": r.skill, "params": r.params, "version": r.version}
            for r in crossed
        ]
    family = rollback_children(
        store, task_id, head.state, target.state, to_version=to_version, choice=children
    )
    document = dict(target.state)
    document["version"] = head.version + 1
    # Which keys were undone is a fact about the world, not about the old version.
    document["effect_generations"] = dict(head.state.get("effect_generations") or {})
    # So is how far the task read its inbox: a message read after ``to_version`` was
    # delivered (the log keeps it), and reading it again would repeat it -- a cancel
    # would cancel the task this rollback reopens.
    document["inbox_seen"] = head.state.get("inbox_seen", 0)
    document["compensations"] = queue
    action: dict[str, Any] = {"kind": "rollback", "to_version": to_version}
    if crossed:
        action["effects"] = effects
        action["crossed"] = [r.key for r in crossed]
    if family.crossed:
        document["children"] = family.records
        action["children"] = family.apply(store)  # the cascade's cancels, then the commit
    event = Event(
        task_id=task_id,
        version=head.version + 1,
        actor="human",
        action=action,
        patch=make_patch(head.state, document),
        **who("human"),
    )
    return store.commit(task_id, head.version, document, event, fence=fence)


def fork_task(
    store: Store,
    agent: Agent[Any],
    task_id: str,
    at_version: int,
    new_id: str,
    *,
    effects: EffectChoice = "refuse",
) -> AgentState:
    """Start task ``new_id`` from version ``at_version`` of ``task_id`` (version 1 of the fork).

    Effects the source made after ``at_version`` stay in the world and the fork's
    card does not know them: with ``effects="keep"`` the fork starts anyway (its
    own effects run under its own keys), otherwise it is refused.
    """
    if is_reserved(new_id):
        raise UsageError(f"task ids starting with {RESERVED!r} are skillstate's own records")
    try:
        store.load(new_id)
    except TaskNotFound:
        pass
    else:
        raise UsageError(f"task {new_id!r} already exists; pick another --new-id")
    if effects == "compensate":
        raise UsageError(
            "a fork cannot undo the source's effects (the source task still owns them); "
            f"roll the source back first (skillstate rollback {task_id} --to {at_version} "
            "--compensate), or fork with --keep-effects"
        )
    source = _kept(store, task_id, at_version)
    state = agent.parse_state(source.state, task_id=task_id)
    if state.pending_effect is not None:
        # The fork would get a new idempotency key and could repeat an effect that
        # already happened in the original task.
        raise UsageError(
            f"version {at_version} of {task_id!r} has an effect in flight "
            f"({state.pending_effect.skill}); fork at {at_version - 1} or {at_version + 1}"
        )
    head = store.load(task_id)
    crossed = crossed_effects(store.events(task_id), head.version, at_version)
    if crossed and effects == "refuse":
        raise EffectsCrossed(
            f"task {task_id!r} made {len(crossed)} effect(s) after version {at_version} that "
            f"the fork would not know about: {describe(crossed)}; pass --keep-effects to fork "
            "anyway (they stay in the world; the fork's own effects get its own keys)",
            crossed,
        )
    family, detached = forked_children(state)  # the fork starts with no live children
    forked: AgentState = state.evolve(
        **family,
        task_id=new_id,
        version=1,
        compensations=(),
        effect_generations={},
        # The fork's inbox starts empty: the source's inbox numbers mean nothing there
        # (a kept cursor would skip the fork's first signals). The payloads stay.
        signals={name: r.model_copy(update={"seq": 0}) for name, r in state.signals.items()},
        inbox_seen=0,
        cancelling=None,  # a cancel of the source is not one of the fork
        memory_outbox=(),  # the source's memory writes are its own: it flushes them
    )
    document = forked.to_json()
    action: dict[str, Any] = {"kind": "fork", "from_task": task_id, "from_version": at_version}
    if detached:
        action["children"] = {"detached": detached}
    if crossed:
        action["effects"] = effects
        action["crossed"] = [r.key for r in crossed]
    event = Event(task_id=new_id, version=1, actor="human", action=action, **who("human"))
    with human_lease(store, new_id) as fence:
        store.commit(new_id, 0, document, event, fence=fence)
    return forked


def _check_settled(head: dict[str, Any], task_id: str) -> None:
    if head.get("pending_effect"):
        raise UsageError(
            f"task {task_id!r} has an effect in flight; resume it to settle the effect first "
            "(it may or may not have happened: only its probe can tell)"
        )
    if head.get("compensations"):
        raise UsageError(
            f"task {task_id!r} is still undoing effects of a rollback; resume it to finish first"
        )


def _check_compensable(agent: Agent[Any] | None, crossed: list[EffectRecord]) -> None:
    if agent is None:
        raise UsageError("compensating needs the agent (its skills' rollback hooks)")
    missing = sorted(
        {
            r.skill
            for r in crossed
            if (skill := agent.skills.get(r.skill)) is None or not skill.has_rollback
        }
    )
    if missing:
        raise EffectsCrossed(
            f"cannot compensate: {', '.join(missing)} has no rollback hook to undo its effects "
            f"({describe([r for r in crossed if r.skill in missing])}); use --keep-effects, or "
            "undo them by hand first",
            crossed,
        )


def _kept(store: Store, task_id: str, version: int) -> Checkpoint:
    """A kept checkpoint; asking for one that does not exist (or was pruned) is bad input."""
    kept = [info.version for info in store.checkpoints(task_id)]
    if version not in kept:
        span = f"{kept[0]}..{kept[-1]}" if kept else "none"
        raise UsageError(
            f"task {task_id!r} has no kept checkpoint at version {version} "
            f"({len(kept)} kept, {span}; see skillstate checkpoints {task_id})"
        )
    return store.checkpoint(task_id, version)
