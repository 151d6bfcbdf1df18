"""The prompt view: the compact text a decision is made from.

A view is rendered from the state card alone (plus the skills that apply now), so
its size depends on the card, not on how many steps came before. Rendering is
deterministic: the same state gives the same bytes, which makes views diffable,
cacheable and testable.

Sections are rendered in priority order; with a token budget the lowest-priority
content goes first (oldest evidence, then older failed attempts, then older
completed steps). Goal and constraints are never dropped.

Failures reach the decision as one line: what was already tried since the task
last made progress, and why it did not work (``state.tried``). The error log's
details stay in the card and the events, not in the decision context.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic import BaseModel

from skillstate.errors import UsageError
from skillstate.llm.tokens import count_tokens, tokenizer_name
from skillstate.skills.binding import BoundParams, FromState, OneOf, bindings, decided
from skillstate.state.model import AgentState, FailedAttempt, StepRecord, UserMessage
from skillstate.state.secrets import MASK, sensitive_fields

if TYPE_CHECKING:
    from skillstate.llm.base import Message
    from skillstate.skills.skill import Skill
    from skillstate.state.machine import StateMachine

__all__ = ["View", "render_view"]

S_co = TypeVar("S_co", bound=AgentState, covariant=True)
S = TypeVar("S", bound=AgentState)
"""The agent's state class (a view only hands it out: covariant)."""

RECENT_STEPS = 5
RECENT_EVIDENCE = 5
VALUE_CHARS = 200


