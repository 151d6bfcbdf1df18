"""What a step leaves behind between its phases: the draft the commit turns into a version.

A step is four phases: **decide** (the policy picks an action from the view),
**act** (the action is validated and run: skill attempts, or a question, a finish,
a failure), **settle** (the outcome is judged: effects settled, the stall guard
counts progress, invariants checked) and **commit** (one state built from the
draft, its event, one compare-and-set). Each phase hands the next a
:class:`Draft`; nothing reaches the store before the commit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from skillstate.engine.actions import Action, CallSkill, LoadEvidence
from skillstate.engine.schema import SHORT_REF
from skillstate.events import SkillTransition, TokenUsage, ToolCall, Verdict
from skillstate.state.model import AgentState, Decision, ErrorEntry

if TYPE_CHECKING:
    from skillstate.audit import Identity
    from skillstate.memory.facts import MemoryWrite
    from skillstate.shared.access import SharedChange
    from skillstate.skills.skill import Skill

__all__ = ["Draft", "decision", "reject", "signature"]


@dataclass
class Draft:
    """The pieces of an event and the state a phase proposes, before the commit."""

    after: AgentState
    step_id: str | None = None
    skill: Skill[Any, Any] | None = None
    verdict: Verdict | None = None
    attempts: int = 0
    tool_calls: tuple[ToolCall, ...] = ()
    transition: SkillTransition | None = None
    error: str | None = None
    """The error-log message this step adds (also set for refusals)."""
    found_by_probe: bool = False
    """The effect had already happened: its probe, not a new run, gave the outcome."""
    usage: TokenUsage | None = None
    """What deciding this step cost (model calls, tokens)."""
    failed: str | None = None
    """Why the decided action did not work (refused, failed, invalid); ``None`` when it
    did. What the stall guard and the view's "already tried" line record."""
    compensated: bool = False
    """A failed effect's ``rollback`` undid it (so its key is not reused)."""
    judged: Literal["failed", "permanent"] | None = None
    """The skill ran and its outcome was judged wrong (its verify or an invariant, not a
    fault that a retry may fix); ``"permanent"``: the verify said retrying cannot help.
    The call is remembered as rejected (:mod:`skillstate.engine.rejections`)."""
    secrets: tuple[str, ...] = ()
    """Plaintext of the step's secret params (:mod:`skillstate.state.protect`): masked
    exactly wherever this step's text goes (error log, event, trace)."""
    remembered: tuple[MemoryWrite, ...] = ()
    """What the verified attempt asked to remember (``ctx.remember``): the commit puts it
    in the card's outbox and writes it to the memory scopes (:mod:`skillstate.memory`)."""
    shared: tuple[SharedChange, ...] = ()
    """The verified attempt's write to a shared record (``ctx.write_shared``): committed
    pending with the step, then compared-and-set on the record (:mod:`skillstate.shared`)."""
    identity: Identity | None = None
    """Who asked for this commit and why, when it is not the enclosing command's
    (:func:`skillstate.audit.who`): the sender of a message taken from the inbox."""


def decision(action: Action, target: str | None) -> Decision:
    """The card's ``last_decision`` for ``action``."""
    return Decision(action=action.kind, target=target, reason=action.reason)


def signature(action: Action | None) -> str:
    """A short, stable rendering of an action: what the stall guard compares."""
    if action is None:
        return "invalid reply"
    if isinstance(action, CallSkill):
        if not action.params:
            return action.skill
        params = json.dumps(action.params, sort_keys=True, ensure_ascii=False, default=str)
        return f"{action.skill} {params if len(params) <= 120 else params[:119] + '…'}"
    if isinstance(action, LoadEvidence):  # loading another artifact is another decision
        return f"load_evidence {action.ref[:SHORT_REF]}"
    step = getattr(action, "next_step", None)
    return f"{action.kind} -> {step}" if step else action.kind


def reject(state: AgentState, step_id: str, kind: str, message: str, skill: str | None) -> Draft:
    """A refused action: only the error log records it; nothing else changes."""
    entry = ErrorEntry(kind=kind, message=message, step_id=step_id, skill=skill)
    return Draft(
        after=state.with_error(entry),
        step_id=step_id,
        verdict=Verdict.failed(message),
        error=message,
        failed=message,
    )
