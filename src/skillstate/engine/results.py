"""What the runtime reports: one :class:`StepReport` per commit, one :class:`RunResult` per run."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Generic, Literal, TypeVar

from skillstate.events import Event
from skillstate.state.model import AgentState, TaskStatus
from skillstate.state.view import View

__all__ = ["RunResult", "StepReport", "StopReason"]

S = TypeVar("S", bound=AgentState)

StopReason = Literal[
    "completed",
    "failed",
    "cancelled",
    "waiting_user",
    "waiting_approval",
    "waiting",
    "waiting_children",
    "max_steps",
    "budget",
    "stalled",
]


@dataclass(frozen=True)
class StepReport(Generic[S]):
    """One committed version, as observers see it."""

    before: S
    after: S
    event: Event
    view: View[S] | None = None
    """The view the decision was made from (``None`` for replies and settlements)."""
    stalled: str | None = None
    """Why the stall guard stopped the task at this step (``None``: it did not)."""


@dataclass(frozen=True)
class RunResult(Generic[S]):
    """Where :meth:`Runtime.run` stopped, and why."""

    state: S
    stopped: StopReason
    steps: int
    """Decisions taken during this call."""
    unused_inputs: tuple[str, ...] = ()
    """The ``inputs`` of this call the task was not given: it finished, failed or
    stopped before asking for them."""

    @property
    def resume_at(self) -> datetime | None:
        """When to drive a ``waiting`` task again: its wait's deadline (UTC). ``None``
        when it does not wait, or waits for a signal without a timeout (the signal's
        delivery drives it)."""
        wait = self.state.wait if self.stopped == "waiting" else None
        return wait.deadline if wait is not None else None


PARKED: dict[TaskStatus, StopReason] = {
    TaskStatus.WAITING_USER: "waiting_user",
    TaskStatus.WAITING: "waiting",
    TaskStatus.WAITING_CHILDREN: "waiting_children",
}
"""Statuses a run stops in unless something at hand moves the task on
(see ``Runtime._moved_on``)."""


def stopped_by_status(state: AgentState) -> StopReason | None:
    """Why a run ends at ``state``: the status it is in, if that ends a run."""
    if state.status is TaskStatus.COMPLETED:
        return "completed"
    if state.status is TaskStatus.FAILED:
        return "failed"
    if state.status is TaskStatus.WAITING_APPROVAL:  # a person decides, not a run
        return "waiting_approval"
    if state.status is TaskStatus.CANCELLED:
        return "cancelled"
    return None
