"""Approval gates: a call a person approves (edits, or rejects) before it runs.

A skill declares ``approval=True`` (every call) or ``approval=fn(state, params)``
(a predicate on the state and the validated params). When the policy chooses such a
call and the call is valid (the skill exists and applies, its params validate, the
machine allows its step), nothing runs: the runtime commits the call as the card's
``pending_approval`` (an :class:`~skillstate.state.model.Intent`: step id, skill,
params with their secret leaves sealed, target step, reason, idempotency key) and
the status ``waiting_approval``, and the run stops there
(``RunResult.stopped == "waiting_approval"``; a worker's slice ends, the sweeper
leaves the task alone). Then a person decides:

* **approve**, optionally with edits of the params (validated against the skill's
  params schema; an invalid edit writes nothing), turns the pending approval into
  the card's ``pending_effect`` and the status ``running``, in one compare-and-set
  commit whose event (kind ``approve``) names who approved, why, and what they
  edited (masked). Nothing runs in that commit: the next ``run``, ``resume`` or
  worker slice settles the intent as any effect in flight is settled
  (:meth:`~skillstate.engine.settle.Settling.settle_effect`: probed first, so after a
  ``kill -9`` anywhere the call runs exactly once). A skill without effects goes the
  same way and runs once from its intent; its event is a ``call``, not an effect,
  so it stays out of the ledger of effects.
* **reject** clears the pending approval and sets the task running, with the reason
  in the error log (``approval_rejected``) and in the card's ``tried`` list, which
  the next decision's view shows ("Already tried without progress: wire {...} ->
  rejected by alice: ..."). The stall guard counts it: a policy that keeps proposing
  the call people reject stalls instead of asking forever.

Two people deciding at once each take the task's lease to commit and check under it
that the approval is still pending: the second gets
:class:`~skillstate.errors.ApprovalNotPending`, which names who decided first and
at which version. One approval, one effect.

One *tool* of a skill may be gated instead (``gated(tool, approval=...)``): the
skill's run stops at the call and the pending approval names the skill call and the
tool call (``pending_approval.tool``). The same ``approve`` and ``reject`` decide it;
edits then change the tool call's arguments
(:mod:`skillstate.control.tool_approvals`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

from skillstate.audit import ACTOR_ENV, Identity, default_actor
from skillstate.control import tool_approvals
from skillstate.engine.act import Acting
from skillstate.engine.actions import CallSkill
from skillstate.engine.agent import Agent
from skillstate.engine.commit import Committer
from skillstate.engine.draft import Draft, decision, signature
from skillstate.engine.rejections import remember
from skillstate.engine.results import StepReport
from skillstate.engine.settle import Settling
from skillstate.errors import (
    ActionRejected,
    ApprovalNotPending,
    IllegalTransition,
    LeaseHeld,
    StaleState,
    ToolApprovalNeeded,
    UsageError,
)
from skillstate.events import TokenUsage
from skillstate.limits import edit_problem, problem
from skillstate.skills.skill import Skill
from skillstate.state.model import AgentState, ErrorEntry, Intent, TaskStatus
from skillstate.state.protect import masked_params, open_params, secret_texts
from skillstate.state.view import View

__all__ = ["ACTOR_ENV", "Approvals", "default_actor"]

ACTOR_CHARS = 100  # skillstate.audit.BY_CHARS
HELD_TRIES = 40
HELD_PAUSE = 0.05
"""A decision waits up to ~2 s for the task's lease: whoever holds a task that waits
for approval holds it briefly (the slice that parked it, another person deciding)."""
DECIDED = frozenset({"approve", "reject"})
"""Event kinds of a person's decision on a pending approval."""


