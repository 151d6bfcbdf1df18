"""What a skill's attempts come to: the draft of a verified one, or of giving up.

Split from :mod:`skillstate.engine.act`, which runs the attempts: an
:class:`Attempt` is one run (or probe) verified; :func:`succeeded` turns the first
passing one into the step's draft, :func:`give_up` records why the last one failed
(after the skill's rollback, if it declares one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from skillstate.engine.actions import CallSkill
from skillstate.engine.agent import Agent
from skillstate.engine.draft import Draft, decision
from skillstate.events import SkillTransition, ToolCall, Verdict
from skillstate.fanout.spawn import spawned_by
from skillstate.skills.skill import Outcome, Skill, SkillContext
from skillstate.state.depends import can_go_stale, undo_values
from skillstate.state.model import AgentState, ErrorEntry, ErrorKind, StepRecord, TaskStatus

__all__ = ["Attempt", "give_up", "judged_by", "succeeded"]


@dataclass(frozen=True)
class Attempt:
    """One run (or probe) of a skill, verified: what it proposed and what was wrong."""

    outcome: Outcome | None
    candidate: AgentState
    verdict: Verdict | None
    failure: tuple[ErrorKind, str] | None
    """``(kind, message)`` when the attempt failed."""
    permanent: bool = False
    trace: str | None = None
    """Ref of the artifact holding the traceback, when the skill or verify raised."""


def succeeded(
    agent: Agent[Any],
    state: AgentState,
    action: CallSkill,
    skill: Skill[Any, Any],
    result: Attempt,
    *,
    ctx: SkillContext,
    target: str,
    record_id: str,
    attempt: int,
    calls: list[ToolCall],
) -> Draft:
    """The draft of a skill's first verified attempt: its writes, its step record,
    the skill transition and what the commit writes after (memory, shared records)."""
    outcome = result.outcome
    writes = outcome.writes if outcome else {}
    transition = None
    if skill.name != state.active_skill:
        transition = SkillTransition(
            from_skill=state.active_skill, to_skill=skill.name, reason=action.reason
        )
    stale_ready = can_go_stale(
        reads=skill.reads or None,
        writes=tuple(writes),
        fingerprints=ctx.fingerprints,
        window=state.completed_steps,
    )
    record = StepRecord(
        id=record_id,
        step=target,
        action="call_skill",
        skill=skill.name,
        summary=outcome.summary if outcome else "",
        fingerprints=tuple(ctx.fingerprints),
        # Only a step that can go stale needs to know what its writes replaced.
        undo=undo_values(state, writes) if stale_ready else None,
        # What a later staleness check needs, for the steps it concerns only.
        reads=(skill.reads or None) if stale_ready else None,
        writes=tuple(writes) if stale_ready else None,
    )
    after = (
        result.candidate.with_evidence(outcome.evidence if outcome else ())
        .replace(
            status=TaskStatus.RUNNING,
            current_step=target,
            active_skill=skill.name,
            last_decision=decision(action, skill.name),
            inputs=(),  # a decision that worked has used the replies it saw
            question=None,
        )
        .with_step(record)
    )
    after = spawned_by(agent, state, after, ctx.spawned)  # ctx.spawn: fanout
    return Draft(
        after=after,
        step_id=record.id,
        skill=skill,
        verdict=result.verdict,
        attempts=attempt,
        tool_calls=tuple(calls),
        transition=transition,
        found_by_probe=ctx.found_by_probe,
        remembered=tuple(ctx.remembered),  # verified: the commit writes them
        shared=ctx.sharing.changes() if ctx.sharing else (),  # skillstate.shared
    )


def give_up(
    state: AgentState,
    action: CallSkill,
    skill: Skill[Any, Any],
    *,
    step_id: str,
    errors: list[ErrorEntry],
    calls: list[ToolCall],
    outcome: Outcome | None,
    ctx: SkillContext | None,
) -> Draft:
    """The draft of a skill whose attempts all failed: every attempt's error and a
    summary in the log, after the skill's rollback (if it declares one)."""
    last = errors[-1]
    rolled_back = "no rollback declared"
    compensated = False
    if skill.has_rollback and ctx is not None:
        ctx.gate = None  # undoing a failed attempt does not wait for a person
        try:
            skill.rollback(state, outcome, ctx)
            rolled_back = "rolled back"
            compensated = True
        except Exception as exc:
            rolled_back = f"rollback failed: {type(exc).__name__}: {exc}"
            errors.append(last.model_copy(update={"kind": "rollback_failed", "message": str(exc)}))
    summary = ErrorEntry(
        kind="step_failed",
        message=f"{skill.name} failed after {last.attempt} attempt(s): {last.message}; "
        f"{rolled_back}",
        step_id=step_id,
        skill=skill.name,
        attempt=last.attempt,
        max_attempts=last.max_attempts,
        permanent=last.permanent,
    )
    after = state
    for entry in (*errors, summary):
        after = after.with_error(entry)
    after = after.replace(
        status=TaskStatus.RUNNING, last_decision=decision(action, skill.name)
    )  # the replies stay: the next decision may use them
    return Draft(
        after=after,
        step_id=step_id,
        skill=skill,
        verdict=Verdict.failed(last.message, permanent=last.permanent),
        attempts=last.attempt,
        tool_calls=tuple(calls),
        error=summary.message,
        failed=last.message,
        compensated=compensated,
        judged=judged_by(last),
    )


def judged_by(last: ErrorEntry) -> Literal["failed", "permanent"] | None:
    """Whether a step's last failure judged its outcome (a rejection) or was a fault."""
    if last.kind not in ("verify_failed", "invariant_failed"):
        return None  # a skill error, a tool error, a bad output: a retry may fix it
    return "permanent" if last.permanent else "failed"
