"""Aggregate teacher-forced decisions into accuracy by step and by prompt length.

Pure functions over :class:`~skillstate.eval.results.ForcedDecision` records that
return plain dicts (straight into JSON). Three accuracies, each stricter than the last:

``valid``
    the reply parsed as a decision the view allows (after the repairs allowed);
``skill``
    valid, and the same skill/tool as the reference (or the same kind: ``finish``);
``exact``
    right skill and the same parameters (both validated by the skill's params model).

**Intervals.** Every decision at index ``k`` of every task and seed is one Bernoulli
trial; a rate comes with its 95% **Wilson score interval** over those ``n`` trials
(pooled over tasks and seeds: with the few seeds a run has, a bootstrap over seeds
would have almost nothing to resample). Tasks of one seed are not fully independent,
so read the interval as a lower bound on the uncertainty.

**Drop index.** Per accuracy, the *early* accuracy is the pooled rate over the
decisions with ``k <= 5``; the drop index is the first ``k`` (any ``k``, from 1) whose
rate is below half of it, ``None`` when none is (or when the early rate is 0).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Literal, TypedDict

from skillstate.eval.metrics import order_variants
from skillstate.eval.results import ForcedDecision

__all__ = [
    "ACCURACIES",
    "EARLY_K",
    "WINDOWS",
    "AccuracySummary",
    "LengthPoint",
    "Rate",
    "StepPoint",
    "accuracy_by_length",
    "accuracy_by_step",
    "drop_index",
    "length_bin",
    "summarize_forced",
    "wilson",
]

Accuracy = Literal["valid", "skill", "exact"]
ACCURACIES: tuple[Accuracy, ...] = ("valid", "skill", "exact")
EARLY_K = 5
"""Decisions ``k <= EARLY_K`` give the early accuracy the drop index is measured against."""
Z_95 = 1.959963984540054
WINDOWS: tuple[tuple[int, int], ...] = ((1, 10), (11, 39), (40, 60))
"""Decision windows pooled in the summary: early, middle, late (a task of the long
group reaches 40-60; the stability target compares the first and the last)."""
LENGTH_BASE = 512
"""Prompt-length bins are [0, 512), [512, 1024), [1024, 2048)... tokens."""


class Rate(TypedDict):
    """``hits`` of ``n`` trials; ``rate`` and its 95% Wilson interval (``None`` if n = 0)."""

    hits: int
    n: int
    rate: float | None
    low: float | None
    high: float | None


class StepPoint(TypedDict):
    """The three accuracies at decision ``k``, over every task and seed that got there."""

    k: int
    prompt_tokens_mean: float | None
    valid: Rate
    skill: Rate
    exact: Rate


class LengthPoint(TypedDict):
    """The three accuracies over decisions whose prompt had ``low <= tokens < high``."""

    low: int
    high: int
    prompt_tokens_mean: float
    valid: Rate
    skill: Rate
    exact: Rate


class AccuracySummary(TypedDict):
    """Everything forced mode reports about one variant."""

    decisions: int
    runs: int
    seeds: int
    overall: dict[str, Rate]
    early: dict[str, Rate]
    """Pooled over the decisions with ``k <= EARLY_K``."""
    drop_k: dict[str, int | None]
    windows: dict[str, dict[str, Rate]]
    """Pooled over the decisions of each of :data:`WINDOWS` (``"1-10"``, ``"40-60"``)."""
    by_step: list[StepPoint]
    by_length: list[LengthPoint]


def wilson(hits: int, n: int, z: float = Z_95) -> Rate:
    """``hits / n`` with its Wilson score interval (95% by default)."""
    if n <= 0:
        return Rate(hits=0, n=0, rate=None, low=None, high=None)
    if not 0 <= hits <= n:
        raise ValueError(f"{hits} hits out of {n} trials")
    p = hits / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return Rate(hits=hits, n=n, rate=p, low=max(0.0, centre - half), high=min(1.0, centre + half))


def _hit(decision: ForcedDecision, accuracy: Accuracy) -> bool:
    if accuracy == "valid":
        return decision.valid
    if accuracy == "skill":
        return decision.skill_ok
    return decision.params_ok


def _rates(decisions: Sequence[ForcedDecision]) -> dict[str, Rate]:
    rates: dict[str, Rate] = {}
    for accuracy in ACCURACIES:
        rates[accuracy] = wilson(sum(_hit(d, accuracy) for d in decisions), len(decisions))
    return rates


def _mean_tokens(decisions: Iterable[ForcedDecision]) -> float | None:
    sizes = [d.prompt_tokens for d in decisions if d.prompt_tokens is not None]
    return round(sum(sizes) / len(sizes), 1) if sizes else None


def accuracy_by_step(decisions: Sequence[ForcedDecision]) -> list[StepPoint]:
    """One point per decision index ``k`` (ascending) that any decision has."""
    points: list[StepPoint] = []
    for k in sorted({d.k for d in decisions}):
        at = [d for d in decisions if d.k == k]
        rates = _rates(at)
        points.append(
            StepPoint(
                k=k,
                prompt_tokens_mean=_mean_tokens(at),
                valid=rates["valid"],
                skill=rates["skill"],
                exact=rates["exact"],
            )
        )
    return points


def length_bin(tokens: int) -> tuple[int, int]:
    """The ``[low, high)`` prompt-length bin ``tokens`` falls in (doubling from 512)."""
    if tokens < LENGTH_BASE:
        return 0, LENGTH_BASE
    low = LENGTH_BASE * 2 ** int(math.log2(tokens / LENGTH_BASE))
    if tokens >= 2 * low:  # float rounding at an exact power of two
        low *= 2
    return low, 2 * low


def accuracy_by_length(decisions: Sequence[ForcedDecision]) -> list[LengthPoint]:
    """One point per non-empty prompt-length bin; decisions without a prompt are left out."""
    bins: dict[tuple[int, int], list[ForcedDecision]] = {}
    for d in decisions:
        if d.prompt_tokens is not None:
            bins.setdefault(length_bin(d.prompt_tokens), []).append(d)
    points: list[LengthPoint] = []
    for (low, high), inside in sorted(bins.items()):
        rates = _rates(inside)
        points.append(
            LengthPoint(
                low=low,
                high=high,
                prompt_tokens_mean=_mean_tokens(inside) or 0.0,
                valid=rates["valid"],
                skill=rates["skill"],
                exact=rates["exact"],
            )
        )
    return points


def drop_index(
    counts: Sequence[tuple[int, int, int]], *, early: int = EARLY_K
) -> tuple[float | None, int | None]:
    """``(early_rate, k)`` from ``(k, hits, n)`` per decision index.

    ``early_rate`` pools the hits and trials of every ``k <= early``; ``k`` is the first
    index (ascending, ``n > 0``) whose rate is below half of it, or ``None``.
    """
    early_hits = sum(h for k, h, _ in counts if k <= early)
    early_n = sum(n for k, _, n in counts if k <= early)
    if early_n == 0:
        return None, None
    baseline = early_hits / early_n
    if baseline == 0:
        return baseline, None  # nothing to drop from
    for k, hits, n in sorted(counts):
        if n > 0 and hits / n < baseline / 2:
            return baseline, k
    return baseline, None


def _summary(decisions: Sequence[ForcedDecision]) -> AccuracySummary:
    steps = accuracy_by_step(decisions)
    early = [d for d in decisions if d.k <= EARLY_K]
    drops: dict[str, int | None] = {}
    for accuracy in ACCURACIES:
        counts = [(p["k"], p[accuracy]["hits"], p[accuracy]["n"]) for p in steps]
        drops[accuracy] = drop_index(counts)[1]
    return AccuracySummary(
        decisions=len(decisions),
        runs=len({(d.task_id, d.seed) for d in decisions}),
        seeds=len({d.seed for d in decisions}),
        overall=_rates(decisions),
        early=_rates(early),
        drop_k=drops,
        windows={
            f"{low}-{high}": _rates([d for d in decisions if low <= d.k <= high])
            for low, high in WINDOWS
        },
        by_step=steps,
        by_length=accuracy_by_length(decisions),
    )


def summarize_forced(decisions: Sequence[ForcedDecision]) -> dict[str, AccuracySummary]:
    """Per variant (report order): overall, early, drop index, by step and by length."""
    return {
        variant: _summary([d for d in decisions if d.variant == variant])
        for variant in order_variants(d.variant for d in decisions)
    }
