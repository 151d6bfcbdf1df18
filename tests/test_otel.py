"""OpenTelemetry export (issue 17, part 2): ``skillstate.integrations.otel.OTelTracer``.

The runtime's tracing hooks (engine/trace.py) mapped to real OpenTelemetry spans
and instruments, read back with the SDK's in-memory exporter and metric reader: the
span tree of a run, its attributes, the commit's diff event, ERROR on a failing
verify, the GenAI conventions of model calls and the metric values. Then once over
the wire, to an OTLP/HTTP receiver started here, and once with tracing off (a fresh
interpreter runs an agent without importing OpenTelemetry). A sensitive field's
plaintext is searched for in everything exported, down to the OTLP bytes.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from skillstate import (
    Action,
    Agent,
    AgentState,
    CallSkill,
    Finish,
    NoParams,
    Outcome,
    Runtime,
    ScriptedPolicy,
    Sensitive,
    SkillContext,
    SkillRegistry,
    StateMachine,
    Verdict,
    View,
)
from skillstate.engine import trace
from skillstate.engine.aruntime import AsyncRuntime
from skillstate.engine.policy import StatePolicy
from skillstate.errors import MissingExtra
from skillstate.integrations.otel import OTelTracer, tracer_from_env
from skillstate.llm.base import Message
from skillstate.llm.replay import ScriptedProvider
from skillstate.state.secrets import PREFIX, generate_key
from skillstate.store.memory import MemoryStore

TOKEN = "vault-tok-5e8c1a7f2b9d4c63"
"""The sensitive field's plaintext: it must appear in no span, attribute or event."""
TASK = "v1"


class Vault(AgentState):
    token: Sensitive[str] | None = None
    count: int = 0
    checked: bool = False


def vault_agent(policy: Any = None) -> Agent[Vault]:
    """``fetch`` (its ``api`` tool refuses the token once, in words that quote it, and
    its ``lookup`` tool always fails, returned as a ToolError), ``check`` (a verify
    that always fails, one retry), then finish."""
    refusals = {"api": 1}

    def api(auth: str) -> dict[str, Any]:
        if refusals["api"]:
            refusals["api"] -= 1
            raise PermissionError(f"401 for token {auth}")
        return {"n": 1}

    def lookup(auth: str) -> dict[str, Any]:
        raise KeyError(f"no record for {auth}")

    skills = SkillRegistry()

    @skills.skill(outputs=["count"], tools=["api", "lookup"], max_retries=2)
    def fetch(state: Vault, params: NoParams, ctx: SkillContext) -> Outcome:
        """Fetch the count with the token."""
        ctx.call("lookup", auth=state.token, errors="return")
        reply = ctx.call("api", auth=state.token)
        return Outcome(writes={"count": state.count + reply["n"]}, summary="fetched")

    fetch.verifier(lambda state, outcome: state.count == 1)

    @skills.skill(outputs=["checked"], max_retries=1)
    def check(state: Vault, params: NoParams, ctx: SkillContext) -> Outcome:
        """Check the count."""
        return Outcome(writes={"checked": True})

    @check.verifier
    def _never(state: Vault, outcome: Outcome) -> Verdict:
        return Verdict.failed("the count is not checked")

    def decide(view: View[Vault]) -> Action:
        state = view.state
        if state.count == 0:
            return CallSkill(skill="fetch", reason="need the count")
        if not state.errors:
            return CallSkill(skill="check", reason="check it")
        return Finish(summary="done")

    return Agent(
        name="vault",
        state_type=Vault,
        machine=StateMachine({"init": ["init"]}, final=["init"]),
        skills=skills,
        policy=policy or ScriptedPolicy(decide),
        tools={"api": api, "lookup": lookup},
    )


