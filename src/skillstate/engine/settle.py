"""The settle phase: judging what a decision's action left behind, before the commit.

* **Effects.** An effectful skill's decision is committed as an intent first
  (:meth:`Settling.record_intent`); then the effect is run, or probed, and settled
  (:meth:`Settling.settle_effect`). The settling event records the effect's key,
  params and outcome (``done``, ``unverified``, ``compensated``): the ledger of
  effects that rollback and fork read.
* **Compensations** queued by a compensating rollback are run one by one, a commit
  after each (:meth:`Settling.compensate`).
* **The stall guard** counts the decision into the card (:meth:`Settling.account`).
* **Invariants** of a question, finish or failure (a skill's attempts check them
  while acting).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from skillstate.control.tool_approvals import park
from skillstate.engine.act import Acting
from skillstate.engine.actions import CallSkill
from skillstate.engine.agent import Agent
from skillstate.engine.commit import Committer
from skillstate.engine.draft import Draft, decision, reject, signature
from skillstate.engine.effects import base_key, current_key, effect_key
from skillstate.engine.guard import Guard
from skillstate.engine.rejections import after_call
from skillstate.engine.results import StepReport
from skillstate.errors import (
    ActionRejected,
    CompensationFailed,
    IllegalTransition,
    ToolApprovalNeeded,
)
from skillstate.events import TokenUsage, utcnow
from skillstate.state.model import AgentState, ErrorEntry, Intent
from skillstate.state.protect import masked_params, open_params, seal_params, secret_texts
from skillstate.state.view import View

__all__ = ["Settling"]


def _as_decided(raw: dict[str, Any], params: Any) -> dict[str, Any]:
    """The params to keep in an intent: as decided, so the settled run validates exactly
    what a fresh run would (``2`` stays ``2``; unset fields stay unset).

    Params that are not plain JSON (a scripted policy may hand over any object) are
    kept as their JSON dump of the fields that were set."""
    try:
        json.dumps(raw, allow_nan=False)
    except (TypeError, ValueError):
        dumped: dict[str, Any] = params.model_dump(mode="json", exclude_unset=True)
        return dumped
    return dict(raw)


class Settling:
    """The runtime's settle phase for one agent and store."""

    def __init__(
        self,
        agent: Agent[Any],
        acting: Acting,
        committer: Committer,
        guard: Guard,
        *,
        check_lease: Callable[[str], None] = lambda task_id: None,
    ) -> None:
        self.agent = agent
        self._acting = acting
        self._committer = committer
        self.guard = guard
        self._check_lease = check_lease
        """Raises ``LeaseLost`` when this worker no longer holds the task: checked right
        before an effect or a compensation runs, the moments a lost lease costs most."""

    def account(self, before: AgentState, draft: Draft, action: str) -> str | None:
        """Count a decision's draft into the stall guard; it stops the task if stuck."""
        reason = self.guard.account(before, draft, action)
        if reason is not None:
            self.guard.stop(draft, reason)
        return reason

    def check_invariants(self, state: AgentState, draft: Draft, step_id: str) -> None:
        """A question, finish or failure that would break an invariant is refused."""
        broken = self.agent.broken_invariant(draft.after)
        if broken is None:
            return
        refused = reject(state, step_id, "invariant_failed", f"invariant {broken}", None)
        draft.after, draft.verdict, draft.error, draft.failed = (
            refused.after,
            refused.verdict,
            refused.error,
            refused.failed,
        )
        draft.step_id = step_id

    def intent_for(self, state: AgentState, action: CallSkill, step_id: str) -> Intent | None:
        """The intent to record first when ``action`` calls an effectful skill, else None.

        A call that will be rejected anyway returns None and goes the normal way
        (its rejection is logged; no intent, nothing runs).
        """
        skill = self.agent.skills.get(action.skill)
        if skill is None or not skill.effects:
            return None
        return self.build_intent(state, action, step_id)

    def build_intent(self, state: AgentState, action: CallSkill, step_id: str) -> Intent | None:
        """The intent of ``action`` for any skill (an approval keeps one for a skill without
        effects too), or None when the call would be rejected."""
        skill = self.agent.skills.get(action.skill)
        if skill is None:
            return None
        try:
            _, params, target = self._acting.validate_call(state, action)
        except (ActionRejected, IllegalTransition):
            return None
        data = params.model_dump(mode="json")
        # The effect runs from this intent, first time and after a crash: the values it
        # needs are kept, sealed where the redaction policy would mask them (never "***").
        kept, _ = seal_params(
            _as_decided(action.params, params), self._acting.redactor(state), skill=skill.name
        )
        return Intent(
            step_id=f"{step_id}-{skill.name}",
            skill=skill.name,
            params=kept,
            target=target,
            reason=action.reason,
            key=effect_key(state, skill.name, data),
        )

    def record_intent(
        self,
        state: AgentState,
        action: CallSkill,
        intent: Intent,
        *,
        view: View[Any],
        started: datetime,
        usage: TokenUsage | None,
    ) -> StepReport[Any]:
        """Commit the intent (the decision), then run the effect and commit its outcome."""
        after = state.replace(
            pending_effect=intent, last_decision=decision(action, intent.skill)
        )  # the replies are used when the effect is settled, not before
        skill = self.agent.skills[intent.skill]
        draft = Draft(after=after, step_id=intent.step_id, skill=skill, usage=usage)
        draft.secrets = secret_texts(open_params(intent.params), self._acting.redactor(state))
        recorded, _ = self._committer.commit(
            state, draft, action.model_dump(mode="json"), "policy", view=view, started=started
        )
        return self.settle_effect(recorded, resumed=False)

    def settle_effect(self, state: AgentState, *, resumed: bool) -> StepReport[Any]:
        """Run (or, after a crash, first probe) the pending effect and commit its outcome."""
        intent = state.pending_effect
        assert intent is not None
        self._check_lease(state.task_id)  # a worker taken over must not run the effect
        key = current_key(state, intent.key)
        if key != intent.key:
            intent = intent.model_copy(update={"key": key})
        started = utcnow()
        # What the stall guard compares and records: the params as kept, sealed ones shown
        # as "***" (a token is long, and the plaintext must not reach the card).
        action = CallSkill(
            skill=intent.skill, params=masked_params(intent.params), reason=intent.reason
        )
        step_number = intent.step_id.split("-", 1)[0]
        skill = self.agent.skills.get(intent.skill)
        draft: Draft
        try:
            if skill is None:
                raise ActionRejected(f"effect of unknown skill {intent.skill!r} cannot be settled")
            params = self._acting.parse_params(skill, state, intent.params)
        except ActionRejected as exc:
            message = str(exc).splitlines()[0]
            draft = reject(state, step_number, "action_rejected", message, intent.skill)
        else:
            try:
                draft = self._acting.attempts(
                    state,
                    action,
                    skill,
                    params=params,
                    target=intent.target,
                    step_id=step_number,
                    key=intent.key,
                    approved=intent.approved_tools,
                )
            except ToolApprovalNeeded as paused:  # a gated tool: a person approves it first
                note = {
                    "kind": "approval",
                    "skill": intent.skill,
                    "params": masked_params(intent.params),
                    "key": intent.key,
                }
                return park(
                    self._committer,
                    self._acting,
                    state,
                    intent,
                    paused,
                    note=note,
                    actor="runtime",
                    started=started,
                )
        changes: dict[str, Any] = {"pending_effect": None}
        outcome = "done" if draft.failed is None else "unverified"
        if draft.failed is not None and draft.compensated:
            # Undone: the next run of this logical step must not reuse the key.
            outcome = "compensated"
            base = base_key(intent.key)
            gens = state.effect_generations
            changes["effect_generations"] = {**gens, base: gens.get(base, 0) + 1}
        draft.after = draft.after.replace(**changes)
        if skill is not None:  # an effect judged wrong stays rejected (engine.rejections)
            draft.after = after_call(
                state, draft, params=open_params(intent.params), shown=signature(action)
            )
        settled: dict[str, Any] = {
            "kind": "effect_resumed" if resumed else "effect",
            "skill": intent.skill,
            "key": intent.key,
            "params": intent.params,
            "outcome": outcome,
        }
        if skill is not None and not skill.effects:
            # An approved call of a skill without effects: run once from its intent, but
            # not an effect, so it stays out of the ledger that rollback and fork read.
            settled = {"kind": "call", "skill": intent.skill, "params": intent.params}
        if draft.found_by_probe:
            settled["found_by_probe"] = True
        stalled = self.account(state, draft, signature(action))
        after, event = self._committer.commit(state, draft, settled, "runtime", started=started)
        return StepReport(before=state, after=after, event=event, stalled=stalled)

    def compensate(self, state: AgentState) -> StepReport[Any]:
        """Undo the next queued effect with its skill's ``rollback`` hook; commit after it."""
        item = state.compensations[0]
        skill = self.agent.skills.get(item.skill)
        ctx = None
        secrets: tuple[str, ...] = ()
        self._check_lease(state.task_id)
        try:
            if skill is None or not skill.has_rollback:
                raise CompensationFailed(f"skill {item.skill!r} has no rollback hook to undo it")
            params = self._acting.parse_params(skill, state, item.params)
            secrets = self._acting.param_secrets(state, params)
            ctx = self._acting.context(
                skill,
                state,
                f"compensate-{item.key}",
                1,
                params=params,
                key=item.key,
                compensating=True,
                secrets=secrets,
            )
            skill.rollback(state, None, ctx)
        except Exception as exc:
            reason = str(exc)
            if not isinstance(exc, CompensationFailed):
                reason = f"{type(exc).__name__}: {exc}"
            message = f"cannot undo effect {item.key} ({item.skill}): {reason}"
            draft = Draft(
                after=state.with_error(
                    ErrorEntry(kind="compensation_failed", message=message, skill=item.skill)
                ),
                error=message,
                tool_calls=tuple(ctx.calls) if ctx else (),
                secrets=secrets,
            )
            failed = {"kind": "compensate", "key": item.key, "skill": item.skill, "ok": False}
            self._committer.commit(state, draft, failed, "runtime")
            raise CompensationFailed(
                f"{message}; it stays queued: fix the cause and resume task {state.task_id!r}"
            ) from exc
        base = base_key(item.key)
        gens = state.effect_generations
        after = state.replace(
            compensations=state.compensations[1:],
            effect_generations={**gens, base: gens.get(base, 0) + 1},
        )
        draft = Draft(after=after, skill=skill, tool_calls=tuple(ctx.calls), secrets=secrets)
        done = {"kind": "compensate", "key": item.key, "skill": item.skill, "version": item.version}
        final, event = self._committer.commit(state, draft, done, "runtime")
        return StepReport(before=state, after=final, event=event)
