"""``eval --compare``: what moved between a baseline report and a new one, and the gates.

Both reports are ``report.json`` documents (:mod:`skillstate.eval.report`): per variant,
each metric as ``{"mean", "std"}`` over seeds. The comparison reads the *means* of
the variants both reports have, metric by metric, and a gate
(``--fail-under METRIC=DELTA``) fails when a metric got worse by more than ``DELTA``:

* absolute (``success=0.05``): the mean dropped (or, for a lower-is-better metric,
  rose) by more than 0.05;
* relative (``tokens_per_decision=10%``): by more than 10% of the baseline's mean
  (of a baseline of 0, any worsening is more).

``VARIANT:METRIC=DELTA`` gates one variant only. A gated metric that the new report
has no value for (no recovery runs, say) while the baseline has one is a breach: the
gate cannot be checked. A metric a baseline has no value for is not gated.

**Apples to oranges is refused.** A baseline of another suite, model, variant set,
seeds or task list raises :class:`~skillstate.errors.BaselineMismatch` (exit 2)
before anything is compared; ``allow_mismatch`` compares the common variants anyway,
and the differences are printed and written into the report in bold.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from skillstate.errors import BaselineMismatch, RegressionDetected, UsageError

__all__ = [
    "METRICS",
    "Comparison",
    "Gate",
    "Metric",
    "Row",
    "compare_reports",
    "delta_text",
    "load_report",
    "metrics_help",
    "mismatches",
    "number_text",
    "parse_gates",
    "refuse_early",
]

Direction = Literal["higher", "lower"]
_EPSILON = 1e-9
"""Float noise below which a difference is no difference (a mean of equal numbers)."""


@dataclass(frozen=True)
class Metric:
    """A metric a gate can name: its report key and which way is better."""

    name: str
    key: str
    """The key in ``report.json``'s ``variants.<name>`` (see :mod:`skillstate.eval.metrics`)."""
    better: Direction
    what: str


METRICS: tuple[Metric, ...] = (
    Metric("success", "success_rate", "higher", "runs whose every final check passed"),
    Metric("step_completion", "step_completion", "higher", "share of the plan's steps done"),
    Metric("validity", "intermediate_validity", "higher", "share of checks that passed"),
    Metric(
        "tokens_per_decision",
        "prompt_tokens_per_decision_mean",
        "lower",
        "mean prompt tokens per decision",
    ),
    Metric("tokens_p95", "prompt_tokens_per_decision_p95", "lower", "p95 prompt tokens/decision"),
    Metric("prompt_tokens", "prompt_tokens_total", "lower", "prompt tokens of one suite pass"),
    Metric(
        "completion_tokens", "completion_tokens_total", "lower", "completion tokens of one pass"
    ),
    Metric("model_calls", "model_calls_mean", "lower", "model calls per run"),
    Metric("repairs", "repairs_mean", "lower", "repair calls per run"),
    Metric("retries", "retries_per_step_mean", "lower", "skill retries per step"),
    Metric("seconds_per_step", "time_per_step_mean", "lower", "wall seconds per step"),
    Metric("recovery", "recovery_rate", "higher", "success after a clean stop and resume"),
    Metric("kill_recovery", "kill_recovery_rate", "higher", "success after SIGKILLs"),
    Metric("rollback_recovery", "rollback_recovery_rate", "higher", "success after a failed try"),
    Metric("faults", "faults_per_run", "lower", "provider errors met per run"),
    Metric("duplicated_effects", "duplicated_effects", "lower", "effects repeated after resumes"),
)
"""Every metric ``--fail-under`` takes, in report order (the report key works too)."""
_BY_NAME = {m.name: m for m in METRICS} | {m.key: m for m in METRICS}


def metrics_help() -> str:
    """The metric names for ``--help``: ``success (higher), ...``."""
    return ", ".join(f"{m.name} ({'↑' if m.better == 'higher' else '↓'})" for m in METRICS)


