"""Rejected approaches stay rejected: until what they depended on changes.

The stall guard's ``tried`` list forgets a failed call at the first step that makes
progress, so a model could propose the same wrong plan again two steps later. A
call whose outcome was **judged** wrong is remembered instead, in the card's
``rejected`` list (:class:`~skillstate.state.model.Rejected`), with the reason, a
digest of its params and a digest of the values it depended on (its skill's
``reads``; without them, every typed field and fact). It survives unrelated steps
and goes when one of those values changes (:mod:`skillstate.state.rejected`).

What is a rejection, and what is not:

* the skill ran and its verify failed on every attempt (``verify_failed``), or the
  outcome broke an agent invariant (``invariant_failed``): remembered and shown to
  every decision that is offered the skill ("Rejected earlier ... until report
  changes");
* a verify that says retrying cannot help (``Verdict.failed(..., permanent=True)``),
  or a person's rejection of a call waiting for approval: remembered **and** an
  identical call (same skill, same params, same values it depended on) is refused
  without running, with the original reason;
* a skill that raised, a tool error, a timeout, refused params: not rejections.
  They may be transient, and a retry (the stall guard still bounds it) may work.

A non-permanent verify failure is only shown, never refused: a verify may judge the
world (a deploy not ready yet), and the same call may pass later.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from skillstate.engine.actions import CallSkill
from skillstate.engine.draft import Draft, reject
from skillstate.skills.skill import Skill
from skillstate.state.model import AgentState, Rejected
from skillstate.state.rejected import depends_digest, holding, holds, params_digest, until

__all__ = ["after_call", "refusal", "remember", "tidy"]

REASON_CHARS = 240


def refusal(
    state: AgentState, action: CallSkill, skill: Skill[Any, Any], step_id: str
) -> Draft | None:
    """The refusal of ``action`` when it repeats a permanently rejected call that still
    holds; ``None`` when it may run."""
    if not state.rejected:
        return None
    digest = params_digest(state.task_id, skill.name, action.params)
    for entry in state.rejected:
        if entry.permanent and entry.skill == skill.name and entry.params == digest:
            if not holds(state, entry):
                continue
            message = (
                f"refused: {entry.shown} was rejected at step {entry.step_id} ({entry.reason}); "
                f"it stays rejected until {until(entry)}: change the call or what it reads"
            )
            draft = reject(state, step_id, "action_rejected", message, skill.name)
            # The same reason as the original failure: the stall guard counts it as a repeat.
            draft.failed = entry.reason
            return draft
    return None


def remember(
    after: AgentState,
    before: AgentState,
    *,
    skill: Skill[Any, Any],
    params: Mapping[str, Any],
    shown: str,
    reason: str,
    step_id: str,
    permanent: bool,
) -> AgentState:
    """``after`` with the call of ``skill`` with ``params`` (taken in ``before``) remembered
    as rejected for ``reason``; an earlier entry for the same call is replaced."""
    reads = skill.reads or None
    entry = Rejected(
        skill=skill.name,
        shown=shown,
        params=params_digest(before.task_id, skill.name, params),
        reason=reason if len(reason) <= REASON_CHARS else reason[: REASON_CHARS - 1] + "…",
        step_id=step_id,
        permanent=permanent,
        reads=reads,
        depends=depends_digest(before, reads),
    )
    kept = [e for e in after.rejected if (e.skill, e.params) != (entry.skill, entry.params)]
    merged = (*kept, entry)[-type(after).MAX_REJECTED :]
    return after.replace(rejected=merged)


def tidy(state: AgentState) -> AgentState:
    """``state`` without the rejected calls that no longer hold (a value they read changed)."""
    if not state.rejected:
        return state
    kept = holding(state)
    return state if len(kept) == len(state.rejected) else state.replace(rejected=kept)


def after_call(
    state: AgentState, draft: Draft, *, params: Mapping[str, Any], shown: str
) -> AgentState:
    """``draft``'s card after a call of a skill with ``params`` taken in ``state``: the call
    remembered when its outcome was judged wrong, and the rejected calls that no longer
    hold dropped. ``shown`` is the call's signature, masked."""
    after = draft.after
    if draft.judged is not None and draft.skill is not None:
        after = remember(
            after,
            state,
            skill=draft.skill,
            params=params,
            shown=shown,
            reason=draft.failed or "verify failed",
            step_id=draft.step_id or "",
            permanent=draft.judged == "permanent",
        )
    # A call that failed wrote nothing: what the entries read is as it was.
    return tidy(after) if draft.failed is None else after
