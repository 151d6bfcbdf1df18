"""Write an evaluation's results as ``report.json``, ``report.md`` and two PNG plots.

``report.json`` is the record: every aggregate of :func:`~skillstate.eval.metrics.summarize`
plus every single run (``TaskResult.as_json()``), so any number in the Markdown can be
recomputed from it. ``report.md`` is the same aggregates as tables for a reader, with the
run's provenance (model, suite, seeds, command, machine) on top and every failure listed
with the step it first went wrong at. The plots show the two effects the experiment is
about: prompt size against decision index, and success per length group.

Wording is kept honest on purpose: the model name is printed verbatim, and when it is an
oracle or a scripted/replayed policy the report says that the numbers test the harness,
not a language model.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from skillstate.errors import MissingExtra
from skillstate.eval.markdown import _code, _fmt, _table
from skillstate.eval.metrics import (
    MetricSet,
    Stat,
    VariantSummary,
    order_groups,
    order_variants,
    summarize,
    tokens_by_step,
)
from skillstate.eval.report_recovery import recovery_section
from skillstate.eval.results import TaskResult
from skillstate.state.redact import RedactionPolicy

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from matplotlib.typing import RcKeyType

__all__ = ["ReportPaths", "write_report"]

_MISSING_PLOTS = "plots need: pip install 'skillstate[eval]'"
_SCRIPTED = re.compile(r"oracle|scripted|replay|cassette|fake|mock", re.IGNORECASE)
_VARIANT_COLORS = {
    "history": "#7f7f7f",
    "state": "#1f77b4",
    "skills": "#ff7f0e",
    "skillstate": "#2ca02c",
    "window": "#9467bd",
    "summary": "#8c564b",
    "hybrid": "#17becf",
}
_EXTRA_COLORS = ("#e377c2", "#bcbd22", "#d62728", "#aec7e8", "#ffbb78", "#98df8a")
# Fixed fonts, sizes and resolution so that the same results draw the same PNG on any
# machine (DejaVu Sans ships with matplotlib, so no system font is picked up).
_RC: dict[RcKeyType, Any] = {
    "font.family": "DejaVu Sans",
    "font.size": 10.0,
    "axes.titlesize": 11.0,
    "axes.labelsize": 10.0,
    "legend.fontsize": 9.0,
    "xtick.labelsize": 9.0,
    "ytick.labelsize": 9.0,
    "figure.dpi": 100.0,
    "savefig.dpi": 100.0,
    "lines.linewidth": 1.5,
}
_FIGSIZE = (7.0, 4.0)


class ReportPaths(NamedTuple):
    """The files :func:`write_report` wrote (plots are ``None`` when not drawn)."""

    json: Path
    markdown: Path
    tokens_by_step: Path | None
    success_by_length: Path | None


def write_report(
    results: Sequence[TaskResult],
    out_dir: str | os.PathLike[str],
    *,
    model: str,
    suite: str,
    seeds: Sequence[int],
    command: str | Sequence[str],
    started_at: datetime | str,
    duration_s: float,
    machine: str | Mapping[str, Any],
    plots: bool = True,
) -> ReportPaths:
    """Write ``report.json``, ``report.md`` and (with ``plots``) two PNGs into ``out_dir``.

    ``model`` is printed verbatim; ``command`` may be an argv list (it is shell-quoted);
    ``machine`` is a description or a mapping of facts (CPU, GPU, OS...).

    The JSON and Markdown need only the standard library, so they are written first:
    if matplotlib is missing, :class:`~skillstate.errors.MissingExtra` is raised *after*
    them, and an evaluation that took hours does not lose its numbers to a missing
    plotting extra. Pass ``plots=False`` to skip the PNGs on purpose.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    summary = summarize(results)
    curves = tokens_by_step(results)
    draw = plots and importlib.util.find_spec("matplotlib") is not None
    command_text = command if isinstance(command, str) else shlex.join(command)
    started_text = started_at.isoformat() if isinstance(started_at, datetime) else started_at

    json_path = out / "report.json"
    document = {
        "model": model,
        "suite": suite,
        "seeds": [int(seed) for seed in seeds],
        "command": command_text,
        "machine": machine if isinstance(machine, str) else dict(machine),
        "started_at": started_text,
        "duration_s": float(duration_s),
        "variants": summary,
        # Mean prompt tokens of the i-th decision, per variant (see tokens_by_step).
        "prompt_tokens_by_step": {name: [round(v, 1) for v in c] for name, c in curves.items()},
        "tasks": [run.as_json() for run in _sorted_runs(results)],
    }
    # Reports get shared: a token or phone number in a failure reason stays behind.
    redactor = RedactionPolicy().redactor()
    document = redactor.json(document)
    json_path.write_text(
        json.dumps(document, indent=2, ensure_ascii=False, allow_nan=False) + "\n",
        encoding="utf-8",
    )

    md_path = out / "report.md"
    md_path.write_text(
        redactor.text(
            _markdown(
                results,
                summary,
                model=model,
                suite=suite,
                seeds=seeds,
                command=command_text,
                started_at=started_text,
                duration_s=duration_s,
                machine=machine,
                with_plots=draw,
            )
        ),
        encoding="utf-8",
    )

    if not plots:
        return ReportPaths(json_path, md_path, None, None)
    if not draw:
        raise MissingExtra(f"{_MISSING_PLOTS} (report.json and report.md were written to {out})")
    tokens_png, success_png = _draw_plots(summary, curves, out)
    return ReportPaths(json_path, md_path, tokens_png, success_png)


