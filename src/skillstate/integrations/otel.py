"""OpenTelemetry traces and metrics of every run, step and model call (extra ``otel``).

:class:`OTelTracer` implements :class:`skillstate.engine.trace.Tracer` with real
OpenTelemetry spans and instruments: hand it to a runtime and each run becomes a
trace (``skillstate.run`` → ``skillstate.step`` → ``skillstate.decide`` →
``chat {model}``, ``skillstate.skill.run`` → ``skillstate.tool`` /
``skillstate.skill.verify``, ``skillstate.commit``)::

    from skillstate import Runtime
    from skillstate.integrations.otel import OTelTracer, tracer_from_env

    runtime = Runtime(agent, store, tracer=OTelTracer())  # the global providers
    runtime = Runtime(agent, store, tracer=tracer_from_env())  # OTLP if configured

Model calls follow the GenAI semantic conventions (span kind ``CLIENT``, the
``gen_ai.*`` attributes). Nothing here is imported by ``import skillstate``, and
OpenTelemetry itself is imported only when an :class:`OTelTracer` is made (or
:func:`tracer_from_env` finds an endpoint): a runtime without a tracer never
touches it. See docs/integrations/otel.md.

What leaves the process: the attributes the runtime's hooks set (ids, names,
versions, verdicts, token counts), the commit's JSON Patch (the redacted one the
store keeps: sensitive fields are ciphertext or ``***`` in it) and the one-line
reasons of failures (masked like the error log). The message and traceback of an
exception that leaves a span may hold anything a tool or a verifier put in it, so
by default only its type is exported (``error.type``); ``record_exceptions=True``
exports the whole exception too.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from skillstate.engine import trace
from skillstate.errors import MissingExtra

if TYPE_CHECKING:
    from types import TracebackType

    from opentelemetry.metrics import Counter, Histogram, MeterProvider
    from opentelemetry.trace import Span as OTelSpan
    from opentelemetry.trace import TracerProvider
    from opentelemetry.util.types import AttributeValue

__all__ = ["INSTRUMENTS", "OTelTracer", "tracer_from_env"]

SCOPE = "skillstate"
"""The instrumentation scope of the tracer and the meter."""

INSTRUMENTS: Mapping[str, tuple[str, str]] = {
    "skillstate.steps": ("counter", "{step}"),
    "skillstate.failures": ("counter", "{failure}"),
    "skillstate.retries": ("counter", "{retry}"),
    "skillstate.tokens": ("counter", "{token}"),
    "skillstate.commit.duration": ("histogram", "s"),
}
"""The instrument kind and unit of each metric in :data:`skillstate.engine.trace.METRICS`;
a name not listed is a counter (a histogram when it ends in ``.duration``)."""

DURATION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
"""Bucket boundaries (seconds) advised for the duration histograms: a commit takes
milliseconds, far below the SDK's default boundaries."""

_INSTALL = "OpenTelemetry tracing needs its extra: pip install 'skillstate[otel]'"


def _require(*modules: str, hint: str = "") -> None:
    """Import ``modules`` now, or raise :class:`MissingExtra` naming the ``otel`` extra."""
    import importlib

    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            why = f"{hint}; {exc}" if hint else str(exc)
            raise MissingExtra(f"{_INSTALL} ({why})") from exc


# ---------------------------------------------------------------- attributes


def _value(value: Any) -> AttributeValue | None:
    """``value`` as an OpenTelemetry attribute value (``None``: leave it out).

    Strings, numbers and bools pass; a sequence of one of them stays a sequence (of
    strings if mixed); anything else (a dict) is written as JSON text.
    """
    if isinstance(value, (str, bool, int, float)):
        return value
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        kinds = {type(item) for item in value}
        if len(kinds) == 1 and kinds <= {str, bool, int, float}:
            return list(value)
        return [item if isinstance(item, str) else _json(item) for item in value]
    return _json(value)


def _json(value: Any) -> str:
    try:
        return json.dumps(value, default=str, ensure_ascii=False, separators=(",", ":"))
    except ValueError:
        return str(value)


def _attributes(attributes: trace.Attributes | None) -> dict[str, AttributeValue]:
    if not attributes:
        return {}
    out: dict[str, AttributeValue] = {}
    for key, raw in attributes.items():
        value = _value(raw)
        if value is not None:
            out[key] = value
    return out


def _error_type(exc_type: type[BaseException]) -> str:
    """The fully qualified class name, as the ``error.type`` convention asks."""
    module = exc_type.__module__
    name = exc_type.__qualname__
    return name if module in {"builtins", "__main__"} else f"{module}.{name}"


# ---------------------------------------------------------------- spans


