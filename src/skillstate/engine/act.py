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
from typing import Any, Protocol

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
from skillstate.engine.attempted import Attempt, give_up, succeeded
from skillstate.engine.draft import Draft, reject
from skillstate.engine.evidence import load_evidence
from skillstate.engine.plain_actions import ask_user, check_not_stranded, fail, finish, revise
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
from skillstate.events import ToolCall
from skillstate.fanout.spawn import spawn_draft, spawn_problem
from skillstate.limits import problem
from skillstate.memory.runtime import bound_scopes, write_problem
from skillstate.shared.access import Sharing
from skillstate.skills.binding import check_bound
from skillstate.skills.handles import resolve_handles
from skillstate.skills.skill import Skill, SkillContext, VerifyContext
from skillstate.state.model import (
    AgentState,
    ErrorEntry,
    ToolApproval,
)
from skillstate.state.protect import open_params, secret_texts
from skillstate.state.redact import Redactor
from skillstate.store.base import Store
from skillstate.store.sealing import write_artifact

__all__ = ["Acting", "Attempt"]


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
                return ask_user(self.agent, state, action, step_id)
            if isinstance(action, WaitUntil | WaitFor):
                return start_wait(self.agent, state, action, step_id)
            if isinstance(action, LoadEvidence):
                return load_evidence(self.store, state, action, step_id)
            if isinstance(action, Spawn | Map):  # skillstate.fanout
                return spawn_draft(self.agent, state, action, step_id)
            if isinstance(action, Finish):
                return finish(self.agent, state, action, step_id)
            if isinstance(action, Revise):
                return revise(self.agent, state, action, step_id)
            return fail(state, action, step_id)
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
                check_not_stranded(self.agent, state, target)
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
                draft = succeeded(
                    self.agent,
                    state,
                    action,
                    skill,
                    result,
                    ctx=ctx,
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
        draft = give_up(
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
        if not type(params).model_fields:
            return ()  # NoParams: nothing to find, and no redactor to build
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


def _tool(
    tool: Callable[..., Any] | PerTask | Gated, state: AgentState, ctx: SkillContext
) -> Callable[..., Any]:
    if isinstance(tool, Gated):  # the gate is the context's (ctx.gate), the tool is the tool
        tool = tool.tool
    return tool.build(state, ctx) if isinstance(tool, PerTask) else tool


_NAMED = 20
"""An error names at most this many known skills: with a library of thousands, the whole
list would go into the error log and the next view's "already tried" line."""


def _some(names: tuple[str, ...]) -> str:
    shown = ", ".join(names[:_NAMED])
    return shown if len(names) <= _NAMED else f"{shown} and {len(names) - _NAMED} more"


def _skill_of(action: Action) -> str | None:
    return action.skill if isinstance(action, CallSkill) else None
