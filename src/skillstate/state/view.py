"""The prompt view: the compact text a decision is made from.

A view is rendered from the state card alone (plus the skills that apply now), so
its size depends on the card, not on how many steps came before. Rendering is
deterministic: the same state gives the same bytes, which makes views diffable,
cacheable and testable.

Sections are rendered in priority order; with a token budget the lowest-priority
content is hidden first (oldest evidence, older failed attempts, older completed
steps, then facts and typed fields by their declared priority), each hidden kind
leaving a marker; goal and constraints are never hidden, and a view still over its
budget reports the overrun (:mod:`skillstate.state.budget`). Evidence the previous
decision asked to see (``load_evidence``) is shown raw, bounded and masked, to this
decision only (:attr:`View.peek`).

Failures reach the decision as one line: what was already tried since the task
last made progress, and why it did not work (``state.tried``). The error log's
details stay in the card and the events, not in the decision context.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic import BaseModel

from skillstate.errors import UsageError
from skillstate.events import Candidate
from skillstate.llm.tokens import count_tokens, tokenizer_name
from skillstate.skills.binding import BoundParams, decided
from skillstate.state.model import AgentState, FailedAttempt, Rejected, StepRecord, UserMessage
from skillstate.state.rejected import holding
from skillstate.state.view_text import (
    PEEK_CHARS,
    VALUE_CHARS,
    Peek,
    Rendered,
    peek_lines,
    signature,
    trimmed,
)

if TYPE_CHECKING:
    from skillstate.llm.base import Message
    from skillstate.skills.skill import Skill
    from skillstate.state.machine import StateMachine

__all__ = ["PEEK_CHARS", "VALUE_CHARS", "Peek", "View", "render_view"]

_LOADED = "load_evidence "
"""How ``tried`` names a load (:func:`skillstate.engine.draft.signature`): then a shown ref."""

S_co = TypeVar("S_co", bound=AgentState, covariant=True)
S = TypeVar("S", bound=AgentState)
"""The agent's state class (a view only hands it out: covariant)."""

