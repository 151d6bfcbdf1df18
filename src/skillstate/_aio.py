"""Async skills and tools under a synchronous step: awaitables resolved where they belong.

A step's act phase is synchronous code (one implementation for both runtimes). Under
:class:`~skillstate.engine.aruntime.AsyncRuntime` it runs in a worker thread while
the event loop goes on serving other tasks; an ``async def`` skill, verify, probe,
rollback or tool it meets is handed back to that loop
(``run_coroutine_threadsafe``) and the worker waits for it, so the coroutine runs
where its clients (``AsyncOpenAI``, ``httpx.AsyncClient``, an MCP session) live.
Under the synchronous :class:`~skillstate.engine.runtime.Runtime` there is no loop:
the coroutine runs to completion on a private one (``asyncio.run``).
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from skillstate.errors import UsageError

__all__ = ["on_loop", "resolve"]

T = TypeVar("T")

_LOOP: contextvars.ContextVar[asyncio.AbstractEventLoop | None] = contextvars.ContextVar(
    "skillstate_loop", default=None
)


@contextmanager
def on_loop(loop: asyncio.AbstractEventLoop) -> Iterator[None]:
    """Coroutines met in the block (and in threads started from it with
    ``asyncio.to_thread``, which copies the context) run on ``loop``."""
    token = _LOOP.set(loop)
    try:
        yield
    finally:
        _LOOP.reset(token)


async def _awaited(value: Awaitable[T]) -> T:
    return await value


def resolve(value: Any) -> Any:
    """``value``, or what it resolves to when it is awaitable (see the module docstring)."""
    if not inspect.isawaitable(value):
        return value
    loop = _LOOP.get()
    if loop is not None and loop.is_running():
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            # Waiting here would deadlock the loop the coroutine needs.
            raise UsageError(
                "an async skill or tool was reached on the event loop's own thread; "
                "await it (ctx.acall) or run the step through AsyncRuntime"
            )
        return asyncio.run_coroutine_threadsafe(_awaited(value), loop).result()
    return asyncio.run(_awaited(value))
