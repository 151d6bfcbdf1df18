"""The ``Provider`` protocol: one chat call, optionally constrained to a JSON schema.

A provider turns a list of messages into one reply and says what it cost. Every
model backend (an OpenAI-compatible server, a GGUF model in-process, a replay of
recorded replies) implements this one method, and every policy that talks to a
model talks through it, so the state policy and the history baselines differ only
in the messages they send.

Usage is what the provider reports; when it reports nothing (a replay, a local
model without counters) it is counted offline with the same tokenizer as the
views, and marked ``estimated`` so a report can say so.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from skillstate.llm.tokens import count_tokens

__all__ = [
    "MESSAGE_OVERHEAD",
    "Completion",
    "Message",
    "Prices",
    "Provider",
    "Usage",
    "acomplete",
    "count_messages",
]

Role = Literal["system", "user", "assistant", "tool"]

MESSAGE_OVERHEAD = 4
"""Tokens a chat template adds per message (role markers), as OpenAI documents it."""


@dataclass(frozen=True)
class Message:
    role: Role
    content: str

    def as_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


@dataclass(frozen=True)
class Usage:
    """Tokens of one model call (or of several, summed)."""

    prompt: int = 0
    completion: int = 0
    cached: int = 0
    """Prompt tokens the server served from its cache (billed cheaper, if at all)."""
    estimated: bool = False
    """Counted offline rather than reported by the provider."""

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt=self.prompt + other.prompt,
            completion=self.completion + other.completion,
            cached=self.cached + other.cached,
            estimated=self.estimated or other.estimated,
        )


@dataclass(frozen=True)
class Completion:
    """One reply: its text, its usage, and how long the call took."""

    text: str
    usage: Usage
    model: str
    duration_ms: float = 0.0
    raw: dict[str, Any] = field(default_factory=dict)
    """Provider-specific details worth keeping (finish reason, response id)."""


@runtime_checkable
class Provider(Protocol):
    """A chat model."""

    name: str
    """``openai:gpt-4o-mini``, ``local:gemma-3-270m``, ``replay:cassette.json`` …"""

    def complete(
        self,
        messages: Sequence[Message],
        *,
        schema: dict[str, Any] | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        """The model's reply to ``messages``.

        With ``schema`` the reply should be one JSON document matching it: providers
        that can constrain decoding (JSON-schema structured output, grammars) do so;
        the others ask for JSON. Either way the caller still validates the reply.
        Raises :class:`~skillstate.errors.ProviderError` when the call itself fails.
        """
        ...


async def acomplete(
    provider: Provider,
    messages: Sequence[Message],
    *,
    schema: dict[str, Any] | None = None,
    max_tokens: int | None = None,
) -> Completion:
    """``provider``'s reply, awaited: its own ``acomplete`` (an async client, such as the
    OpenAI provider's ``AsyncOpenAI``) when it has one, else ``complete`` in a thread,
    so an event loop never blocks on a model."""
    native = getattr(provider, "acomplete", None)
    if native is not None:
        completion: Completion = await native(messages, schema=schema, max_tokens=max_tokens)
        return completion
    return await asyncio.to_thread(
        provider.complete, messages, schema=schema, max_tokens=max_tokens
    )


@dataclass(frozen=True)
class Prices:
    """Prices per million tokens, to turn usage into cost."""

    input: float
    output: float
    cached: float | None = None
    """Price of cached prompt tokens; ``None``: the same as ``input``."""

    def cost(self, prompt: int, completion: int, cached: int = 0) -> float:
        cached_price = self.input if self.cached is None else self.cached
        fresh = max(0, prompt - cached)
        return (fresh * self.input + cached * cached_price + completion * self.output) / 1e6


def count_messages(messages: Sequence[Message]) -> int:
    """Prompt tokens of ``messages`` counted offline (content plus per-message overhead)."""
    return sum(count_tokens(m.content) + MESSAGE_OVERHEAD for m in messages)