# --- ordering and formatting -------------------------------------------------------------


def _sorted_runs(results: Sequence[TaskResult]) -> list[TaskResult]:
    """Runs in a stable order (group, task, variant, seed) so reports diff cleanly."""
    groups = {name: i for i, name in enumerate(order_groups(run.group for run in results))}
    variants = {name: i for i, name in enumerate(order_variants(run.variant for run in results))}
    return sorted(
        results,
        key=lambda run: (
            run.suite,
            groups[run.group],
            run.task_id,
            variants[run.variant],
            run.seed,
        ),
    )


STEP_COLUMNS = (1, 5, 10, 20, 40, 60)


def _by_step_table(curves: Mapping[str, list[float]]) -> list[str]:
    """Mean prompt tokens at a few decision indices: the plot's curve, as numbers."""
    longest = max((len(c) for c in curves.values()), default=0)
    columns = [i for i in STEP_COLUMNS if i <= longest]
    if not columns:
        return []
    lines = ["Mean prompt tokens of the i-th decision (over the runs that got that far):", ""]
    return lines + _table(
        ["Variant", *(f"i = {i}" for i in columns)],
        [
            [name, *(f"{curve[i - 1]:,.0f}" if i <= len(curve) else "—" for i in columns)]
            for name, curve in curves.items()
        ],
    )


CELL_CHARS = 240
"""A model's garbage (a 500-character id) is quoted in reasons; tables show the start
(report.json keeps all of it)."""


def _clip(text: str) -> str:
    return text if len(text) <= CELL_CHARS else text[: CELL_CHARS - 1] + "…"


def _first_bad(run: TaskResult) -> str:
    if run.first_bad_step is None:
        return "—"
    reason = f": {_clip(run.first_bad_reason)}" if run.first_bad_reason else ""
    return f"decision {run.first_bad_step}{reason}"


def _machine_text(machine: str | Mapping[str, Any]) -> str:
    if isinstance(machine, str):
        return machine
    return ", ".join(f"{key}: {value}" for key, value in machine.items())


# --- Markdown ------------------------------------------------------------------------------