class Approvals:
    """The runtime's approval gate for one agent and store."""

    def __init__(
        self,
        agent: Agent[Any],
        acting: Acting,
        committer: Committer,
        settling: Settling,
        hold: Callable[[str], AbstractContextManager[None]],
    ) -> None:
        self.agent = agent
        self._acting = acting
        self._committer = committer
        self._settling = settling
        self._hold = hold
        """Holds the task's lease for a person's decision (the runtime's own lease)."""
        self._approved: set[tuple[str, int]] = set()
        """(task, version) of the approvals this runtime committed."""

    # ------------------------------------------------------------------ asking

    def gate(self, state: AgentState, action: CallSkill, step_id: str) -> Intent | None:
        """The approval to ask for when ``action`` needs one, else None.

        A call that will be refused anyway (unknown skill, ``when`` false, invalid
        params, illegal step) returns None and goes the normal way: its refusal is
        logged, and no person is asked about a call that could not run.
        """
        skill = self.agent.skills.get(action.skill)
        if skill is None or skill.approval is False:
            return None
        try:
            _, params, _ = self._acting.validate_call(state, action)
        except (ActionRejected, IllegalTransition):
            return None
        if not skill.needs_approval(state, params):
            return None
        return self._settling.build_intent(state, action, step_id)

    def request(
        self,
        state: AgentState,
        action: CallSkill,
        intent: Intent,
        *,
        view: View[Any],
        started: datetime,
        usage: TokenUsage | None,
    ) -> StepReport[Any]:
        """Commit the decision as a pending approval: the task waits; nothing runs."""
        # The replies stay: the call uses them once it runs. The stall guard does not
        # count a request (a rejection is what counts).
        after = state.replace(
            status=TaskStatus.WAITING_APPROVAL,
            pending_approval=intent,
            last_decision=decision(action, intent.skill),
        )
        draft = Draft(after=after, step_id=intent.step_id, skill=self.agent.skills[intent.skill])
        draft.usage = usage
        draft.secrets = secret_texts(open_params(intent.params), self._acting.redactor(state))
        note = {**action.model_dump(mode="json"), "approval": "requested"}
        final, event = self._committer.commit(
            state, draft, note, "policy", view=view, started=started
        )
        return StepReport(before=state, after=final, event=event, view=view)

    def request_tool(
        self,
        state: AgentState,
        action: CallSkill,
        paused: ToolApprovalNeeded,
        step_id: str,
        *,
        view: View[Any],
        started: datetime,
        usage: TokenUsage | None,
    ) -> StepReport[Any]:
        """Commit the decision, whose skill stopped at a gated tool call, as a pending
        approval of that call (:mod:`skillstate.control.tool_approvals`)."""
        intent = self._settling.build_intent(state, action, step_id)
        assert intent is not None  # the call validated: its skill ran
        return tool_approvals.park(
            self._committer,
            self._acting,
            state,
            intent,
            paused,
            note=action.model_dump(mode="json"),
            actor="policy",
            last_decision=decision(action, intent.skill),
            view=view,
            started=started,
            usage=usage,
        )

    def approved_last(self, state: AgentState) -> bool:
        """Whether this runtime committed the head as an approval: its call runs for the
        first time now (settled as ``effect``); any other runtime settling it cannot know
        that it did not run before a crash (``effect_resumed``), as for any intent."""
        key = (state.task_id, state.version)
        if key not in self._approved:
            return False
        self._approved.discard(key)  # asked once per settlement: the set stays small
        return True

    # ------------------------------------------------------------------ deciding

    def approve(
        self,
        task_id: str,
        *,
        edits: Mapping[str, Any] | None = None,
        actor: str | None = None,
        reason: str | None = None,
    ) -> AgentState:
        """Approve the pending call (with ``edits`` of its params): one commit that makes
        it the task's effect in flight; the next run settles it exactly once."""
        who = self._actor(actor)
        why = self._reason(reason, required=False)
        changes = _edits(edits)

        def build(state: AgentState, pending: Intent) -> tuple[Draft, dict[str, Any]]:
            if pending.tool is not None:  # edits are of the tool call's arguments
                return tool_approvals.approved(
                    self._acting, state, pending, changes=changes, who=who, why=why
                )
            return self._approval(state, pending, changes, who, why)

        approved = self._decide(task_id, build)
        self._approved.add((task_id, approved.version))
        return approved

    def reject(self, task_id: str, *, reason: str, actor: str | None = None) -> AgentState:
        """Refuse the pending call: the task runs on, and its next decision sees why."""
        who = self._actor(actor)
        why = self._reason(reason, required=True)

        def build(state: AgentState, pending: Intent) -> tuple[Draft, dict[str, Any]]:
            return self._rejected(state, pending, who, why)

        return self._decide(task_id, build)

    def _decide(
        self,
        task_id: str,
        build: Callable[[AgentState, Intent], tuple[Draft, dict[str, Any]]],
    ) -> AgentState:
        """Commit ``build``'s draft under the lease, if the approval is still pending."""
        self._pending(self._committer.load(task_id))  # the common race, named without a wait
        tries = HELD_TRIES
        while True:
            try:
                with self._hold(task_id):
                    state = self._committer.head(task_id)  # checked against its pin
                    draft, action = build(state, self._pending(state))
                    draft.identity = Identity(by=action["actor"], reason=action["reason"] or None)
                    return self._committer.commit(state, draft, action, "human")[0]
            except (LeaseHeld, StaleState):
                # Someone else holds or moved the task: if they decided, say who.
                self._pending(self._committer.load(task_id))
                tries -= 1
                if tries <= 0:
                    raise
                time.sleep(HELD_PAUSE)

    def _pending(self, state: AgentState) -> Intent:
        pending = state.pending_approval
        if pending is None or state.status is not TaskStatus.WAITING_APPROVAL:
            raise ApprovalNotPending(state.task_id, self._decided(state))
        return pending

    def _decided(self, state: AgentState) -> str:
        """``approved by alice at version 7``: the last decision on an approval, if any."""
        for event in reversed(self._committer.store.events(state.task_id)):
            kind = event.action.get("kind")
            if kind in DECIDED:
                verb = "approved" if kind == "approve" else "rejected"
                return f"{verb} by {event.action.get('actor') or '?'} at version {event.version}"
        return f"it is {state.status.value} and asked for none"

    def _approval(
        self,
        state: AgentState,
        pending: Intent,
        changes: dict[str, Any],
        who: str,
        why: str,
    ) -> tuple[Draft, dict[str, Any]]:
        skill = self._skill(pending)
        unknown = [name for name in changes if name not in skill.params.model_fields]
        if unknown:
            known = ", ".join(skill.params.model_fields) or "none"
            raise UsageError(
                f"edit refused: {skill.name!r} has no param {unknown[0]!r} (its params: "
                f"{known}); nothing was written"
            )
        redactor = self._acting.redactor(state)
        hidden = secret_texts(changes, redactor)
        # The step the decision chose, only if it named one (``next_step``).
        chosen = None if pending.target == (skill.step or state.current_step) else pending.target
        call = CallSkill(
            skill=skill.name,
            params={**open_params(pending.params), **changes},
            reason=pending.reason,
            next_step=chosen,
        )
        try:
            self._acting.validate_call(state, call)
        except (ActionRejected, IllegalTransition) as exc:
            message = self._acting.redactor(state, extra=hidden).text(str(exc).splitlines()[0])
            what = "edit refused" if changes else "approval refused"
            raise UsageError(f"{what}: {message}; nothing was written") from None
        intent = self._settling.build_intent(state, call, pending.step_id.split("-", 1)[0])
        assert intent is not None  # validated just above
        after = state.replace(
            status=TaskStatus.RUNNING, pending_approval=None, pending_effect=intent
        )
        draft = Draft(after=after, step_id=intent.step_id, skill=skill)
        draft.secrets = (*secret_texts(open_params(intent.params), redactor), *hidden)
        shown = masked_params(intent.params)
        action: dict[str, Any] = {
            "kind": "approve",
            "actor": who,
            "reason": why,
            "skill": skill.name,
            "params": shown,
            "key": intent.key,
        }
        if changes:
            action["edited"] = {name: shown.get(name) for name in changes}
        return draft, action

    def _rejected(
        self, state: AgentState, pending: Intent, who: str, why: str
    ) -> tuple[Draft, dict[str, Any]]:
        message = f"{pending.skill} was rejected by {who}: {why}"
        failed = f"rejected by {who}: {why}"
        extra: dict[str, Any] = {}
        if pending.tool is not None:  # one tool call of the skill was rejected
            message, failed, extra = tool_approvals.rejected_tool(pending, who, why)
        entry = ErrorEntry(
            kind="approval_rejected",
            message=message,
            step_id=pending.step_id.split("-", 1)[0],
            skill=pending.skill,
        )
        after = state.replace(status=TaskStatus.RUNNING, pending_approval=None).with_error(entry)
        draft = Draft(
            after=after,
            step_id=pending.step_id,
            skill=self.agent.skills.get(pending.skill),
            error=message,
            failed=failed,
        )
        redactor = self._acting.redactor(state)
        draft.secrets = secret_texts(open_params(pending.params), redactor)
        if pending.tool is not None:
            draft.secrets += secret_texts(open_params(pending.tool.args), redactor)
        # What the view's "already tried" line shows, under the signature the stall guard
        # compares: the same call proposed and rejected again counts as a repeat.
        shown = masked_params(pending.params)
        tried = signature(CallSkill(skill=pending.skill, params=shown))
        if pending.tool is None and draft.skill is not None:
            # A person said no to this call: the same call is refused until what it read
            # changes (engine.rejections), rather than put to them again.
            draft.after = remember(
                after,
                state,
                skill=draft.skill,
                params=open_params(pending.params),
                shown=redactor.text(tried),
                reason=failed,
                step_id=pending.step_id,
                permanent=True,
            )
        self._settling.account(state, draft, tried)
        action = {
            "kind": "reject",
            "actor": who,
            "reason": why,
            "skill": pending.skill,
            "params": shown,
            **extra,
        }
        return draft, action

    # ------------------------------------------------------------------ checks

    def _skill(self, pending: Intent) -> Skill[Any, Any]:
        skill = self.agent.skills.get(pending.skill)
        if skill is None:
            raise UsageError(
                f"the pending call's skill {pending.skill!r} is not a skill of agent "
                f"{self.agent.name!r}; reject it instead"
            )
        return skill

    def _actor(self, actor: str | None) -> str:
        who = (actor if actor is not None else default_actor()).strip()
        found = edit_problem(who)
        if not who or found is not None or "\n" in who or len(who) > ACTOR_CHARS:
            why = found or f"it must be one line of 1 to {ACTOR_CHARS} characters"
            raise UsageError(f"actor refused: {why}; nothing was written")
        return who

    def _reason(self, reason: str | None, *, required: bool) -> str:
        why = (reason or "").strip()
        if required and not why:
            raise UsageError("a rejection needs a reason (--reason): the next decision reads it")
        limits = self.agent.limits
        found = edit_problem(why) or problem(why, chars=limits.reply_chars, depth=limits.depth)
        if found is not None:
            raise UsageError(f"reason refused: {found}; nothing was written")
        return why


def _edits(edits: Mapping[str, Any] | None) -> dict[str, Any]:
    """The edited params, each checked as a person's edit of a card is."""
    changes = dict(edits or {})
    for name, value in changes.items():
        if not isinstance(name, str) or not name or "." in name:
            raise UsageError(
                f"edit refused: {name!r} is not a param name (edit top-level params: "
                "F=V, V is YAML); nothing was written"
            )
        found = edit_problem(value)
        if found is not None:
            raise UsageError(f"edit of {name!r} refused: {found}; nothing was written")
    return changes