Choose = Callable[
    [Sequence["Skill[Any, Any]"]], tuple[Sequence["Skill[Any, Any]"], tuple[Candidate, ...]]
]
"""Picks the skills a decision is offered among those that apply, with their scores."""


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
    child_kinds: tuple[str, ...] = ()
    """The kinds of child task the agent declares (``Agent(children=...)``): ``spawn``
    and ``map`` are offered for these (:mod:`skillstate.fanout`)."""
    transcript: Callable[[], list[Message]] | None = field(default=None, compare=False)
    """The task's conversation so far, as a history-driven agent would hold it (every
    user message, decision and full tool output). Set by the runtime; rebuilt from
    the event log only when a policy asks (the state policy never does)."""
    lookup: Callable[[str], StepRecord | None] | None = field(default=None, compare=False)
    """Finds an older step's record in the event log (see :meth:`step`); set by the runtime."""
    budget: int | None = None
    """Token budget of :attr:`text` (``None``: rendered whole)."""
    render: Callable[[int | None, Sequence[str]], Rendered] | None = field(
        default=None, compare=False, repr=False
    )
    """Renders the text under a budget, with the lines showing :attr:`peek`."""
    artifact: Callable[[str], str | None] | None = field(default=None, compare=False, repr=False)
    """Reads one raw artifact of the task, masked like tool outputs (``None``: not in the
    store); set by the runtime, so the view can show what ``load_evidence`` asked for."""
    peek_chars: int = field(default=0, compare=False)
    """At most this many characters of :attr:`peek` are shown (0: :data:`PEEK_CHARS`;
    a budgeted view shows at most twice its budget's tokens in characters)."""
    catalog: Callable[[], tuple[tuple[str, str], ...]] | None = field(
        default=None, compare=False, repr=False
    )
    candidates: tuple[Candidate, ...] = ()
    """With a skill retriever (``Agent(retriever=...)``): the skills this decision is
    offered (:attr:`skills`) and how they ranked; recorded on the decision's event."""

    @cached_property
    def _rendered(self) -> Rendered:
        if self.render is None:
            return Rendered("", 0, (), None)
        return self.render(self.budget, peek_lines(self.peek))

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
    def rendered(self) -> bool:
        """Whether :attr:`text` was rendered (read, or counted); asking renders nothing."""
        return "_rendered" in self.__dict__

    @property
    def shown_peek(self) -> str | None:
        """The ref of the raw evidence this view showed (its :attr:`text` or :attr:`peek`
        was read), else ``None``; asking reads nothing."""
        shown = self.rendered or "peek" in self.__dict__
        return getattr(self.state, "peek", None) if shown else None

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
        """What the token budget hid, in the order it chose: ``evidence``, ``tried``,
        ``template`` (an entry of the template's hint), ``steps``, ``facts.KEY`` or a typed
        field's name, e.g. ``("evidence", "facts.raw")``."""
        return self._rendered[2]

    @property
    def overrun(self) -> int | None:
        """Tokens :attr:`text` is over :attr:`budget` even with everything hideable hidden
        (0: it fits; ``None``: no budget). Recorded on the decision's event."""
        return self._rendered.overrun

    @cached_property
    def peek(self) -> Peek | None:
        """The raw evidence the previous decision asked to see (``load_evidence``), masked
        and bounded; :attr:`text` shows it to this decision only. ``None``: none asked."""
        ref = getattr(self.state, "peek", None)
        if ref is None:
            return None
        raw = self.artifact(ref) if self.artifact is not None else None
        limit = self.peek_chars or PEEK_CHARS
        if self.budget is not None:
            limit = min(limit, 2 * self.budget)
        if raw is None:
            return Peek(ref, None, 0)
        return Peek(ref, raw[:limit], len(raw))

    @property
    def evidence_refs(self) -> tuple[str, ...]:
        """Refs of the card's evidence: what ``load_evidence`` is offered for.

        Left out: the ref this view already shows raw (``peek``), and every ref loaded
        since the task last made progress (``tried`` names them, and a step that makes
        progress clears it). Loading one again shows nothing new, and a weak model
        (Gemma 3 270M) was seen loading artifacts decision after decision, the same one
        or two in turn, until the stall guard failed the task: once each was seen, the
        decision has to act on them."""
        seen = [self.state.peek] if self.state.peek else []
        seen += [
            t.action.removeprefix(_LOADED)
            for t in self.state.tried
            if t.action.startswith(_LOADED) and len(t.action) > len(_LOADED)
        ]
        return tuple(
            dict.fromkeys(
                e.ref
                for e in self.state.evidence
                if e.ref and not any(e.ref.startswith(ref) for ref in seen)
            )
        )

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
    def rejected(self) -> tuple[Rejected, ...]:
        """Calls judged wrong earlier that still hold (what they read is unchanged), of
        the skills offered now; a ``permanent`` one is refused if made again."""
        return holding(self.state, self.skills)

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
            evidence=self.evidence_refs,
            children=self.child_kinds,
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
    choose: Choose | None = None,
    child_kinds: Sequence[str] = (),
) -> View[S]:
    """The :class:`View` of ``state``; its text is rendered (trimmed to ``budget``
    tokens if given) when first read. With ``bind``, params bound from the state
    (:mod:`skillstate.skills.binding`) leave the decision and show their value.
    ``choose`` (a skill library's retrieval, :mod:`skillstate.library.select`) picks
    the skills offered among those that apply; the catalog then lists only those."""
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
    candidates: tuple[Candidate, ...] = ()
    if choose is not None:
        chosen, candidates = choose(applicable)
        applicable = list(chosen)
        decisions = {s.name: decisions[s.name] for s in applicable}
    next_steps = tuple(sorted(machine.allowed(state.current_step))) if machine else ()

    def render(limit: int | None, peek: Sequence[str] = ()) -> Rendered:
        return trimmed(
            state,
            applicable,
            decisions,
            next_steps,
            budget=limit,
            value_chars=value_chars,
            peek=peek,
        )

    # With a retriever, listing every skill would put thousands in the system prompt.
    listed = skills if choose is None else applicable

    def catalog() -> tuple[tuple[str, str], ...]:
        return tuple((f"{s.name}({signature(s, bind)})", s.description) for s in listed)

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
        child_kinds=tuple(child_kinds),
        budget=budget,
        render=render,
        catalog=catalog,
        candidates=candidates,
    )