@dataclass
class Telemetry:
    tracer: OTelTracer
    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.spans() if s.name == name]

    def children(self, parent: ReadableSpan, name: str | None = None) -> list[ReadableSpan]:
        return [
            s
            for s in self.spans()
            if s.parent is not None
            and s.parent.span_id == parent.context.span_id
            and (name is None or s.name == name)
        ]

    def metrics(self) -> dict[str, list[tuple[dict[str, Any], Any]]]:
        """Each metric's data points: (attributes, value) for a counter, (attributes,
        (count, sum)) for a histogram."""
        out: dict[str, list[tuple[dict[str, Any], Any]]] = {}
        data = self.reader.get_metrics_data()
        assert data is not None
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                assert scope.scope.name == "skillstate"
                for metric in scope.metrics:
                    points = out.setdefault(metric.name, [])
                    for point in metric.data.data_points:
                        value = getattr(point, "value", None)
                        if value is None:
                            value = (point.count, point.sum)  # type: ignore[union-attr]
                        points.append((dict(point.attributes or {}), value))
        return out

    def counter(self, name: str, key: str) -> dict[Any, Any]:
        return {attributes.get(key): value for attributes, value in self.metrics()[name]}


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> str:
    value = generate_key()
    monkeypatch.setenv("SKILLSTATE_KEY", value)
    return value


@pytest.fixture
def otel() -> Iterator[Telemetry]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    yield Telemetry(OTelTracer(provider, meters), exporter, reader)
    provider.shutdown()
    meters.shutdown()


def run_vault(tracer: trace.Tracer, agent: Agent[Vault] | None = None) -> tuple[Any, MemoryStore]:
    """Start the task with the token (traced too: its diff is the card with the token),
    then run it to the end."""
    store = MemoryStore()
    runtime = Runtime(agent or vault_agent(), store, tracer=tracer)
    with trace.using(tracer):
        runtime.start(TASK, token=TOKEN)
    return runtime.run(TASK), store


def exported_text(spans: Sequence[ReadableSpan]) -> str:
    """Everything a span exports, as text: names, attributes, events, status, resource."""
    parts: list[str] = []
    for span in spans:
        parts.append(span.to_json())
        parts += [str(span.name), str(span.status.description)]
        parts += [f"{k}={v!r}" for k, v in (span.attributes or {}).items()]
        for event in span.events:
            parts += [event.name, *(f"{k}={v!r}" for k, v in (event.attributes or {}).items())]
    return "\n".join(parts)


def number(span: ReadableSpan, key: str) -> int:
    value = (span.attributes or {})[key]
    assert isinstance(value, int)
    return value


def _json_list(value: Any) -> list[Any]:
    assert isinstance(value, str)
    loaded = json.loads(value)
    assert isinstance(loaded, list)
    return loaded


# ---------------------------------------------------------------- the span tree


