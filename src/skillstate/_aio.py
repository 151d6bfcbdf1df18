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
import functools
import inspect
import threading
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

from skillstate.errors import UsageError

__all__ = ["current_loop", "in_step_thread", "on_loop", "on_thread_of", "resolve"]

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


STEP_THREADS = 64
"""Threads the synchronous parts of async-run steps share (more steps wait their turn)."""

_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def _step_executor() -> ThreadPoolExecutor:
    global _executor  # noqa: PLW0603 - one pool per process, made on first use
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(STEP_THREADS, thread_name_prefix="skillstate-step")
        return _executor


async def in_step_thread(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` in a step thread, with this context (as ``to_thread``).

    Not the loop's default executor: a step thread waits for coroutines on the loop
    (an async skill, a store call), and those may need the default executor
    themselves (``to_thread`` in a tool, a DNS lookup when a pool connects). Were
    steps in that executor, enough concurrent steps would hold every thread while
    waiting for work queued behind them: a deadlock. Step threads only ever wait for
    the loop, and the loop never waits for them.
    """
    loop = asyncio.get_running_loop()
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    return await loop.run_in_executor(_step_executor(), call)


def current_loop() -> asyncio.AbstractEventLoop | None:
    """The loop :func:`on_loop` set for this context, if any."""
    return _LOOP.get()


def on_thread_of(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether this thread is running ``loop`` (waiting for it here would deadlock)."""
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


async def _awaited(value: Awaitable[T]) -> T:
    return await value


def resolve(value: Any) -> Any:
    """``value``, or what it resolves to when it is awaitable (see the module docstring)."""
    if not inspect.isawaitable(value):
        return value
    loop = _LOOP.get()
    if loop is not None and loop.is_running():
        if on_thread_of(loop):
            # Waiting here would deadlock the loop the coroutine needs.
            raise UsageError(
                "an async skill or tool was reached on the event loop's own thread; "
                "await it (ctx.acall) or run the step through AsyncRuntime"
            )
        return asyncio.run_coroutine_threadsafe(_awaited(value), loop).result()
    return asyncio.run(_awaited(value))
