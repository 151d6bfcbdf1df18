"""Tracing hooks: where a run, a step and its phases begin and end, for any tracer.

The runtime opens a span around each task run, each step, and inside a step around
the decision (one span per model call), each skill attempt's ``run`` and
``verify``, each tool call and the commit; it records a few metrics (steps,
failures, retries, tokens, commit latency). What a span *is* belongs to the tracer:
:class:`NoTracer` (the default) does nothing and costs a context-variable read and
an ``enabled`` check per hook; ``skillstate.integrations.otel.OTelTracer`` maps
them to OpenTelemetry. A hook that would compute something for its span (a diff, a
token count) asks ``tracer.enabled`` first, so tracing off costs nothing more.

The active tracer is held in a context variable: the runtime sets it for the
duration of ``run``/``step``, so the policy's model calls and a skill's tool calls
reach the same tracer without being handed it (and an asyncio task or a
``to_thread`` call inherits it).

Span names (``skillstate.*``) and the metric names are part of the public surface:
see docs/integrations/otel.md.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from skillstate.events import Event
    from skillstate.llm.base import Completion

__all__ = [
    "METRICS",
    "NOOP",
    "NoTracer",
    "Span",
    "Tracer",
    "chat_span",
    "current",
    "model_of",
    "traced_call",
    "traced_step",
    "using",
]

Attributes = Mapping[str, Any]

METRICS: Mapping[str, str] = {
    "skillstate.steps": "steps committed, by outcome (ok, failed, invalid)",
    "skillstate.failures": "failed skill attempts, by error kind",
    "skillstate.retries": "skill attempts beyond the first",
    "skillstate.tokens": "model tokens, by type (input, output)",
    "skillstate.commit.duration": "seconds a commit took (histogram)",
}
"""The metrics the runtime records (name: what it counts)."""


@runtime_checkable
class Span(Protocol):
    """One open span: attributes, events and an error status can be added to it."""

    def set(self, key: str, value: Any) -> None:
        """Set one attribute (a string, number, bool or a sequence of them)."""
        ...

    def event(self, name: str, attributes: Attributes | None = None) -> None:
        """Add a timestamped event (e.g. the state diff of a commit)."""
        ...

    def fail(self, message: str) -> None:
        """Mark the span as failed, with a one-line reason."""
        ...


@runtime_checkable
class Tracer(Protocol):
    """What the runtime's hooks call. ``enabled`` false means every call is a no-op."""

    enabled: bool

    def span(self, name: str, attributes: Attributes | None = None) -> Any:
        """A context manager that opens a span (child of the current one) and yields a
        :class:`Span`; an exception leaving it marks the span failed."""
        ...

    def record(self, metric: str, value: float, attributes: Attributes | None = None) -> None:
        """Add ``value`` to a counter, or one observation to a histogram (see
        :data:`METRICS`)."""
        ...


class _NoSpan:
    __slots__ = ()

    def set(self, key: str, value: Any) -> None:
        pass

    def event(self, name: str, attributes: Attributes | None = None) -> None:
        pass

    def fail(self, message: str) -> None:
        pass

    def __enter__(self) -> _NoSpan:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


_NO_SPAN = _NoSpan()


class NoTracer:
    """The default: no spans, no metrics, one shared do-nothing context manager."""

    enabled = False

    def span(self, name: str, attributes: Attributes | None = None) -> _NoSpan:
        return _NO_SPAN

    def record(self, metric: str, value: float, attributes: Attributes | None = None) -> None:
        pass


NOOP = NoTracer()

_current: contextvars.ContextVar[Tracer] = contextvars.ContextVar("skillstate_tracer", default=NOOP)


def current() -> Tracer:
    """The tracer of the run in progress (:data:`NOOP` outside one)."""
    return _current.get()


@contextmanager
def using(tracer: Tracer) -> Iterator[Tracer]:
    """Make ``tracer`` the current one for the block (restored after, also on error)."""
    token = _current.set(tracer)
    try:
        yield tracer
    finally:
        _current.reset(token)


def traced_step(span: Span, event: Event) -> None:
    """Name the step's span after what was committed, and count it (tracing on only)."""
    tracer = current()
    kind = str(event.action.get("kind", ""))
    span.set("skillstate.version", event.version)
    span.set("skillstate.action", kind)
    if event.step_id:
        span.set("skillstate.step.id", event.step_id)
    if event.skill:
        span.set("skillstate.skill", event.skill)
    if event.verdict is not None:
        span.set("skillstate.verdict", "passed" if event.verdict.ok else "failed")
    if event.attempts > 1:
        tracer.record("skillstate.retries", event.attempts - 1, {"skillstate.skill": event.skill})
    if event.error:
        span.fail(event.error)
    outcome = "invalid" if kind == "invalid" else "failed" if event.error else "ok"
    tracer.record("skillstate.steps", 1, {"skillstate.outcome": outcome})


def model_of(provider: str) -> tuple[str, str]:
    """``(provider, model)`` of a provider's name: ``openai:gpt-4o-mini`` is
    ``("openai", "gpt-4o-mini")``; a name without a colon is both."""
    system, sep, model = provider.partition(":")
    return (system, model) if sep and model else (provider, provider)


def chat_span(provider: str) -> tuple[str, dict[str, Any]]:
    """The name and first attributes of a model call's span (GenAI semantic conventions):
    ``chat {model}``, with the operation, the provider and the requested model known
    when it starts (a sampler sees them)."""
    system, model = model_of(provider)
    attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": system,
        "gen_ai.system": system,  # its name before semantic conventions 1.37
        "gen_ai.request.model": model,
    }
    return f"chat {model}", attributes


def traced_call(span: Span, model: str, max_tokens: int | None, completion: Completion) -> None:
    """GenAI semantic-convention attributes of one model call (tracing on only).

    ``model`` is the provider's name (``openai:gpt-4o-mini``)."""
    usage = completion.usage
    system, requested = model_of(model)
    span.set("gen_ai.operation.name", "chat")
    span.set("gen_ai.provider.name", system)
    span.set("gen_ai.request.model", requested)
    if max_tokens is not None:
        span.set("gen_ai.request.max_tokens", max_tokens)
    answered = completion.model or requested  # a replayed or scripted model may be prefixed
    span.set("gen_ai.response.model", answered.removeprefix(f"{system}:"))
    response_id = completion.raw.get("id")
    if response_id:
        span.set("gen_ai.response.id", str(response_id))
    span.set("gen_ai.usage.input_tokens", usage.prompt)
    span.set("gen_ai.usage.output_tokens", usage.completion)
    reason = completion.raw.get("finish_reason")
    if reason:
        span.set("gen_ai.response.finish_reasons", [str(reason)])
    tracer = current()
    on = {"gen_ai.provider.name": system, "gen_ai.request.model": requested}
    tracer.record("skillstate.tokens", usage.prompt, {**on, "gen_ai.token.type": "input"})
    tracer.record("skillstate.tokens", usage.completion, {**on, "gen_ai.token.type": "output"})
