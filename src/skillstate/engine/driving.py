"""Driving a run loop synchronously.

A run loop (:meth:`Runtime.steps <skillstate.engine.runtime.Runtime.steps>`,
:meth:`Runtime.one_step <skillstate.engine.runtime.Runtime.one_step>`) is a generator;
:func:`drive` takes its steps in this thread, and
:class:`~skillstate.engine.aruntime.AsyncRuntime` awaits them instead.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any, TypeVar

from skillstate.engine.results import StepReport
from skillstate.state.model import AgentState

__all__ = ["Steps", "drive"]

R = TypeVar("R")

Steps = Generator[AgentState, "StepReport[Any]", R]
"""A run loop (:meth:`Runtime.steps`, :meth:`Runtime.one_step`): yields the states a
decision is to be taken in, is sent each step's report, returns ``R``."""


def drive(steps: Steps[R], step: Callable[[AgentState], StepReport[Any]]) -> R:
    """Run the loop ``steps`` to its end, taking each step with ``step`` (synchronously)."""
    try:
        state = next(steps)
        while True:
            try:
                report = step(state)
            except BaseException as exc:  # into the loop: its leases are released on the way out
                state = steps.throw(exc)
            else:
                state = steps.send(report)
    except StopIteration as done:
        result: R = done.value
        return result
