"""The report's recovery section: clean stops, SIGKILLs, rollback after a failed attempt."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from skillstate.eval.markdown import _fmt, _table
from skillstate.eval.metrics import VariantSummary
from skillstate.eval.results import TaskResult

__all__ = ["recovery_section"]


def recovery_section(
    results: Sequence[TaskResult], summary: Mapping[str, VariantSummary]
) -> list[str]:
    """``## Recovery``: one table of every recovery measure, per variant."""
    lines = ["## Recovery", ""]
    interrupted = any(run.recovery for run in results)
    failed_attempts = any(run.bad_steps for run in results)
    faults = any(run.faults for run in results)
    if not (interrupted or failed_attempts or faults):
        return [*lines, "No interrupted runs and no failed attempts in these results.", ""]
    lines += [
        "- **Stopped**: runs stopped cleanly at 25/50/75% of the plan and resumed by a new "
        "runtime; **killed**: runs whose process was SIGKILLed at random instants and "
        "resumed each time by a new process (kills landed / of them with an effect in "
        "flight). Each rate counts only tasks whose uninterrupted run succeeded.",
        "- **Rollback recovery**: of the runs with a failed attempt (a tool error, an "
        "injected bad step, a verify that refused), the fraction that still succeeded "
        "through rollback and retry.",
        "- **Provider faults / run**: timeouts and rate limits a run met and was resumed "
        "from. **Duplicated effects**: effects found more than once after a resume.",
        "",
    ]
    lines += _table(
        [
            "Variant",
            "Stopped (runs)",
            "Stopped recovery",
            "Killed (runs)",
            "Kills (in flight)",
            "Killed recovery",
            "Failed-attempt runs",
            "Rollback recovery",
            "Provider faults / run",
            "Duplicated effects",
        ],
        [
            [
                name,
                str(item["recovery_runs"]),
                _fmt(item["recovery_rate"], 2),
                str(item["kill_runs"]),
                f"{item['kills']} ({item['kills_in_flight']})",
                _fmt(item["kill_recovery_rate"], 2),
                str(item["rollback_runs"]),
                _fmt(item["rollback_recovery_rate"], 2),
                _fmt(item["faults_per_run"], 2),
                _fmt(item["duplicated_effects"], 1),
            ]
            for name, item in summary.items()
        ],
    )
    return lines