@pytest.mark.usefixtures("key")
class TestSpans:
    def test_the_tree_of_a_run(self, otel: Telemetry) -> None:
        """run → step → decide, skill.run (→ tool, verify), commit; one trace."""
        result, _ = run_vault(otel.tracer)
        assert result.stopped == "completed"
        (run,) = otel.named("skillstate.run")
        assert run.parent is None
        assert run.kind is SpanKind.INTERNAL
        assert run.attributes == {
            "skillstate.task.id": TASK,
            "skillstate.run.stopped": "completed",
            "skillstate.run.steps": 3,
        }
        assert {s.context.trace_id for s in otel.spans() if s.parent is not None} == {
            run.context.trace_id
        }
        steps = otel.children(run, "skillstate.step")
        assert len(steps) == 3 == len(otel.named("skillstate.step"))
        fetch, _, finish = steps
        for step in steps:
            assert len(otel.children(step, "skillstate.decide")) == 1
            assert len(otel.children(step, "skillstate.commit")) == 1
        # fetch: two attempts (the first fails in its tool), each with its tool calls
        attempts = otel.children(fetch, "skillstate.skill.run")
        assert [a.attributes["skillstate.attempt"] for a in attempts if a.attributes] == [1, 2]
        first, second = attempts
        assert [t.attributes["skillstate.tool"] for t in otel.children(first) if t.attributes] == [
            "lookup",
            "api",
        ]
        assert [s.name for s in otel.children(second)] == [
            "skillstate.tool",
            "skillstate.tool",
            "skillstate.skill.verify",
        ]
        (verify,) = otel.children(second, "skillstate.skill.verify")
        assert verify.attributes == {"skillstate.verdict": "passed"}
        assert second.status.status_code is StatusCode.UNSET
        assert not otel.children(finish, "skillstate.skill.run")  # finish runs no skill

    def test_step_attributes(self, otel: Telemetry) -> None:
        """Task id, version, skill, verdict and action on each step."""
        run_vault(otel.tracer)
        fetch, check, finish = otel.named("skillstate.step")
        assert fetch.attributes == {
            "skillstate.task.id": TASK,
            "skillstate.version": 2,
            "skillstate.action": "call_skill",
            "skillstate.step.id": "0002-fetch",
            "skillstate.skill": "fetch",
            "skillstate.verdict": "passed",
        }
        assert check.attributes is not None
        assert finish.attributes is not None
        assert check.attributes["skillstate.version"] == 3
        assert check.attributes["skillstate.skill"] == "check"
        assert check.attributes["skillstate.verdict"] == "failed"
        assert finish.attributes["skillstate.action"] == "finish"
        assert "skillstate.skill" not in finish.attributes
        assert fetch.status.status_code is StatusCode.UNSET

    def test_the_commit_carries_the_state_diff(self, otel: Telemetry) -> None:
        """Each commit has one ``skillstate.state.diff`` event: the JSON Patch it wrote."""
        _, store = run_vault(otel.tracer)
        commits = otel.named("skillstate.commit")
        assert [c.attributes["skillstate.version"] for c in commits if c.attributes] == [1, 2, 3, 4]
        patches = []
        for commit in commits:
            (event,) = commit.events
            assert event.name == "skillstate.state.diff"
            assert event.attributes is not None
            patches.append(_json_list(event.attributes["skillstate.patch"]))
        assert {"op": "replace", "path": "/count", "value": 1} in patches[1]
        assert patches[1:] == [e.patch for e in store.events(TASK)][1:]

    def test_a_failing_verify_is_an_error(self, otel: Telemetry) -> None:
        """Each failed attempt's span is ERROR with its reason, and so is the step."""
        run_vault(otel.tracer)
        check = otel.named("skillstate.step")[1]
        attempts = otel.children(check, "skillstate.skill.run")
        assert len(attempts) == 2
        for attempt in attempts:
            assert attempt.status.status_code is StatusCode.ERROR
            assert attempt.status.description == "verify_failed: the count is not checked"
            (verify,) = otel.children(attempt, "skillstate.skill.verify")
            assert verify.attributes == {"skillstate.verdict": "failed"}
        assert check.status.status_code is StatusCode.ERROR
        assert check.status.description is not None
        assert check.status.description.startswith("check failed after 2 attempt(s)")

    def test_an_exception_leaving_a_span_is_an_error_of_its_type(self, otel: Telemetry) -> None:
        """The tool that raised: ERROR, ``error.type`` and an exception event, no message."""
        run_vault(otel.tracer)
        fetch = otel.named("skillstate.step")[0]
        first = otel.children(fetch, "skillstate.skill.run")[0]
        lookup, api = otel.children(first, "skillstate.tool")
        assert api.status.status_code is StatusCode.ERROR
        assert api.status.description == "PermissionError"
        assert api.attributes == {"skillstate.tool": "api", "error.type": "PermissionError"}
        assert [(e.name, dict(e.attributes or {})) for e in api.events] == [
            ("exception", {"exception.type": "PermissionError"})
        ]
        # a tool error returned as a value fails its span too, with its (masked) reason
        assert lookup.status.status_code is StatusCode.ERROR
        assert lookup.status.description == "KeyError: 'no record for ***'"
        assert first.status.description == "skill_error: PermissionError: 401 for token ***"

    def test_record_exceptions_exports_the_message(self, otel: Telemetry) -> None:
        provider = otel.tracer.tracer_provider
        tracer = OTelTracer(provider, record_exceptions=True)
        outer_scope, inner_scope = tracer.span("outer"), tracer.span("inner")
        with pytest.raises(ValueError, match="bad value"), outer_scope, inner_scope:
            raise ValueError("bad value")
        inner, outer = otel.spans()
        for span in (inner, outer):
            assert span.status.status_code is StatusCode.ERROR
            assert span.status.description == "ValueError: bad value"
            assert span.attributes == {"error.type": "ValueError"}
            (event,) = span.events
            assert event.name == "exception"
            assert event.attributes is not None
            assert event.attributes["exception.message"] == "bad value"
            assert "Traceback" in str(event.attributes["exception.stacktrace"])
        assert inner.parent is not None
        assert inner.parent.span_id == outer.context.span_id

    def test_a_sensitive_value_is_in_no_exported_span(self, otel: Telemetry, key: str) -> None:
        """Not in attributes, events (the diffs), status reasons, nor the OTLP bytes."""
        run_vault(otel.tracer)
        spans = otel.spans()
        assert len(spans) > 20
        text = exported_text(spans)
        assert TOKEN not in text
        wire = encode_spans(spans).SerializeToString()
        assert TOKEN.encode() not in wire
        assert key.encode() not in wire
        # The token was exported, sealed: the created card's diff holds its ciphertext.
        create = otel.named("skillstate.commit")[0].events[0].attributes
        assert create is not None
        (op,) = [op for op in _json_list(create["skillstate.patch"]) if op["path"] == "/token"]
        assert op["value"].startswith(PREFIX)
        # ...and the masks are where the raw text would have been
        assert "401 for token ***" in text

    def test_a_run_nests_under_the_application_span(self, otel: Telemetry) -> None:
        provider = otel.tracer.tracer_provider
        assert provider is not None
        app = provider.get_tracer("app")
        with app.start_as_current_span("handle request") as outer:
            run_vault(otel.tracer)
        (run,) = otel.named("skillstate.run")
        assert run.parent is not None
        assert run.parent.span_id == outer.get_span_context().span_id

    def test_the_async_runtime_nests_the_same(self, otel: Telemetry) -> None:
        """Spans opened in worker threads and across awaits still form one tree."""
        store = MemoryStore()
        runtime = AsyncRuntime(vault_agent(), store, tracer=otel.tracer)

        async def main() -> Any:
            await runtime.start(TASK, token=TOKEN)
            return await runtime.run(TASK)

        assert asyncio.run(main()).stopped == "completed"
        (run,) = otel.named("skillstate.run")
        steps = otel.children(run, "skillstate.step")
        assert len(steps) == 3
        for step in steps:
            assert {s.name for s in otel.children(step)} >= {
                "skillstate.decide",
                "skillstate.commit",
            }
        assert len(otel.children(steps[0], "skillstate.skill.run")) == 2
        assert TOKEN not in exported_text(otel.spans())


