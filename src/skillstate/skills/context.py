"""What a running skill may touch: its declared tools, the artifact store, its memory scopes.

Every tool call goes through :class:`SkillContext` (``ctx.call``, or ``await
ctx.acall`` in an ``async def`` skill): it refuses a tool the skill did not declare,
records the call (args, a summary, the raw result as an artifact) for the step's
event, and turns an expected failure into a :class:`ToolError` value when asked.
``ctx.remember(key, value)`` asks to write a fact to a cross-task memory scope the
skill declares (``remembers``); it is written only if the attempt verifies.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel

from skillstate._aio import resolve
from skillstate.engine import trace
from skillstate.errors import MemoryNotDeclared, SharedNotDeclared, ToolNotAllowed, UsageError
from skillstate.events import ToolCall
from skillstate.fanout.spec import SpawnRequest
from skillstate.memory.facts import MemoryWrite, check_key
from skillstate.state import fingerprint as fingerprints
from skillstate.state.model import Evidence, Fingerprint
from skillstate.store.sealing import read_artifact, write_artifact

if TYPE_CHECKING:
    from skillstate.control.gates import ToolGate
    from skillstate.shared.access import Sharing
    from skillstate.state.redact import Redactor
    from skillstate.store.base import Store

__all__ = ["ErrorMode", "SkillContext", "Tool", "ToolError"]

Tool = Callable[..., Any]
"""A tool: any callable taking keyword arguments (an ``async def`` one is awaited)."""


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
        memory: Mapping[str, str | None] | None = None,
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
        self.gate: ToolGate | None = None
        """The skill's gated tools (:mod:`skillstate.control.gates`): a call that needs a
        person's approval stops the run here. Set by the runtime for a run and a probe,
        not for a rollback (an undo does not wait for a person)."""
        self._memory = dict(memory or {})
        """The scopes the skill declares (``remembers``), each resolved for this task."""
        self.remembered: list[MemoryWrite] = []
        """What this attempt asked to remember: kept only if it verifies."""
        self.spawned: list[SpawnRequest] = []
        """The child tasks this attempt asked to spawn (``spawn``): only if it verifies."""
        self.sharing: Sharing | None = None
        """The shared records this attempt may read and write (set by the runtime)."""

    def bind_tools(self, tools: Mapping[str, Tool]) -> None:
        """Add tools built for this context (the runtime's per-task tools take it)."""
        self._tools.update(tools)

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
        if self.gate is not None:  # may stop the run: ToolApprovalNeeded
            args = self.gate.args_for(tool, args)
        with trace.current().span("skillstate.tool", {"skillstate.tool": tool}) as span:
            result = self._call(tool, fn, errors, args)
            if isinstance(result, ToolError):
                span.fail(self._redactor.text(str(result)) if self._redactor else str(result))
            return result

    def _call(self, tool: str, fn: Tool, errors: ErrorMode, args: dict[str, Any]) -> Any:
        started = time.perf_counter()
        try:
            result = resolve(fn(**args))  # an async tool runs on the runtime's loop
        except Exception as exc:
            return self._failed(tool, args, exc, started, errors)
        return self._returned(tool, args, result, started)

    async def acall(
        self,
        tool: str,
        /,
        *,
        timeout: float | None = None,
        retries: int = 0,
        backoff: float = 0.5,
        errors: ErrorMode = "raise",
        **args: Any,
    ) -> Any:
        """:meth:`call`, awaited, for an ``async def`` skill: the tool is awaited (a sync
        one runs in a thread), each try bounded by ``timeout`` seconds, and a failed or
        timed-out try is retried ``retries`` times after ``backoff``, 2 x ``backoff``...
        seconds. Every try is recorded; ``errors`` applies to the last one. The names
        ``timeout``, ``retries``, ``backoff`` and ``errors`` are reserved here."""
        fn = self._tools.get(tool)
        if fn is None:
            raise ToolNotAllowed(self.skill, tool, self._tools)
        if retries < 0 or backoff < 0 or (timeout is not None and timeout <= 0):
            raise UsageError("acall: retries and backoff must be >= 0, timeout > 0")
        if self.gate is not None:
            args = self.gate.args_for(tool, args)
        with trace.current().span("skillstate.tool", {"skillstate.tool": tool}) as span:
            for number in range(retries + 1):
                started = time.perf_counter()
                try:
                    result = await asyncio.wait_for(_awaitable(fn, args), timeout)
                except Exception as exc:
                    if number < retries:
                        self._failed(tool, args, exc, started, "return")
                        await asyncio.sleep(backoff * 2**number)
                        continue
                    failed = self._failed(tool, args, exc, started, errors)
                    span.fail(self._redactor.text(str(failed)) if self._redactor else str(failed))
                    return failed
                return self._returned(tool, args, result, started)
        raise AssertionError("unreachable")  # the last try returns or raises

    def _failed(
        self, tool: str, args: dict[str, Any], exc: Exception, started: float, errors: ErrorMode
    ) -> ToolError:
        """Record a failed call; the :class:`ToolError` if ``errors`` expects it, else raise."""
        if isinstance(exc, TimeoutError) and not str(exc):
            exc = TimeoutError(f"{tool} did not answer in time")
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
            return ToolError(tool=tool, kind=type(exc).__name__, message=str(exc), exception=exc)
        raise exc

    def _returned(self, tool: str, args: dict[str, Any], result: Any, started: float) -> Any:
        """Record a call that returned; its raw result becomes an artifact."""
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

    def remember(
        self,
        key: str,
        value: Any,
        *,
        scope: str | None = None,
        ttl: float | timedelta | None = None,
        artifact: str | None = None,
    ) -> None:
        """Remember ``key = value`` (JSON, at most 2,000 characters) in a cross-task memory
        scope, for later tasks' views (:mod:`skillstate.memory`).

        ``scope`` is one the skill declares in ``remembers`` (as declared, ``user:{user}``,
        or as resolved, ``user:alice``); it may be left out when the skill declares one.
        Any other is :class:`~skillstate.errors.MemoryNotDeclared`, which fails the step
        without a retry. Nothing is written now: only if this attempt's verify passes is
        the fact committed with the step and written to the scope, once, with the task,
        the version, the skill and ``artifact`` as its provenance. ``ttl`` (seconds or a
        timedelta): how long the fact is shown once written.
        """
        template = self._declared_scope(scope)
        resolved = self._memory[template]
        if resolved is None:
            raise UsageError(
                f"memory scope {template!r} names no scope in task {self.task_id!r}: "
                "the card field it reads is empty"
            )
        check_key(key)
        seconds = ttl.total_seconds() if isinstance(ttl, timedelta) else ttl
        if seconds is not None and (
            isinstance(seconds, bool) or not math.isfinite(seconds) or seconds <= 0
        ):
            raise UsageError(f"remember {key!r}: ttl must be a positive number of seconds")
        write = MemoryWrite(resolved, key, copy.deepcopy(value), seconds, artifact)
        self.remembered.append(write)

    def spawn(
        self,
        child: str,
        *,
        key: str,
        set: Mapping[str, Any] | None = None,  # the name Spawn(set=...) uses
        goal: str | None = None,
    ) -> None:
        """Spawn a child task of a kind the agent declares (``Agent(children=...)``), as a
        ``Spawn`` decision would (:mod:`skillstate.fanout`): committed with this step,
        only if the attempt verifies; the task then waits for its children. Not
        available to a skill with effects."""
        self.spawned.append(SpawnRequest(child, key, copy.deepcopy(dict(set or {})), goal))

    def shared(self, name: str) -> Any:
        """The shared record ``name`` (a model of its declared schema) as this step's
        decision saw it, or as this attempt last wrote it. See :mod:`skillstate.shared`."""
        if self.sharing is None:
            raise SharedNotDeclared(self.skill, name, (), writing=False)
        return self.sharing.read(name)

    def write_shared(self, name: str, value: Any) -> None:
        """Replace shared record ``name`` (declared in the skill's ``shares``) with
        ``value``: a model, a dict, or a function of the current value. Written only if
        this attempt verifies, as a compare-and-set against the version the decision
        saw: if another task wrote first the step is undone and decided again."""
        if self.sharing is None:
            raise SharedNotDeclared(self.skill, name, (), writing=True)
        self.sharing.write(name, value)

    def _declared_scope(self, scope: str | None) -> str:
        """The declared template ``scope`` names (or the only one, for ``None``)."""
        declared = self._memory
        if scope is None:
            if len(declared) == 1:
                return next(iter(declared))
        elif scope in declared:
            return scope
        else:
            for template, resolved in declared.items():
                if resolved == scope:
                    return template
        raise MemoryNotDeclared(self.skill, scope, declared)

    def fingerprint(self, target: str, *, kind: str = "file") -> Fingerprint:
        """Record what this step relied on (default: the sha256 of file ``target``).

        Other kinds: ``sqlite`` (``sqlite_target(db, query)``: the query's rows),
        ``http`` (a URL's ETag), or one registered with ``register_fingerprint_kind``
        (:mod:`skillstate.state.fingerprint`). Recorded with the step; on resume, before
        a ``recheck`` skill and before ``Finish``, a changed fingerprint marks the step
        stale, with every later step that read what it wrote. Raises
        :class:`~skillstate.errors.FingerprintUnavailable` when ``target`` cannot be read.
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


async def _awaitable(fn: Tool, args: dict[str, Any]) -> Any:
    """Await ``fn(**args)``: a coroutine function directly, a plain one in a thread."""
    if inspect.iscoroutinefunction(fn):
        return await fn(**args)
    result = await asyncio.to_thread(fn, **args)
    return await result if inspect.isawaitable(result) else result
