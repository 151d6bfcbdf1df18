"""What the spot-checks say about verify: eval-style metrics with honest intervals.

The one number is ``verify_precision``: of the marked verified steps a person judged,
the share judged correct, ``correct / (correct + incorrect)``. ``unsure`` verdicts are
counted but left out of it (a person who could not tell judged nothing). Each rate is a
:class:`~skillstate.eval.forced_metrics.Rate` (``hits``, ``n``, ``rate`` and its 95%
Wilson score interval), the shape the evaluation reports use, so a run of 12 reviews
says how little it knows. A step reviewed more than once counts once, with its latest
verdict; steps whose reviewers disagree are counted in ``disagreements``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypedDict

from skillstate.eval.forced_metrics import Rate, wilson

if TYPE_CHECKING:
    from skillstate.ops.review import Review
    from skillstate.ops.spotchecks import SampledStep

__all__ = ["INTERVAL", "SpotCheckGroup", "SpotCheckReport", "spot_check_report"]

INTERVAL = "95% Wilson score interval over the reviewed steps"


class SpotCheckGroup(TypedDict):
    """The counts and the precision of one group of marked steps."""

    sampled: int
    """Marked steps (reviewed or not)."""
    reviewed: int
    """Marked steps with at least one verdict."""
    correct: int
    incorrect: int
    unsure: int
    disagreements: int
    """Reviewed steps whose reviewers gave different verdicts."""
    verify_precision: Rate
    """``correct`` of ``correct + incorrect``, with its Wilson interval."""
    review_coverage: Rate
    """``reviewed`` of ``sampled``."""


class SpotCheckReport(TypedDict):
    overall: SpotCheckGroup
    by_skill: dict[str, SpotCheckGroup]
    by_agent: dict[str, SpotCheckGroup]
    """By review scope: the agent reference the tasks' cards name."""
    interval: str


def spot_check_report(rows: Sequence[tuple[SampledStep, Sequence[Review]]]) -> SpotCheckReport:
    """The metrics of ``rows`` (:func:`skillstate.ops.review.spot_check_queue`)."""
    by_skill: dict[str, list[tuple[SampledStep, Sequence[Review]]]] = {}
    by_agent: dict[str, list[tuple[SampledStep, Sequence[Review]]]] = {}
    for row in rows:
        by_skill.setdefault(row[0].skill, []).append(row)
        by_agent.setdefault(row[0].scope, []).append(row)
    return SpotCheckReport(
        overall=_group(rows),
        by_skill={k: _group(v) for k, v in sorted(by_skill.items())},
        by_agent={k: _group(v) for k, v in sorted(by_agent.items())},
        interval=INTERVAL,
    )


def _group(rows: Sequence[tuple[Any, Sequence[Review]]]) -> SpotCheckGroup:
    counts = {"correct": 0, "incorrect": 0, "unsure": 0}
    reviewed = disagreements = 0
    for _, reviews in rows:
        if not reviews:
            continue
        reviewed += 1
        latest = max(reviews, key=lambda r: r.seq)
        counts[latest.verdict] += 1
        disagreements += len({r.verdict for r in reviews}) > 1
    judged = counts["correct"] + counts["incorrect"]
    return SpotCheckGroup(
        sampled=len(rows),
        reviewed=reviewed,
        correct=counts["correct"],
        incorrect=counts["incorrect"],
        unsure=counts["unsure"],
        disagreements=disagreements,
        verify_precision=wilson(counts["correct"], judged),
        review_coverage=wilson(reviewed, len(rows)),
    )
