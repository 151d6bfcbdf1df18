"""Inline children: a parent's ``run`` runs its children itself, then joins them.

With ``Runtime(children="inline")`` (the default) a ``run`` that stops
``waiting_children`` runs every child that has not ended (a
:class:`~skillstate.engine.runtime.Runtime` one after another; an
:class:`~skillstate.engine.aruntime.AsyncRuntime` concurrently, at most
``max_concurrency`` at once), each with a runtime built from the child's agent and
the parent runtime's options, then runs the parent again: its loop's join hook
(:mod:`skillstate.fanout.join`) joins them and it goes on. A child that cannot end
here (it waits for a user, a signal, a person) leaves the parent waiting: ``run``
returns ``stopped="waiting_children"``, and a later ``run`` tries again.

With ``children="dispatch"`` nothing here runs: workers drive the children.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from skillstate._aio import in_step_thread, on_loop
from skillstate.errors import LeaseHeld, TaskNotFound, UsageError
from skillstate.fanout.spec import child_agent
from skillstate.state.model import ChildRecord

if TYPE_CHECKING:
    from skillstate.engine.agent import Agent
    from skillstate.engine.aruntime import AsyncRuntime
    from skillstate.engine.results import RunResult
    from skillstate.engine.runtime import Runtime
    from skillstate.store.aio import AsyncStore
    from skillstate.store.base import Store

__all__ = ["arun_inline", "check_concurrency", "child_runtime", "run_inline"]

_ENDED = frozenset({"completed", "failed", "cancelled"})
MAX_CONCURRENCY = 8
"""Default ``AsyncRuntime(max_concurrency=...)``."""


def check_concurrency(value: object) -> int:
    """``AsyncRuntime(max_concurrency=...)`` checked: an integer >= 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"max_concurrency must be an integer >= 1, not {value!r}")
    return value


def options_of(runtime: Runtime[Any] | None) -> dict[str, Any]:
    """The options a child's runtime is built with: the parent runtime's."""
    if runtime is None:
        return {}
    guard = runtime.guard
    return {
        "max_steps": runtime.max_steps,
        "max_retries": runtime.max_retries,
        "worker": runtime.worker,
        "lease_ttl": runtime.lease_ttl,
        "max_calls": runtime.max_calls,
        "max_tokens": runtime.max_tokens,
        "max_cost": runtime.max_cost,
        "prices": runtime.prices,
        "max_invalid": runtime.max_invalid,
        "max_stalled": guard.max_stalled,
        "max_repeats": guard.max_repeats,
        "on_stall": guard.on_stall,
        "lease": runtime.lease,
        "tracer": runtime.tracer,
        "children": runtime.children,
    }


def child_runtime(runtime: Runtime[Any] | None, agent: Agent[Any], store: Store) -> Runtime[Any]:
    """A runtime for a child agent, with the parent runtime's options."""
    from skillstate.engine.runtime import Runtime

    return Runtime(agent, store, **options_of(runtime))


def _open(runtime: Runtime[Any], state: Any) -> list[ChildRecord]:
    """The parent's pending children whose task has not ended (or is not there yet)."""
    found = []
    for record in state.children:
        if record.status == "pending" and _status(runtime.store, record.task_id) not in _ENDED:
            found.append(record)
    return found


def _status(store: Store, task_id: str) -> str | None:
    try:
        status = store.load(task_id).state.get("status")
    except TaskNotFound:
        return None
    return status if isinstance(status, str) else None


def run_inline(runtime: Runtime[Any], result: RunResult[Any], **again: Any) -> RunResult[Any]:
    """After ``runtime.run`` stopped ``waiting_children``: run the open children one
    after another, then the parent again (``again``: the run's own arguments)."""
    if result.stopped != "waiting_children" or runtime.children != "inline":
        return result
    stop = again.get("stop")
    for record in _open(runtime, result.state):
        child = child_runtime(runtime, child_agent(runtime.agent, record.name), runtime.store)
        try:
            child.run(record.task_id, stop=stop)
        except (LeaseHeld, TaskNotFound):
            continue  # another process drives it (or is creating it): the parent waits
    if _open(runtime, result.state):
        return result  # a child waits for someone: so does the parent
    after = runtime.run(result.state.task_id, **again)
    return replace(after, steps=after.steps + result.steps)


async def arun_inline(
    aruntime: AsyncRuntime[Any], result: RunResult[Any], **again: Any
) -> RunResult[Any]:
    """:func:`run_inline` for an :class:`AsyncRuntime`: the open children run
    concurrently, at most ``aruntime.max_concurrency`` at once."""
    runtime = aruntime.runtime
    if result.stopped != "waiting_children" or runtime.children != "inline":
        return result
    loop = asyncio.get_running_loop()

    async def opened() -> list[ChildRecord]:
        with on_loop(loop):  # a store awaited on this loop is called from the thread
            return await in_step_thread(_open, runtime, result.state)

    gate = asyncio.Semaphore(aruntime.max_concurrency)
    stop = again.get("stop")

    async def one(record: ChildRecord) -> None:
        async with gate:
            child = _async_child(aruntime, child_agent(runtime.agent, record.name))
            with contextlib.suppress(LeaseHeld, TaskNotFound):  # another process has it
                await child.run(record.task_id, stop=stop)

    # Every child runs to where it stops before an error of one is raised: none is left
    # running unawaited (its lease released on the way out).
    outcomes = await asyncio.gather(*(one(r) for r in await opened()), return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    if await opened():
        return result
    after = await aruntime.run(result.state.task_id, **again)
    return replace(after, steps=after.steps + result.steps)


def _async_child(aruntime: AsyncRuntime[Any], agent: Agent[Any]) -> AsyncRuntime[Any]:
    from skillstate.engine.aruntime import AsyncRuntime

    store: Store | AsyncStore = aruntime.store
    options = options_of(aruntime.runtime)
    return AsyncRuntime(agent, store, max_concurrency=aruntime.max_concurrency, **options)
