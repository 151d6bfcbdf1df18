"""Aggregate :class:`~skillstate.eval.results.TaskResult` runs into the numbers a report shows.

Every function here is pure: it reads a sequence of results and returns plain
dicts, lists and Python ``float``/``int`` values (no NumPy), so the output goes
straight into JSON and the same input always gives the same numbers.

**Seeds are the unit of variation.** A seed is one full pass of the suite; runs
of one seed share the model's sampling and the tasks' random parameters, so they
are not independent of each other. Each metric is therefore computed *per seed*
first (over that seed's runs of one variant, optionally of one length group),
and only then summarised across seeds as ``{"mean": m, "std": s}``:

* ``mean`` is the arithmetic mean of the per-seed values;
* ``std`` is the *sample* standard deviation (``statistics.stdev``, n-1) of the
  per-seed values, and ``0.0`` when only one seed has a value;
* a seed whose value is undefined (no decisions to average, no recovery runs)
  is left out; when no seed has a value, both are ``None`` (``null`` in JSON)
  rather than a made-up ``0.0``.

Per-seed definitions (``runs`` are one seed's runs of one variant):

``success_rate``
    fraction of runs whose every final check passed.
``step_completion``, ``intermediate_validity``
    mean over runs of the run's own fraction (see ``TaskResult``).
``model_calls_mean``, ``repairs_mean``
    mean over runs of model calls / repair calls per run.
``prompt_tokens_per_decision_mean``, ``prompt_tokens_per_decision_p95``
    mean and 95th percentile of the prompt size of every decision of every run,
    pooled (a long run weighs more because it makes more decisions, which is
    what "per decision" means). The percentile interpolates linearly between
    order statistics (``statistics.quantiles(method="inclusive")``, NumPy's
    default).
``prompt_tokens_total``, ``completion_tokens_total``
    tokens summed over the seed's runs: the cost of one pass of the suite.
``retries_per_step_mean``, ``time_per_step_mean``
    skill attempts beyond the first, and wall seconds (from the events'
    ``started_at``/``finished_at``), per decision: the seed's totals over its
    runs divided by the decisions those runs made.
``recovery_rate``
    of the runs stopped cleanly at 25/50/75% and resumed (``TaskResult.recovery``,
    kind ``stop``) whose uninterrupted run of the same task and seed succeeded,
    the fraction that still succeeded. Resumed runs of a task the variant fails
    anyway are left out: they say nothing about recovery. A resumed run that
    succeeded but repeated an effect still counts as recovered here; the
    repetition is counted separately in ``duplicated_effects``.
``kill_recovery_rate``
    the same for the runs whose process was SIGKILLed at random instants
    (kind ``kill``, :mod:`skillstate.eval.interrupt`).
``rollback_recovery_rate``
    of the runs with at least one failed attempt (``TaskResult.bad_steps``: a
    tool error, an injected bad step, a verify that refused), the fraction that
    still succeeded: the task recovered through rollback and retry.
``faults_per_run``
    provider errors (timeouts, 429s) a run met and was resumed from, per run.
``duplicated_effects``
    effects found more than once after a resume, summed over every resumed run
    of the seed (whatever the uninterrupted outcome: a duplicated ledger line is
    a fault either way).

Counts that are not per-seed statistics: ``runs`` (results summarised),
``seeds`` (distinct seeds among them), ``recovery_runs``, ``kill_runs`` and
``rollback_runs`` (the denominators of the three recovery rates, all seeds
together) and ``kills`` / ``kills_in_flight`` (SIGKILLs that landed, and those
that landed with an effect in flight).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Sequence
from typing import TypedDict

from skillstate.eval.results import TaskResult

__all__ = [
    "GROUPS",
    "STAT_METRICS",
    "VARIANTS",
    "MetricSet",
    "Stat",
    "VariantSummary",
    "order_groups",
    "order_variants",
    "percentile",
    "summarize",
    "tokens_by_step",
]

VARIANTS: tuple[str, ...] = (
    "history",
    "state",
    "skills",
    "skillstate",
    "window",
    "summary",
    "hybrid",
)
"""The variants in the order reports list them (baseline first, context baselines last)."""
GROUPS: tuple[str, ...] = ("short", "medium", "long")
"""The length groups in the order reports list them."""


class Stat(TypedDict):
    """One metric across seeds; ``None`` when no seed had a defined value."""

    mean: float | None
    std: float | None


class MetricSet(TypedDict):
    """Every metric of one variant (or one variant within one length group)."""

    runs: int
    seeds: int
    recovery_runs: int
    kill_runs: int
    rollback_runs: int
    kills: int
    kills_in_flight: int
    success_rate: Stat
    step_completion: Stat
    intermediate_validity: Stat
    model_calls_mean: Stat
    repairs_mean: Stat
    prompt_tokens_per_decision_mean: Stat
    prompt_tokens_per_decision_p95: Stat
    prompt_tokens_total: Stat
    completion_tokens_total: Stat
    retries_per_step_mean: Stat
    time_per_step_mean: Stat
    recovery_rate: Stat
    kill_recovery_rate: Stat
    rollback_recovery_rate: Stat
    faults_per_run: Stat
    duplicated_effects: Stat


class VariantSummary(MetricSet):
    """A variant's metrics over all its runs, plus the same metrics per length group."""

    by_length: dict[str, MetricSet]


