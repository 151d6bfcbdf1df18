"""The step loop: load → view → decide → validate → run → verify → commit.

Each decision is one atomic commit of the new state together with its event (and
the JSON Patch from the previous version). Anything that goes wrong before the
commit (a rejected action, an illegal transition, a failing verify) writes only
an error-log entry: the skill's outputs never reach the state unverified.

Because every step starts from the stored head, stopping the process at any point
and calling :meth:`Runtime.run` again resumes from the last commit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal

from pydantic import ValidationError

from skillstate._validation import first_error
from skillstate.engine.actions import Action, AskUser, CallSkill, Fail, Finish
from skillstate.engine.agent import Agent
from skillstate.engine.lease import Holder
from skillstate.engine.policy import Decided
from skillstate.engine.transcript import conversation
from skillstate.errors import (
    ActionRejected,
    DecisionFailed,
    IllegalTransition,
    OutputNotDeclared,
    StateError,
    TaskNotFound,
    ToolNotAllowed,
    UsageError,
)
from skillstate.events import (
    Actor,
    Event,
    SkillTransition,
    TokenUsage,
    ToolCall,
    Verdict,
    utcnow,
)
from skillstate.llm.base import Prices, Usage
from skillstate.llm.tokens import count_tokens
from skillstate.skills.skill import Outcome, Skill, SkillContext
from skillstate.state.diff import Differ
from skillstate.state.fingerprint import current_digest
from skillstate.state.model import (
    AgentState,
    Decision,
    ErrorEntry,
    Intent,
    StepRecord,
    TaskStatus,
    UsageTotals,
)
from skillstate.state.redact import Redactor
from skillstate.state.secrets import secret_values
from skillstate.state.view import View
from skillstate.store.base import Store

__all__ = ["RunResult", "Runtime", "StepReport"]

StopReason = Literal["completed", "failed", "waiting_user", "max_steps", "budget"]


@dataclass(frozen=True)
class StepReport:
    """One committed version, as observers see it."""

    before: AgentState
    after: AgentState
    event: Event
    view: View | None = None
    """The view the decision was made from (``None`` for replies)."""


@dataclass(frozen=True)
class RunResult:
    """Where :meth:`Runtime.run` stopped, and why."""

    state: AgentState
    stopped: StopReason
    steps: int
    """Decisions taken during this call."""


@dataclass
class _Draft:
    """The pieces of an event a handler fills in before the commit."""

    after: AgentState
    step_id: str | None = None
    skill: Skill[Any, Any] | None = None
    verdict: Verdict | None = None
    attempts: int = 0
    tool_calls: tuple[ToolCall, ...] = ()
    transition: SkillTransition | None = None
    error: str | None = None
    found_by_probe: bool = False
    """The effect had already happened: its probe, not a new run, gave the outcome."""
    usage: TokenUsage | None = None
    """What deciding this step cost (model calls, tokens)."""


class Runtime:
    """Runs an :class:`Agent` against a :class:`Store`.

    ``max_steps`` bounds the decisions of one :meth:`run` call; ``max_retries`` is
    the retry budget of a skill that does not set its own.
    """

    def __init__(
        self,
        agent: Agent,
        store: Store,
        *,
        max_steps: int = 50,
        max_retries: int = 2,
        observer: Callable[[StepReport], None] | None = None,
        worker: str | None = None,
        lease_ttl: float = 60.0,
        max_calls: int | None = None,
        max_tokens: int | None = None,
        max_cost: float | None = None,
        prices: Prices | None = None,
        max_invalid: int | None = None,
    ) -> None:
        if max_steps < 1 or max_retries < 0:
            raise UsageError("max_steps must be >= 1 and max_retries >= 0")
        if max_invalid is not None and max_invalid < 1:
            raise UsageError("max_invalid must be >= 1")
        self.agent = agent
        self.store = store
        self.max_steps = max_steps
        self.max_retries = max_retries
        self.observer = observer
        self.worker = worker
        """With a worker id, :meth:`run` holds a lease on the task while it works."""
        self.lease_ttl = lease_ttl
        # Budgets per task, checked against the card's usage totals (which survive
        # resumes) before every decision.
        self.max_calls = max_calls
        self.max_tokens = max_tokens
        self.max_cost = max_cost
        self.prices = prices
        self.max_invalid = max_invalid
        """Stop a run after this many decisions in a row that stayed invalid after
        their repairs: a model that cannot produce an action here would otherwise
        spend the whole step budget (resumable, like the other budgets)."""
        # The raw stored document of the head each task was last loaded or committed
        # at. Patches are made against it, not against the parsed state: after a
        # schema migration the two differ, and a store replays patches over raw docs.
        self._raw: dict[str, dict[str, Any]] = {}
        self._differs: dict[str, Differ] = {}

    # ------------------------------------------------------------------ public

    def start(self, task_id: str, **fields: Any) -> AgentState:
        """Create the task (version 1). Raises ``StaleState`` if it exists."""
        state = self.agent.new_state(task_id, **fields)
        return self._commit(None, state, {"kind": "create"}, "runtime", _Draft(after=state))[0]

    def load(self, task_id: str) -> AgentState:
        """The head state of a task, validated (and migrated) into the agent's state class.

        Raises :class:`~skillstate.errors.StateCorrupted` when the stored record
        does not validate; nothing is written then.
        """
        checkpoint = self.store.load(task_id)
        state = self.agent.parse_state(checkpoint.state, task_id=task_id)
        cached = self._raw.get(task_id)
        if cached is None or cached.get("version") != checkpoint.version:
            # A version is written once (compare-and-set), so a cached document of the same
            # version is the head's: keeping it keeps the differ's texts valid.
            self._raw[task_id] = checkpoint.state
        return state

    def run(
        self, task_id: str, *, inputs: Sequence[str] = (), max_steps: int | None = None
    ) -> RunResult:
        """Decide and commit until the task ends, waits for a user, or hits ``max_steps``.

        ``inputs`` answer the task's questions in order; when they run out the task
        pauses in ``waiting_user``. An unknown ``task_id`` is created first.
        """
        budget = max_steps if max_steps is not None else self.max_steps
        queue = list(inputs)
        try:
            self.store.load(task_id)
            resumed = True
        except TaskNotFound:
            self.start(task_id)
            resumed = False
        holder = Holder(self.store, task_id, self.worker, self.lease_ttl) if self.worker else None
        if holder is not None:
            holder.acquire()
        try:
            if resumed:
                self.recheck(task_id)
            return self._loop(task_id, queue, budget, holder)
        finally:
            if holder is not None:
                holder.release()

    def _loop(
        self, task_id: str, queue: list[str], budget: int, holder: Holder | None
    ) -> RunResult:
        steps = invalid = 0
        while True:
            if holder is not None:
                holder.renew()
            state = self.load(task_id)
            if state.pending_effect is not None:
                # A crash (or a kill) came between recording an effect and its outcome.
                self._settle(state, resumed=True)
                continue
            if state.status is TaskStatus.COMPLETED:
                return RunResult(state, "completed", steps)
            if state.status is TaskStatus.FAILED:
                return RunResult(state, "failed", steps)
            if state.status is TaskStatus.WAITING_USER:
                if not queue:
                    return RunResult(state, "waiting_user", steps)
                self.reply(task_id, queue.pop(0))
                continue
            if steps >= budget:
                return RunResult(state, "max_steps", steps)
            spent = self._over_budget(state)
            if spent is not None:
                return RunResult(self._stop_for_budget(state, spent), "budget", steps)
            report = self._step(state)  # decide from the state just loaded: one read per step
            steps += 1
            invalid = invalid + 1 if report.event.action.get("kind") == "invalid" else 0
            if self.max_invalid is not None and invalid >= self.max_invalid:
                reason = f"{invalid} invalid decisions in a row (max_invalid {self.max_invalid})"
                return RunResult(self._stop_for_budget(report.after, reason), "budget", steps)

    def _over_budget(self, state: AgentState) -> str | None:
        used = state.usage
        if self.max_calls is not None and used.calls >= self.max_calls:
            return f"model call budget reached ({used.calls} of --max-calls {self.max_calls})"
        if self.max_tokens is not None and used.prompt >= self.max_tokens:
            return (
                f"prompt token budget reached ({used.prompt:,} of --max-tokens {self.max_tokens:,})"
            )
        if self.max_cost is not None and used.cost >= self.max_cost:
            return f"cost budget reached ({used.cost:.4f} of --max-cost {self.max_cost:g})"
        return None

    def _stop_for_budget(self, state: AgentState, reason: str) -> AgentState:
        """Record why the task stopped (once); it stays running and resumable."""
        message = f"{reason}; resume with a higher limit to continue"
        if (
            state.errors
            and state.errors[-1].kind == "budget"
            and state.errors[-1].message == message
        ):
            return state
        after = state.with_error(ErrorEntry(kind="budget", message=message))
        action = {"kind": "budget", "reason": reason}
        return self._commit(state, after, action, "runtime", _Draft(after=after, error=message))[0]

    def recheck(self, task_id: str) -> list[StepRecord]:
        """Recompute the fingerprints of a task's completed steps; mark changed ones stale.

        A stale step leaves ``completed_steps``, goes back to the front of
        ``pending_steps``, and gets a ``stale_step`` entry in the error log, all in
        one commit. Finished tasks are left alone. Returns the stale steps.
        """
        state = self.load(task_id)
        if state.status.is_terminal or state.pending_effect is not None:
            return []
        stale: list[StepRecord] = []
        after = state
        for record in state.completed_steps:
            for fp in record.fingerprints:
                now = current_digest(fp.kind, fp.target)
                if now == fp.digest:
                    continue
                stale.append(record)
                after = after.with_error(
                    ErrorEntry(
                        kind="stale_step",
                        message=f"{fp.kind} {fp.target} changed since step {record.id} "
                        f"({_short(fp.digest)} -> {_short(now)}); the step is pending again",
                        step_id=record.id,
                        skill=record.skill,
                    )
                )
                break
        if not stale:
            return []
        labels = [r.skill or r.step for r in stale]
        kept = tuple(r for r in state.completed_steps if r not in stale)
        pending = (*dict.fromkeys(labels), *(p for p in state.pending_steps if p not in labels))
        after = after.evolve(completed_steps=kept, pending_steps=pending)
        action = {"kind": "recheck", "stale": [r.id for r in stale]}
        self._commit(state, after, action, "runtime", _Draft(after=after, error="stale steps"))
        return stale

    def reply(self, task_id: str, text: str) -> AgentState:
        """Answer the open question of a ``waiting_user`` task; it becomes ``running``."""
        state = self.load(task_id)
        if state.status is not TaskStatus.WAITING_USER:
            raise UsageError(
                f"task {task_id!r} is not waiting for a reply (status: {state.status.value})"
            )
        after = state.evolve(status=TaskStatus.RUNNING, inbox=text, question=None)
        action = {"kind": "reply", "text": text, "question": state.question}
        return self._commit(state, after, action, "user", _Draft(after=after))[0]

    def step(self, task_id: str) -> StepReport:
        """Take exactly one decision on a running task and commit it.

        A task with an effect in flight settles that effect instead.
        """
        state = self.load(task_id)
        if state.pending_effect is not None:
            return self._settle(state, resumed=True)
        return self._step(state)

    def _step(self, state: AgentState) -> StepReport:
        task_id = state.task_id
        if state.status.is_terminal or state.status is TaskStatus.WAITING_USER:
            raise UsageError(f"task {task_id!r} cannot step (status: {state.status.value})")
        view = self._view(state)
        started = utcnow()
        step_id = f"{state.version + 1:04d}"
        try:
            decided = self.agent.policy.decide(view)
        except DecisionFailed as exc:
            return self._invalid_decision(state, exc, step_id, view=view, started=started)
        action, usage = self._accounted(decided, view)
        if isinstance(action, CallSkill):
            intent = self._intent_for(state, action, step_id)
            if intent is not None:
                return self._record_intent(
                    state, action, intent, view=view, started=started, usage=usage
                )
        draft = self._handle(state, action, step_id)
        draft.usage = usage
        after, event = self._commit(
            state,
            draft.after,
            action.model_dump(mode="json"),
            "policy",
            draft,
            view=view,
            started=started,
        )
        return StepReport(before=state, after=after, event=event, view=view)

    def _view(self, state: AgentState) -> View:
        view = self.agent.view(state)
        store, task_id = self.store, state.task_id
        # History baselines need the conversation; it is rebuilt only if asked for.
        return replace(view, transcript=lambda: conversation(store, task_id))

    def _accounted(self, decided: Action | Decided, view: View) -> tuple[Action, TokenUsage]:
        """The action, and what deciding it cost (counted offline for scripted policies)."""
        if isinstance(decided, Decided):
            u = decided.usage
            return decided.action, TokenUsage(
                prompt=u.prompt,
                completion=u.completion,
                cached=u.cached,
                calls=decided.calls,
                repairs=decided.repairs,
                estimated=u.estimated,
                model=decided.model or None,
                cost=self.prices.cost(u.prompt, u.completion, u.cached) if self.prices else None,
                duration_ms=round(decided.duration_ms, 1),
            )
        # No model was called: record what one would have been sent and returned.
        reply = count_tokens(decided.model_dump_json())
        return decided, TokenUsage(prompt=view.tokens, completion=reply, estimated=True)

    def _invalid_decision(
        self,
        state: AgentState,
        exc: DecisionFailed,
        step_id: str,
        *,
        view: View,
        started: datetime,
    ) -> StepReport:
        """The model never gave a valid action: log it; the state is otherwise unchanged."""
        u = exc.usage if isinstance(exc.usage, Usage) else Usage()
        usage = TokenUsage(
            prompt=u.prompt,
            completion=u.completion,
            cached=u.cached,
            calls=exc.calls,
            repairs=exc.repairs,
            estimated=u.estimated,
            cost=self.prices.cost(u.prompt, u.completion, u.cached) if self.prices else None,
        )
        draft = _reject(state, step_id, "decision_failed", str(exc), None)
        draft.usage = usage
        after, event = self._commit(
            state, draft.after, {"kind": "invalid"}, "policy", draft, view=view, started=started
        )
        return StepReport(before=state, after=after, event=event, view=view)

    # ------------------------------------------------------------------ effects

    def _intent_for(self, state: AgentState, action: CallSkill, step_id: str) -> Intent | None:
        """The intent to record first when ``action`` calls an effectful skill, else None.

        A call that will be rejected anyway returns None and goes the normal way
        (its rejection is logged; no intent, nothing runs).
        """
        skill = self.agent.skills.get(action.skill)
        if skill is None or not skill.effects:
            return None
        try:
            _, params, target = self._validate_call(state, action)
        except (ActionRejected, IllegalTransition):
            return None
        record_id = f"{step_id}-{skill.name}"
        return Intent(
            step_id=record_id,
            skill=skill.name,
            params=params.model_dump(mode="json"),
            target=target,
            reason=action.reason,
            key=f"{state.task_id}:{record_id}",
        )

    def _record_intent(
        self,
        state: AgentState,
        action: CallSkill,
        intent: Intent,
        *,
        view: View,
        started: datetime,
        usage: TokenUsage,
    ) -> StepReport:
        """Commit the intent (the decision), then run the effect and commit its outcome."""
        after = state.evolve(
            pending_effect=intent, last_decision=_decision(action, intent.skill), inbox=None
        )
        skill = self.agent.skills[intent.skill]
        draft = _Draft(after=after, step_id=intent.step_id, skill=skill, usage=usage)
        recorded, _ = self._commit(
            state,
            after,
            action.model_dump(mode="json"),
            "policy",
            draft,
            view=view,
            started=started,
        )
        return self._settle(recorded, resumed=False)

    def _settle(self, state: AgentState, *, resumed: bool) -> StepReport:
        """Run (or, after a crash, first probe) the pending effect and commit its outcome."""
        intent = state.pending_effect
        assert intent is not None
        started = utcnow()
        action = CallSkill(skill=intent.skill, params=intent.params, reason=intent.reason)
        step_number = intent.step_id.split("-", 1)[0]
        skill = self.agent.skills.get(intent.skill)
        if skill is None:
            message = f"effect of unknown skill {intent.skill!r} cannot be settled"
            draft = _reject(state, step_number, "action_rejected", message, intent.skill)
            draft.after = draft.after.evolve(pending_effect=None)
        else:
            params = skill.params.model_validate(intent.params)
            draft = self._attempts(
                state,
                action,
                skill,
                params=params,
                target=intent.target,
                step_id=step_number,
                probe_first=resumed,
            )
            draft.after = draft.after.evolve(pending_effect=None)
        kind = "effect_resumed" if resumed else "effect"
        settled: dict[str, Any] = {"kind": kind, "skill": intent.skill, "key": intent.key}
        if draft.found_by_probe:
            settled["found_by_probe"] = True
        after, event = self._commit(
            state,
            draft.after,
            settled,
            "runtime",
            draft,
            started=started,
        )
        return StepReport(before=state, after=after, event=event)

    # ------------------------------------------------------------------ handlers

    def _handle(self, state: AgentState, action: Action, step_id: str) -> _Draft:
        try:
            if isinstance(action, CallSkill):
                return self._call_skill(state, action, step_id)
            if isinstance(action, AskUser):
                if not self.agent.can_ask:
                    # Any policy, not only a model's: an unattended task never waits.
                    message = "ask_user is not available: this agent runs unattended"
                    return _reject(state, step_id, "action_rejected", message, None)
                return self._ask_user(state, action, step_id)
            if isinstance(action, Finish):
                return self._finish(state, action, step_id)
            return self._fail(state, action, step_id)
        except IllegalTransition as exc:
            return _reject(state, step_id, "illegal_transition", str(exc), _skill_of(action))
        except ActionRejected as exc:
            return _reject(state, step_id, "action_rejected", str(exc), _skill_of(action))

    def _call_skill(self, state: AgentState, action: CallSkill, step_id: str) -> _Draft:
        skill, params, target = self._validate_call(state, action)
        return self._attempts(state, action, skill, params=params, target=target, step_id=step_id)

    def _validate_call(
        self, state: AgentState, action: CallSkill
    ) -> tuple[Skill[Any, Any], Any, str]:
        """The skill, its validated params and the step it enters; raises if refused."""
        skill = self.agent.skills.get(action.skill)
        if skill is None:
            raise ActionRejected(
                f"unknown skill {action.skill!r}; known: {', '.join(self.agent.skills.names)}"
            )
        if not skill.when(state):
            raise ActionRejected(f"skill {skill.name!r} does not apply now (its `when` is false)")
        try:
            params = skill.params.model_validate(action.params)
        except ValidationError as exc:
            raise ActionRejected(
                f"invalid params for {skill.name!r}: {first_error(exc, 'params')}"
            ) from exc
        target = action.next_step or skill.step
        if target is not None:
            self.agent.machine.check(state.current_step, target)
        return skill, params, target or state.current_step

    def _attempts(
        self,
        state: AgentState,
        action: CallSkill,
        skill: Skill[Any, Any],
        *,
        params: Any,
        target: str,
        step_id: str,
        probe_first: bool = False,
    ) -> _Draft:
        retries = skill.max_retries if skill.max_retries is not None else self.max_retries
        max_attempts = retries + 1
        calls: list[ToolCall] = []
        errors: list[ErrorEntry] = []
        outcome: Outcome | None = None
        ctx: SkillContext | None = None
        for attempt in range(1, max_attempts + 1):
            ctx = self._context(skill, state, step_id, attempt)
            # An effect whose outcome is unknown (a crash, or a failed attempt) is
            # probed before it is run again: it may already have happened.
            probe = skill.effects and (probe_first or attempt > 1)
            outcome, candidate, verdict, failure = _attempt(skill, state, params, ctx, probe=probe)
            calls += ctx.calls
            if failure is None:
                transition = None
                if skill.name != state.active_skill:
                    transition = SkillTransition(
                        from_skill=state.active_skill, to_skill=skill.name, reason=action.reason
                    )
                record = StepRecord(
                    id=f"{step_id}-{skill.name}",
                    step=target,
                    action="call_skill",
                    skill=skill.name,
                    summary=outcome.summary if outcome else "",
                    fingerprints=tuple(ctx.fingerprints),
                )
                after = (
                    candidate.with_evidence(outcome.evidence if outcome else ())
                    .evolve(
                        status=TaskStatus.RUNNING,
                        current_step=target,
                        active_skill=skill.name,
                        last_decision=_decision(action, skill.name),
                        inbox=None,
                        question=None,
                    )
                    .with_step(record)
                )
                return _Draft(
                    after=after,
                    step_id=record.id,
                    skill=skill,
                    verdict=verdict,
                    attempts=attempt,
                    tool_calls=tuple(calls),
                    transition=transition,
                    found_by_probe=ctx.found_by_probe,
                )
            kind, message = failure
            errors.append(
                ErrorEntry(
                    kind=kind,
                    message=message,
                    step_id=step_id,
                    skill=skill.name,
                    attempt=attempt,
                    max_attempts=max_attempts,
                )
            )
            if kind == "output_not_declared":
                break  # a contract bug, not bad luck: retrying cannot help
        return self._give_up(
            state,
            action,
            skill,
            step_id=step_id,
            errors=errors,
            calls=calls,
            outcome=outcome,
            ctx=ctx,
        )

    def _give_up(
        self,
        state: AgentState,
        action: CallSkill,
        skill: Skill[Any, Any],
        *,
        step_id: str,
        errors: list[ErrorEntry],
        calls: list[ToolCall],
        outcome: Outcome | None,
        ctx: SkillContext | None,
    ) -> _Draft:
        last = errors[-1]
        rolled_back = "no rollback declared"
        if skill.has_rollback and ctx is not None:
            try:
                skill.rollback(state, outcome, ctx)
                rolled_back = "rolled back"
            except Exception as exc:
                rolled_back = f"rollback failed: {type(exc).__name__}: {exc}"
                errors.append(
                    last.model_copy(update={"kind": "rollback_failed", "message": str(exc)})
                )
        summary = ErrorEntry(
            kind="step_failed",
            message=f"{skill.name} failed after {last.attempt} attempt(s): {last.message}; "
            f"{rolled_back}",
            step_id=step_id,
            skill=skill.name,
            attempt=last.attempt,
            max_attempts=last.max_attempts,
        )
        after = state
        for entry in (*errors, summary):
            after = after.with_error(entry)
        after = after.evolve(
            status=TaskStatus.RUNNING,
            last_decision=_decision(action, skill.name),
            inbox=None,
        )
        return _Draft(
            after=after,
            step_id=step_id,
            skill=skill,
            verdict=Verdict.failed(last.message),
            attempts=last.attempt,
            tool_calls=tuple(calls),
            error=summary.message,
        )

    def _ask_user(self, state: AgentState, action: AskUser, step_id: str) -> _Draft:
        target = action.next_step or state.current_step
        if action.next_step is not None:
            self.agent.machine.check(state.current_step, target)
        record = StepRecord(
            id=f"{step_id}-ask_user", step=target, action="ask_user", summary=action.question
        )
        after = state.evolve(
            status=TaskStatus.WAITING_USER,
            question=action.question,
            current_step=target,
            last_decision=_decision(action, target),
            inbox=None,
        ).with_step(record)
        return _Draft(after=after, step_id=record.id)

    def _finish(self, state: AgentState, action: Finish, step_id: str) -> _Draft:
        machine = self.agent.machine
        target = action.next_step or machine.finish_step(state.current_step)
        if target is None:
            raise IllegalTransition(
                state.current_step, "<final step>", machine.allowed(state.current_step)
            )
        if target != state.current_step:
            machine.check(state.current_step, target)
        if target not in machine.final:
            raise ActionRejected(f"cannot finish in {target!r}: it is not a final step")
        record = StepRecord(
            id=f"{step_id}-finish", step=target, action="finish", summary=action.summary
        )
        after = state.evolve(
            status=TaskStatus.COMPLETED,
            current_step=target,
            last_decision=_decision(action, target),
            inbox=None,
            question=None,
            active_skill=None,
        ).with_step(record)
        transition = None
        if state.active_skill is not None:
            transition = SkillTransition(
                from_skill=state.active_skill, to_skill=None, reason="task finished"
            )
        return _Draft(after=after, step_id=record.id, transition=transition)

    def _fail(self, state: AgentState, action: Fail, step_id: str) -> _Draft:
        message = action.reason or "the policy gave up"
        record = StepRecord(id=f"{step_id}-fail", step=state.current_step, action="fail")
        after = (
            state.with_error(ErrorEntry(kind="task_failed", message=message, step_id=step_id))
            .evolve(status=TaskStatus.FAILED, last_decision=_decision(action, None), inbox=None)
            .with_step(record)
        )
        return _Draft(after=after, step_id=record.id, error=message)

    # ------------------------------------------------------------------ plumbing

    def _context(
        self, skill: Skill[Any, Any], state: AgentState, step_id: str, attempt: int
    ) -> SkillContext:
        record_id = f"{step_id}-{skill.name}"
        return SkillContext(
            skill=skill.name,
            task_id=state.task_id,
            step_id=record_id,
            attempt=attempt,
            tools={name: self.agent.tools[name] for name in skill.tools},
            store=self.store,
            idempotency_key=f"{state.task_id}:{record_id}" if skill.effects else None,
            redactor=self._redactor(state),
        )

    @staticmethod
    def _redactor(*states: AgentState | None) -> Redactor:
        values: list[str] = []
        for state in states:
            if state is not None:
                values += secret_values(state)
        return Redactor(values)

    def _commit(
        self,
        before: AgentState | None,
        after: AgentState,
        action: dict[str, Any],
        actor: Actor,
        draft: _Draft,
        *,
        view: View | None = None,
        started: datetime | None = None,
    ) -> tuple[AgentState, Event]:
        expected = before.version if before is not None else 0
        if draft.usage is not None:
            after = after.evolve(usage=_add_usage(after.usage, draft.usage))
        final = after.evolve(version=expected + 1)
        document = final.to_json()
        redactor = self._redactor(before, final)
        if redactor:
            # A secret copied into a plain field (an error message, a summary) is
            # masked in the state itself, so memory and store never disagree.
            cleaned = redactor.json(document)
            if cleaned != document:
                final = self.agent.parse_state(cleaned)
                document = final.to_json()
        base: dict[str, Any] = {}
        if before is not None:
            raw = self._raw.get(before.task_id)
            base = raw if raw is not None and raw.get("version") == expected else before.to_json()
        patch, stored = self._differs.setdefault(final.task_id, Differ()).diff(base, document)
        event = Event(
            task_id=final.task_id,
            version=final.version,
            actor=actor,
            action=action,
            step_id=draft.step_id,
            skill=draft.skill.name if draft.skill else None,
            skill_version=draft.skill.version if draft.skill else None,
            verdict=draft.verdict,
            attempts=draft.attempts,
            tool_calls=draft.tool_calls,
            skill_transition=draft.transition,
            error=draft.error,
            patch=patch,
            view_tokens=view.tokens if view else None,
            usage=draft.usage,
            started_at=started or utcnow(),
        )
        if redactor:
            event = redactor.event(event)
        self.store.commit(final.task_id, expected, stored, event)
        self._raw[final.task_id] = document
        if self.observer is not None and before is not None:
            self.observer(StepReport(before=before, after=final, event=event, view=view))
        return final, event


def _attempt(
    skill: Skill[Any, Any], state: AgentState, params: Any, ctx: SkillContext, *, probe: bool
) -> tuple[Outcome | None, AgentState, Verdict | None, tuple[str, str] | None]:
    """Run (or probe) and verify once: the outcome, the candidate, the verdict, a failure."""
    try:
        found = skill.probe(state, params, ctx) if probe else None
        ctx.found_by_probe = found is not None
        outcome = found if found is not None else skill.run(state, params, ctx)
    except ToolNotAllowed as exc:
        return None, state, None, ("tool_not_allowed", str(exc))
    except Exception as exc:
        return None, state, None, ("skill_error", f"{type(exc).__name__}: {exc}")
    undeclared = skill.undeclared_writes(outcome.writes)
    if undeclared:
        refused = OutputNotDeclared(skill.name, undeclared, skill.outputs)
        return outcome, state, None, ("output_not_declared", str(refused))
    try:
        candidate = state.with_writes(outcome.writes)
    except StateError as exc:
        return outcome, state, None, ("invalid_output", str(exc))
    try:
        verdict = skill.verify(candidate, outcome)
    except Exception as exc:
        return outcome, state, None, ("verify_error", f"{type(exc).__name__}: {exc}")
    if not verdict.ok:
        return outcome, state, verdict, ("verify_failed", verdict.reason or "verify failed")
    return outcome, candidate, verdict, None


def _add_usage(totals: UsageTotals, usage: TokenUsage) -> UsageTotals:
    return UsageTotals(
        calls=totals.calls + usage.calls,
        prompt=totals.prompt + usage.prompt,
        completion=totals.completion + usage.completion,
        cached=totals.cached + usage.cached,
        repairs=totals.repairs + usage.repairs,
        cost=totals.cost + (usage.cost or 0.0),
    )


def _short(digest: str) -> str:
    return digest if len(digest) <= 19 else digest[:19] + "…"


def _decision(action: Action, target: str | None) -> Decision:
    return Decision(action=action.kind, target=target, reason=action.reason)


def _skill_of(action: Action) -> str | None:
    return action.skill if isinstance(action, CallSkill) else None


def _reject(state: AgentState, step_id: str, kind: str, message: str, skill: str | None) -> _Draft:
    # "Nothing else changes": only the error log records a refused action.
    entry = ErrorEntry(kind=kind, message=message, step_id=step_id, skill=skill)
    return _Draft(
        after=state.with_error(entry),
        step_id=step_id,
        verdict=Verdict.failed(message),
        error=message,
    )