@dataclass(frozen=True, eq=False)
class View(Generic[S_co]):
    """What the policy sees for one decision, typed by the agent's state class:
    ``View[TripState]`` gives ``view.state`` as a ``TripState``.

    Nothing is rendered or counted until it is read: a scripted policy that looks
    only at :attr:`state` pays for neither the text nor its tokens, and a model
    policy pays for the tokens once (they are cached with the view).
    """

    state: S_co
    skills: tuple[str, ...]
    """Names of the skills whose ``when`` holds now."""
    next_steps: tuple[str, ...]
    """Steps the machine allows from the current one."""
    agent_name: str = ""
    agent_description: str = ""
    params: Mapping[str, type[BaseModel]] = field(default_factory=dict)
    """The params model of each skill in :attr:`skills`."""
    can_ask: bool = True
    """Whether ``ask_user`` is offered (an unattended run has nobody to answer)."""
    stepped: frozenset[str] = frozenset()
    """Skills in :attr:`skills` whose own declared step is bound: a decision that calls
    one gives no ``next_step`` (see :mod:`skillstate.skills.binding`)."""
    can_wait: bool = False
    """Whether ``wait_until`` is offered to a model (``Agent(can_wait=True)``)."""
    signals: Mapping[str, type[BaseModel]] = field(default_factory=dict)
    """The signals the agent declares, by name, with their payload schemas: ``wait_for``
    is offered for these, and :meth:`signal` reads a received one typed."""
    transcript: Callable[[], list[Message]] | None = field(default=None, compare=False)
    """The task's conversation so far, as a history-driven agent would hold it (every
    user message, decision and full tool output). Set by the runtime; rebuilt from
    the event log only when a policy asks (the state policy never does)."""
    lookup: Callable[[str], StepRecord | None] | None = field(default=None, compare=False)
    """Finds an older step's record in the event log (see :meth:`step`); set by the runtime."""
    budget: int | None = None
    """Token budget of :attr:`text` (``None``: rendered whole)."""
    render: Callable[[int | None], tuple[str, int | None, tuple[str, ...]]] | None = field(
        default=None, compare=False, repr=False
    )
    """Renders the text under a budget: ``(text, tokens if counted, dropped)``."""
    catalog: Callable[[], tuple[tuple[str, str], ...]] | None = field(
        default=None, compare=False, repr=False
    )

    @cached_property
    def _rendered(self) -> tuple[str, int | None, tuple[str, ...]]:
        return self.render(self.budget) if self.render is not None else ("", 0, ())

    @property
    def text(self) -> str:
        """The rendered prompt view, exactly as a model would receive it."""
        return self._rendered[0]

    @cached_property
    def tokens(self) -> int:
        """Tokens of :attr:`text` under :attr:`tokenizer` (counted on first use)."""
        known = self._rendered[1]
        return known if known is not None else count_tokens(self.text)

    @property
    def counted_tokens(self) -> int | None:
        """:attr:`tokens` if something already counted them, else ``None`` (no counting)."""
        if "tokens" in self.__dict__:
            return self.tokens
        if "_rendered" in self.__dict__:
            return self._rendered[1]
        return None

    @property
    def tokenizer(self) -> str:
        return tokenizer_name()

    @property
    def dropped(self) -> tuple[str, ...]:
        """What a token budget removed, e.g. ``("evidence", "evidence")``."""
        return self._rendered[2]

    @cached_property
    def skill_catalog(self) -> tuple[tuple[str, str], ...]:
        """Every skill of the agent as ``(signature, description)``: what a system prompt lists."""
        return self.catalog() if self.catalog is not None else ()

    def step(self, step_id: str) -> StepRecord | None:
        """The record of step ``step_id``: from the card's recent steps, else the event
        log (the card keeps only ``MAX_STEPS`` of them)."""
        for record in reversed(self.state.completed_steps):
            if record.id == step_id:
                return record
        return self.lookup(step_id) if self.lookup is not None else None

    @property
    def messages(self) -> tuple[UserMessage, ...]:
        """Messages sent to the task while it ran (``skillstate send``) that no decision
        has seen yet: urgent ones (``Agent(messages="interrupt")``) first, then oldest
        first. This decision is the one that sees them (:mod:`skillstate.control.inbox`)."""
        return tuple(sorted(self.state.messages, key=lambda m: not m.urgent))

    @property
    def inbox(self) -> str | None:
        """The latest reply not yet used (``state.inputs`` has every one, numbered)."""
        return self.state.inbox

    def signal(self, name: str) -> BaseModel | None:
        """The payload of the latest ``name`` signal a wait received, as its declared
        schema's model (``None``: none received yet). ``state.signals`` has the JSON."""
        schema = self.signals.get(name)
        if schema is None:
            raise UsageError(f"signal {name!r} is not declared (Agent(signals=...))")
        received = self.state.signals.get(name)
        data = received.data if received is not None else None
        return None if data is None else schema.model_validate(data)

    @property
    def last_failure(self) -> FailedAttempt | None:
        """What the latest decision without progress tried and why it did not work
        (typed; ``None`` when the task has made progress since). React to this rather
        than to the text of the error log."""
        return self.state.tried[-1] if self.state.tried else None

    @property
    def can_revise(self) -> bool:
        """Whether ``revise`` is offered: a user's reply (or a message sent while the task
        ran) is waiting to be used."""
        return bool(self.state.inputs or self.state.messages)

    @property
    def action_schema(self) -> dict[str, Any]:
        """The response schema of this decision (see :func:`decision_schema`)."""
        from skillstate.engine.actions import decision_schema

        return decision_schema(
            self.params,
            self.next_steps,
            can_ask=self.can_ask,
            can_revise=self.can_revise,
            stepped=self.stepped,
            can_wait=self.can_wait,
            signals=tuple(self.signals),
        )


