"""Skills: reusable, tested units of action with a precondition and a hard check.

A skill is ``when`` (may it run now?), ``run`` (do the work, return an
:class:`Outcome` of proposed writes), ``verify`` (a real check of the proposed new
state; only a passing verdict is committed) and an optional ``rollback`` (undo the
side effects of a failed attempt). ``run`` never mutates the state it is given: it
returns writes, and the runtime applies them to a copy after ``verify`` passed.

Least privilege: a skill names the state keys it may write (``outputs``) and the
tools it may call (``tools``); its :class:`SkillContext` hands it only those.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypedDict, TypeVar, get_type_hints

from pydantic import BaseModel, ConfigDict

from skillstate._aio import resolve
from skillstate.errors import UsageError
from skillstate.events import Verdict
from skillstate.memory.facts import check_template
from skillstate.skills.context import SkillContext, ToolError
from skillstate.state.model import PROTECTED_FIELDS, AgentState, Evidence

__all__ = [
    "ApprovalFn",
    "NoParams",
    "Outcome",
    "ProbeFn",
    "Skill",
    "SkillContext",  # re-exported from skillstate.skills.context
    "SkillOptions",
    "ToolError",  # re-exported from skillstate.skills.context
    "Verdict",
    "VerifyContext",
]

P = TypeVar("P", bound=BaseModel)
S = TypeVar("S", bound=AgentState)


class NoParams(BaseModel):
    """The params schema of a skill that takes none."""

    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class Outcome:
    """What ``run`` proposes. Nothing here touches state until ``verify`` passes."""

    writes: Mapping[str, Any] = field(default_factory=dict)
    """Dotted paths to new values: ``{"facts.total": 42, "priority": "P1"}``."""
    summary: str = ""
    """One line for the step record and the log."""
    evidence: Sequence[Evidence] = ()
    """Short summaries (with artifact refs) to keep in the bounded evidence buffer."""
    value: Any = None
    """Anything else ``verify`` should look at (e.g. a tool's confirmation)."""


RunFn = Callable[[S, P, SkillContext], "Outcome | Awaitable[Outcome]"]


@dataclass(frozen=True)
class VerifyContext(Generic[S, P]):
    """What a three-argument verify gets besides the new state and the outcome."""

    before: S
    """The state the step started from (``state`` is the candidate after its writes)."""
    params: P
    """The validated params the step ran with."""
    attempt: int
    idempotency_key: str | None = None
    """The effect's idempotency key (effectful skills), named as on
    :class:`~skillstate.skills.context.SkillContext`."""

    @property
    def key(self) -> str | None:
        """Deprecated spelling of :attr:`idempotency_key` (kept so older verifiers work)."""
        return self.idempotency_key


VerifyFn = (
    Callable[[S, Outcome], "Verdict | bool"]
    | Callable[[S, Outcome, "VerifyContext[S, Any]"], "Verdict | bool"]
)
"""``verify(state, outcome)``, or ``verify(state, outcome, ctx)`` to also see the state
before the step and the params (:class:`VerifyContext`)."""
WhenFn = Callable[[S], bool]
RollbackFn = Callable[[S, "Outcome | None", SkillContext], "Awaitable[None] | None"]
ProbeFn = Callable[[S, P, SkillContext], "Outcome | Awaitable[Outcome | None] | None"]
ApprovalFn = Callable[[S, P], bool]
"""``approval(state, params)``: does this call need a person's approval before it runs?"""


def _always(state: Any) -> bool:
    return True


class SkillOptions(TypedDict, total=False):
    """The keyword options of :class:`Skill` (and of ``SkillRegistry.skill``)."""

    name: str | None
    description: str | None
    version: str
    params: type[BaseModel] | None
    outputs: Sequence[str]
    tools: Sequence[str]
    reads: Sequence[str]
    tags: Sequence[str]
    aliases: Sequence[str]
    step: str | None
    max_retries: int | None
    verify: VerifyFn[Any] | None
    when: WhenFn[Any] | None
    rollback: RollbackFn[Any] | None
    effects: bool
    probe: ProbeFn[Any, Any] | None
    recheck: bool
    approval: bool | ApprovalFn[Any, Any]
    remembers: Sequence[str]
    shares: Sequence[str]


class Skill(Generic[S, P]):
    """A named unit of action. Usually built with :meth:`SkillRegistry.skill`.

    ``verify`` is required: a skill whose results nobody checks is refused when the
    agent is built, not discovered later in production.
    """

    def __init__(
        self,
        run: RunFn[S, P],
        *,
        name: str | None = None,
        description: str | None = None,
        version: str = "1",
        params: type[BaseModel] | None = None,
        outputs: Sequence[str] = (),
        tools: Sequence[str] = (),
        reads: Sequence[str] = (),
        tags: Sequence[str] = (),
        aliases: Sequence[str] = (),
        step: str | None = None,
        max_retries: int | None = None,
        verify: VerifyFn[S] | None = None,
        when: WhenFn[S] | None = None,
        rollback: RollbackFn[S] | None = None,
        effects: bool = False,
        probe: ProbeFn[S, P] | None = None,
        recheck: bool = False,
        approval: bool | ApprovalFn[S, P] = False,
        remembers: Sequence[str] = (),
        shares: Sequence[str] = (),
    ) -> None:
        self.name = name or run.__name__
        self.description = description or _first_line(run.__doc__) or self.name
        self.version = version
        self.params: type[BaseModel] = params or _params_from_annotation(run)
        bad = [o for o in outputs if o.split(".")[0] in PROTECTED_FIELDS]
        if bad:
            raise UsageError(
                f"skill {self.name!r} declares runtime-owned outputs: {', '.join(bad)} "
                "(only the runtime writes those)"
            )
        if not isinstance(approval, bool) and not callable(approval):
            raise UsageError(
                f"skill {self.name!r}: approval must be True, False or a function "
                f"(state, params) -> bool, not {type(approval).__name__}"
            )
        if max_retries is not None and max_retries < 0:
            raise UsageError(f"skill {self.name!r}: max_retries must be >= 0")
        self.outputs = tuple(outputs)
        self.tools = tuple(tools)
        self.reads = tuple(reads)
        """Paths of the card the skill reads (fields, dotted paths, fact keys): the view
        shows those facts; a step whose input goes stale goes stale with it, and a call
        judged wrong stays rejected until they change. None declared: it depends on
        every step before it (:mod:`skillstate.state.depends`)."""
        self.tags = tuple(tags)
        if isinstance(aliases, str):  # aliases="fetch" would be five one-letter names
            raise UsageError(f"skill {self.name!r}: aliases takes a list of names, not a string")
        self.aliases = tuple(aliases)
        """Names this skill had before (a rename): a task pinned to a definition with the
        old name is carried to this one, as if the agent declared
        ``patched("alias:OLD", renamed={OLD: name})`` (:mod:`skillstate.definitions`)."""
        self.step = step
        self.max_retries = max_retries
        self._run = run
        self._verify = verify
        # Asked once, not on every attempt: does the verifier take a VerifyContext?
        self._verify_context = verify is not None and _takes_context(verify)
        self._when: WhenFn[S] = when or _always
        self._rollback = rollback
        self.effects = effects
        """The skill changes the outside world: the runtime records an intent before
        running it and, after a crash, asks ``probe`` before running it again."""
        self._probe = probe
        self.recheck = recheck
        """The skill depends on the outside world: right before it runs, the runtime
        re-checks the fingerprints of the completed steps (not only on resume), and a
        changed world puts the stale steps back on the plan instead of running it."""
        self.approval = approval
        """A person approves a call before it runs: ``True`` (always) or a predicate on
        the state and the validated params (:mod:`skillstate.control.approvals`)."""
        if isinstance(remembers, str):  # remembers="agent:x" would be a list of characters
            raise UsageError(f"skill {self.name!r}: remembers takes a list of scopes")
        try:
            self.remembers = tuple(check_template(t) for t in remembers)
        except UsageError as exc:
            raise UsageError(f"skill {self.name!r}: {exc}") from None
        """The cross-task memory scopes the skill may write (``ctx.remember``):
        ``agent:NAME``, ``team:NAME``, ``user:NAME``, a ``{field}`` of the card standing
        for the name (``user:{user}``). See :mod:`skillstate.memory`."""
        if isinstance(shares, str):  # shares="case" would be a list of characters
            raise UsageError(f"skill {self.name!r}: shares takes a list of record names")
        self.shares = tuple(shares)
        """The shared records the skill may write (``ctx.write_shared``), by the names the
        agent declares in ``Agent(shared=...)``. See :mod:`skillstate.shared`."""

    # Decorator-style setters, like ``property.setter``:
    #   @record_priority.verifier
    #   def _(state, outcome): ...
    def verifier(self, fn: VerifyFn[S]) -> VerifyFn[S]:
        self._verify = fn
        self._verify_context = _takes_context(fn)
        return fn

    def precondition(self, fn: WhenFn[S]) -> WhenFn[S]:
        self._when = fn
        return fn

    def rollbacker(self, fn: RollbackFn[S]) -> RollbackFn[S]:
        self._rollback = fn
        return fn

    def prober(self, fn: ProbeFn[S, P]) -> ProbeFn[S, P]:
        self._probe = fn
        return fn

    @property
    def has_probe(self) -> bool:
        return self._probe is not None

    def probe(self, state: S, params: P, ctx: SkillContext) -> Outcome | None:
        """Did this step's effect already happen (key: ``ctx.idempotency_key``)?

        Returns the :class:`Outcome` ``run`` would have returned if it did, else ``None``.
        """
        if self._probe is None:
            return None
        found: Outcome | None = resolve(self._probe(state, params, ctx))
        return found

    def needs_approval(self, state: S, params: P) -> bool:
        """Whether calling this skill with ``params`` in ``state`` waits for a person.

        A predicate that raises counts as "yes": when in doubt, a person looks."""
        if isinstance(self.approval, bool):
            return self.approval
        try:
            return bool(self.approval(state, params))
        except Exception:
            return True

    @property
    def has_verify(self) -> bool:
        return self._verify is not None

    @property
    def verify_function(self) -> VerifyFn[S] | None:
        """The verifier as declared (what the agent checks can fail at all)."""
        return self._verify

    @property
    def has_rollback(self) -> bool:
        return self._rollback is not None

    def when(self, state: S) -> bool:
        return bool(self._when(state))

    def run(self, state: S, params: P, ctx: SkillContext) -> Outcome:
        outcome = resolve(self._run(state, params, ctx))  # an async def run: awaited
        if isinstance(outcome, Mapping):  # a bare dict of writes is accepted too
            outcome = Outcome(writes=outcome)
        if not isinstance(outcome, Outcome):
            raise TypeError(f"skill {self.name!r} returned {type(outcome).__name__}, not Outcome")
        return outcome

    def verify(
        self, state: S, outcome: Outcome, context: VerifyContext[S, Any] | None = None
    ) -> Verdict:
        """Run the verifier on the candidate ``state``; ``context`` reaches a verifier that
        takes three arguments."""
        if self._verify is None:
            raise UsageError(f"skill {self.name!r} has no verify")
        if self._verify_context:
            if context is None:
                raise UsageError(f"the verify of skill {self.name!r} needs a VerifyContext")
            verdict = resolve(self._verify(state, outcome, context))  # type: ignore[call-arg]
        else:
            verdict = resolve(self._verify(state, outcome))  # type: ignore[call-arg]
        if isinstance(verdict, Verdict):
            return verdict
        return Verdict(ok=bool(verdict), reason="" if verdict else "verify returned False")

    def rollback(self, state: S, outcome: Outcome | None, ctx: SkillContext) -> None:
        if self._rollback is not None:
            resolve(self._rollback(state, outcome, ctx))

    def undeclared_writes(self, writes: Mapping[str, Any]) -> list[str]:
        """The written paths not covered by a declared output (or by a parent of one)."""
        return [path for path in writes if not any(_covers(o, path) for o in self.outputs)]

    def params_schema(self) -> dict[str, Any]:
        return self.params.model_json_schema()

    def __repr__(self) -> str:
        return f"Skill({self.name!r}, version={self.version!r})"


def _takes_context(fn: Callable[..., Any]) -> bool:
    """Whether a verifier accepts a third (context) argument."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 3 or any(p.kind is p.VAR_POSITIONAL for p in parameters)


def _covers(declared: str, path: str) -> bool:
    return path == declared or path.startswith(declared + ".")


def _first_line(doc: str | None) -> str:
    return doc.strip().splitlines()[0].strip() if doc and doc.strip() else ""


def _params_from_annotation(run: Callable[..., Any]) -> type[BaseModel]:
    """The params model from ``run``'s second parameter's annotation, else :class:`NoParams`."""
    try:
        hints = get_type_hints(run)
    except Exception:
        return NoParams
    names = list(run.__code__.co_varnames[: run.__code__.co_argcount])
    if len(names) >= 2:
        hint = hints.get(names[1])
        if isinstance(hint, type) and issubclass(hint, BaseModel) and hint is not BaseModel:
            return hint
    return NoParams
