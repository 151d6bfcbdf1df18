"""The act phase: validate a decided action and carry it out against a state.

A skill call is validated (the skill exists, its ``when`` holds, its params
parse, the machine allows its step), then attempted up to its retry budget:
run (or, for an effect whose outcome is unknown, probe first), apply the
proposed writes to a copy, verify, check the agent's invariants. Only a
passing attempt's writes reach the draft. A question, a finish and a failure
have their own rules; every refusal becomes an error-log entry and nothing else.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ValidationError

from skillstate._validation import first_error
from skillstate.control.gates import Gated, ToolGate
from skillstate.control.waits import start_wait
from skillstate.engine import trace
from skillstate.engine.actions import (
    Action,
    AskUser,
    CallSkill,
    Finish,
    LoadEvidence,
    Map,
    Revise,
    Spawn,
    WaitFor,
    WaitUntil,
)
from skillstate.engine.agent import Agent, PerTask
from skillstate.engine.draft import Draft, decision, reject
from skillstate.engine.evidence import load_evidence
from skillstate.errors import (
    ActionRejected,
    IllegalTransition,
    MemoryNotDeclared,
    OutputNotDeclared,
    SharedNotDeclared,
    SkillstateError,
    StateError,
    ToolApprovalNeeded,
    ToolNotAllowed,
)
from skillstate.events import SkillTransition, ToolCall, Verdict
from skillstate.fanout.spawn import spawn_draft, spawn_problem, spawned_by
from skillstate.limits import problem
from skillstate.memory.runtime import bound_scopes, write_problem
from skillstate.shared.access import Sharing
from skillstate.skills.binding import check_bound
from skillstate.skills.handles import resolve_handles
from skillstate.skills.skill import Outcome, Skill, SkillContext, VerifyContext
from skillstate.state.depends import can_go_stale, undo_values
from skillstate.state.model import (
    AgentState,
    ErrorEntry,
    ErrorKind,
    StepRecord,
    TaskStatus,
    ToolApproval,
)
from skillstate.state.protect import open_params, secret_texts
from skillstate.state.redact import Redactor
from skillstate.store.base import Store
from skillstate.store.sealing import write_artifact

__all__ = ["Acting", "Attempt"]


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


class RedactorFor(Protocol):
    """Builds the redactor of a step (:meth:`~skillstate.engine.commit.Committer.redactor`)."""

    def __call__(self, *states: AgentState | None, extra: Iterable[str] = ()) -> Redactor: ...


@dataclass(frozen=True)
class Acting:
    """Carries out actions for one agent against one store (the runtime's act phase)."""

    agent: Agent[Any]
    store: Store
    max_retries: int
    redactor: RedactorFor
    fence: Callable[[str], int | None] = lambda task_id: None
    """The lease generation the runtime holds the task under (handed to effects)."""

    # ------------------------------------------------------------------ dispatch

    def handle(self, state: AgentState, action: Action, step_id: str) -> Draft:
        """The draft of ``action`` taken in ``state`` (a refusal is a draft too)."""
        try:
            if isinstance(action, CallSkill):
                skill, params, target = self.validate_call(state, action)
                return self.attempts(
                    state, action, skill, params=params, target=target, step_id=step_id
                )
            if isinstance(action, AskUser):
                return self._ask_user(state, action, step_id)
            if isinstance(action, WaitUntil | WaitFor):
                return start_wait(self.agent, state, action, step_id)
            if isinstance(action, LoadEvidence):
                return load_evidence(self.store, state, action, step_id)
            if isinstance(action, Spawn | Map):  # skillstate.fanout
                return spawn_draft(self.agent, state, action, step_id)
            if isinstance(action, Finish):
                return self._finish(state, action, step_id)
            if isinstance(action, Revise):
                return self._revise(state, action, step_id)
            return self._fail(state, action, step_id)
        except IllegalTransition as exc:
            return reject(state, step_id, "illegal_transition", str(exc), _skill_of(action))
        except ActionRejected as exc:
            return reject(state, step_id, "action_rejected", str(exc), _skill_of(action))

    def validate_call(
        self, state: AgentState, action: CallSkill
    ) -> tuple[Skill[Any, Any], BaseModel, str]:
        """The skill, its validated params and the step it enters; raises if refused."""
        skill = self.agent.skills.get(action.skill)
        if skill is None:
            raise ActionRejected(
                f"unknown skill {action.skill!r}; known: {_some(self.agent.skills.names)}"
            )
        if not skill.when(state):
            raise ActionRejected(f"skill {skill.name!r} does not apply now (its `when` is false)")
        limits = self.agent.limits
        found = problem(action.params, chars=limits.param_chars, depth=limits.depth)
        if found is not None:
            raise ActionRejected(f"params for {skill.name!r} refused: {found}")
        if self.agent.bind_params:
            check_bound(skill.name, skill.params, state, action.params)
        params = self.parse_params(skill, state, action.params)
        target = action.next_step or skill.step
        if target is not None:
            self.agent.machine.check(state.current_step, target)
            if action.next_step is not None:
                self._check_not_stranded(state, target)
        return skill, params, target or state.current_step

    def parse_params(
        self, skill: Skill[Any, Any], state: AgentState, raw: Mapping[str, Any]
    ) -> BaseModel:
        """The params a skill is given: sealed values opened, handles of ``Sensitive``
        fields replaced by their values, validated. Raises :class:`ActionRejected`."""
        try:
            return skill.params.model_validate(resolve_handles(open_params(raw), state))
        except ValidationError as exc:
            raise ActionRejected(
                f"invalid params for {skill.name!r}: {first_error(exc, 'params')}"
            ) from exc

    # ------------------------------------------------------------------ skills

    def attempts(
        self,
        state: AgentState,
        action: CallSkill,
        skill: Skill[Any, Any],
        *,
        params: BaseModel,
        target: str,
        step_id: str,
        key: str | None = None,
        approved: tuple[ToolApproval, ...] = (),
    ) -> Draft:
        """Run ``skill`` up to its retry budget; the first verified attempt is the draft.

        A call of a gated tool that needs a person's approval (none of ``approved``
        matches it) ends the attempts: :class:`ToolApprovalNeeded` leaves, carrying the
        tool calls made so far, and nothing of the attempt is kept."""
        retries = skill.max_retries if skill.max_retries is not None else self.max_retries
        max_attempts = retries + 1
        calls: list[ToolCall] = []
        errors: list[ErrorEntry] = []
        result: Attempt | None = None
        ctx: SkillContext | None = None
        record_id = f"{step_id}-{skill.name}"
        secrets = self.param_secrets(state, params)
        for number in range(1, max_attempts + 1):
            ctx = self.context(
                skill,
                state,
                record_id,
                number,
                params=params,
                key=key,
                secrets=secrets,
                approved=approved,
            )
            # An effect is probed before every run: its key belongs to the logical
            # step, so it may have happened already (a crash, a failed attempt, a
            # re-decision, a rollback that kept its effects).
            probe = skill.effects
            try:
                result = self.attempt(skill, state, params, ctx, probe=probe, secrets=secrets)
            except ToolApprovalNeeded as paused:
                paused.calls = (*calls, *ctx.calls)  # they ran: the event says so
                raise
            calls += ctx.calls
            if result.failure is None:
                draft = self._succeeded(
                    state,
                    action,
                    skill,
                    result,
                    ctx,
                    target=target,
                    record_id=record_id,
                    attempt=number,
                    calls=calls,
                )
                draft.secrets = secrets
                return draft
            kind, message = result.failure
            errors.append(
                ErrorEntry(
                    kind=kind,
                    message=message,
                    step_id=step_id,
                    skill=skill.name,
                    attempt=number,
                    max_attempts=max_attempts,
                    permanent=result.permanent,
                    trace=result.trace,
                )
            )
            if kind == "output_not_declared" or result.permanent:
                break  # a contract bug, or a verify that says retrying cannot help
        outcome = result.outcome if result is not None else None
        draft = self._give_up(
            state,
            action,
            skill,
            step_id=step_id,
            errors=errors,
            calls=calls,
            outcome=outcome,
            ctx=ctx,
        )
        draft.secrets = secrets
        return draft

    def param_secrets(self, state: AgentState, params: BaseModel) -> tuple[str, ...]:
        """Plaintext of the ``params`` leaves the agent's redaction policy masks: masked
        exactly wherever the step's text goes (a verify reason quoting a password)."""
        return secret_texts(params.model_dump(mode="json"), self.redactor(state))

    def attempt(
        self,
        skill: Skill[Any, Any],
        state: AgentState,
        params: BaseModel,
        ctx: SkillContext,
        *,
        probe: bool,
        secrets: tuple[str, ...] = (),
    ) -> Attempt:
        """Run (or probe) and verify once."""
        tracer = trace.current()
        attributes = {"skillstate.skill": skill.name, "skillstate.attempt": ctx.attempt}
        with tracer.span("skillstate.skill.run", attributes) as span:
            attempt = self._attempt(skill, state, params, ctx, probe=probe, secrets=secrets)
            if attempt.failure is not None:
                reason = f"{attempt.failure[0]}: {attempt.failure[1]}"  # masked like the log:
                if tracer.enabled:
                    span.fail(self.redactor(state, extra=secrets).text(reason))
                tracer.record("skillstate.failures", 1, {"skillstate.error": attempt.failure[0]})
            return attempt

    def _attempt(
        self,
        skill: Skill[Any, Any],
        state: AgentState,
        params: BaseModel,
        ctx: SkillContext,
        *,
        probe: bool,
        secrets: tuple[str, ...] = (),
    ) -> Attempt:
        try:
            found = skill.probe(state, params, ctx) if probe else None
            ctx.found_by_probe = found is not None
            outcome = found if found is not None else skill.run(state, params, ctx)
        except ToolNotAllowed as exc:
            return Attempt(None, state, None, ("tool_not_allowed", str(exc)))
        except (MemoryNotDeclared, SharedNotDeclared) as exc:  # a contract bug, like an output
            return Attempt(None, state, None, ("output_not_declared", str(exc)))
        except Exception as exc:
            return Attempt(
                None,
                state,
                None,
                ("skill_error", f"{type(exc).__name__}: {exc}"),
                trace=self._trace(state, secrets),
            )
        undeclared = skill.undeclared_writes(outcome.writes)
        if undeclared:
            refused = OutputNotDeclared(skill.name, undeclared, skill.outputs)
            return Attempt(outcome, state, None, ("output_not_declared", str(refused)))
        limits = self.agent.limits
        for path, value in outcome.writes.items():
            unfit = problem(value, chars=limits.value_chars, depth=limits.depth)
            if unfit is not None:
                reason = (
                    f"{path} refused: {unfit}; keep raw output in an artifact (ctx.call "
                    "stores each tool output) and write a summary or its ref"
                )
                return Attempt(outcome, state, None, ("invalid_output", reason))
        unfit = write_problem(ctx.remembered, limits) or spawn_problem(
            self.agent, state, skill, ctx.spawned
        )
        if unfit is not None:
            return Attempt(outcome, state, None, ("invalid_output", unfit))
        try:
            candidate = state.with_writes(outcome.writes)  # the step's one validation
        except StateError as exc:
            return Attempt(outcome, state, None, ("invalid_output", str(exc)))
        try:
            context = VerifyContext(
                before=state,
                params=params,
                attempt=ctx.attempt,
                idempotency_key=ctx.idempotency_key,
            )
            with trace.current().span("skillstate.skill.verify") as span:
                verdict = skill.verify(candidate, outcome, context)
                span.set("skillstate.verdict", "passed" if verdict.ok else "failed")
        except Exception as exc:
            return Attempt(
                outcome,
                state,
                None,
                ("verify_error", f"{type(exc).__name__}: {exc}"),
                trace=self._trace(state, secrets),
            )
        if not verdict.ok:
            reason = verdict.reason or "verify failed"
            return Attempt(
                outcome, state, verdict, ("verify_failed", reason), permanent=verdict.permanent
            )
        broken = self.agent.broken_invariant(candidate)
        if broken is not None:
            return Attempt(outcome, state, verdict, ("invariant_failed", broken))
        return Attempt(outcome, candidate, verdict, None)

    def _trace(self, state: AgentState, secrets: tuple[str, ...]) -> str | None:
        """Keep the traceback of the exception being handled, redacted, as an artifact.

        The error log holds one line; the whole traceback is what a developer needs
        (``skillstate log``, or printed with ``SKILLSTATE_DEBUG=1``).
        """
        text = traceback.format_exc(limit=30)
        data = self.redactor(state, extra=secrets).bytes(text.encode("utf-8", errors="replace"))
        try:
            return write_artifact(self.store, data, media_type="text/plain")
        except SkillstateError:
            return None  # the failure is recorded anyway; its traceback is a bonus

    def context(
        self,
        skill: Skill[Any, Any],
        state: AgentState,
        record_id: str,
        attempt: int,
        *,
        params: BaseModel | None = None,
        key: str | None = None,
        compensating: bool = False,
        secrets: tuple[str, ...] = (),
        approved: tuple[ToolApproval, ...] = (),
    ) -> SkillContext:
        ctx = SkillContext(
            skill=skill.name,
            task_id=state.task_id,
            step_id=record_id,
            attempt=attempt,
            tools={},
            store=self.store,
            idempotency_key=key if skill.effects else None,
            redactor=self.redactor(state, extra=secrets),
            params=params,
            compensating=compensating,
            fence=self.fence(state.task_id) if skill.effects else None,
            memory=bound_scopes(skill.remembers, state),
        )
        ctx.sharing = Sharing(skill.name, self.agent.shared, skill.shares, state, self.store)
        # Built after the context: a per-task factory may take it (artifacts, the key).
        ctx.bind_tools({name: _tool(self.agent.tools[name], state, ctx) for name in skill.tools})
        gates = {n: t for n in skill.tools if isinstance(t := self.agent.tools[n], Gated)}
        if gates and not compensating:
            ctx.gate = ToolGate(skill.name, state, gates, approved)
        return ctx

    def _succeeded(
        self,
        state: AgentState,
        action: CallSkill,
        skill: Skill[Any, Any],
        result: Attempt,
        ctx: SkillContext,
        *,
        target: str,
        record_id: str,
        attempt: int,
        calls: list[ToolCall],
    ) -> Draft:
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
        after = spawned_by(self.agent, state, after, ctx.spawned)  # ctx.spawn: fanout
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
    ) -> Draft:
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
            judged=_judged(last),
        )

    # ------------------------------------------------------------------ other actions

    def _ask_user(self, state: AgentState, action: AskUser, step_id: str) -> Draft:
        if not self.agent.can_ask:
            # Any policy, not only a model's: an unattended task never waits.
            message = "ask_user is not available: this agent runs unattended"
            return reject(state, step_id, "action_rejected", message, None)
        target = action.next_step or state.current_step
        if action.next_step is not None:
            self.agent.machine.check(state.current_step, target)
            self._check_not_stranded(state, target)
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

    def _finish(self, state: AgentState, action: Finish, step_id: str) -> Draft:
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
        if state.pending_steps and not self.agent.finish_with_pending:
            raise ActionRejected(
                f"cannot finish: steps still pending ({', '.join(state.pending_steps)}); "
                "do them first"
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

    def _revise(self, state: AgentState, action: Revise, step_id: str) -> Draft:
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
        found = problem(changes, chars=self.agent.limits.param_chars, depth=4)
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

    def _fail(self, state: AgentState, action: Action, step_id: str) -> Draft:
        message = action.reason or "the policy gave up"
        record = StepRecord(id=f"{step_id}-fail", step=state.current_step, action="fail")
        after = (
            state.with_error(ErrorEntry(kind="task_failed", message=message, step_id=step_id))
            .replace(status=TaskStatus.FAILED, last_decision=decision(action, None))
            .with_step(record)
        )
        return Draft(after=after, step_id=record.id, error=message)

    def _check_not_stranded(self, state: AgentState, target: str) -> None:
        """Refuse a decision that moves the task to a step where nothing could apply.

        A small model once moved the ticket demo to its final step with a question
        while work was still pending: after the reply no skill could run there and
        finishing was refused, so the task could only stall.
        """
        if self.agent.can_continue_from(target, pending=state.pending_steps):
            return
        raise ActionRejected(
            f"next_step {target!r} would leave nothing that can apply (no skill can run "
            f"from there, and the task cannot finish there"
            + (f" with {', '.join(state.pending_steps)} pending" if state.pending_steps else "")
            + ")"
        )


def _tool(
    tool: Callable[..., Any] | PerTask | Gated, state: AgentState, ctx: SkillContext
) -> Callable[..., Any]:
    if isinstance(tool, Gated):  # the gate is the context's (ctx.gate), the tool is the tool
        tool = tool.tool
    return tool.build(state, ctx) if isinstance(tool, PerTask) else tool


def _judged(last: ErrorEntry) -> Literal["failed", "permanent"] | None:
    """Whether a step's last failure judged its outcome (a rejection) or was a fault."""
    if last.kind not in ("verify_failed", "invariant_failed"):
        return None  # a skill error, a tool error, a bad output: a retry may fix it
    return "permanent" if last.permanent else "failed"


_NAMED = 20
"""An error names at most this many known skills: with a library of thousands, the whole
list would go into the error log and the next view's "already tried" line."""


def _some(names: tuple[str, ...]) -> str:
    shown = ", ".join(names[:_NAMED])
    return shown if len(names) <= _NAMED else f"{shown} and {len(names) - _NAMED} more"


def _skill_of(action: Action) -> str | None:
    return action.skill if isinstance(action, CallSkill) else None
