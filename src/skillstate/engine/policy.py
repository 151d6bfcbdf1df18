"""Policies: given a view, decide the next action.

A policy sees the :class:`~skillstate.state.view.View` of the current state. The
library ships five:

* :class:`ScriptedPolicy` — decision rules written in Python (demos, tests).
* :class:`StatePolicy` — a model decides from the compact state view alone: the
  system prompt plus one user message, whatever the length of the task.
* :class:`HybridPolicy` — the seeds' hybrid context (000 §2.4, 003 §6.3): the last
  ``n`` raw messages, then the state view, with the rule stated that the state wins
  where they disagree.
* :class:`HistoryPolicy` — the usual agent loop, as a baseline: every user
  message, every decision and every full tool output so far, sent each time.
* :class:`WindowPolicy` — the same transcript cut to its last ``n`` messages.

The model policies share everything but the messages they send (same provider,
system prompt, response schema and repair loop), so comparing them measures the
context strategy and nothing else.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, Protocol, TypeVar, runtime_checkable

from skillstate._aio import in_step_thread
from skillstate.engine import trace
from skillstate.engine.actions import Action, reply_budget, validate_decision
from skillstate.errors import ActionRejected, DecisionFailed, UsageError
from skillstate.limits import DEFAULT_LIMITS, problem
from skillstate.llm.base import Completion, Message, Provider, Usage, acomplete
from skillstate.llm.tokens import preload
from skillstate.state.model import AgentState
from skillstate.state.view import View

__all__ = [
    "SYSTEM_PROMPT",
    "Decided",
    "HistoryPolicy",
    "HybridPolicy",
    "ModelPolicy",
    "Policy",
    "ScriptedPolicy",
    "StatePolicy",
    "WindowPolicy",
    "policy_for",
]


@dataclass(frozen=True)
class Decided:
    """An action together with what deciding it cost (model policies return this)."""

    action: Action
    usage: Usage
    calls: int = 1
    """Model calls made, repairs included."""
    repairs: int = 0
    """Replies that were invalid and sent back with the error."""
    model: str = ""
    duration_ms: float = 0.0


class Call(NamedTuple):
    """One model call the repair loop asks for (see :meth:`ModelPolicy.calls`)."""

    messages: list[Message]
    schema: dict[str, Any]
    max_tokens: int


S = TypeVar("S", bound=AgentState)
S_contra = TypeVar("S_contra", bound=AgentState, contravariant=True)


@runtime_checkable
class Policy(Protocol[S_contra]):
    """Decides one action from one view (of a state of class ``S``)."""

    def decide(self, view: View[S_contra]) -> Action | Decided:
        """The next action. A model policy returns :class:`Decided` to report its usage;
        it raises :class:`~skillstate.errors.DecisionFailed` when no valid action came."""
        ...


class ScriptedPolicy(Generic[S]):
    """A deterministic policy from a plain function ``view -> Action``.

    Typed by what the function takes: ``ScriptedPolicy(decide)`` with
    ``def decide(view: View[TripState]) -> Action`` is a ``ScriptedPolicy[TripState]``.

    >>> from skillstate.engine.actions import Finish
    >>> policy = ScriptedPolicy(lambda view: Finish(reason="nothing to do"))
    """

    def __init__(self, rules: Callable[[View[S]], Action], *, name: str | None = None) -> None:
        if not callable(rules):
            # A list of actions is the usual slip: said here, not as a TypeError mid-run.
            raise UsageError(
                f"ScriptedPolicy takes a function view -> Action, not a {type(rules).__name__}"
            )
        self._rules = rules
        self.name = name or getattr(rules, "__name__", "scripted")

    def decide(self, view: View[S]) -> Action:
        action = self._rules(view)
        # Python values need no parsing, but must be storable like a model's: an
        # integer past the int-string limit, NaN or a lone surrogate would fail the
        # step's commit instead of being a refused decision. (Sizes are the act
        # phase's to bound, as for any decision.)
        dump = getattr(action, "model_dump", None)  # what is not an Action fails later
        found = problem(dump(), chars=1 << 30, depth=DEFAULT_LIMITS.depth) if dump else None
        if found is not None:
            raise DecisionFailed(
                f"scripted decision refused: {found}", usage=Usage(), calls=0, repairs=0
            )
        return action

    def __repr__(self) -> str:
        return f"ScriptedPolicy({self.name!r})"


SYSTEM_PROMPT = """\
You decide the next action of one task of the {agent} agent. {description}
Each turn, reply with exactly one JSON object and nothing else:
- {{"kind": "call_skill", "skill": NAME, "params": {{...}}, "reason": WHY}} to run a skill,
{ask}{wait}{revise}- {{"kind": "finish", "summary": TEXT, "reason": WHY}} when the goal is met.
Only skills that apply now may be called. Add "next_step": STEP to move the task on.
Skills:
{skills}"""


REVISE_LINE = (
    '- {"kind": "revise", "goal": TEXT, "constraints": [TEXT], "drop_pending": [STEP], '
    '"reason": WHY} when the user\'s message changes the task,\n'
)
WAIT_LINE = '- {"kind": "wait_until", "seconds": N, "reason": WHY} to pause the task N seconds,\n'
SIGNAL_LINE = (
    '- {{"kind": "wait_for", "signal": NAME, "timeout": SECONDS or null, "reason": WHY}} '
    "to pause until a signal arrives ({names}),\n"
)
ASK_LINE = (
    '- {"kind": "ask_user", "question": TEXT, "reason": WHY} when only the user can answer,\n'
)
SPAWN_LINE = (
    '- {{"kind": "spawn", "child": KIND, "key": KEY, "set": {{FIELD: VALUE}}, "reason": WHY}} '
    'or {{"kind": "map", "child": KIND, "over": [{{FIELD: VALUE}}, ...], "reason": WHY}} to start '
    "child tasks ({names}) and wait for their results (the Children section),\n"
)
LOAD_LINE = (
    '- {"kind": "load_evidence", "ref": REF, "reason": WHY} to read one evidence item\'s raw '
    "output (its ref as the state shows it) when its summary is not enough: the next turn "
    "shows it, once,\n"
)


class ModelPolicy:
    """A model decides; invalid replies go back with the error, at most ``max_repairs`` times.

    Subclasses choose the messages (:meth:`messages`); everything else is shared.
    """

    kind = "model"

    def __init__(
        self,
        provider: Provider,
        *,
        max_repairs: int = 2,
        system: str | None = None,
        max_tokens: int | None = None,
    ) -> None:
        if max_repairs < 0:
            raise UsageError("max_repairs must be >= 0")
        self.provider = provider
        self.max_repairs = max_repairs
        self.max_tokens = max_tokens
        self._system = system
        preload()  # the first decision counts tokens: start loading the tokenizer now

    def system_prompt(self, view: View[Any]) -> str:
        if self._system is not None:
            return self._system
        agent = view.agent_name or "task"
        lines = [f"- {name}: {desc}" for name, desc in view.skill_catalog] or ["- (none)"]
        ask = ASK_LINE if view.can_ask else ""
        revise = REVISE_LINE if view.can_revise else ""
        wait = WAIT_LINE if view.can_wait else ""
        if view.signals:
            wait += SIGNAL_LINE.format(names=", ".join(view.signals))
        if view.evidence_refs:
            wait += LOAD_LINE
        if view.child_kinds:
            wait += SPAWN_LINE.format(names=", ".join(view.child_kinds))
        return SYSTEM_PROMPT.format(
            agent=agent,
            description=view.agent_description,
            skills="\n".join(lines),
            ask=ask,
            wait=wait,
            revise=revise,
        ).strip()

    def messages(self, view: View[Any]) -> list[Message]:
        raise NotImplementedError

    def decide(self, view: View[Any]) -> Decided:
        calls = self.calls(view)
        request = next(calls)
        while True:
            try:
                request = calls.send(self._complete(request))
            except StopIteration as done:
                decided: Decided = done.value
                return decided

    async def adecide(self, view: View[Any]) -> Decided:
        """:meth:`decide` with the model call awaited (``provider.acomplete`` when the
        provider has one, else its ``complete`` in a thread): the same repair loop."""
        calls = self.calls(view)
        # Building the messages may read the event log (a history policy): off the loop.
        request = await in_step_thread(next, calls)
        while True:
            try:
                request = calls.send(await self._acomplete(request))
            except StopIteration as done:
                decided: Decided = done.value
                return decided

    def calls(self, view: View[Any]) -> Generator[Call, Completion, Decided]:
        """The repair loop: yields each model call to make, is sent its completion, and
        returns the decision (or raises :class:`DecisionFailed`). Shared by
        :meth:`decide` and :meth:`adecide`, which only differ in how they call."""
        messages = self.messages(view)
        schema = view.action_schema
        # Enough for the longest reply the schema allows, unless set by hand.
        budget = self.max_tokens if self.max_tokens is not None else reply_budget(schema)
        usage = Usage()
        started = time.perf_counter()
        error = "no reply"
        for attempt in range(self.max_repairs + 1):
            completion = yield Call(messages, schema, budget)
            usage = usage + completion.usage
            try:
                action = validate_decision(
                    completion.text,
                    view.params,
                    view.next_steps,
                    can_ask=view.can_ask,
                    can_revise=view.can_revise,
                    stepped=view.stepped,
                    can_wait=view.can_wait,
                    signals=tuple(view.signals),
                    evidence=view.evidence_refs,
                    children=view.child_kinds,
                )
            except ActionRejected as exc:
                error = str(exc)
                messages = [
                    *messages,
                    Message("assistant", completion.text),
                    Message(
                        "user",
                        f"That reply was invalid: {error}. Reply again with one JSON object "
                        "matching the schema.",
                    ),
                ]
                continue
            return Decided(
                action=action,
                usage=usage,
                calls=attempt + 1,
                repairs=attempt,
                model=completion.model or self.provider.name,
                duration_ms=(time.perf_counter() - started) * 1000,
            )
        calls = self.max_repairs + 1
        raise DecisionFailed(
            f"no valid action after {calls} model call(s): {error}",
            usage=usage,
            calls=calls,
            repairs=self.max_repairs,
        )

    def _complete(self, call: Call) -> Completion:
        tracer = trace.current()
        model = self.provider.name
        with tracer.span(f"chat {model}", {"gen_ai.operation.name": "chat"}) as span:
            completion = self.provider.complete(
                call.messages, schema=call.schema, max_tokens=call.max_tokens
            )
            if tracer.enabled:
                trace.traced_call(span, model, call.max_tokens, completion)
            return completion

    async def _acomplete(self, call: Call) -> Completion:
        tracer = trace.current()
        model = self.provider.name
        with tracer.span(f"chat {model}", {"gen_ai.operation.name": "chat"}) as span:
            completion = await acomplete(
                self.provider, call.messages, schema=call.schema, max_tokens=call.max_tokens
            )
            if tracer.enabled:
                trace.traced_call(span, model, call.max_tokens, completion)
            return completion

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.provider.name!r})"


class StatePolicy(ModelPolicy):
    """The model sees the system prompt and the state view: flat, whatever the history."""

    kind = "state"

    def messages(self, view: View[Any]) -> list[Message]:
        return [Message("system", self.system_prompt(view)), Message("user", view.text)]


class HistoryPolicy(ModelPolicy):
    """Baseline: the whole conversation so far, every time (the usual agent loop)."""

    kind = "history"

    def messages(self, view: View[Any]) -> list[Message]:
        return [Message("system", self.system_prompt(view)), *_transcript(view)]


class WindowPolicy(ModelPolicy):
    """Baseline: the last ``n`` messages of the conversation (goal and constraints
    scroll out of the window once the task is long enough)."""

    kind = "window"

    def __init__(
        self,
        provider: Provider,
        n: int,
        *,
        max_repairs: int = 2,
        system: str | None = None,
        max_tokens: int | None = None,
    ) -> None:
        if n < 1:
            raise UsageError("window size must be >= 1")
        super().__init__(provider, max_repairs=max_repairs, system=system, max_tokens=max_tokens)
        self.n = n

    def messages(self, view: View[Any]) -> list[Message]:
        return [Message("system", self.system_prompt(view)), *_transcript(view)[-self.n :]]


HYBRID_RULE = (
    "Each turn you are sent the last {n} raw messages of the task, then its current state. "
    "If the messages and the state disagree, the state is right: it is verified."
)
STATE_HEADER = "The current state of the task (verified; it wins over the messages above):\n"


class HybridPolicy(WindowPolicy):
    """The seeds' hybrid context: the last ``n`` raw messages of the conversation, then
    the state view, with the rule stated that the state wins (seed 000 §2.4, 003 §6.3).

    The raw messages give the model the wording of recent tool outputs and replies;
    the state gives it the goal, the constraints and the verified results that have
    scrolled out of them. Where the two disagree (a failed attempt's output, a value
    a later step corrected), the prompt says the state is right.
    """

    kind = "hybrid"

    def system_prompt(self, view: View[Any]) -> str:
        return f"{super().system_prompt(view)}\n{HYBRID_RULE.format(n=self.n)}"

    def messages(self, view: View[Any]) -> list[Message]:
        recent = _transcript(view)[-self.n :]
        return [
            Message("system", self.system_prompt(view)),
            *recent,
            Message("user", STATE_HEADER + view.text),
        ]


def _transcript(view: View[Any]) -> Sequence[Message]:
    if view.transcript is None:
        raise UsageError("this policy needs the task's transcript; run it through the Runtime")
    return view.transcript()


def policy_for(spec: str, provider: Provider, *, max_repairs: int = 2) -> ModelPolicy:
    """``state``, ``history``, ``window:N`` or ``hybrid:N`` over ``provider``."""
    name, _, arg = spec.partition(":")
    if name == "state" and not arg:
        return StatePolicy(provider, max_repairs=max_repairs)
    if name == "history" and not arg:
        return HistoryPolicy(provider, max_repairs=max_repairs)
    if name == "window" and arg.isdigit() and int(arg) > 0:
        return WindowPolicy(provider, int(arg), max_repairs=max_repairs)
    if name == "hybrid" and arg.isdigit() and int(arg) > 0:
        return HybridPolicy(provider, int(arg), max_repairs=max_repairs)
    raise UsageError(
        f"unknown policy {spec!r}; expected state, history, window:N or hybrid:N (N >= 1)"
    )