def render_view(
    state: S,
    *,
    machine: StateMachine | None = None,
    skills: Sequence[Skill[Any, Any]] = (),
    budget: int | None = None,
    agent_name: str = "",
    agent_description: str = "",
    can_ask: bool = True,
    value_chars: int = VALUE_CHARS,
    bind: bool = True,
    can_wait: bool = False,
    signals: Mapping[str, type[BaseModel]] | None = None,
) -> View[S]:
    """The :class:`View` of ``state``; its text is rendered (trimmed to ``budget``
    tokens if given) when first read. With ``bind``, params bound from the state
    (:mod:`skillstate.skills.binding`) leave the decision and show their value."""
    # A finished task has nothing left to call; a skill applies when its `when` holds
    # and the machine allows entering its step from here (else calling it could
    # only be refused as an illegal transition).
    applicable = [] if state.status.is_terminal else [s for s in skills if s.when(state)]
    if machine is not None:
        current = state.current_step
        applicable = [s for s in applicable if s.step is None or machine.can(current, s.step)]
    decisions: dict[str, BoundParams] = {}
    for s in applicable:
        found = decided(s.params, state) if bind else BoundParams(s.params, {})
        if found is not None:  # else a bound param has nothing to bind: it cannot apply
            decisions[s.name] = found
    applicable = [s for s in applicable if s.name in decisions]
    next_steps = tuple(sorted(machine.allowed(state.current_step))) if machine else ()

    def render(limit: int | None) -> tuple[str, int | None, tuple[str, ...]]:
        return _trimmed(
            state, applicable, decisions, next_steps, budget=limit, value_chars=value_chars
        )

    def catalog() -> tuple[tuple[str, str], ...]:
        return tuple((f"{s.name}({_signature(s, bind)})", s.description) for s in skills)

    return View(
        state=state,
        skills=tuple(s.name for s in applicable),
        next_steps=next_steps,
        agent_name=agent_name,
        agent_description=agent_description,
        params={name: d.model for name, d in decisions.items()},
        stepped=frozenset(s.name for s in applicable if bind and s.step is not None),
        can_ask=can_ask,
        can_wait=can_wait,
        signals=dict(signals or {}),
        budget=budget,
        render=render,
        catalog=catalog,
    )


def _signature(skill: Skill[Any, Any], bind: bool) -> str:
    """The params a decision gives, as the system prompt lists them (bound ones left out)."""
    bound = bindings(skill.params) if bind else {}
    return ", ".join(
        n for n in skill.params.model_fields if not isinstance(bound.get(n), FromState)
    )


def _call_line(skill: Skill[Any, Any], decision: BoundParams) -> str:
    """``- name(params): description``, bound values shown as ``i=3 (from next_record)``."""
    marks = bindings(skill.params) if decision.values else {}
    shown = [
        f"{n}={json.dumps(decision.values[n], ensure_ascii=False)} "
        f"(from {marks[n].describe() if isinstance(marks[n], FromState) else 'the only choice'})"
        if n in decision.values
        else n
        for n in skill.params.model_fields
    ]
    choices = [
        f"{n} one of {list(getattr(f.annotation, '__args__', ()))}"
        for n, f in decision.model.model_fields.items()
        if isinstance(bindings(skill.params).get(n), OneOf)
    ]
    params = ", ".join(shown) or "no params"
    extra = f" [{'; '.join(choices)}]" if choices else ""
    return f"- {skill.name}({params}): {skill.description}{extra}"


def _trimmed(
    state: AgentState,
    applicable: Sequence[Skill[Any, Any]],
    decisions: Mapping[str, BoundParams],
    next_steps: tuple[str, ...],
    *,
    budget: int | None,
    value_chars: int,
) -> tuple[str, int | None, tuple[str, ...]]:
    evidence = list(state.evidence[-RECENT_EVIDENCE:])
    tried = list(state.tried)
    steps = list(state.completed_steps[-RECENT_STEPS:])
    dropped: list[str] = []

    def build() -> str:
        return _render(
            state,
            applicable,
            decisions,
            next_steps=next_steps,
            evidence=evidence,
            tried=tried,
            steps=steps,
            value_chars=value_chars,
        )

    text = build()
    if budget is None:
        return text, None, ()
    tokens = count_tokens(text)
    # Trim in priority order until it fits; goal and constraints are never touched.
    for bucket, name in ((evidence, "evidence"), (tried, "tried"), (steps, "steps")):
        while tokens > budget and bucket:
            bucket.pop(0)
            dropped.append(name)
            text = build()
            tokens = count_tokens(text)
    return text, tokens, tuple(dropped)


