"""``AsyncRuntime``: the same runtime, driven from an event loop.

There is one implementation of the step logic: :class:`~skillstate.engine.runtime.Runtime`.
Its run loop is a generator (:meth:`Runtime.steps`) that yields the state each
decision is to be taken in and is sent the step's report; everything in between
(leases, loads, settling an effect after a crash, replies, budgets) happens inside
it. The synchronous runtime drives that generator directly. This class drives the
same generator from an event loop:

* the decision is **awaited**: a policy's ``adecide`` (every model policy has one:
  the same repair loop, the provider's ``acomplete`` awaited — ``AsyncOpenAI`` for
  the OpenAI-compatible provider — or ``complete`` in a thread), any other policy's
  ``decide`` in a thread;
* the synchronous parts (store reads and commits, a skill's run and verify) run in
  a worker thread (``asyncio.to_thread``), so the loop is never blocked by them;
* an ``async def`` skill, verify, probe, rollback or tool met there is run on the
  loop (see :mod:`skillstate._aio`), and ``await ctx.acall(...)`` gives tool calls
  per-call timeouts and retries with backoff.

The store is either synchronous (a :class:`~skillstate.store.base.Store`: its calls
run in those worker threads) or an :class:`~skillstate.store.aio.AsyncStore`
(``await open_async_store(url)``): then each store call the step logic makes from its
worker thread is submitted to the loop and awaited there
(:class:`~skillstate.store.aio.BlockingStore`), so the PostgreSQL and Redis stores'
connections live on the loop, one pool for every task it runs.

So a hundred tasks on one loop wait for their models concurrently, while each
task's commits stay exactly as safe as before (benchmarks/async_concurrency.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Generic, TypeVar, cast

from skillstate._aio import in_step_thread, on_loop
from skillstate.engine.actions import Action
from skillstate.engine.agent import Agent
from skillstate.engine.driving import Steps
from skillstate.engine.policy import Decided
from skillstate.engine.results import RunResult, StepReport
from skillstate.engine.runtime import Runtime
from skillstate.engine.trace import traced_step, using
from skillstate.errors import DecisionFailed
from skillstate.fanout.inline import arun_inline, check_concurrency
from skillstate.state.model import AgentState
from skillstate.store.aio import AsyncStore, BlockingStore, ThreadedStore, is_async_store
from skillstate.store.base import Store

__all__ = ["AsyncRuntime"]

S = TypeVar("S", bound=AgentState)
R = TypeVar("R")

OnReport = Callable[[StepReport[Any]], Awaitable[None]]


class AsyncRuntime(Generic[S]):
    """``await runtime.run(task_id)``: a :class:`Runtime` for asyncio.

    Takes the same arguments as :class:`Runtime` (``max_steps``, budgets, the stall
    guard, leases, ``tracer``...), and has the same methods, awaited. The store is
    any :class:`~skillstate.store.base.Store` (its calls run in worker threads) or
    :class:`~skillstate.store.aio.AsyncStore` (its calls are awaited on this loop).
    """

    def __init__(self, agent: Agent[S], store: Store | AsyncStore, **options: Any) -> None:
        self._store = store
        self.max_concurrency = check_concurrency(options.pop("max_concurrency", 8))
        """How many of a parent's inline children run at once (:mod:`skillstate.fanout`)."""
        # Both protocols name the same methods: only their coroutines tell them apart.
        # A ThreadedStore is unwrapped: the step logic runs in a thread already.
        sync: Store
        if isinstance(store, ThreadedStore):
            sync = store.store
        elif is_async_store(store):
            sync = BlockingStore(cast("AsyncStore", store))
        else:
            sync = cast("Store", store)
        self.runtime: Runtime[S] = Runtime(agent, sync, **options)
        """The synchronous runtime whose step logic this one drives."""

    @property
    def agent(self) -> Agent[S]:
        return self.runtime.agent

    @property
    def store(self) -> Store | AsyncStore:
        """The store as given."""
        return self._store

    async def start(self, task_id: str, **fields: Any) -> S:
        """Create the task (version 1), as :meth:`Runtime.start`."""
        return await self._thread(self.runtime.start, task_id, **fields)

    async def load(self, task_id: str) -> S:
        return await self._thread(self.runtime.load, task_id)

    async def reply(self, task_id: str, text: str) -> S:
        """Answer a ``waiting_user`` task's question, as :meth:`Runtime.reply`."""
        return await self._thread(self.runtime.reply, task_id, text)

    async def approve(
        self,
        task_id: str,
        *,
        edits: dict[str, Any] | None = None,
        actor: str | None = None,
        reason: str | None = None,
    ) -> S:
        """Approve a ``waiting_approval`` task's call, as :meth:`Runtime.approve`; the next
        :meth:`run` runs it exactly once."""
        return await self._thread(
            self.runtime.approve, task_id, edits=edits, actor=actor, reason=reason
        )

    async def reject(self, task_id: str, *, reason: str, actor: str | None = None) -> S:
        """Reject a ``waiting_approval`` task's call, as :meth:`Runtime.reject`."""
        return await self._thread(self.runtime.reject, task_id, reason=reason, actor=actor)

    async def signal(self, task_id: str, name: str, data: Any) -> int:
        """Deliver signal ``name`` to a task's inbox, as :meth:`Runtime.signal`; a run of a
        task waiting for it consumes it (``run`` returns ``stopped="waiting"`` until
        then, and never sleeps through a wait)."""
        return await self._thread(self.runtime.signal, task_id, name, data)

    async def send(self, task_id: str, text: str, *, actor: str | None = None) -> int:
        """Send a message to a running task, as :meth:`Runtime.send`."""
        return await self._thread(self.runtime.send, task_id, text, actor=actor)

    async def cancel(
        self, task_id: str, *, reason: str = "", actor: str | None = None, compensate: bool = False
    ) -> int:
        """Ask a task to stop at its next step boundary, as :meth:`Runtime.cancel`."""
        return await self._thread(
            self.runtime.cancel, task_id, reason=reason, actor=actor, compensate=compensate
        )

    async def step(self, task_id: str, *, accept_definition: bool = False) -> StepReport[S]:
        """Take exactly one decision and commit it, as :meth:`Runtime.step`."""
        steps = self.runtime.one_step(task_id, accept_definition=accept_definition)
        with using(self.runtime.tracer):
            report: StepReport[S] = await self._drive(steps)
            return report

    async def accept_definition(
        self, task_id: str, *, actor: str | None = None, reason: str = ""
    ) -> S:
        """Re-pin a task to this agent's definition, as :meth:`Runtime.accept_definition`."""
        return await self._thread(
            self.runtime.accept_definition, task_id, actor=actor, reason=reason
        )

    async def run(
        self,
        task_id: str,
        *,
        inputs: Sequence[str] = (),
        max_steps: int | None = None,
        inputs_from: int = 0,
        stop: Callable[[], bool] | None = None,
        create: bool = False,
        accept_definition: bool = False,
    ) -> RunResult[S]:
        """Decide and commit until the task ends, waits, stalls or spends its budget, as
        :meth:`Runtime.run` (an unknown ``task_id`` is ``TaskNotFound`` unless
        ``create=True``; a task pinned to another definition is ``DefinitionChanged``
        unless a declared patch carries it or ``accept_definition``)."""
        steps = self.runtime.loop(
            task_id,
            inputs=inputs,
            max_steps=max_steps,
            inputs_from=inputs_from,
            stop=stop,
            create=create,
            accept_definition=accept_definition,
        )
        result = await self._run(task_id, steps, None)
        again = {"inputs": inputs, "inputs_from": inputs_from, "max_steps": max_steps, "stop": stop}
        return await arun_inline(self, result, **again)  # children concurrently, then the join

    async def resume(self, task_id: str, **options: Any) -> RunResult[S]:
        """:meth:`run` on a task that must exist already (``TaskNotFound`` otherwise)."""
        await self.load(task_id)
        return await self.run(task_id, **options)

    async def stream(
        self,
        task_id: str,
        *,
        inputs: Sequence[str] = (),
        max_steps: int | None = None,
        inputs_from: int = 0,
        create: bool = False,
    ) -> AsyncIterator[StepReport[S]]:
        """:meth:`run`, yielding each decision's report as soon as it is committed::

        async for report in runtime.stream("t1"):
            print(report.event.version, report.event.label)

        Leaving the loop early stops the run after the step in progress (its lease
        is released); the task stays resumable.
        """
        steps = self.runtime.loop(
            task_id, inputs=inputs, max_steps=max_steps, inputs_from=inputs_from, create=create
        )
        queue: asyncio.Queue[StepReport[S] | None] = asyncio.Queue()

        async def put(report: StepReport[Any]) -> None:
            await queue.put(report)

        async def produce() -> None:
            try:
                await self._run(task_id, steps, put)
            finally:
                await queue.put(None)

        producer = asyncio.create_task(produce())
        try:
            while (report := await queue.get()) is not None:
                yield report
            await producer  # its error, if it failed
        finally:
            if not producer.done():
                producer.cancel()
                await asyncio.gather(producer, return_exceptions=True)

    # ------------------------------------------------------------------ driving

    async def _run(
        self, task_id: str, steps: Steps[RunResult[Any]], on_report: OnReport | None
    ) -> RunResult[S]:
        runtime = self.runtime
        tracer = runtime.tracer
        with (
            using(tracer),
            tracer.span("skillstate.run", {"skillstate.task.id": task_id}) as span,
        ):
            result: RunResult[S] = await self._drive(steps, on_report)
            span.set("skillstate.run.stopped", result.stopped)
            span.set("skillstate.run.steps", result.steps)
            return result

    async def _drive(self, steps: Steps[R], on_report: OnReport | None = None) -> R:
        """The async twin of :func:`~skillstate.engine.runtime.drive`."""
        with on_loop(asyncio.get_running_loop()):
            done = False
            try:
                done, value = await in_step_thread(_advance, steps, None, None)
                while not done:
                    try:
                        report = await self._step(value)
                    except BaseException as exc:  # into the loop: it releases its lease
                        done, value = await in_step_thread(_advance, steps, None, exc)
                        continue
                    if on_report is not None:
                        await on_report(report)
                    done, value = await in_step_thread(_advance, steps, report, None)
                result: R = value
                return result
            finally:
                if not done:  # cancelled between steps: release what the loop holds
                    await asyncio.shield(in_step_thread(_close, steps))

    async def _step(self, state: AgentState) -> StepReport[Any]:
        """One step: the decision awaited, the rest of the step in a worker thread."""
        runtime = self.runtime
        tracer = runtime.tracer
        attributes = {"skillstate.task.id": state.task_id, "skillstate.version": state.version}
        with tracer.span("skillstate.step", attributes) as span:
            if runtime.agent.retriever is None:
                begun = runtime.begin(state)
            else:  # retrieval may read the store or call an endpoint: not on the loop
                begun = await in_step_thread(runtime.begin, state)
            try:
                with tracer.span("skillstate.decide", {"skillstate.step.id": begun.step_id}):
                    decided: Action | Decided | DecisionFailed = await self._decide(begun.view)
            except DecisionFailed as exc:
                decided = exc
            report = await in_step_thread(runtime.conclude, state, begun, decided)
            if tracer.enabled:
                traced_step(span, report.event)
            return report

    async def _decide(self, view: Any) -> Action | Decided:
        policy = self.runtime.agent.policy
        adecide = getattr(policy, "adecide", None)
        if adecide is not None:
            decided: Action | Decided = await adecide(view)
            return decided
        return await in_step_thread(policy.decide, view)

    async def _thread(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        with using(self.runtime.tracer), on_loop(asyncio.get_running_loop()):
            return await in_step_thread(fn, *args, **kwargs)


def _advance(
    steps: Steps[R], report: StepReport[Any] | None, error: BaseException | None
) -> tuple[bool, Any]:
    """One move of the loop: ``(False, next state)`` or ``(True, its result)``.

    (A ``StopIteration`` cannot cross ``to_thread``'s future: it is turned into a value.)
    """
    try:
        if error is not None:
            return False, steps.throw(error)
        if report is None:
            return False, next(steps)
        return False, steps.send(report)
    except StopIteration as done:
        return True, done.value


def _close(steps: Steps[Any]) -> None:
    with contextlib.suppress(ValueError):  # still running in its thread: it ends there
        steps.close()
