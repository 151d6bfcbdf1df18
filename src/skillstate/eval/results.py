"""What one run of one task under one variant produced: the unit every metric is built from."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["ForcedDecision", "RecoveryResult", "TaskResult"]


@dataclass
class RecoveryResult:
    """A run interrupted and resumed: stopped cleanly at ``at`` (a fraction of the
    reference plan), or its process SIGKILLed at random instants (``kind="kill"``)."""

    at: float | None
    """0.25, 0.5 or 0.75 for a clean stop; ``None`` for a killed run."""
    success: bool
    duplicated_effects: int = 0
    """Effects (e.g. ledger lines) found more than once after the resume."""
    kind: str = "stop"
    """``stop`` (a clean stop after a number of decisions) or ``kill`` (SIGKILL)."""
    kills: int = 0
    """Kills that landed (the process was still running when it was killed)."""
    in_flight: int = 0
    """Kills that landed with an effect in flight (its intent recorded, no outcome)."""
    resumes: int = 0
    """Processes that resumed the task after a kill or a provider error."""


@dataclass
class TaskResult:
    task_id: str
    suite: str
    group: str
    """short, medium or long."""
    variant: str
    """history, state, skills, skillstate, or a baseline: window, summary, hybrid."""
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
    retries: int = 0
    """Skill attempts beyond the first, summed over the run's decisions (``attempts - 1``)."""
    step_seconds: float = 0.0
    """Wall time of the run's decisions, summed (each event's ``finished_at - started_at``)."""
    bad_steps: int = 0
    """Decisions with a failed attempt (a tool error, an injected bad step, a verify
    that refused), whether or not a retry then passed: what rollback recovers from."""
    faults: int = 0
    """Provider errors (timeouts, rate limits) the run met and was resumed from."""
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


@dataclass
class ForcedDecision:
    """One teacher-forced decision: the prompt a variant sends at decision ``k`` of the
    reference run, the model's answer to it, and how it compares with the reference."""

    task_id: str
    suite: str
    group: str
    variant: str
    seed: int
    k: int
    """1-based decision index in the reference run."""
    expected: str
    """The reference decision: its skill name, or its kind (``finish``)."""
    prompt_tokens: int | None = None
    """Size of the prompt the variant sent (first attempt, before any repair);
    ``None`` when no model call was made."""
    valid: bool = False
    """The reply parsed as a decision the view allows (within the repairs allowed)."""
    skill_ok: bool = False
    """Valid, and the same skill/tool (or the same kind: finish) as the reference."""
    params_ok: bool = False
    """Right skill and the same parameters, both validated by the skill's params model."""
    got: str | None = None
    """What the model chose (skill name or kind), when valid."""
    error: str | None = None
    """Why not valid: the repair error, a context overflow, a provider error."""

    def as_json(self) -> dict[str, Any]:
        return asdict(self)
