"""Tools built for each task from its state: :func:`per_task` and :class:`PerTask`.

Split from :mod:`skillstate.engine.agent` (which re-exports both): an agent's
``tools`` may hold one, and the act phase builds it before every attempt.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["PerTask", "per_task"]


@dataclass(frozen=True)
class PerTask:
    """A tool built for each task from its state (see :func:`per_task`)."""

    factory: Callable[..., Callable[..., Any]]
    takes_context: bool = False
    """Whether the factory takes the skill's context too: ``factory(state, ctx)``."""

    def build(self, state: Any, ctx: Any) -> Callable[..., Any]:
        """The tool for one attempt of a skill in ``state`` (``ctx``: its SkillContext)."""
        return self.factory(state, ctx) if self.takes_context else self.factory(state)


def per_task(factory: Callable[..., Callable[..., Any]]) -> PerTask:
    """Declare a tool that is built from the task's state each time a skill runs.

    One :class:`Agent` then serves every task, each with its own resources (a
    per-task database, a working directory), and a new process (``skillstate
    resume``) rebuilds them from the card alone::

        tools={"query": per_task(lambda state: Database(state.db_path).query)}

    A factory with two parameters also gets the running skill's
    :class:`~skillstate.skills.context.SkillContext`: the task id, the step, the
    effect's idempotency key and fencing token, and the task's artifacts
    (``ctx.attach``, ``ctx.artifact``)::

        tools={"upload": per_task(lambda state, ctx: Uploader(state.bucket, ctx.attach))}

    The factory runs before every attempt of a skill that declares the tool: cache
    in it whatever is expensive to open.
    """
    return PerTask(factory, takes_context=_positional_arity(factory) >= 2)


def _positional_arity(fn: Callable[..., Any]) -> int:
    """How many positional arguments ``fn`` takes (a ``*args`` counts as many)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: the one-argument form
        return 1
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return 2
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