class _Span:
    """The :class:`skillstate.engine.trace.Span` face of one OpenTelemetry span."""

    __slots__ = ("_error", "_span")

    def __init__(self, span: OTelSpan, error: Any) -> None:
        self._span = span
        self._error = error

    @property
    def otel(self) -> OTelSpan:
        """The OpenTelemetry span itself."""
        return self._span

    def set(self, key: str, value: Any) -> None:
        clean = _value(value)
        if clean is not None:
            self._span.set_attribute(key, clean)

    def event(self, name: str, attributes: trace.Attributes | None = None) -> None:
        self._span.add_event(name, _attributes(attributes))

    def fail(self, message: str) -> None:
        self._span.set_status(self._error(message))


class _Scope:
    """One span from ``__enter__`` (a child of the current span, made current) to
    ``__exit__`` (ended; an exception leaving it sets ERROR and ``error.type``)."""

    __slots__ = ("_attributes", "_name", "_owner", "_span", "_token")

    def __init__(self, owner: OTelTracer, name: str, attributes: trace.Attributes | None) -> None:
        self._owner = owner
        self._name = name
        self._attributes = attributes
        self._span: OTelSpan | None = None
        self._token: object = None

    def __enter__(self) -> _Span:
        owner = self._owner
        name, attributes, kind = owner._describe(self._name, self._attributes)
        span = owner._tracer.start_span(name, kind=kind, attributes=attributes)
        self._span = span
        self._token = owner._context.attach(owner._set_span_in_context(span))
        return _Span(span, owner._error)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        span = self._span
        assert span is not None
        owner = self._owner
        try:
            if exc_type is not None and exc is not None:
                kind = _error_type(exc_type)
                span.set_attribute("error.type", kind)
                if owner.record_exceptions:
                    span.record_exception(exc, escaped=True)
                    span.set_status(owner._error(f"{exc_type.__name__}: {exc}"))
                else:
                    span.add_event("exception", {"exception.type": kind})
                    span.set_status(owner._error(exc_type.__name__))
        finally:
            owner._context.detach(self._token)
            span.end()


# ---------------------------------------------------------------- the tracer


