"""Write a forced-mode evaluation as ``report.json``, ``report.md`` and two PNG plots.

``report.json`` holds every aggregate of :func:`~skillstate.eval.forced_metrics.summarize_forced`
and every scored decision, so each number in the Markdown can be recomputed from it.
The plots: exact accuracy by decision index and by prompt length, per variant, with
the 95% Wilson interval. Shares the end-to-end report's formatting and plot style.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

from skillstate.errors import MissingExtra
from skillstate.eval.forced import ForcedRun
from skillstate.eval.forced_metrics import (
    EARLY_K,
    WINDOWS,
    AccuracySummary,
    LengthPoint,
    Rate,
    StepPoint,
    summarize_forced,
)
from skillstate.eval.markdown import _code, _table
from skillstate.eval.report import (
    _FIGSIZE,
    _MISSING_PLOTS,
    _RC,
    _SCRIPTED,
    _color,
    _machine_text,
    _save,
)
from skillstate.state.redact import RedactionPolicy

__all__ = ["ForcedReportPaths", "write_forced_report"]

STEP_COLUMNS = (1, 3, 5, 10, 20, 30, 40, 60)
INTERVAL = "95% Wilson score interval over every (task, seed) decision at that point, pooled"


class ForcedReportPaths(NamedTuple):
    json: Path
    markdown: Path
    accuracy_by_step: Path | None
    accuracy_by_length: Path | None


def write_forced_report(
    runs: Sequence[ForcedRun],
    out_dir: str | os.PathLike[str],
    *,
    model: str,
    suite: str,
    seeds: Sequence[int],
    command: str,
    started_at: datetime,
    duration_s: float,
    machine: str | Mapping[str, Any],
    settings: Mapping[str, Any],
    plots: bool = True,
) -> ForcedReportPaths:
    """Write the forced-mode report into ``out_dir`` (JSON and Markdown before the plots)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    decisions = [d for run in runs for d in run.decisions]
    summary = summarize_forced(decisions)
    draw = plots and importlib.util.find_spec("matplotlib") is not None
    redactor = RedactionPolicy().redactor()
    document = {
        "mode": "forced",
        "model": model,
        "suite": suite,
        "seeds": [int(s) for s in seeds],
        "command": command,
        "machine": machine if isinstance(machine, str) else dict(machine),
        "started_at": started_at.isoformat(),
        "duration_s": float(duration_s),
        "settings": dict(settings),
        "interval": INTERVAL,
        "early_k": EARLY_K,
        "variants": summary,
        "runs": [run.as_json() for run in runs],
    }
    json_path = out / "report.json"
    json_path.write_text(
        json.dumps(redactor.json(document), indent=2, ensure_ascii=False, allow_nan=False) + "\n",
        encoding="utf-8",
    )
    md_path = out / "report.md"
    text = _markdown(runs, summary, document, with_plots=draw)
    md_path.write_text(redactor.text(text), encoding="utf-8")
    if not plots:
        return ForcedReportPaths(json_path, md_path, None, None)
    if not draw:
        raise MissingExtra(f"{_MISSING_PLOTS} (report.json and report.md were written to {out})")
    import matplotlib

    by_step, by_length = out / "accuracy_by_step.png", out / "accuracy_by_prompt_length.png"
    with matplotlib.rc_context(_RC):
        _plot(summary, by_step, by_length)
    return ForcedReportPaths(json_path, md_path, by_step, by_length)


def _points(early: Rate, late: Rate) -> str:
    """``late - early`` in percentage points, or a dash when either has no decision."""
    if early["rate"] is None or late["rate"] is None:
        return "—"
    return f"{(late['rate'] - early['rate']) * 100:+.1f}"


def _rate(rate: Rate) -> str:
    if rate["rate"] is None or rate["low"] is None or rate["high"] is None:
        return "—"
    return f"{rate['rate']:.2f} [{rate['low']:.2f}, {rate['high']:.2f}] (n={rate['n']})"


