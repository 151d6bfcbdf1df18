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
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Literal, TypedDict, TypeVar, get_type_hints

from pydantic import BaseModel, ConfigDict

from skillstate.engine import trace
from skillstate.errors import ToolNotAllowed, UsageError
from skillstate.events import ToolCall, Verdict
from skillstate.state import fingerprint as fingerprints
from skillstate.state.model import PROTECTED_FIELDS, AgentState, Evidence, Fingerprint
from skillstate.store.sealing import read_artifact, write_artifact

if TYPE_CHECKING:
    from skillstate.state.redact import Redactor
    from skillstate.store.base import Store

__all__ = [
    "NoParams",
    "Outcome",
    "ProbeFn",
    "Skill",
    "SkillContext",
    "SkillOptions",
    "ToolError",
    "Verdict",
    "VerifyContext",
]

P = TypeVar("P", bound=BaseModel)
S = TypeVar("S", bound=AgentState)

Tool = Callable[..., Any]


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


@dataclass(frozen=True)
class ToolError:
    """A tool's failure returned as a value (``ctx.call(..., errors="return")``).

    An expected answer such as "order not found" is data the skill (and, through
    its outcome, the model) should react to, not a crashed step: returned this
    way it is recorded as a failed tool call, but nothing is retried or rolled back.
    """

    tool: str
    kind: str
    """The exception's class name (``KeyError``, ``OrderNotFound``)."""
    message: str
    exception: BaseException | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}" if self.message else self.kind


ErrorMode = Literal["raise", "return"] | tuple[type[BaseException], ...]
"""How ``ctx.call`` treats a tool's exception: ``"raise"`` it (a failed attempt,
retried), ``"return"`` it as a :class:`ToolError`, or return a ToolError only for
the exception types in the tuple (the expected ones) and raise the rest."""

SUMMARY_CHARS = 160


def _summarize(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 1] + "…"


class SkillContext:
    """What a running skill may touch: its declared tools and the artifact store.

    Every tool call is recorded (args, a summary, and the raw result as an artifact)
    and ends up in the step's event.
    """

    def __init__(
        self,
        *,
        skill: str,
        task_id: str,
        step_id: str,
        attempt: int,
        tools: Mapping[str, Tool],
        store: Store,
        idempotency_key: str | None = None,
        redactor: Redactor | None = None,
        params: BaseModel | None = None,
        compensating: bool = False,
        fence: int | None = None,
    ) -> None:
        self.skill = skill
        self.task_id = task_id
        self.step_id = step_id
        self.attempt = attempt
        self.idempotency_key = idempotency_key
        """For skills declared with ``effects=True``: a key for this *logical* step,
        the same for every attempt, resume, retry and re-decision of it (and after a
        rollback that kept its effect), so the outside world (or the skill's probe)
        can tell a repeat from a new effect."""
        self.params = params
        """The validated params this step runs with."""
        self.compensating = compensating
        """True when a compensating rollback calls the ``rollback`` hook to undo an
        effect that succeeded earlier (``idempotency_key`` names it); False when the
        hook undoes a failed attempt of the step that is running."""
        self.fence = fence
        """For effects: the lease generation (fencing token) this worker holds the task
        under. A world that can store it (a SQL row, an object version) can refuse
        writes from a worker with an older one, which the key alone cannot do."""
        self._tools = dict(tools)
        self._store = store
        self._redactor = redactor
        self.calls: list[ToolCall] = []
        self.fingerprints: list[Fingerprint] = []
        self.found_by_probe = False
        """Set by the runtime when this attempt's outcome came from the skill's probe."""

    @property
    def tool_names(self) -> tuple[str, ...]:
        return tuple(self._tools)

    def call(self, tool: str, /, *, errors: ErrorMode = "raise", **args: Any) -> Any:
        """Call a declared tool; its full result is stored as an artifact.

        ``errors`` says what a tool's exception means (the name is reserved: a tool
        cannot take an argument called ``errors`` through here). By default it fails
        the attempt (retried, then rolled back). ``errors="return"``, or a tuple of
        the exception types the tool is expected to raise, returns a
        :class:`ToolError` instead, so the skill can turn "not found" into an
        outcome rather than a crash.
        """
        fn = self._tools.get(tool)
        if fn is None:
            raise ToolNotAllowed(self.skill, tool, self._tools)
        with trace.current().span("skillstate.tool", {"skillstate.tool": tool}) as span:
            result = self._call(tool, fn, errors, args)
            if isinstance(result, ToolError):
                span.fail(str(result))
            return result

    def _call(self, tool: str, fn: Tool, errors: ErrorMode, args: dict[str, Any]) -> Any:
        started = time.perf_counter()
        try:
            result = fn(**args)
        except Exception as exc:
            self.calls.append(
                ToolCall(
                    tool=tool,
                    args=args,
                    ok=False,
                    summary=f"{type(exc).__name__}: {exc}",
                    attempt=self.attempt,
                    duration_ms=(time.perf_counter() - started) * 1000,
                )
            )
            if errors == "return" or (isinstance(errors, tuple) and isinstance(exc, errors)):
                return ToolError(
                    tool=tool, kind=type(exc).__name__, message=str(exc), exception=exc
                )
            raise
        raw = result if isinstance(result, str) else json.dumps(result, default=str, indent=1)
        data = raw.encode()
        if self._redactor:
            # A tool may echo the credential it was given, or return a token, a phone
            # number: the redaction policy masks them before the bytes are stored.
            data = self._redactor.bytes(data)
        ref = write_artifact(self._store, data, media_type="application/json")
        self.calls.append(
            ToolCall(
                tool=tool,
                args=args,
                summary=_summarize(result),
                ref=ref,
                attempt=self.attempt,
                duration_ms=(time.perf_counter() - started) * 1000,
            )
        )
        return result

    def fingerprint(self, target: str, *, kind: str = "file") -> Fingerprint:
        """Record what this step relied on (default: the sha256 of file ``target``).

        Recorded with the step; on resume a changed fingerprint marks the step stale.
        """
        taken = fingerprints.take(target, kind=kind)
        self.fingerprints.append(taken)
        return taken

    def evidence(self, summary: str, *, kind: str = "tool_output") -> Evidence:
        """Evidence pointing at the raw output of the last tool call."""
        if not self.calls:
            raise UsageError("evidence() needs a tool call first")
        last = self.calls[-1]
        return Evidence(kind=kind, source=last.tool, summary=summary, ref=last.ref)

    def attach(self, data: bytes, *, media_type: str = "application/octet-stream") -> str:
        """Store ``data`` (a simulator snapshot, a generated file) as an artifact; its ref.

        Write the ref into the state (``Outcome(writes={"snapshot_ref": ref})``): the
        artifact is stored before the step commits, so a committed card never points
        at a missing one (a crash in between leaves an unreferenced artifact, nothing
        worse). Sealed at rest like tool outputs when a key is set; read it back with
        :meth:`artifact` to restore an in-process environment after a crash.
        """
        return write_artifact(self._store, data, media_type=media_type)

    def artifact(self, ref: str) -> bytes:
        """Read a raw artifact back (e.g. a tool output an earlier step stored)."""
        return read_artifact(self._store, ref)

    def artifact_json(self, ref: str) -> Any:
        return json.loads(self.artifact(ref))