# ---------------------------------------------------------------- model calls


def model_replies(*replies: dict[str, Any] | str) -> Callable[..., str]:
    queue = list(replies)

    def rule(messages: Sequence[Message], schema: dict[str, Any] | None) -> str:
        reply = queue.pop(0)
        return reply if isinstance(reply, str) else json.dumps(reply)

    return rule


@pytest.mark.usefixtures("key")
class TestModelCalls:
    def model_run(self, otel: Telemetry) -> tuple[Any, MemoryStore]:
        """fetch (after one invalid reply, repaired), check, finish: four model calls."""
        rule = model_replies(
            "not json at all",
            {"kind": "call_skill", "skill": "fetch", "params": {}, "reason": "need the count"},
            {"kind": "call_skill", "skill": "check", "params": {}, "reason": "check it"},
            {"kind": "finish", "summary": "done"},
        )
        policy = StatePolicy(ScriptedProvider(rule, name="openai:gpt-test"), max_repairs=1)
        return run_vault(otel.tracer, vault_agent(policy))

    def test_chat_spans_follow_the_genai_conventions(self, otel: Telemetry) -> None:
        result, _ = self.model_run(otel)
        assert result.stopped == "completed"
        chats = otel.named("chat gpt-test")
        assert len(chats) == 4 == len([s for s in otel.spans() if s.name.startswith("chat ")])
        decides = otel.named("skillstate.decide")
        assert [len(otel.children(d, "chat gpt-test")) for d in decides] == [2, 1, 1]
        for chat in chats:
            assert chat.kind is SpanKind.CLIENT
            attributes = dict(chat.attributes or {})
            assert attributes["gen_ai.operation.name"] == "chat"
            assert attributes["gen_ai.provider.name"] == "openai"
            assert attributes["gen_ai.request.model"] == "gpt-test"
            assert attributes["gen_ai.response.model"] == "gpt-test"
            assert isinstance(attributes["gen_ai.request.max_tokens"], int)
            assert number(chat, "gen_ai.usage.input_tokens") > 0
            assert number(chat, "gen_ai.usage.output_tokens") > 0
            assert chat.status.status_code is StatusCode.UNSET
        assert TOKEN not in exported_text(otel.spans())

    def test_token_counts_agree_with_the_events_and_the_metric(self, otel: Telemetry) -> None:
        _, store = self.model_run(otel)
        chats = otel.named("chat gpt-test")
        sent = sum(number(c, "gen_ai.usage.input_tokens") for c in chats)
        got = sum(number(c, "gen_ai.usage.output_tokens") for c in chats)
        usages = [e.usage for e in store.events(TASK) if e.usage is not None]
        assert sent == sum(u.prompt for u in usages) > 0
        assert got == sum(u.completion for u in usages) > 0
        tokens = otel.counter("skillstate.tokens", "gen_ai.token.type")
        assert tokens == {"input": sent, "output": got}
        for attributes, _ in otel.metrics()["skillstate.tokens"]:
            assert attributes["gen_ai.provider.name"] == "openai"
            assert attributes["gen_ai.request.model"] == "gpt-test"

    def test_a_failed_model_call_is_an_error_of_its_type(self, otel: Telemetry) -> None:
        from skillstate.errors import ProviderError

        def down(messages: Sequence[Message], schema: dict[str, Any] | None) -> str:
            raise ProviderError("openai:gpt-test: cannot reach the server")

        policy = StatePolicy(ScriptedProvider(down, name="openai:gpt-test"))
        with pytest.raises(ProviderError):
            run_vault(otel.tracer, vault_agent(policy))
        (chat,) = otel.named("chat gpt-test")
        assert chat.kind is SpanKind.CLIENT
        assert chat.status.status_code is StatusCode.ERROR
        assert (chat.attributes or {})["error.type"] == "skillstate.errors.ProviderError"
        (run,) = otel.named("skillstate.run")
        assert run.status.status_code is StatusCode.ERROR