@dataclass(frozen=True)
class Gate:
    """``[VARIANT:]METRIC=DELTA``: the worst a metric may get."""

    metric: Metric
    delta: float
    relative: bool
    variant: str | None = None
    text: str = ""

    def allowed(self, baseline: float) -> float:
        """How much worse than ``baseline`` the new value may be."""
        return abs(baseline) * self.delta / 100 if self.relative else self.delta

    def limit_text(self) -> str:
        return f"{self.delta:g}%" if self.relative else f"{self.delta:g}"


def parse_gates(texts: Sequence[str]) -> list[Gate]:
    """``--fail-under`` values (repeated or comma-separated); a :class:`UsageError` on any
    unknown metric or malformed delta."""
    gates: list[Gate] = []
    for text in (part.strip() for raw in texts for part in raw.split(",")):
        if not text:
            continue
        name, sep, delta_text = text.partition("=")
        if not sep:
            raise UsageError(f"--fail-under {text!r}: expected METRIC=DELTA (e.g. success=0.05)")
        variant, _, metric_name = name.strip().rpartition(":")
        metric = _BY_NAME.get(metric_name.strip())
        if metric is None:
            raise UsageError(
                f"--fail-under {text!r}: unknown metric {metric_name.strip()!r}; "
                f"choose from: {', '.join(m.name for m in METRICS)}"
            )
        delta, relative = _parse_delta(text, delta_text.strip())
        gates.append(Gate(metric, delta, relative, variant.strip() or None, text))
    return gates


def _parse_delta(text: str, value: str) -> tuple[float, bool]:
    relative = value.endswith("%")
    number = value[:-1].strip() if relative else value
    try:
        delta = float(number)
    except ValueError:
        delta = math.nan
    if not math.isfinite(delta) or delta < 0 or not number:
        raise UsageError(
            f"--fail-under {text!r}: DELTA must be a number >= 0, absolute (0.05) or relative (10%)"
        )
    return delta, relative