def _markdown(
    results: Sequence[TaskResult],
    summary: Mapping[str, VariantSummary],
    *,
    model: str,
    suite: str,
    seeds: Sequence[int],
    command: str,
    started_at: str,
    duration_s: float,
    machine: str | Mapping[str, Any],
    with_plots: bool,
) -> str:
    variants = list(summary)
    lines = [
        f"# skillstate evaluation: {suite}",
        "",
        f"- Model: {_code(model)}",
        f"- Suite: {_code(suite)}",
        f"- Seeds: {', '.join(str(seed) for seed in seeds)} (n = {len(seeds)})",
        f"- Command: {_code(command)}",
        f"- Machine: {_machine_text(machine)}",
        f"- Started: {started_at}",
        f"- Duration: {duration_s:.1f} s",
        f"- Runs: {len(results)}",
        "",
    ]
    if _SCRIPTED.search(model):
        lines += [
            f"> **Scripted model.** {_code(model)} is not a language model deciding on its own "
            "(an oracle follows each task's reference plan; a replay repeats recorded replies). "
            "These numbers check the harness and the variants' mechanics (prompt growth, "
            "recovery after an interruption), not how well any model solves the tasks.",
            "",
        ]
    lines += [
        "Every value is `mean ± std` over seeds: the metric is computed on each seed's runs, "
        "then averaged; std is the sample standard deviation across seeds (0 with one seed). "
        "A dash means no seed had a value (e.g. no interrupted runs).",
        "",
    ]

    lines += ["## Success and completion", ""]
    lines += _table(
        [
            "Variant",
            "Runs",
            "Success rate",
            "Step completion",
            "Intermediate validity",
            "Model calls / run",
            "Repairs / run",
            "Retries / step",
            "Seconds / step",
        ],
        [
            [
                name,
                str(item["runs"]),
                _fmt(item["success_rate"], 2),
                _fmt(item["step_completion"], 2),
                _fmt(item["intermediate_validity"], 2),
                _fmt(item["model_calls_mean"], 1),
                _fmt(item["repairs_mean"], 2),
                _fmt(item["retries_per_step_mean"], 2),
                _fmt(item["time_per_step_mean"], 3),
            ]
            for name, item in summary.items()
        ],
    )

    groups = order_groups(run.group for run in results)
    pickers: tuple[tuple[str, Callable[[MetricSet], Stat]], ...] = (
        ("Success rate by length group", lambda metrics: metrics["success_rate"]),
        ("Step completion by length group", lambda metrics: metrics["step_completion"]),
    )
    for title, pick in pickers:
        lines += [f"## {title}", ""]
        lines += _table(
            ["Group", *variants],
            [
                [group, *(_group_cell(summary[name], group, pick) for name in variants)]
                for group in groups
            ],
        )

    lines += ["## Prompt tokens", ""]
    lines += [
        "Per decision: over every decision of every run of a seed. "
        "Totals: summed over one seed's runs (the cost of one pass of the suite).",
        "",
    ]
    lines += _table(
        [
            "Variant",
            "Prompt tokens / decision (mean)",
            "Prompt tokens / decision (p95)",
            "Prompt tokens total",
            "Completion tokens total",
        ],
        [
            [
                name,
                _fmt(item["prompt_tokens_per_decision_mean"], 1),
                _fmt(item["prompt_tokens_per_decision_p95"], 1),
                _fmt(item["prompt_tokens_total"], 0),
                _fmt(item["completion_tokens_total"], 0),
            ]
            for name, item in summary.items()
        ],
    )
    lines += _by_step_table(tokens_by_step(results))

    lines += recovery_section(results, summary)

    failures = [run for run in _sorted_runs(results) if not run.success]
    lines += ["## Failures", ""]
    if not failures:
        lines += ["No failures.", ""]
    else:
        lines += _table(
            ["Task", "Group", "Variant", "Seed", "Failure", "First bad step"],
            [
                [
                    run.task_id,
                    run.group,
                    run.variant,
                    str(run.seed),
                    _clip(run.failure or "(no reason recorded)"),
                    _first_bad(run),
                ]
                for run in failures
            ],
        )
        lines += [
            "Each run's timeline, with the same attribution: "
            "`skillstate replay task --store sqlite:///DIR/runs/<task>-<variant>-<seed>/run/"
            "state.db --expect DIR/runs/<task>-<variant>-<seed>/run/expected.json` "
            "(`report.json` has the exact command per run).",
            "",
        ]

    if with_plots:
        lines += [
            "## Plots",
            "",
            "![Prompt tokens by decision index](tokens_by_step.png)",
            "",
            "![Success rate by length group](success_by_length.png)",
            "",
        ]
    return "\n".join(lines)


