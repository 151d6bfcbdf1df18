"""The actions that are not skill calls: a question, a finish, a revision, a failure.

Split from :mod:`skillstate.engine.act`, which dispatches to them. Each returns
the step's draft, or raises :class:`~skillstate.errors.ActionRejected` (or
:class:`~skillstate.errors.IllegalTransition`), which the act phase turns into an
error-log entry.
"""

from __future__ import annotations

from typing import Any

from skillstate.engine.actions import Action, AskUser, Finish, Revise
from skillstate.engine.agent import Agent
from skillstate.engine.draft import Draft, decision, reject
from skillstate.errors import ActionRejected, IllegalTransition, StateError
from skillstate.events import SkillTransition
from skillstate.limits import problem
from skillstate.state.model import AgentState, ErrorEntry, StepRecord, TaskStatus

__all__ = ["ask_user", "check_not_stranded", "fail", "finish", "revise"]


def ask_user(agent: Agent[Any], state: AgentState, action: AskUser, step_id: str) -> Draft:
    if not agent.can_ask:
        # Any policy, not only a model's: an unattended task never waits.
        message = "ask_user is not available: this agent runs unattended"
        return reject(state, step_id, "action_rejected", message, None)
    target = action.next_step or state.current_step
    if action.next_step is not None:
        agent.machine.check(state.current_step, target)
        check_not_stranded(agent, state, target)
    record = StepRecord(
        id=f"{step_id}-ask_user", step=target, action="ask_user", summary=action.question
    )
    after = state.replace(
        status=TaskStatus.WAITING_USER,
        question=action.question,
        current_step=target,
        last_decision=decision(action, target),
        inputs=(),
    ).with_step(record)
    return Draft(after=after, step_id=record.id)


def finish(agent: Agent[Any], state: AgentState, action: Finish, step_id: str) -> Draft:
    machine = agent.machine
    target = action.next_step or machine.finish_step(state.current_step)
    if target is None:
        raise IllegalTransition(
            state.current_step, "<final step>", machine.allowed(state.current_step)
        )
    if target != state.current_step:
        machine.check(state.current_step, target)
    if target not in machine.final:
        raise ActionRejected(f"cannot finish in {target!r}: it is not a final step")
    if state.pending_steps and not agent.finish_with_pending:
        raise ActionRejected(
            f"cannot finish: steps still pending ({', '.join(state.pending_steps)}); do them first"
        )
    record = StepRecord(
        id=f"{step_id}-finish", step=target, action="finish", summary=action.summary
    )
    after = state.replace(
        status=TaskStatus.COMPLETED,
        current_step=target,
        last_decision=decision(action, target),
        inputs=(),
        question=None,
        active_skill=None,
    ).with_step(record)
    transition = None
    if state.active_skill is not None:
        transition = SkillTransition(
            from_skill=state.active_skill, to_skill=None, reason="task finished"
        )
    return Draft(after=after, step_id=record.id, transition=transition)


def revise(agent: Agent[Any], state: AgentState, action: Revise, step_id: str) -> Draft:
    """The user changed the task: new goal or constraints, moot plan entries dropped."""
    if not state.inputs and not state.messages:  # a message sent while it ran counts too
        raise ActionRejected("'revise' needs a user's reply asking for the change")
    unknown = [p for p in action.drop_pending if p not in state.pending_steps]
    if unknown:
        raise ActionRejected(
            f"cannot drop {', '.join(unknown)}: not pending (pending: "
            f"{', '.join(state.pending_steps) or 'none'})"
        )
    changes: dict[str, Any] = {}
    if action.goal is not None:
        changes["goal"] = action.goal
    if action.constraints is not None:
        changes["constraints"] = tuple(action.constraints)
    pending = list(state.pending_steps)
    for label in action.drop_pending:
        pending.remove(label)
    try:
        revised = state.evolve(**changes) if changes else state  # validated: user data
    except StateError as exc:
        raise ActionRejected(f"revise refused: {exc}") from exc
    found = problem(changes, chars=agent.limits.param_chars, depth=4)
    if found is not None:
        raise ActionRejected(f"revise refused: {found}")
    summary = ", ".join(
        part
        for part in (
            "goal" if action.goal is not None else "",
            "constraints" if action.constraints is not None else "",
            f"dropped {', '.join(action.drop_pending)}" if action.drop_pending else "",
        )
        if part
    )
    record = StepRecord(
        id=f"{step_id}-revise", step=state.current_step, action="revise", summary=summary
    )
    after = revised.replace(
        pending_steps=tuple(pending),
        last_decision=decision(action, None),
        inputs=(),  # the reply that asked for it is used
    ).with_step(record)
    return Draft(after=after, step_id=record.id)


def fail(state: AgentState, action: Action, step_id: str) -> Draft:
    message = action.reason or "the policy gave up"
    record = StepRecord(id=f"{step_id}-fail", step=state.current_step, action="fail")
    after = (
        state.with_error(ErrorEntry(kind="task_failed", message=message, step_id=step_id))
        .replace(status=TaskStatus.FAILED, last_decision=decision(action, None))
        .with_step(record)
    )
    return Draft(after=after, step_id=record.id, error=message)


def check_not_stranded(agent: Agent[Any], state: AgentState, target: str) -> None:
    """Refuse a decision that moves the task to a step where nothing could apply.

    A small model once moved the ticket demo to its final step with a question
    while work was still pending: after the reply no skill could run there and
    finishing was refused, so the task could only stall.
    """
    if agent.can_continue_from(target, pending=state.pending_steps):
        return
    raise ActionRejected(
        f"next_step {target!r} would leave nothing that can apply (no skill can run "
        f"from there, and the task cannot finish there"
        + (f" with {', '.join(state.pending_steps)} pending" if state.pending_steps else "")
        + ")"
    )
