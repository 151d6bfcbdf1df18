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
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import ValidationError

from skillstate._validation import first_error
from skillstate.engine.actions import Action, AskUser, CallSkill, Fail, Finish
from skillstate.engine.agent import Agent
from skillstate.errors import (
    ActionRejected,
    IllegalTransition,
    OutputNotDeclared,
    StateError,
    TaskNotFound,
    ToolNotAllowed,
    UsageError,
)
from skillstate.events import Actor, Event, SkillTransition, ToolCall, Verdict, utcnow
from skillstate.skills.skill import Outcome, Skill, SkillContext
from skillstate.state.diff import make_patch
from skillstate.state.model import AgentState, Decision, ErrorEntry, StepRecord, TaskStatus
from skillstate.state.view import View
from skillstate.store.base import Store

__all__ = ["RunResult", "Runtime", "StepReport", "rollback_task"]

StopReason = Literal["completed", "failed", "waiting_user", "max_steps"]


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
    ) -> None:
        if max_steps < 1 or max_retries < 0:
            raise UsageError("max_steps must be >= 1 and max_retries >= 0")
        self.agent = agent
        self.store = store
        self.max_steps = max_steps
        self.max_retries = max_retries
        self.observer = observer

    # ------------------------------------------------------------------ public

    def start(self, task_id: str, **fields: Any) -> AgentState:
        """Create the task (version 1). Raises ``StaleState`` if it exists."""
        state = self.agent.new_state(task_id, **fields)
        empty: dict[str, Any] = {}
        return self._commit(empty, state, {"kind": "create"}, "runtime", _Draft(after=state))[0]

    def load(self, task_id: str) -> AgentState:
        """The head state of a task, validated into the agent's state class."""
        checkpoint = self.store.load(task_id)
        return self.agent.parse_state(checkpoint.state)

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
        except TaskNotFound:
            self.start(task_id)
        steps = 0
        while True:
            state = self.load(task_id)
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
            self._step(state)  # decide from the state just loaded: one read per step
            steps += 1

    def reply(self, task_id: str, text: str) -> AgentState:
        """Answer the open question of a ``waiting_user`` task; it becomes ``running``."""
        state = self.load(task_id)
        if state.status is not TaskStatus.WAITING_USER:
            raise UsageError(
                f"task {task_id!r} is not waiting for a reply (status: {state.status.value})"
            )
        after = state.evolve(status=TaskStatus.RUNNING, inbox=text, question=None)
        action = {"kind": "reply", "text": text, "question": state.question}
        return self._commit(state.to_json(), after, action, "user", _Draft(after=after))[0]

    def step(self, task_id: str) -> StepReport:
        """Take exactly one decision on a running task and commit it."""
        return self._step(self.load(task_id))

    def _step(self, state: AgentState) -> StepReport:
        task_id = state.task_id
        if state.status.is_terminal or state.status is TaskStatus.WAITING_USER:
            raise UsageError(f"task {task_id!r} cannot step (status: {state.status.value})")
        view = self.agent.view(state)
        started = utcnow()
        action = self.agent.policy.decide(view)
        step_id = f"{state.version + 1:04d}"
        draft = self._handle(state, action, step_id)
        after, event = self._commit(
            state.to_json(),
            draft.after,
            action.model_dump(mode="json"),
            "policy",
            draft,
            view=view,
            started=started,
        )
        return StepReport(before=state, after=after, event=event, view=view)

    # ------------------------------------------------------------------ handlers

    def _handle(self, state: AgentState, action: Action, step_id: str) -> _Draft:
        try:
            if isinstance(action, CallSkill):
                return self._call_skill(state, action, step_id)
            if isinstance(action, AskUser):
                return self._ask_user(state, action, step_id)
            if isinstance(action, Finish):
                return self._finish(state, action, step_id)
            return self._fail(state, action, step_id)
        except IllegalTransition as exc:
            return _reject(state, step_id, "illegal_transition", str(exc), _skill_of(action))
        except ActionRejected as exc:
            return _reject(state, step_id, "action_rejected", str(exc), _skill_of(action))

    def _call_skill(self, state: AgentState, action: CallSkill, step_id: str) -> _Draft:
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
        return self._attempts(
            state,
            action,
            skill,
            params=params,
            target=target or state.current_step,
            step_id=step_id,
        )

    def _attempts(
        self,
        state: AgentState,
        action: CallSkill,
        skill: Skill[Any, Any],
        *,
        params: Any,
        target: str,
        step_id: str,
    ) -> _Draft:
        retries = skill.max_retries if skill.max_retries is not None else self.max_retries
        max_attempts = retries + 1
        calls: list[ToolCall] = []
        errors: list[ErrorEntry] = []
        outcome: Outcome | None = None
        ctx: SkillContext | None = None
        for attempt in range(1, max_attempts + 1):
            ctx = self._context(skill, state, step_id, attempt)
            outcome, candidate, verdict, failure = _attempt(skill, state, params, ctx)
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
        return SkillContext(
            skill=skill.name,
            task_id=state.task_id,
            step_id=f"{step_id}-{skill.name}",
            attempt=attempt,
            tools={name: self.agent.tools[name] for name in skill.tools},
            store=self.store,
        )

    def _commit(
        self,
        before: dict[str, Any],
        after: AgentState,
        action: dict[str, Any],
        actor: Actor,
        draft: _Draft,
        *,
        view: View | None = None,
        started: datetime | None = None,
    ) -> tuple[AgentState, Event]:
        expected = int(before.get("version", 0))
        final = after.evolve(version=expected + 1)
        document = final.to_json()
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
            patch=make_patch(before, document),
            view_tokens=view.tokens if view else None,
            started_at=started or utcnow(),
        )
        self.store.commit(final.task_id, expected, document, event)
        if self.observer is not None and before:
            prior = self.agent.parse_state(before)
            self.observer(StepReport(before=prior, after=final, event=event, view=view))
        return final, event


def _attempt(
    skill: Skill[Any, Any], state: AgentState, params: Any, ctx: SkillContext
) -> tuple[Outcome | None, AgentState, Verdict | None, tuple[str, str] | None]:
    """Run and verify once: the outcome, the candidate state, the verdict, a failure."""
    try:
        outcome = skill.run(state, params, ctx)
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


def rollback_task(store: Store, task_id: str, to_version: int) -> int:
    """Make the state of ``to_version`` the new head, as a new commit.

    History is kept: the rollback is itself a version with its own event, and can
    be rolled back in turn. Returns the new version.
    """
    head = store.load(task_id)
    if not 1 <= to_version < head.version:
        raise UsageError(
            f"--to must be between 1 and {head.version - 1} (task {task_id!r} is at "
            f"version {head.version})"
        )
    target = store.checkpoint(task_id, to_version)
    document = dict(target.state)
    document["version"] = head.version + 1
    event = Event(
        task_id=task_id,
        version=head.version + 1,
        actor="human",
        action={"kind": "rollback", "to_version": to_version},
        patch=make_patch(head.state, document),
    )
    return store.commit(task_id, head.version, document, event)