RunFn = Callable[[S, P, SkillContext], Outcome]


@dataclass(frozen=True)
class VerifyContext(Generic[S, P]):
    """What a three-argument verify gets besides the new state and the outcome."""

    before: S
    """The state the step started from (``state`` is the candidate after its writes)."""
    params: P
    """The validated params the step ran with."""
    attempt: int
    key: str | None = None
    """The effect's idempotency key (effectful skills)."""


VerifyFn = (
    Callable[[S, Outcome], "Verdict | bool"]
    | Callable[[S, Outcome, "VerifyContext[S, Any]"], "Verdict | bool"]
)
"""``verify(state, outcome)``, or ``verify(state, outcome, ctx)`` to also see the state
before the step and the params (:class:`VerifyContext`)."""
WhenFn = Callable[[S], bool]
RollbackFn = Callable[[S, "Outcome | None", SkillContext], None]
ProbeFn = Callable[[S, P, SkillContext], "Outcome | None"]


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
    step: str | None
    max_retries: int | None
    verify: VerifyFn[Any] | None
    when: WhenFn[Any] | None
    rollback: RollbackFn[Any] | None
    effects: bool
    probe: ProbeFn[Any, Any] | None
    recheck: bool


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
        step: str | None = None,
        max_retries: int | None = None,
        verify: VerifyFn[S] | None = None,
        when: WhenFn[S] | None = None,
        rollback: RollbackFn[S] | None = None,
        effects: bool = False,
        probe: ProbeFn[S, P] | None = None,
        recheck: bool = False,
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
        if max_retries is not None and max_retries < 0:
            raise UsageError(f"skill {self.name!r}: max_retries must be >= 0")
        self.outputs = tuple(outputs)
        self.tools = tuple(tools)
        self.reads = tuple(reads)
        self.tags = tuple(tags)
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
        return self._probe(state, params, ctx)

    @property
    def has_verify(self) -> bool:
        return self._verify is not None

    @property
    def has_rollback(self) -> bool:
        return self._rollback is not None

    def when(self, state: S) -> bool:
        return bool(self._when(state))

    def run(self, state: S, params: P, ctx: SkillContext) -> Outcome:
        outcome = self._run(state, params, ctx)
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
            verdict = self._verify(state, outcome, context)  # type: ignore[call-arg]
        else:
            verdict = self._verify(state, outcome)  # type: ignore[call-arg]
        if isinstance(verdict, Verdict):
            return verdict
        return Verdict(ok=bool(verdict), reason="" if verdict else "verify returned False")

    def rollback(self, state: S, outcome: Outcome | None, ctx: SkillContext) -> None:
        if self._rollback is not None:
            self._rollback(state, outcome, ctx)

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