def _render(
    state: AgentState,
    applicable: Sequence[Skill[Any, Any]],
    decisions: Mapping[str, BoundParams],
    *,
    next_steps: Sequence[str],
    evidence: Sequence[Any],
    tried: Sequence[Any],
    steps: Sequence[Any],
    value_chars: int = VALUE_CHARS,
) -> str:
    lines = [f"## Task {state.task_id}", f"Goal: {state.goal or '(none)'}"]
    if state.constraints:
        lines.append("Constraints (hard rules, always apply):")
        lines += [f"- {c}" for c in state.constraints]
    lines.append(f"Status: {state.status.value} | step: {state.current_step}")
    # An interrupting message comes before everything else the decision reads.
    lines += [_message_line(m) for m in state.messages if m.urgent]
    if next_steps:
        lines.append(f"Allowed next steps: {', '.join(next_steps)}")
    done = ", ".join(s.id for s in steps)
    earlier = state.step_count - len(steps)
    if earlier:
        done = f"({earlier} earlier) " + done
    lines.append(f"Completed: {done or 'none'}")
    if state.pending_steps:
        lines.append(f"Pending: {', '.join(state.pending_steps)}")
    fields = _fields(state, applicable, value_chars)
    if fields:
        lines.append("Facts:")
        lines += [f"- {k}: {v}" for k, v in fields]
    if state.last_decision:
        d = state.last_decision
        target = f" {d.target}" if d.target else ""
        lines.append(f"Last decision: {d.action}{target}" + (f" ({d.reason})" if d.reason else ""))
    if evidence:
        lines.append("Evidence:")
        lines += [_evidence_line(e) for e in evidence]
    lines += _signal_lines(state, value_chars)
    if tried:
        lines.append("Already tried without progress: " + "; ".join(_tried(t) for t in tried))
    if applicable:
        lines.append("Skills you can call now:")
        lines += [_call_line(s, decisions[s.name]) for s in applicable]
    if state.question:
        lines.append(f"Open question: {state.question}")
    for reply in state.inputs:
        lines.append(f"User input #{reply.index + 1}: {reply.text}")
    lines += [_message_line(m) for m in state.messages if not m.urgent]
    return "\n".join(lines)


def _message_line(message: UserMessage) -> str:
    """A message sent while the task ran (control.inbox), as the view shows it once."""
    who = f" from {message.actor}" if message.actor else ""
    if not message.urgent:
        return f"Message{who} (sent while the task ran): {message.text}"
    asked = f" (it interrupts your question: {message.interrupted})" if message.interrupted else ""
    return f"URGENT message{who}, read this first{asked}: {message.text}"


def _fields(
    state: AgentState, applicable: Sequence[Skill[Any, Any]], limit: int = VALUE_CHARS
) -> list[tuple[str, str]]:
    """Typed custom fields and facts. If every applicable skill declares ``reads``,
    only the facts they read are shown."""
    reads: set[str] | None = None
    if applicable and all(s.reads for s in applicable):
        reads = {r for s in applicable for r in s.reads}
    out: list[tuple[str, str]] = []
    # A sensitive value is shown as *** (never to a model), but shown: the policy
    # may need to know that a token is there.
    hidden = sensitive_fields(type(state))
    for name in state.custom_fields():
        value = getattr(state, name)
        if value is None or (reads is not None and name not in reads):
            continue
        out.append((name, MASK if name in hidden else _short(value, limit)))
    for key, value in state.facts.items():
        if reads is not None and f"facts.{key}" not in reads and key not in reads:
            continue
        out.append((key, _short(value, limit)))
    return out


def _signal_lines(state: AgentState, limit: int) -> list[str]:
    """The payload of the latest signal of each name a wait received."""
    return [
        f"Signal received: {name} {_short(received.data, limit)}"
        for name, received in state.signals.items()
        if received.data is not None
    ]


def _tried(t: Any) -> str:
    times = f" ({t.times}x)" if t.times > 1 else ""
    return f"{t.action}{times} -> {t.reason}"


def _evidence_line(e: Any) -> str:
    # A short ref prefix is enough for a human to match it in `skillstate log`.
    ref = f" ({e.ref[:19]})" if e.ref else ""
    return f"- [{e.source}] {e.summary}{ref}"


def _short(value: Any, limit: int = VALUE_CHARS) -> str:
    if hasattr(value, "model_dump"):
        value = value.model_dump(mode="json")
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"
