"""What one run of one task under one variant produced: the unit every metric is built from."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["RecoveryResult", "TaskResult"]


@dataclass
class RecoveryResult:
    """A run interrupted at ``at`` (a fraction of the reference plan) and resumed."""

    at: float
    """0.25, 0.5 or 0.75."""
    success: bool
    duplicated_effects: int = 0
    """Effects (e.g. ledger lines) found more than once after the resume."""


@dataclass
class TaskResult:
    task_id: str
    suite: str
    group: str
    """short, medium or long."""
    variant: str
    """history, state, skills or skillstate."""
    seed: int
    success: bool
    """Every final check passed."""
    failure: str | None = None
    """Why not: the first failed check, ``context overflow``, ``step budget``, an error."""
    first_bad_step: int | None = None
    """1-based index of the first decision that errored, failed its verify or diverged
    from the task's expected facts or effects (see :func:`skillstate.engine.replay.attribute`);
    every failed run has one, ``None`` means nothing went wrong."""
    first_bad_reason: str | None = None
    """Why that step was bad, in one line."""
    replay: str | None = None
    """The command that shows this run's timeline with the same attribution."""
    steps: int = 0
    """Decisions taken."""
    plan_steps: int = 0
    """Decisions the reference plan takes for this variant."""
    step_completion: float = 0.0
    """Fraction of the expected intermediate facts that were reached (0..1)."""
    intermediate_validity: float = 0.0
    """Fraction of verified step outputs that also pass the task's independent re-checks."""
    model_calls: int = 0
    repairs: int = 0
    prompt_tokens: list[int] = field(default_factory=list)
    """Prompt tokens of each decision, in order."""
    completion_tokens: int = 0
    duration_s: float = 0.0
    checks: dict[str, bool] = field(default_factory=dict)
    recovery: list[RecoveryResult] = field(default_factory=list)

    @property
    def prompt_tokens_total(self) -> int:
        return sum(self.prompt_tokens)

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["prompt_tokens_total"] = self.prompt_tokens_total
        return data
