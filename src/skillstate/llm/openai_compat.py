"""Any OpenAI-compatible chat-completions server, through the official ``openai`` SDK.

That covers OpenAI itself and the servers that speak its protocol (vLLM,
llama.cpp's ``llama-server``, Ollama, LM Studio, most gateways): ``base_url``
picks the server. Replies are asked for at temperature 0 so that reruns stay as
close to deterministic as the server allows.

Servers differ in what they accept, and the caller validates every reply anyway,
so a request the server refuses for a known reason is adapted and resent, and
the adaptation is remembered so a run pays for the probe once:

* structured output degrades step by step: ``response_format`` ``json_schema``
  (decoding constrained to the schema: OpenAI, recent vLLM and llama.cpp), then
  ``json_object`` with the schema spelled out in the last message (JSON
  guaranteed, shape asked for), then the instruction alone;
* models that only sample at their default temperature (OpenAI's reasoning
  models) get no ``temperature``;
* models that want ``max_completion_tokens`` instead of ``max_tokens`` get it.

The API key is a secret: it never goes into ``name``, ``repr``, ``raw``, an error
message or a log line. Server error text is scrubbed of it, in case a proxy echoes
the request's headers back, and an SDK error that carries it is not chained.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Sequence
from typing import Any, Literal

from skillstate.errors import ContextOverflow, MissingExtra, ProviderError, is_context_overflow
from skillstate.llm.base import Completion, Message, Usage, count_messages
from skillstate.llm.tokens import count_tokens

__all__ = ["PLACEHOLDER_KEY", "OpenAIProvider", "SchemaMode"]

SchemaMode = Literal["json_schema", "json_object", "prompt"]
_MODES: tuple[SchemaMode, ...] = ("json_schema", "json_object", "prompt")

PLACEHOLDER_KEY = "not-needed"
"""Sent to servers given by ``base_url`` when no key is set: local servers ignore
it, but the SDK refuses to build a client without one."""

_ERROR_CHARS = 300
"""Server error text is cut to this many characters: some servers answer with a
whole HTML page or a stack trace, and the error must stay one readable line."""

_ADAPTABLE_STATUS = frozenset({400, 404, 415, 422, 501})
"""Statuses with which servers refuse a parameter (vLLM says 400, some proxies 422)."""

_REJECTS_FORMAT = ("response_format", "json_schema", "json_object", "structured output")


def endpoint(base_url: str | None, api_key: str | None, *, what: str) -> tuple[str | None, str]:
    """The server and key to call: the arguments, else ``$OPENAI_BASE_URL`` and
    ``$OPENAI_API_KEY``. A local server (a base URL) needs no key (the SDK insists on
    one: :data:`PLACEHOLDER_KEY`); the hosted API without one is a ProviderError."""
    base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
    key = api_key or os.environ.get("OPENAI_API_KEY") or None
    if key is None:
        if base_url is None:
            raise ProviderError(
                f"{what} needs an API key: set OPENAI_API_KEY "
                "(or give a base URL for a local server)"
            )
        key = PLACEHOLDER_KEY
    return base_url, key


def _sdk() -> Any:
    """Import ``openai`` now that an OpenAI provider is really wanted."""
    try:
        import openai
    except ImportError as exc:
        raise MissingExtra("the OpenAI provider needs: pip install 'skillstate[openai]'") from exc
    return openai


class OpenAIProvider:
    """Chat completions from ``model`` on an OpenAI-compatible server.

    ``api_key`` defaults to ``OPENAI_API_KEY``; without either, a server named by
    ``base_url`` (or ``OPENAI_BASE_URL``) gets a placeholder, and api.openai.com is
    refused up front rather than on the first call. ``timeout`` is per HTTP
    request; ``max_retries`` is the SDK's own retry of connection errors, 408,
    409, 429 and 5xx answers, with backoff.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60,
        max_retries: int = 2,
    ) -> None:
        openai = _sdk()
        if not model:
            raise ProviderError("the OpenAI provider needs a model name")
        base_url, key = endpoint(base_url, api_key, what=f"openai:{model}")
        self.model = model
        self.name = f"openai:{model}"
        self.base_url = base_url
        self.timeout = timeout
        self._secret = key
        # What the server turned out to accept; only ever moves one way (see _adapt).
        self._mode: SchemaMode = "json_schema"
        self._send_temperature = True
        self._limit_param = "max_tokens"
        self._adapt_lock = threading.Lock()
        self._max_retries = max_retries
        self._async: Any = None  # AsyncOpenAI, built on the first awaited call
        try:
            self._client: Any = openai.OpenAI(
                api_key=key, base_url=base_url, timeout=timeout, max_retries=max_retries
            )
        except openai.OpenAIError as exc:
            raise self._error(exc) from self._cause(exc)

    @property
    def schema_mode(self) -> SchemaMode:
        """How schemas are sent: ``json_schema`` until the server refuses it."""
        return self._mode

    def close(self) -> None:
        """Close the HTTP connection pool (the provider is unusable afterwards). An async
        client is closed with :meth:`aclose`."""
        self._client.close()

    async def aclose(self) -> None:
        """Close both clients' connection pools."""
        self._client.close()
        if self._async is not None:
            await self._async.close()

    def __repr__(self) -> str:  # never the key
        return f"OpenAIProvider(model={self.model!r}, base_url={self.base_url!r})"

    def complete(
        self,
        messages: Sequence[Message],
        *,
        schema: dict[str, Any] | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        openai = _sdk()
        started = time.perf_counter()
        while True:  # ends: every retry follows an adaptation, and each happens once
            mode = self._mode if schema is not None else None
            request = self._request(messages, schema, mode, max_tokens)
            try:
                response = self._client.chat.completions.create(**request)
                break
            except openai.APIStatusError as exc:
                if not self._adapt(exc, request, mode):
                    raise self._error(exc) from self._cause(exc)
            except openai.OpenAIError as exc:
                raise self._error(exc) from self._cause(exc)
        sent = [Message(m["role"], m["content"]) for m in request["messages"]]
        return self._completion(response, sent, mode, started)

    async def acomplete(
        self,
        messages: Sequence[Message],
        *,
        schema: dict[str, Any] | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        """:meth:`complete` through ``AsyncOpenAI``: the event loop waits, it never blocks.

        The same request, adaptation and errors; the async client is bound to the
        loop it was first awaited on (one provider per loop)."""
        openai = _sdk()
        if self._async is None:
            try:
                self._async = openai.AsyncOpenAI(
                    api_key=self._secret,
                    base_url=self.base_url,
                    timeout=self.timeout,
                    max_retries=self._max_retries,
                )
            except openai.OpenAIError as exc:
                raise self._error(exc) from self._cause(exc)
        started = time.perf_counter()
        while True:  # ends: every retry follows an adaptation, and each happens once
            mode = self._mode if schema is not None else None
            request = self._request(messages, schema, mode, max_tokens)
            try:
                response = await self._async.chat.completions.create(**request)
                break
            except openai.APIStatusError as exc:
                if not self._adapt(exc, request, mode):
                    raise self._error(exc) from self._cause(exc)
            except openai.OpenAIError as exc:
                raise self._error(exc) from self._cause(exc)
        sent = [Message(m["role"], m["content"]) for m in request["messages"]]
        return self._completion(response, sent, mode, started)

    # ------------------------------------------------------------------ internals

    def _request(
        self,
        messages: Sequence[Message],
        schema: dict[str, Any] | None,
        mode: SchemaMode | None,
        max_tokens: int | None,
    ) -> dict[str, Any]:
        """The keyword arguments of one chat-completions call, as adapted so far."""
        if schema is not None and mode in {"json_object", "prompt"}:
            messages = _with_instruction(messages, schema)
        request: dict[str, Any] = {
            "model": self.model,
            "messages": [m.as_dict() for m in messages],
        }
        if self._send_temperature:
            request["temperature"] = 0
        if max_tokens is not None:
            request[self._limit_param] = max_tokens
        if schema is not None and mode == "json_schema":
            request["response_format"] = {
                "type": "json_schema",
                # strict=False: strict mode rejects common schemas (optional
                # properties, open objects); the caller validates the reply anyway.
                "json_schema": {"name": "action", "schema": schema, "strict": False},
            }
        elif schema is not None and mode == "json_object":
            request["response_format"] = {"type": "json_object"}
        return request

    def _adapt(self, exc: Any, request: dict[str, Any], mode: SchemaMode | None) -> bool:
        """Whether ``exc`` refuses something this provider can drop; drops it if so.

        True only when the next request will differ from ``request`` in what was
        refused, so retries cannot loop.
        """
        if exc.status_code not in _ADAPTABLE_STATUS:
            return False
        text = _status_text(exc).lower()
        param = _error_param(exc)
        with self._adapt_lock:
            if "max_completion_tokens" in text and "max_tokens" in request:
                self._limit_param = "max_completion_tokens"
                return True
            if "temperature" in request and (param == "temperature" or "temperature" in text):
                self._send_temperature = False
                return True
            if mode is None or mode == "prompt" or "invalid schema" in text:
                return False  # an invalid schema is the caller's bug, not a missing feature
            if param != "response_format" and not any(w in text for w in _REJECTS_FORMAT):
                return False
            following = _MODES[_MODES.index(mode) + 1]
            if _MODES.index(following) > _MODES.index(self._mode):
                self._mode = following
            return True

    def _completion(
        self, response: Any, sent: Sequence[Message], mode: SchemaMode | None, started: float
    ) -> Completion:
        choices = getattr(response, "choices", None) or []
        if not choices:
            raise ProviderError(f"{self.name}: the server answered with no choices")
        choice = choices[0]
        message = getattr(choice, "message", None)
        text = getattr(message, "content", None) or ""
        raw: dict[str, Any] = {
            "id": getattr(response, "id", None),
            "finish_reason": getattr(choice, "finish_reason", None),
        }
        if mode is not None:
            raw["schema_mode"] = mode
        refusal = getattr(message, "refusal", None)
        if refusal:
            # An empty text fails the caller's validation, which is what a refusal is.
            raw["refusal"] = str(refusal)
        fingerprint = getattr(response, "system_fingerprint", None)
        if fingerprint:
            raw["system_fingerprint"] = fingerprint
        return Completion(
            text=text,
            usage=_usage(getattr(response, "usage", None), sent, text),
            model=getattr(response, "model", None) or self.model,
            duration_ms=(time.perf_counter() - started) * 1000,
            raw=raw,
        )

    def _error(self, exc: Any) -> ProviderError:
        """One line saying what failed, in the user's terms, without the key."""
        openai = _sdk()
        if isinstance(exc, openai.APITimeoutError):
            return ProviderError(f"{self.name}: no reply within {self.timeout:g}s")
        if isinstance(exc, openai.APIConnectionError):
            where = self.base_url or "the OpenAI API"
            return ProviderError(
                f"{self.name}: cannot reach {where}: {self._scrub(_cause_text(exc))}"
            )
        if isinstance(exc, openai.APIStatusError):
            text = self._scrub(_status_text(exc))
            overflow = is_context_overflow(text) or is_context_overflow(str(_error_body(exc)))
            error = ContextOverflow if overflow else ProviderError
            return error(f"{self.name}: HTTP {exc.status_code}: {text}")
        return ProviderError(f"{self.name}: {self._scrub(_one_line(str(exc)))}")

    def _cause(self, exc: BaseException) -> BaseException | None:
        """``exc`` to chain, or ``None`` when its text holds the key (a traceback prints it)."""
        if self._secret == PLACEHOLDER_KEY:
            return exc
        texts = [str(exc), str(getattr(exc, "body", "")), str(exc.__cause__ or "")]
        return None if any(self._secret in text for text in texts) else exc

    def _scrub(self, text: str) -> str:
        """``text`` without the API key (a proxy may echo request headers in errors)."""
        if self._secret != PLACEHOLDER_KEY:
            text = text.replace(self._secret, "[api key]")
        return text


def _with_instruction(messages: Sequence[Message], schema: dict[str, Any]) -> list[Message]:
    """``messages`` with the schema spelled out at the end of the last one.

    For servers that cannot constrain decoding to a schema: the instruction goes
    last, where a model attends most, and into an existing message so that the
    roles keep alternating as chat templates require.
    """
    out = list(messages)
    instruction = (
        "Reply with one JSON object, and nothing else, matching this JSON schema:\n"
        + json.dumps(schema, ensure_ascii=False, separators=(",", ":"))
    )
    if not out:
        return [Message("user", instruction)]
    last = out[-1]
    out[-1] = Message(role=last.role, content=f"{last.content}\n\n{instruction}")
    return out


def _usage(usage: Any, sent: Sequence[Message], text: str) -> Usage:
    """The server's token counts, or offline counts marked ``estimated`` without them."""
    prompt = getattr(usage, "prompt_tokens", None)
    completion = getattr(usage, "completion_tokens", None)
    if not isinstance(prompt, int) or not isinstance(completion, int):
        return Usage(prompt=count_messages(sent), completion=count_tokens(text), estimated=True)
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None)
    return Usage(
        prompt=prompt,
        completion=completion,
        cached=cached if isinstance(cached, int) else 0,
    )


def _error_body(exc: Any) -> dict[str, Any]:
    """The ``error`` object of an OpenAI-style error body (or the body itself)."""
    body = getattr(exc, "body", None)
    if not isinstance(body, dict):
        return {}
    error = body.get("error", body)
    return error if isinstance(error, dict) else {"message": error}


def _error_param(exc: Any) -> str | None:
    param = _error_body(exc).get("param")
    return param if isinstance(param, str) else None


def _status_text(exc: Any) -> str:
    """The server's own error message (``{"error": {"message": ...}}``), on one line."""
    error = _error_body(exc)
    message: Any = error.get("message") or error.get("detail")
    if message is None:
        message = getattr(exc, "message", None) or str(exc)
    if not isinstance(message, str):
        message = json.dumps(message, ensure_ascii=False, default=str)
    return _one_line(message)


def _cause_text(exc: BaseException) -> str:
    """The underlying network error ("Connection refused"), not the SDK's generic line."""
    cause = exc.__cause__ or exc.__context__
    return _one_line(str(cause) if cause is not None and str(cause) else str(exc))


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= _ERROR_CHARS else line[: _ERROR_CHARS - 1] + "…"