# ---------------------------------------------------------------- metrics


@pytest.mark.usefixtures("key")
class TestMetrics:
    def test_the_values_of_a_run(self, otel: Telemetry) -> None:
        run_vault(otel.tracer)
        assert otel.counter("skillstate.steps", "skillstate.outcome") == {"ok": 2, "failed": 1}
        assert otel.counter("skillstate.failures", "skillstate.error") == {
            "skill_error": 1,
            "verify_failed": 2,
        }
        assert otel.counter("skillstate.retries", "skillstate.skill") == {"fetch": 1, "check": 1}
        ((attributes, (count, total)),) = otel.metrics()["skillstate.commit.duration"]
        assert attributes == {}
        assert count == 4  # the created card and three steps
        assert 0 < total < 10
        assert "skillstate.tokens" not in otel.metrics()  # no model: no tokens

    def test_instruments_have_units_and_descriptions(self, otel: Telemetry) -> None:
        run_vault(otel.tracer)
        data = otel.reader.get_metrics_data()
        assert data is not None
        found = {
            m.name: (m.unit, m.description)
            for r in data.resource_metrics
            for s in r.scope_metrics
            for m in s.metrics
        }
        assert found["skillstate.commit.duration"] == (
            "s",
            trace.METRICS["skillstate.commit.duration"],
        )
        assert found["skillstate.steps"][0] == "{step}"

    def test_an_unknown_metric_is_a_counter(self, otel: Telemetry) -> None:
        otel.tracer.record("my.things", 2, {"kind": "a", "skipped": None})
        otel.tracer.record("my.things", 3, {"kind": "a"})
        otel.tracer.record("my.wait.duration", 0.5)
        assert otel.metrics()["my.things"] == [({"kind": "a"}, 5)]
        assert otel.metrics()["my.wait.duration"] == [({}, (1, 0.5))]


# ---------------------------------------------------------------- the tracer itself