class OTelTracer:
    """A :class:`~skillstate.engine.trace.Tracer` that makes OpenTelemetry spans and metrics.

    ``tracer_provider`` and ``meter_provider`` default to the global ones (what the
    application, or ``opentelemetry-instrument``, configured); pass the SDK's own to
    keep skillstate's telemetry apart. Spans nest through the OpenTelemetry context,
    so a run started inside an application span is part of that trace.

    ``record_exceptions`` also exports the message and traceback of an exception
    that leaves a span (by default only its type: a tool's error text may quote
    a credential). Raises :class:`~skillstate.errors.MissingExtra` without the
    ``otel`` extra.
    """

    enabled = True

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        *,
        record_exceptions: bool = False,
    ) -> None:
        _require("opentelemetry.trace", "opentelemetry.metrics", "opentelemetry.context")
        from opentelemetry import context, metrics
        from opentelemetry import trace as otel_trace
        from opentelemetry.trace import SpanKind, Status, StatusCode

        from skillstate import __version__

        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        self.record_exceptions = record_exceptions
        self._tracer = otel_trace.get_tracer(SCOPE, __version__, tracer_provider)
        self._meter = metrics.get_meter(SCOPE, __version__, meter_provider)
        self._context = context
        self._set_span_in_context = otel_trace.set_span_in_context
        self._client = SpanKind.CLIENT
        self._internal = SpanKind.INTERNAL

        def error(message: str) -> Status:
            return Status(StatusCode.ERROR, message)

        self._error = error
        self._lock = threading.Lock()
        self._counters: dict[str, Counter] = {}
        self._histograms: dict[str, Histogram] = {}
        for name in trace.METRICS:
            self._instrument(name)

    def __repr__(self) -> str:
        return f"OTelTracer(record_exceptions={self.record_exceptions})"

    def span(self, name: str, attributes: trace.Attributes | None = None) -> _Scope:
        """A context manager: the span ``name``, a child of the current one."""
        return _Scope(self, name, attributes)

    def record(self, metric: str, value: float, attributes: trace.Attributes | None = None) -> None:
        """Add ``value`` to the counter ``metric``, or record it in its histogram."""
        counter = self._counters.get(metric)
        if counter is None and metric not in self._histograms:
            self._instrument(metric)
            counter = self._counters.get(metric)
        if counter is not None:
            if value >= 0:  # a counter only goes up
                counter.add(value, _attributes(attributes))
        else:
            self._histograms[metric].record(value, _attributes(attributes))

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Export what is buffered now (providers without ``force_flush``: nothing to do)."""
        ok = True
        for provider in (self.tracer_provider, self.meter_provider):
            flush = getattr(provider, "force_flush", None)
            if flush is not None:
                ok = bool(flush(timeout_millis)) and ok
        return ok

    def shutdown(self) -> None:
        """Flush and shut the providers this tracer was given (not the global ones)."""
        with _FROM_ENV_LOCK:
            for config in [c for c, t in _FROM_ENV.items() if t is self]:
                del _FROM_ENV[config]
        for provider in (self.tracer_provider, self.meter_provider):
            close = getattr(provider, "shutdown", None)
            if close is not None:
                close()

    # ---- internals

    def _describe(
        self, name: str, attributes: trace.Attributes | None
    ) -> tuple[str, dict[str, AttributeValue], Any]:
        """The span's name, attributes and kind: a model call (it has a
        ``gen_ai.operation.name``) is a ``CLIENT`` span named and described by the
        GenAI conventions; everything else is ``INTERNAL``."""
        clean = _attributes(attributes)
        operation = clean.get("gen_ai.operation.name")
        if operation is None:
            return name, clean, self._internal
        if operation == "chat" and "gen_ai.request.model" not in clean:
            # A hook that names the span after the provider ("chat openai:gpt-4o"):
            # the convention's name is the model's ("chat gpt-4o"), with the provider apart.
            provider = name.removeprefix(f"{operation} ")
            name, first = trace.chat_span(provider)
            clean = {**_attributes(first), **clean}
        return name, clean, self._client

    def _instrument(self, name: str) -> None:
        with self._lock:
            if name in self._counters or name in self._histograms:
                return
            fallback = "histogram" if name.endswith(".duration") else "counter"
            kind, unit = INSTRUMENTS.get(name, (fallback, ""))
            description = trace.METRICS.get(name, "")
            if kind == "histogram":
                self._histograms[name] = self._meter.create_histogram(
                    name,
                    unit=unit,
                    description=description,
                    explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
                )
            else:
                self._counters[name] = self._meter.create_counter(
                    name, unit=unit, description=description
                )


# ---------------------------------------------------------------- from the environment


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() == "true"


_FROM_ENV: dict[tuple[object, ...], OTelTracer] = {}
_FROM_ENV_LOCK = threading.Lock()


def tracer_from_env(*, record_exceptions: bool = False) -> OTelTracer | trace.NoTracer:
    """An :class:`OTelTracer` exporting OTLP over HTTP when the environment asks for one,
    else :data:`~skillstate.engine.trace.NOOP`::

        Runtime(agent, store, tracer=tracer_from_env())

    It asks when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``..._TRACES_ENDPOINT``) is set,
    unless ``OTEL_SDK_DISABLED=true``. The exporters read the other standard
    variables themselves (``OTEL_EXPORTER_OTLP_HEADERS``, ``..._TIMEOUT``, the
    per-signal endpoints); the resource reads ``OTEL_SERVICE_NAME`` (default
    ``skillstate``) and ``OTEL_RESOURCE_ATTRIBUTES``. Spans leave in batches;
    metrics (when ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``..._METRICS_ENDPOINT`` is set)
    every ``OTEL_METRIC_EXPORT_INTERVAL`` ms. Both providers flush when the process
    exits, or on :meth:`OTelTracer.shutdown`.

    One tracer per configuration and process: called again with the same ``OTEL_*``
    variables it returns the same tracer (a server making a runtime per request
    does not start an exporter per request).

    With an endpoint set but without the ``otel`` extra: :class:`MissingExtra`.
    """
    env = os.environ
    traces = env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    if not traces or _flag("OTEL_SDK_DISABLED"):
        return trace.NOOP
    config = (record_exceptions, *sorted((k, v) for k, v in env.items() if k.startswith("OTEL_")))
    with _FROM_ENV_LOCK:
        found = _FROM_ENV.get(config)
        if found is None:
            found = _FROM_ENV[config] = _exporting(record_exceptions)
        return found


def _exporting(record_exceptions: bool) -> OTelTracer:
    """A tracer with its own SDK providers, exporting OTLP/HTTP as the environment says."""
    _require(
        "opentelemetry.sdk.trace",
        "opentelemetry.sdk.metrics",
        "opentelemetry.exporter.otlp.proto.http.trace_exporter",
        "opentelemetry.exporter.otlp.proto.http.metric_exporter",
        hint="OTEL_EXPORTER_OTLP_ENDPOINT is set; or unset it, or set OTEL_SDK_DISABLED=true",
    )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider as SDKTracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    env = os.environ
    resource = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: SCOPE}))
    tracer_provider = SDKTracerProvider(resource=resource)
    tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    meter_provider = None
    if env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"):
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.sdk.metrics import MeterProvider as SDKMeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        reader = PeriodicExportingMetricReader(OTLPMetricExporter())
        meter_provider = SDKMeterProvider(resource=resource, metric_readers=[reader])
    return OTelTracer(tracer_provider, meter_provider, record_exceptions=record_exceptions)
