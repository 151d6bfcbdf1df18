"""Evaluation reports (``skillstate eval --out DIR``) as the inspector shows them.

A report directory holds ``report.json`` (every aggregate and every run, see
:mod:`skillstate.eval.report`), ``report.md``, two PNG plots, and under ``runs/``
each run's own store: ``runs/<task>-<variant>-<seed>/run/state.db`` with its
``expected.json`` beside it. The inspector opens those stores read-only, so each
row of the report links to its run's timeline with the first bad step that
``skillstate replay --expect`` names. Only directories the operator named with
``skillstate ui --report`` are read.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skillstate.errors import UsageError
from skillstate.ui.masking import without_paths

__all__ = ["PLOTS", "Report", "RunLink", "load_report", "run_paths"]

PLOTS = ("tokens_by_step.png", "success_by_length.png")
"""The plots a report directory may hold (the only files served from it)."""
RUN_TASK = "task"
"""The task id of every evaluation run in its own store (see the eval runner)."""
_RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,200}")
_METRICS = (
    ("success_rate", "success"),
    ("step_completion", "step completion"),
    ("intermediate_validity", "validity"),
    ("prompt_tokens_per_decision_mean", "prompt tokens / decision"),
    ("prompt_tokens_per_decision_p95", "p95"),
    ("prompt_tokens_total", "prompt tokens total"),
    ("model_calls_mean", "model calls"),
    ("recovery_rate", "recovery"),
)


@dataclass(frozen=True)
class RunLink:
    """One run of the report: its row and, when its store is there, the run's name."""

    row: dict[str, Any]
    run: str
    """``<task>-<variant>-<seed>``: the folder under ``runs/``."""
    stored: bool
    """Its store is in the directory (else only the row is shown)."""


@dataclass(frozen=True)
class Report:
    """One report directory, read."""

    path: Path
    meta: dict[str, Any]
    """model, suite, seeds, command, machine, started_at, duration_s."""
    metrics: list[tuple[str, str]]
    """``(key, label)`` of the variant table's columns."""
    variants: list[tuple[str, dict[str, Any]]]
    runs: list[RunLink]
    plots: list[str]

    def as_json(self) -> dict[str, Any]:
        return {
            "path": without_paths(str(self.path)),
            **self.meta,
            "variants": dict(self.variants),
            "tasks": [{**r.row, "run": r.run, "stored": r.stored} for r in self.runs],
            "plots": self.plots,
        }


def load_report(directory: Path) -> Report:
    """Read ``directory/report.json``; a missing or damaged one is a ``UsageError``."""
    path = directory / "report.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise TypeError("not a JSON object")
        variants = data.get("variants") or {}
        tasks = data.get("tasks") or []
    except (OSError, ValueError, TypeError) as exc:
        # Named by its folder: the server's directories are not the visitor's business.
        raise UsageError(f"cannot read the report {directory.name}/{path.name}: {exc}") from None
    meta_keys = ("model", "suite", "seeds", "command", "machine", "started_at", "duration_s")
    runs = []
    for row in tasks:
        if not isinstance(row, dict):
            continue
        run = f"{row.get('task_id')}-{row.get('variant')}-{row.get('seed')}"
        stored = bool(_RUN_NAME.fullmatch(run)) and (run_paths(directory, run)[0]).is_file()
        runs.append(RunLink(row, run, stored))
    return Report(
        path=directory,
        meta={k: data.get(k) for k in meta_keys},
        metrics=list(_METRICS),
        variants=[(str(k), v) for k, v in variants.items() if isinstance(v, dict)],
        runs=runs,
        plots=[name for name in PLOTS if (directory / name).is_file()],
    )


def run_paths(directory: Path, run: str) -> tuple[Path, Path]:
    """The store file and the expectations of one run of a report directory."""
    if not _RUN_NAME.fullmatch(run) or ".." in run:
        raise UsageError(f"not a run of this report: {run[:80]!r}")
    root = directory / "runs" / run / "run"
    return root / "state.db", root / "expected.json"