class TestTracer:
    def test_it_is_a_tracer(self, otel: Telemetry) -> None:
        assert isinstance(otel.tracer, trace.Tracer)
        assert otel.tracer.enabled
        with otel.tracer.span("x") as span:
            assert isinstance(span, trace.Span)

    def test_attribute_values_are_converted(self, otel: Telemetry) -> None:
        """A dict becomes JSON text, a mixed list strings, ``None`` is left out."""
        with otel.tracer.span("x", {"a": None, "b": ("p", "q")}) as span:
            span.set("dict", {"k": [1, 2]})
            span.set("mixed", ["a", 1, {"b": 2}])
            span.set("none", None)
            span.set("floats", [0.5, 1.5])
            span.event("e", {"n": 1, "d": {"x": True}})
        (done,) = otel.spans()
        assert dict(done.attributes or {}) == {
            "b": ("p", "q"),
            "dict": '{"k":[1,2]}',
            "mixed": ("a", "1", '{"b":2}'),
            "floats": (0.5, 1.5),
        }
        assert dict(done.events[0].attributes or {}) == {"n": 1, "d": '{"x":true}'}

    def test_fail_sets_the_error_status(self, otel: Telemetry) -> None:
        with otel.tracer.span("x") as span:
            span.fail("no luck")
        (done,) = otel.spans()
        assert done.status.status_code is StatusCode.ERROR
        assert done.status.description == "no luck"

    def test_a_provider_named_chat_span_is_renamed_after_its_model(self, otel: Telemetry) -> None:
        """``chat local:gemma.gguf`` (what the policy hook opens) becomes ``chat gemma.gguf``."""
        with otel.tracer.span("chat local:gemma.gguf", {"gen_ai.operation.name": "chat"}):
            pass
        with otel.tracer.span(*trace.chat_span("scripted")):
            pass
        first, second = otel.spans()
        assert first.name == "chat gemma.gguf"
        assert first.kind is SpanKind.CLIENT
        assert (first.attributes or {})["gen_ai.provider.name"] == "local"
        assert (first.attributes or {})["gen_ai.request.model"] == "gemma.gguf"
        assert second.name == "chat scripted"
        assert (second.attributes or {})["gen_ai.provider.name"] == "scripted"

    def test_a_missing_extra_is_a_friendly_error(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setitem(sys.modules, "opentelemetry.trace", None)
        with pytest.raises(MissingExtra, match=r"pip install 'skillstate\[otel\]'"):
            OTelTracer()
        monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
        monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
        with pytest.raises(MissingExtra, match=r"skillstate\[otel\]"):
            tracer_from_env()

    def test_from_env_is_noop_without_an_endpoint(self, monkeypatch: pytest.MonkeyPatch) -> None:
        for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
            monkeypatch.delenv(name, raising=False)
        assert tracer_from_env() is trace.NOOP
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
        monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
        assert tracer_from_env() is trace.NOOP


# ---------------------------------------------------------------- over the wire


@dataclass
class Receiver:
    """A minimal OTLP/HTTP receiver: POST /v1/traces and /v1/metrics, protobuf."""

    url: str
    spans: list[str] = field(default_factory=list)
    services: set[str] = field(default_factory=set)
    metrics: set[str] = field(default_factory=set)
    arrived: threading.Condition = field(default_factory=threading.Condition)

    def wait(self, ready: Callable[[], bool], timeout: float = 20.0) -> bool:
        """Until ``ready()`` is true for what has arrived (woken by each request), or the
        deadline."""
        with self.arrived:
            return self.arrived.wait_for(ready, timeout)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found: list[Receiver] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            into = found[0]
            if self.path == "/v1/traces":
                request = ExportTraceServiceRequest.FromString(body)
                reply = ExportTraceServiceResponse().SerializeToString()
                with into.arrived:
                    for resource in request.resource_spans:
                        for attribute in resource.resource.attributes:
                            if attribute.key == "service.name":
                                into.services.add(attribute.value.string_value)
                        for scope in resource.scope_spans:
                            into.spans += [span.name for span in scope.spans]
                    into.arrived.notify_all()
            elif self.path == "/v1/metrics":
                metrics = ExportMetricsServiceRequest.FromString(body)
                reply = ExportMetricsServiceResponse().SerializeToString()
                with into.arrived:
                    for resource_metrics in metrics.resource_metrics:
                        for scope_metrics in resource_metrics.scope_metrics:
                            into.metrics |= {m.name for m in scope_metrics.metrics}
                    into.arrived.notify_all()
            else:
                self.send_response(404)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    found.append(Receiver(f"http://127.0.0.1:{server.server_address[1]}"))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield found[0]
    server.shutdown()
    server.server_close()
    thread.join(5)


@pytest.mark.usefixtures("key")
def test_spans_reach_a_real_otlp_receiver(
    receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``tracer_from_env`` with OTEL_EXPORTER_OTLP_ENDPOINT: the SDK's OTLP/HTTP exporters
    deliver the run's spans and metrics to the receiver."""
    for name in [n for n in os.environ if n.startswith("OTEL_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    tracer = tracer_from_env()
    assert isinstance(tracer, OTelTracer)
    assert tracer_from_env() is tracer  # one per configuration and process
    try:
        rule = model_replies(
            {"kind": "call_skill", "skill": "fetch", "params": {}, "reason": "need the count"},
            {"kind": "call_skill", "skill": "check", "params": {}, "reason": "check it"},
            {"kind": "finish", "summary": "done"},
        )
        policy = StatePolicy(ScriptedProvider(rule, name="openai:gpt-test"))
        result, _ = run_vault(tracer, vault_agent(policy))
        assert result.stopped == "completed"
        assert tracer.force_flush(10_000)
        expected = {
            "skillstate.run",
            "skillstate.step",
            "skillstate.decide",
            "chat gpt-test",
            "skillstate.skill.run",
            "skillstate.skill.verify",
            "skillstate.tool",
            "skillstate.commit",
        }
        total = 1 + 3 * 3 + 3 + 2 * 3 + 2 + 2 + 2  # run; step, decide, chat; commits...
        assert receiver.wait(lambda: len(receiver.spans) >= total), receiver.spans
        assert set(receiver.spans) == expected
        assert receiver.spans.count("skillstate.run") == 1
        assert receiver.spans.count("chat gpt-test") == 3
        assert receiver.services == {"skillstate"}
        assert receiver.wait(lambda: "skillstate.steps" in receiver.metrics), receiver.metrics
        assert {"skillstate.commit.duration", "skillstate.tokens"} <= receiver.metrics
    finally:
        tracer.shutdown()
    again = tracer_from_env()
    assert isinstance(again, OTelTracer)
    assert again is not tracer  # a shut tracer is not handed out again
    again.shutdown()


# ---------------------------------------------------------------- tracing off


OFF = """
import sys
from skillstate import Agent, AgentState, Finish, Runtime, ScriptedPolicy, SkillRegistry
from skillstate import StateMachine
from skillstate.engine import trace
from skillstate.store.memory import MemoryStore
import skillstate.integrations.otel  # the module alone imports no OpenTelemetry

class Card(AgentState):
    n: int = 0

agent = Agent(
    name="off",
    state_type=Card,
    machine=StateMachine({"init": ["init"]}, final=["init"]),
    skills=SkillRegistry(),
    policy=ScriptedPolicy(lambda view: Finish(summary="done")),
)
runtime = Runtime(agent, MemoryStore())
assert runtime.tracer is trace.NOOP
runtime.start("t")
result = runtime.run("t")
loaded = sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")
print(result.stopped, loaded)
"""


def test_tracing_off_imports_no_opentelemetry() -> None:
    """A fresh interpreter runs an agent (and imports the integration module) without
    importing OpenTelemetry: off by default, and free."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SKILLSTATE_"))}
    proc = subprocess.run(
        [sys.executable, "-c", OFF],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["completed", "[]"]


def test_the_default_tracer_is_noop() -> None:
    agent = vault_agent()
    runtime = Runtime(agent, MemoryStore())
    assert runtime.tracer is trace.NOOP
    assert trace.current() is trace.NOOP


def test_the_cli_exports_when_the_endpoint_is_set(receiver: Receiver, tmp_path: Any) -> None:
    """``skillstate demo`` with OTEL_EXPORTER_OTLP_ENDPOINT: the runtime the CLI builds
    traces, and the spans are flushed when the process exits."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SKILLSTATE_"))}
    env |= {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_SERVICE_NAME": "cli-test",
        "NO_PROXY": "127.0.0.1",
        "no_proxy": "127.0.0.1",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "skillstate", "demo", "ticket", "--store", "memory://", "-q"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert receiver.wait(lambda: "skillstate.run" in receiver.spans), receiver.spans
    assert {"skillstate.step", "skillstate.commit"} <= set(receiver.spans)
    assert receiver.services == {"cli-test"}
