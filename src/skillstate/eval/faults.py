"""Provider fault injection (``--inject-faults RATE``): a seeded share of calls fails.

A real server times out and rate-limits; the harness must record such a fault as
the task's failure (end to end) or as an invalid decision (forced mode), never
crash on it. :class:`FaultyProvider` raises :class:`~skillstate.errors.ProviderError`,
the error every provider raises for a failed call, with the text a timeout or a
429 gives, on each call with probability ``rate``. The draws are seeded by the
task, the variant and the order in which providers are built, so a rerun of the
same command injects the same faults.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from skillstate.errors import ProviderError, UsageError
from skillstate.eval.runner import ProviderFactory
from skillstate.eval.tasks import Environment, TaskSpec
from skillstate.eval.variants import Variant
from skillstate.llm.base import Completion, Message, Provider
from skillstate.store.base import Store

__all__ = ["FAULTS", "FaultyProvider", "faulty_factory"]

FAULTS = (
    "injected fault: no reply within 60s (timeout)",
    "injected fault: HTTP 429: rate limit reached, retry later",
)
"""What an injected fault says: a timeout or a rate limit, as the OpenAI provider words them."""


class FaultyProvider:
    """``inner``, except that each call fails with probability ``rate`` (drawn from ``rng``)."""

    def __init__(self, inner: Provider, rate: float, rng: random.Random) -> None:
        if not 0.0 <= rate <= 1.0:
            raise UsageError(f"a fault rate is between 0 and 1, not {rate}")
        self.inner = inner
        self.rate = rate
        self.rng = rng
        self.name = inner.name
        self.injected = 0

    def complete(
        self,
        messages: Sequence[Message],
        *,
        schema: dict[str, Any] | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        # Both draws happen on every call, so the sequence does not depend on the outcomes.
        hit = self.rng.random() < self.rate
        fault = self.rng.choice(FAULTS)
        if hit:
            self.injected += 1
            raise ProviderError(f"{self.name}: {fault}")
        return self.inner.complete(messages, schema=schema, max_tokens=max_tokens)


def faulty_factory(inner: ProviderFactory, rate: float, *, salt: str = "") -> ProviderFactory:
    """``inner`` with every provider it builds wrapped in a :class:`FaultyProvider`
    (``salt`` varies the draws, e.g. per resumed process)."""
    if not 0.0 <= rate <= 1.0:
        raise UsageError(f"--inject-faults takes a rate between 0 and 1, not {rate}")
    built: dict[str, int] = {}

    def factory(spec: TaskSpec, variant: Variant, env: Environment, store: Store) -> Provider:
        key = f"{spec.id}:{variant.name}"
        built[key] = built.get(key, 0) + 1
        rng = random.Random(f"{rate}:{key}:{built[key]}{salt}")
        return FaultyProvider(inner(spec, variant, env, store), rate, rng)

    return factory
