"""Bad-step injection (``--inject-bad-steps RATE``): an effect that happened, then failed.

The hardest failure for an agent is not a call that never ran but one that did its
effect and then failed: a ledger line written, then a timeout. Retrying blindly
writes it twice; the step must be rolled back and retried. :func:`inject_bad_steps`
wraps the environment's effect tools so that a seeded share of their calls raise
:class:`InjectedBadStep` *after* the real call went through. A skill with a
rollback undoes the effect and is retried; a raw tool has nobody to undo it. The
report's rollback-recovery rate (:mod:`skillstate.eval.metrics`) then says how
often a task with such a step still ended right, exactly once.
"""

from __future__ import annotations

import dataclasses
import functools
import random
from collections.abc import Callable
from typing import Any

from skillstate.errors import UsageError
from skillstate.eval.tasks import Environment

__all__ = ["InjectedBadStep", "inject_bad_steps"]


class InjectedBadStep(RuntimeError):
    """Raised by an effect tool after its effect happened (an injected fault)."""


def inject_bad_steps(env: Environment, rate: float, key: str) -> Environment:
    """``env`` with each effect tool failing after its effect with probability ``rate``
    (drawn from a generator seeded by ``key``: the same run injects the same faults)."""
    if not 0.0 <= rate <= 1.0:
        raise UsageError(f"--inject-bad-steps takes a rate between 0 and 1, not {rate}")
    rng = random.Random(f"bad-steps:{rate}:{key}")
    tools = {
        name: _failing_after(name, fn, rate, rng) if name in env.effect_tools else fn
        for name, fn in env.tools.items()
    }
    return dataclasses.replace(env, tools=tools)


def _failing_after(
    name: str, fn: Callable[..., Any], rate: float, rng: random.Random
) -> Callable[..., Any]:
    @functools.wraps(fn)  # keeps the signature: the raw-tools variants read it
    def call(*args: Any, **kwargs: Any) -> Any:
        result = fn(*args, **kwargs)
        if rng.random() < rate:
            raise InjectedBadStep(f"injected fault: {name} did its effect, then failed")
        return result

    return call
