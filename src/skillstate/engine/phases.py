"""One step of a task in four phases: decide, act, settle, commit.

:class:`Phases` holds what a step needs (the agent, its acting, settling and
approval gates, the committer) and nothing about the run around it: the lease,
budgets, replies and the inbox stay with :class:`~skillstate.engine.runtime.Runtime`,
which calls :meth:`Phases.take` (or :meth:`Phases.begin` then
:meth:`Phases.conclude`, when an async runtime awaits the decision in between).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any, NamedTuple

from skillstate.control.approvals import Approvals
from skillstate.engine.act import Acting
from skillstate.engine.actions import Action, CallSkill, Finish, LoadEvidence
from skillstate.engine.agent import Agent
from skillstate.engine.commit import Committer
from skillstate.engine.decide import accounted, failed_usage
from skillstate.engine.draft import Draft, reject, signature
from skillstate.engine.evidence import reader, whole_ref
from skillstate.engine.history import find_step
from skillstate.engine.policy import Decided
from skillstate.engine.rejections import after_call, refusal
from skillstate.engine.results import StepReport
from skillstate.engine.settle import Settling
from skillstate.engine.stale import stale_steps
from skillstate.engine.trace import Tracer
from skillstate.engine.transcript import conversation
from skillstate.errors import DecisionFailed, ToolApprovalNeeded, UsageError
from skillstate.events import TokenUsage, utcnow
from skillstate.llm.base import Prices
from skillstate.skills.binding import fill
from skillstate.skills.skill import Skill
from skillstate.state.model import AgentState, StepRecord, TaskStatus
from skillstate.state.view import View
from skillstate.store.base import Store

__all__ = ["Begun", "Phases"]


class Begun(NamedTuple):
    """A step between its view and its decision (see :meth:`Runtime.begin`)."""

    view: View[Any]
    step_id: str
    started: datetime


_WAITING = frozenset(
    {
        TaskStatus.WAITING_USER,
        TaskStatus.WAITING_APPROVAL,
        TaskStatus.WAITING,
        TaskStatus.WAITING_CHILDREN,
    }
)
"""Statuses a decision is not taken in: someone else moves the task on."""


class Phases:
    """The four phases of a step for one agent and store."""

    def __init__(
        self,
        agent: Agent[Any],
        store: Store,
        *,
        committer: Committer,
        acting: Acting,
        settling: Settling,
        approvals: Approvals,
        prices: Prices | None,
        tracer: Callable[[], Tracer],
    ) -> None:
        self.agent = agent
        self.store = store
        self.prices = prices
        self.tracer = tracer
        """The runtime's tracer (read at each step: it may be set after construction)."""
        self._committer = committer
        self._acting = acting
        self._settling = settling
        self._approvals = approvals

    def take(self, state: AgentState) -> StepReport[Any]:
        """decide, act, settle, commit: one step of ``state``."""
        begun = self.begin(state)
        try:
            with self.tracer().span("skillstate.decide", {"skillstate.step.id": begun.step_id}):
                decided: Action | Decided | DecisionFailed = self.agent.policy.decide(begun.view)
        except DecisionFailed as exc:
            decided = exc
        return self.conclude(state, begun, decided)

    def begin(self, state: AgentState) -> Begun:
        """The start of a step of ``state``: its view, id and start time (no I/O, unless
        the agent has a skill retriever: it may read the store's records and call an
        embeddings endpoint)."""
        task_id = state.task_id
        if state.status.is_terminal or state.status in _WAITING:
            raise UsageError(f"task {task_id!r} cannot step (status: {state.status.value})")
        return Begun(self._view(state), f"{state.version + 1:04d}", utcnow())

    def conclude(
        self, state: AgentState, begun: Begun, decided: Action | Decided | DecisionFailed
    ) -> StepReport[Any]:
        """The rest of a step once the policy decided (or failed to): act, settle, commit."""
        view, step_id, started = begun
        if isinstance(decided, DecisionFailed):
            return self._invalid_decision(state, decided, step_id, view=view, started=started)
        action, usage = self._accounted(decided)
        if isinstance(action, LoadEvidence):  # the event names what was loaded, whole
            action = whole_ref(state, action)
        action, skill = self._bound(state, action)
        stale = _rests_on_stale(state, action, skill)
        if stale is not None:  # the world moved: the decision is moot
            before, found = stale
            return self._stale_before_run(
                state, before, found=found, usage=usage, view=view, started=started
            )
        refused: Draft | None = None
        if isinstance(action, CallSkill) and skill is not None:
            # The same call, rejected for good, does not run (nor wait for a person) again.
            refused = refusal(state, action, skill, step_id)
        if isinstance(action, CallSkill) and refused is None:
            approval = self._approvals.gate(state, action, step_id)
            if approval is not None:  # a person approves it first: nothing runs now
                return self._approvals.request(
                    state, action, approval, view=view, started=started, usage=usage
                )
            intent = self._settling.intent_for(state, action, step_id)
            if intent is not None:
                return self._settling.record_intent(
                    state, action, intent, view=view, started=started, usage=usage
                )
        # act
        try:
            draft = refused or self._acting.handle(state, action, step_id)
        except ToolApprovalNeeded as paused:  # a gated tool: a person approves it first
            assert isinstance(action, CallSkill)  # only a skill's run calls tools
            return self._approvals.request_tool(
                state, action, paused, step_id, view=view, started=started, usage=usage
            )
        draft.usage = usage
        if isinstance(action, CallSkill):
            shown = self._committer.redactor(state, extra=draft.secrets).text(signature(action))
            draft.after = after_call(state, draft, params=action.params, shown=shown)
        # settle
        if draft.failed is None and draft.skill is None:
            self._settling.check_invariants(state, draft, step_id)
        stalled = self._settling.account(state, draft, signature(action))
        # commit
        after, event = self._committer.commit(
            state, draft, action.model_dump(mode="json"), "policy", view=view, started=started
        )
        return StepReport(before=state, after=after, event=event, view=view, stalled=stalled)

    def _bound(self, state: AgentState, action: Action) -> tuple[Action, Skill[Any, Any] | None]:
        """``action`` with the params bound from the state filled in, and its skill."""
        if not isinstance(action, CallSkill):
            return action, None
        skill = self.agent.skills.get(action.skill)
        if skill is not None and self.agent.bind_params:
            # Params bound from the state are filled now, so the intent, the act
            # phase and the event all carry the params the skill runs with.
            action = action.model_copy(update={"params": fill(skill.params, state, action.params)})
        return action, skill

    def _view(self, state: AgentState) -> View[Any]:
        rates = None
        if self.agent.retriever is not None:  # a skill library ranks by the store's record
            from skillstate.library.stats import success_rates

            rates = success_rates(self.store)
            rates.refresh()
        view = self.agent.view(state, rates=rates)
        store, task_id = self.store, state.task_id
        redactor = self._committer.redactor(state)
        # History baselines need the conversation, and a policy may look up a step older
        # than the card's window: both are read from the event log only if asked for.
        # Evidence a decision asked to see (load_evidence) is read when the view shows it.
        return replace(
            view,
            transcript=lambda: conversation(store, task_id, redactor=redactor),
            lookup=lambda step_id: find_step(store, task_id, step_id),
            artifact=reader(store, redactor),
        )

    def _accounted(self, decided: Action | Decided) -> tuple[Action, TokenUsage | None]:
        """The action, and what deciding it cost (``None``: no model was called)."""
        return accounted(decided, self.prices)

    def _invalid_decision(
        self,
        state: AgentState,
        exc: DecisionFailed,
        step_id: str,
        *,
        view: View[Any],
        started: datetime,
    ) -> StepReport[Any]:
        """The model never gave a valid action: log it; the state is otherwise unchanged."""
        draft = reject(state, step_id, "decision_failed", str(exc), None)
        draft.usage = failed_usage(exc, self.prices)
        stalled = self._settling.account(state, draft, signature(None))
        after, event = self._committer.commit(
            state, draft, {"kind": "invalid"}, "policy", view=view, started=started
        )
        return StepReport(before=state, after=after, event=event, view=view, stalled=stalled)

    def _stale_before_run(
        self,
        state: AgentState,
        before: str,
        *,
        found: tuple[Draft, list[StepRecord]],
        usage: TokenUsage | None,
        view: View[Any],
        started: datetime,
    ) -> StepReport[Any]:
        """The world changed under a ``recheck`` skill or a finish (``before``): commit
        the stale steps instead of the decision."""
        draft, stale = found
        draft.usage = usage
        note = {"kind": "recheck", "stale": [r.id for r in stale], "before": before}
        after, event = self._committer.commit(
            state, draft, note, "runtime", view=view, started=started
        )
        return StepReport(before=state, after=after, event=event, view=view)


def _rests_on_stale(
    state: AgentState, action: Action, skill: Skill[Any, Any] | None
) -> tuple[str, tuple[Draft, list[StepRecord]]] | None:
    """The stale steps under a decision that must not rest on a changed world: a
    ``Finish`` (everything it depends on is re-checked first) or a call of a skill
    declared ``recheck=True``; with what it was (``finish`` or the skill's name)."""
    if isinstance(action, Finish):
        before = "finish"
    elif skill is not None and skill.recheck:
        before = skill.name
    else:
        return None
    found = stale_steps(state)
    return None if found is None else (before, found)