def _group_cell(item: VariantSummary, group: str, pick: Callable[[MetricSet], Stat]) -> str:
    """One length group's value of one variant, with the runs it rests on."""
    metrics = item["by_length"].get(group)
    if metrics is None:
        return "—"
    return f"{_fmt(pick(metrics), 2)} (n={metrics['runs']})"


# --- plots ---------------------------------------------------------------------------------


def _color(variant: str, index: int) -> str:
    return _VARIANT_COLORS.get(variant, _EXTRA_COLORS[index % len(_EXTRA_COLORS)])


def _save(figure: Figure, path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(figure)  # attach the non-interactive Agg canvas explicitly
    figure.tight_layout()
    # No "Software" text chunk: the PNG bytes then depend on the data, not the version.
    figure.savefig(path, format="png", metadata={"Software": None})


def _draw_plots(
    summary: Mapping[str, VariantSummary], curves: Mapping[str, list[float]], out: Path
) -> tuple[Path, Path]:
    """Draw both PNGs with the Agg backend, without pyplot (no global figure state)."""
    try:
        import matplotlib
    except ImportError as exc:  # find_spec saw it, but it does not import
        raise MissingExtra(_MISSING_PLOTS) from exc

    tokens_png = out / "tokens_by_step.png"
    success_png = out / "success_by_length.png"
    with matplotlib.rc_context(_RC):
        _plot_tokens(curves, tokens_png)
        _plot_success(summary, success_png)
    return tokens_png, success_png


def _plot_tokens(curves: Mapping[str, list[float]], path: Path) -> None:
    """One line per variant: does the prompt grow with the step index?"""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    figure = Figure(figsize=_FIGSIZE)
    axes = figure.add_subplot()
    for index, (variant, curve) in enumerate(curves.items()):
        if curve:
            steps = list(range(1, len(curve) + 1))
            axes.plot(
                steps,
                curve,
                marker="o",
                markersize=3,
                label=variant,
                color=_color(variant, index),
            )
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel("Decision (step index)")
    axes.set_ylabel("Mean prompt tokens")
    axes.set_title("Prompt tokens by step")
    axes.grid(visible=True, alpha=0.3)
    if axes.lines:
        axes.legend(loc="upper left")
    _save(figure, path)


def _plot_success(summary: Mapping[str, VariantSummary], path: Path) -> None:
    """Grouped bars: success rate per length group and variant, ±1 std over seeds."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=_FIGSIZE)
    axes = figure.add_subplot()
    groups = order_groups(group for item in summary.values() for group in item["by_length"])
    width = 0.8 / max(len(summary), 1)
    for index, (variant, item) in enumerate(summary.items()):
        xs: list[float] = []
        heights: list[float] = []
        below: list[float] = []
        above: list[float] = []
        for position, group in enumerate(groups):
            metrics = item["by_length"].get(group)
            stat = metrics["success_rate"] if metrics is not None else None
            if stat is None or stat["mean"] is None:
                continue
            mean, std = stat["mean"], stat["std"] or 0.0
            xs.append(position - 0.4 + width * (index + 0.5))
            heights.append(mean)
            # A rate lives in 0..1: the ±1 std whisker is cut there, not drawn past it.
            below.append(mean - max(mean - std, 0.0))
            above.append(min(mean + std, 1.0) - mean)
        axes.bar(
            xs,
            heights,
            width=width,
            yerr=[below, above],
            capsize=3,
            label=variant,
            color=_color(variant, index),
        )
    axes.set_xticks(list(range(len(groups))), groups)
    axes.set_ylim(0.0, 1.2)
    axes.set_yticks([0.0, 0.2, 0.4, 0.6, 0.8, 1.0])
    axes.set_xlabel("Length group")
    axes.set_ylabel("Success rate (mean ± std over seeds)")
    axes.set_title("Success rate by length group")
    axes.grid(visible=True, axis="y", alpha=0.3)
    if summary:
        axes.legend(loc="upper center", ncols=max(len(summary), 1), frameon=False)
    _save(figure, path)
