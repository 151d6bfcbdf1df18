"""What the runtime reports: one :class:`StepReport` per commit, one :class:`RunResult` per run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from skillstate.events import Event
from skillstate.state.model import AgentState
from skillstate.state.view import View

__all__ = ["RunResult", "StepReport", "StopReason"]

StopReason = Literal["completed", "failed", "waiting_user", "max_steps", "budget", "stalled"]


@dataclass(frozen=True)
class StepReport:
    """One committed version, as observers see it."""

    before: AgentState
    after: AgentState
    event: Event
    view: View | None = None
    """The view the decision was made from (``None`` for replies and settlements)."""
    stalled: str | None = None
    """Why the stall guard stopped the task at this step (``None``: it did not)."""


@dataclass(frozen=True)
class RunResult:
    """Where :meth:`Runtime.run` stopped, and why."""

    state: AgentState
    stopped: StopReason
    steps: int
    """Decisions taken during this call."""