STAT_METRICS: tuple[str, ...] = (
    "success_rate",
    "step_completion",
    "intermediate_validity",
    "model_calls_mean",
    "repairs_mean",
    "prompt_tokens_per_decision_mean",
    "prompt_tokens_per_decision_p95",
    "prompt_tokens_total",
    "completion_tokens_total",
    "retries_per_step_mean",
    "time_per_step_mean",
    "recovery_rate",
    "kill_recovery_rate",
    "rollback_recovery_rate",
    "faults_per_run",
    "duplicated_effects",
)
"""The keys of :class:`MetricSet` that hold a :class:`Stat`, in report order."""

_PerSeed = Callable[[Sequence[TaskResult]], float | None]


def _ordered(names: Iterable[str], canonical: tuple[str, ...]) -> list[str]:
    present = set(names)
    known = [name for name in canonical if name in present]
    return known + sorted(present.difference(canonical))


def order_variants(names: Iterable[str]) -> list[str]:
    """The distinct variant names, known ones in :data:`VARIANTS` order, then the rest sorted.

    A fixed order keeps tables, plots and JSON comparable between reports.
    """
    return _ordered(names, VARIANTS)


def order_groups(names: Iterable[str]) -> list[str]:
    """The distinct length groups, short → medium → long, then any others sorted."""
    return _ordered(names, GROUPS)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of ``values``, interpolated linearly.

    Same definition as NumPy's default (``statistics.quantiles`` with the
    ``inclusive`` method); a single value is its own percentile, which
    ``statistics.quantiles`` refuses on Python 3.10.
    """
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} is outside 0..100")
    ordered = sorted(float(v) for v in values)
    if len(ordered) == 1 or q == 0:
        return ordered[0]
    if q == 100:
        return ordered[-1]
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _mean(values: Iterable[float]) -> float | None:
    data = [float(v) for v in values]
    return statistics.fmean(data) if data else None


def _across_seeds(values: Iterable[float | None]) -> Stat:
    defined = [float(v) for v in values if v is not None]
    if not defined:
        return Stat(mean=None, std=None)
    std = statistics.stdev(defined) if len(defined) > 1 else 0.0
    return Stat(mean=float(statistics.fmean(defined)), std=float(std))


def _success_rate(runs: Sequence[TaskResult]) -> float | None:
    return _mean(1.0 if run.success else 0.0 for run in runs)


def _step_completion(runs: Sequence[TaskResult]) -> float | None:
    return _mean(run.step_completion for run in runs)


def _intermediate_validity(runs: Sequence[TaskResult]) -> float | None:
    return _mean(run.intermediate_validity for run in runs)


def _model_calls(runs: Sequence[TaskResult]) -> float | None:
    return _mean(run.model_calls for run in runs)


def _repairs(runs: Sequence[TaskResult]) -> float | None:
    return _mean(run.repairs for run in runs)


def _decisions(runs: Sequence[TaskResult]) -> list[float]:
    return [float(tokens) for run in runs for tokens in run.prompt_tokens]


def _tokens_per_decision(runs: Sequence[TaskResult]) -> float | None:
    return _mean(_decisions(runs))


def _tokens_per_decision_p95(runs: Sequence[TaskResult]) -> float | None:
    decisions = _decisions(runs)
    return percentile(decisions, 95) if decisions else None


def _prompt_total(runs: Sequence[TaskResult]) -> float | None:
    return float(sum(run.prompt_tokens_total for run in runs))


def _completion_total(runs: Sequence[TaskResult]) -> float | None:
    return float(sum(run.completion_tokens for run in runs))


def _per_step(runs: Sequence[TaskResult], total: Callable[[TaskResult], float]) -> float | None:
    steps = sum(run.steps for run in runs)
    return sum(total(run) for run in runs) / steps if steps else None


def _retries_per_step(runs: Sequence[TaskResult]) -> float | None:
    return _per_step(runs, lambda run: run.retries)


def _time_per_step(runs: Sequence[TaskResult]) -> float | None:
    return _per_step(runs, lambda run: run.step_seconds)


def _recovery_attempts(runs: Sequence[TaskResult], kind: str = "stop") -> list[bool]:
    return [
        resumed.success
        for run in runs
        if run.success
        for resumed in run.recovery
        if resumed.kind == kind
    ]


def _recovery_rate(runs: Sequence[TaskResult]) -> float | None:
    return _mean(1.0 if ok else 0.0 for ok in _recovery_attempts(runs))


def _kill_recovery_rate(runs: Sequence[TaskResult]) -> float | None:
    return _mean(1.0 if ok else 0.0 for ok in _recovery_attempts(runs, "kill"))


def _with_bad_steps(runs: Sequence[TaskResult]) -> list[TaskResult]:
    return [run for run in runs if run.bad_steps > 0]


def _rollback_recovery_rate(runs: Sequence[TaskResult]) -> float | None:
    return _mean(1.0 if run.success else 0.0 for run in _with_bad_steps(runs))


def _faults_per_run(runs: Sequence[TaskResult]) -> float | None:
    return _mean(run.faults for run in runs)


def _duplicated_effects(runs: Sequence[TaskResult]) -> float | None:
    resumed = [item for run in runs for item in run.recovery]
    return float(sum(item.duplicated_effects for item in resumed)) if resumed else None


def _by_seed(runs: Sequence[TaskResult]) -> list[list[TaskResult]]:
    seeds: dict[int, list[TaskResult]] = {}
    for run in runs:
        seeds.setdefault(run.seed, []).append(run)
    return [seeds[seed] for seed in sorted(seeds)]


def _metric_set(runs: Sequence[TaskResult]) -> MetricSet:
    per_seed = _by_seed(runs)

    def stat(metric: _PerSeed) -> Stat:
        return _across_seeds(metric(seed_runs) for seed_runs in per_seed)

    return MetricSet(
        runs=len(runs),
        seeds=len(per_seed),
        recovery_runs=len(_recovery_attempts(runs)),
        kill_runs=len(_recovery_attempts(runs, "kill")),
        rollback_runs=len(_with_bad_steps(runs)),
        kills=sum(r.kills for run in runs for r in run.recovery),
        kills_in_flight=sum(r.in_flight for run in runs for r in run.recovery),
        success_rate=stat(_success_rate),
        step_completion=stat(_step_completion),
        intermediate_validity=stat(_intermediate_validity),
        model_calls_mean=stat(_model_calls),
        repairs_mean=stat(_repairs),
        prompt_tokens_per_decision_mean=stat(_tokens_per_decision),
        prompt_tokens_per_decision_p95=stat(_tokens_per_decision_p95),
        prompt_tokens_total=stat(_prompt_total),
        completion_tokens_total=stat(_completion_total),
        retries_per_step_mean=stat(_retries_per_step),
        time_per_step_mean=stat(_time_per_step),
        recovery_rate=stat(_recovery_rate),
        kill_recovery_rate=stat(_kill_recovery_rate),
        rollback_recovery_rate=stat(_rollback_recovery_rate),
        faults_per_run=stat(_faults_per_run),
        duplicated_effects=stat(_duplicated_effects),
    )


def summarize(results: Sequence[TaskResult]) -> dict[str, VariantSummary]:
    """Every metric of every variant, overall and per length group, as mean ± std over seeds.

    Keys are variant names in :func:`order_variants` order; ``by_length`` holds the
    groups the variant has runs in, in :func:`order_groups` order. See the module
    docstring for what each metric means and why it is computed per seed first.
    """
    summary: dict[str, VariantSummary] = {}
    for variant in order_variants(run.variant for run in results):
        runs = [run for run in results if run.variant == variant]
        overall = _metric_set(runs)
        by_length = {
            group: _metric_set([run for run in runs if run.group == group])
            for group in order_groups(run.group for run in runs)
        }
        summary[variant] = VariantSummary(**overall, by_length=by_length)
    return summary


def tokens_by_step(results: Sequence[TaskResult]) -> dict[str, list[float]]:
    """Mean prompt tokens of the i-th decision (i = 1..K) per variant.

    Entry ``i - 1`` averages ``prompt_tokens[i - 1]`` over every run (any task,
    any seed) that made at least ``i`` decisions; ``K`` is the most decisions
    any run of the variant made. This is the curve that shows whether a prompt
    grows with the transcript (``history``) or stays flat (explicit state).
    Later entries average fewer runs, so their tail is noisier.
    """
    curves: dict[str, list[float]] = {}
    for variant in order_variants(run.variant for run in results):
        runs = [run.prompt_tokens for run in results if run.variant == variant]
        longest = max((len(tokens) for tokens in runs), default=0)
        curves[variant] = [
            float(statistics.fmean(tokens[index] for tokens in runs if len(tokens) > index))
            for index in range(longest)
        ]
    return curves