def _markdown(
    runs: Sequence[ForcedRun],
    summary: Mapping[str, AccuracySummary],
    document: Mapping[str, Any],
    *,
    with_plots: bool,
) -> str:
    model = str(document["model"])
    lines = [
        f"# skillstate forced-mode evaluation: {document['suite']}",
        "",
        f"- Model: {_code(model)}",
        f"- Suite: {_code(str(document['suite']))}",
        f"- Seeds: {', '.join(str(s) for s in document['seeds'])}",
        f"- Command: {_code(str(document['command']))}",
        f"- Machine: {_machine_text(document['machine'])}",
        f"- Started: {document['started_at']}",
        f"- Duration: {document['duration_s']:.1f} s",
        f"- Settings: {', '.join(f'{k}={v}' for k, v in document['settings'].items())}",
        "",
    ]
    if _SCRIPTED.search(model):
        lines += [
            f"> **Scripted model.** {_code(model)} answers from the reference: these numbers "
            "check the harness (every accuracy should be 1.00), not any language model.",
            "",
        ]
    broken = [r for r in runs if not r.reference_ok]
    if broken:
        lines += [
            f"> **{len(broken)} reference run(s) failed** (e.g. {broken[0].task_id} "
            f"{broken[0].variant}: {broken[0].reference_failure}); their decisions are "
            "still scored.",
            "",
        ]
    lines += [
        "Teacher forcing: at each decision k of the reference run (the oracle's), each "
        "variant's prompt is built as the live run would build it after the reference's "
        "first k-1 decisions; the model answers once (with the usual repairs) and is "
        "scored; the reference decision is then played. *valid*: parses as an allowed "
        "decision; *skill*: same skill/tool; *exact*: same skill and parameters. "
        f"Intervals: {INTERVAL}. Drop k: first k whose accuracy is below half the "
        f"accuracy pooled over k ≤ {EARLY_K}.",
        "",
        "## Overall",
        "",
    ]
    lines += _table(
        ["Variant", "Decisions", "Valid", "Skill", "Exact", f"Exact, k ≤ {EARLY_K}", "Drop k"],
        [
            [
                name,
                str(item["decisions"]),
                _rate(item["overall"]["valid"]),
                _rate(item["overall"]["skill"]),
                _rate(item["overall"]["exact"]),
                _rate(item["early"]["exact"]),
                " / ".join(str(item["drop_k"][a] or "—") for a in ("valid", "skill", "exact")),
            ]
            for name, item in summary.items()
        ],
    )
    lines += ["Drop k is given as valid / skill / exact (— : no drop).", ""]
    lines += ["## Exact accuracy by window of decisions", ""]
    names = [f"{low}-{high}" for low, high in WINDOWS]
    lines += _table(
        ["Variant", *(f"k {n}" for n in names), "Late − early (points)"],
        [
            [
                name,
                *(_rate(item["windows"][n]["exact"]) for n in names),
                _points(item["windows"][names[0]]["exact"], item["windows"][names[-1]]["exact"]),
            ]
            for name, item in summary.items()
        ],
    )
    lines += ["## Exact accuracy by decision index", ""]
    longest = max((p["k"] for item in summary.values() for p in item["by_step"]), default=0)
    columns = [k for k in STEP_COLUMNS if k <= longest]
    lines += _table(
        ["Variant", *(f"k = {k}" for k in columns)],
        [[name, *(_at(item["by_step"], k) for k in columns)] for name, item in summary.items()],
    )
    lines += ["## Exact accuracy by prompt length (tokens)", ""]
    lines += _table(
        ["Variant", "Prompt tokens", "Exact"],
        [
            [name, f"{p['low']:,}–{p['high']:,}", _rate(p["exact"])]
            for name, item in summary.items()
            for p in item["by_length"]
        ],
    )
    if with_plots:
        lines += [
            "![exact accuracy by step](accuracy_by_step.png)",
            "",
            "![exact accuracy by prompt length](accuracy_by_prompt_length.png)",
            "",
        ]
    return "\n".join(lines)


def _at(points: Sequence[StepPoint], k: int) -> str:
    found = [p for p in points if p["k"] == k]
    return _rate(found[0]["exact"]) if found else "—"


def _series(
    points: Sequence[StepPoint] | Sequence[LengthPoint], x: str
) -> tuple[list[float], list[float], list[float], list[float]]:
    xs: list[float] = []
    ys: list[float] = []
    lows: list[float] = []
    highs: list[float] = []
    for point in points:
        rate: Rate = point["exact"]
        position = point.get(x)
        if rate["rate"] is None or rate["low"] is None or rate["high"] is None:
            continue
        if not isinstance(position, int | float):
            continue
        xs.append(float(position))
        ys.append(rate["rate"])
        lows.append(rate["low"])
        highs.append(rate["high"])
    return xs, ys, lows, highs


def _plot(summary: Mapping[str, AccuracySummary], by_step: Path, by_length: Path) -> None:
    """Exact accuracy with its Wilson band, per variant: by k, and by prompt length."""
    from matplotlib.figure import Figure

    for path, key, x, label, log in (
        (by_step, "by_step", "k", "Decision index k", False),
        (by_length, "by_length", "prompt_tokens_mean", "Prompt tokens (bin mean)", True),
    ):
        figure = Figure(figsize=_FIGSIZE)
        axes = figure.add_subplot()
        for index, (variant, item) in enumerate(summary.items()):
            points: Any = item[key]  # type: ignore[literal-required]
            xs, ys, lows, highs = _series(points, x)
            if not xs:
                continue
            color = _color(variant, index)
            axes.plot(xs, ys, marker="o", markersize=3, label=variant, color=color)
            axes.fill_between(xs, lows, highs, color=color, alpha=0.15)
        if log:
            axes.set_xscale("log", base=2)
        axes.set_ylim(-0.05, 1.05)
        axes.set_xlabel(label)
        axes.set_ylabel("Exact accuracy (95% Wilson)")
        axes.set_title(f"Teacher-forced accuracy by {'prompt length' if log else 'step'}")
        axes.grid(visible=True, alpha=0.3)
        if axes.lines:
            axes.legend(loc="lower left")
        _save(figure, path)