def load_report(path: str | Path, what: str = "report") -> dict[str, Any]:
    """An end-to-end ``report.json`` (or a directory holding one); a :class:`UsageError`
    in one line when it cannot be read or is not one."""
    target = Path(path)
    if target.is_dir():
        target = target / "report.json"
    try:
        document = json.loads(target.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read {what} {str(target)!r}: {exc.strerror or exc}") from None
    except RecursionError:
        raise UsageError(f"{what} {str(target)!r} is nested too deeply") from None
    except ValueError as exc:
        raise UsageError(f"{what} {str(target)!r} is not JSON: {exc}") from None
    variants = document.get("variants") if isinstance(document, dict) else None
    if not isinstance(variants, dict) or not all(
        isinstance(v, dict) and isinstance(v.get("success_rate"), dict) for v in variants.values()
    ):
        raise UsageError(
            f"{what} {str(target)!r} is not an end-to-end eval report.json (no per-variant "
            "metrics; --mode forced reports are not compared)"
        )
    document["_path"] = str(target)
    return dict(document)


# ---------------------------------------------------------------------- mismatches


def mismatches(
    baseline: Mapping[str, Any], new: Mapping[str, Any], *, tasks: bool = True
) -> list[str]:
    """How the two reports' experiments differ, one phrase each (empty: comparable).

    ``new`` may be a partial document (suite, model, variants, seeds) to check before a
    run; ``tasks`` also compares the runs' task ids per seed.
    """
    found: list[str] = []
    for key in ("suite", "model"):
        if baseline.get(key) != new.get(key):
            found.append(f"{key} {new.get(key)!r}, baseline {baseline.get(key)!r}")
    old_v, new_v = set(baseline.get("variants", {})), set(new.get("variants", {}))
    if old_v != new_v:
        found.append(
            f"variants {','.join(sorted(new_v)) or '(none)'}, "
            f"baseline {','.join(sorted(old_v)) or '(none)'}"
        )
    if list(baseline.get("seeds", [])) != list(new.get("seeds", [])):
        found.append(f"seeds {new.get('seeds')}, baseline {baseline.get('seeds')}")
    if tasks:
        old_t, new_t = _task_ids(baseline), _task_ids(new)
        if old_t != new_t:
            only_new, only_old = sorted(new_t - old_t), sorted(old_t - new_t)
            found.append(
                f"task lists differ (only in the new report: {_few(only_new)}; "
                f"only in the baseline: {_few(only_old)})"
            )
    return found


def _task_ids(document: Mapping[str, Any]) -> set[str]:
    tasks = document.get("tasks") or []
    return {f"{t.get('task_id')}@{t.get('seed')}" for t in tasks if isinstance(t, dict)}


def _few(names: Sequence[str], shown: int = 3) -> str:
    if not names:
        return "none"
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


# ---------------------------------------------------------------------- comparing


@dataclass(frozen=True)
class Row:
    """One variant × metric of the comparison."""

    variant: str
    metric: Metric
    baseline: float | None
    new: float | None
    gate: Gate | None = None
    breach: bool = False

    @property
    def delta(self) -> float | None:
        if self.baseline is None or self.new is None:
            return None
        return self.new - self.baseline

    @property
    def relative(self) -> float | None:
        delta = self.delta
        if delta is None or self.baseline is None or abs(self.baseline) < _EPSILON:
            return None
        return delta / abs(self.baseline)

    @property
    def moved(self) -> bool:
        delta = self.delta
        if delta is None:
            return (self.baseline is None) != (self.new is None)
        return abs(delta) > _EPSILON

    @property
    def status(self) -> str:
        """``breach``, ``worse``, ``better``, ``same``, ``missing`` or ``new``."""
        if self.breach:
            return "breach"
        if self.baseline is None and self.new is None:
            return "same"
        if self.new is None:
            return "missing"
        if self.baseline is None:
            return "new"
        delta = self.delta or 0.0
        if abs(delta) <= _EPSILON:
            return "same"
        worse = delta < 0 if self.metric.better == "higher" else delta > 0
        return "worse" if worse else "better"

    def as_json(self) -> dict[str, Any]:
        return {
            "variant": self.variant,
            "metric": self.metric.name,
            "key": self.metric.key,
            "better": self.metric.better,
            "baseline": self.baseline,
            "new": self.new,
            "delta": self.delta,
            "relative": self.relative,
            "gate": None if self.gate is None else self.gate.text,
            "status": self.status,
        }

    def breach_text(self) -> str:
        base, new = number_text(self.baseline), number_text(self.new)
        if self.new is None:
            return f"{self.variant} {self.metric.name} {base} -> no value (gate {self.gate_text})"
        relative = self.relative
        if self.gate is not None and self.gate.relative and relative is not None:
            change = f"{relative:+.1%}"
        else:
            change = f"{self.delta or 0.0:+.4g}"
        return (
            f"{self.variant} {self.metric.name} {base} -> {new} ({change}; gate {self.gate_text})"
        )

    @property
    def gate_text(self) -> str:
        return "" if self.gate is None else self.gate.limit_text()


@dataclass
class Comparison:
    """The whole comparison: every row, the gates, and what made it apples to oranges."""

    baseline_path: str
    new_path: str
    rows: list[Row]
    gates: list[Gate]
    mismatches: list[str] = field(default_factory=list)

    @property
    def breaches(self) -> list[Row]:
        return [row for row in self.rows if row.breach]

    @property
    def moved(self) -> list[Row]:
        """Rows shown in the table: those that moved or that a gate checks."""
        return [row for row in self.rows if row.moved or row.gate is not None]

    def as_json(self) -> dict[str, Any]:
        return {
            "baseline": self.baseline_path,
            "report": self.new_path,
            "gates": [gate.text for gate in self.gates],
            "mismatches": list(self.mismatches),
            "breaches": [row.breach_text() for row in self.breaches],
            "rows": [row.as_json() for row in self.rows],
        }

    def summary(self) -> str:
        """The one line for stderr when a gate failed."""
        breaches = self.breaches
        listed = "; ".join(row.breach_text() for row in breaches[:3])
        more = f"; and {len(breaches) - 3} more" if len(breaches) > 3 else ""
        return (
            f"regression: {len(breaches)} gate(s) breached against {self.baseline_path}: "
            f"{listed}{more}"
        )

    def check(self) -> None:
        """Raise :class:`RegressionDetected` when any gate was breached."""
        if self.breaches:
            raise RegressionDetected(self.summary(), [row.breach_text() for row in self.breaches])


def compare_reports(
    baseline: Mapping[str, Any],
    new: Mapping[str, Any],
    gates: Sequence[Gate] = (),
    *,
    allow_mismatch: bool = False,
) -> Comparison:
    """Compare two loaded reports (:func:`load_report`) under ``gates``.

    Raises :class:`BaselineMismatch` when they measured different things, unless
    ``allow_mismatch`` (then only the common variants are compared, and the
    differences are kept in :attr:`Comparison.mismatches`).
    """
    found = mismatches(baseline, new)
    if found and not allow_mismatch:
        raise BaselineMismatch(_refusal(found))
    old_v, new_v = baseline["variants"], new["variants"]
    common = [name for name in new_v if name in old_v]
    unknown = {g.variant for g in gates if g.variant is not None} - set(common)
    if unknown:
        raise UsageError(
            f"--fail-under names variant(s) {', '.join(sorted(unknown))} that the reports "
            f"do not both have ({', '.join(common) or 'none in common'})"
        )
    rows: list[Row] = []
    for name in common:
        for metric in METRICS:
            gate = _gate_for(gates, name, metric)
            before = _mean(old_v[name], metric.key)
            after = _mean(new_v[name], metric.key)
            row = Row(name, metric, before, after, gate)
            rows.append(Row(name, metric, before, after, gate, _breached(row)))
    return Comparison(
        baseline_path=str(baseline.get("_path", "")),
        new_path=str(new.get("_path", "")),
        rows=rows,
        gates=list(gates),
        mismatches=found,
    )


def _refusal(found: Sequence[str]) -> str:
    return (
        "baseline is not comparable: " + "; ".join(found) + " (--allow-mismatch compares the "
        "common variants anyway)"
    )


def refuse_early(baseline: Mapping[str, Any], planned: Mapping[str, Any], allow: bool) -> list[str]:
    """Before a run: refuse a baseline whose suite, model, variants or seeds differ from
    the run's (the task list is compared after it). The differences (when allowed)."""
    found = mismatches(baseline, planned, tasks=False)
    if found and not allow:
        raise BaselineMismatch(_refusal(found))
    return found


def _gate_for(gates: Sequence[Gate], variant: str, metric: Metric) -> Gate | None:
    """The gate of this variant and metric: a variant's own one wins over a general one."""
    own = [g for g in gates if g.metric == metric and g.variant == variant]
    general = [g for g in gates if g.metric == metric and g.variant is None]
    chosen = own or general
    return min(chosen, key=lambda g: (g.relative, g.delta)) if chosen else None


def _mean(item: Mapping[str, Any], key: str) -> float | None:
    stat = item.get(key)
    value = stat.get("mean") if isinstance(stat, dict) else None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _breached(row: Row) -> bool:
    gate = row.gate
    if gate is None or row.baseline is None:
        return False
    if row.new is None:
        return True  # the gate cannot be checked: that is not a pass
    delta = row.new - row.baseline
    worse = -delta if row.metric.better == "higher" else delta
    return worse > gate.allowed(row.baseline) + _EPSILON


# ---------------------------------------------------------------------- formatting


def number_text(value: float | None) -> str:
    if value is None:
        return "—"
    if abs(value) >= 100:
        return f"{value:,.1f}"
    return f"{value:.4g}" if abs(value) < 1 else f"{value:.3f}".rstrip("0").rstrip(".")


def delta_text(row: Row) -> str:
    delta = row.delta
    if delta is None:
        return "—"
    text = f"{delta:+,.1f}" if abs(delta) >= 100 else f"{delta:+.4g}"
    relative = row.relative
    return text + (f" ({relative:+.1%})" if relative is not None else "")
