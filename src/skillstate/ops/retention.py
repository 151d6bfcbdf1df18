"""Retention by time (seed 001 §8.4): prune old checkpoints across tasks.

:func:`prune_older_than` drops, per task, the checkpoints committed longer ago than an
age, through :meth:`Store.prune` and its rules: the head is kept, and so is every
snapshot and delta a kept version is rebuilt from; events and inbox stay (they are
the audit trail). Versions are committed in order, so "newer than the age" is the
last *n* versions: the call keeps ``max(n, keep_last)`` of them. Each task's prune
is atomic in the store, so a ``kill -9`` mid-run leaves every task either pruned or
as it was.

Deleting whole finished tasks by age is :mod:`skillstate.ops.delete`
(``skillstate prune --finished-older-than``, which goes through ``delete``).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta, timezone

from skillstate.errors import TaskNotFound, UsageError
from skillstate.ops.delete import Deletion, plan_deletion, select_tasks
from skillstate.store.base import PruneResult, Store, check_task_id

__all__ = ["FINISHED", "keep_count", "plan_finished", "prune_older_than"]

FINISHED = ("completed", "failed", "cancelled")
"""The terminal statuses: a task in one of them is never run again."""


def keep_count(store: Store, task_id: str, cutoff: datetime, keep_last: int) -> int:
    """How many of the newest versions to keep: those committed at or after ``cutoff``,
    at least ``keep_last`` (and at least the head)."""
    infos = store.checkpoints(task_id)
    recent = sum(1 for info in infos if info.created_at >= cutoff)
    return max(recent, keep_last, 1)


def prune_older_than(
    store: Store,
    task_ids: Iterable[str],
    *,
    older_than: timedelta,
    keep_last: int = 1,
    keep_every: int | None = None,
    now: datetime | None = None,
) -> list[PruneResult]:
    """Prune each task's checkpoints older than ``older_than``; one result per task
    that still exists (one deleted meanwhile is skipped)."""
    if older_than <= timedelta(0):
        raise UsageError("--older-than must be a positive duration")
    if keep_last < 1:
        raise UsageError("--keep-last must be at least 1")
    cutoff = (now or datetime.now(timezone.utc)) - older_than
    results = []
    for task_id in task_ids:
        check_task_id(task_id)
        try:
            keep = keep_count(store, task_id, cutoff, keep_last)
            results.append(store.prune(task_id, keep_last=keep, keep_every=keep_every))
        except TaskNotFound:
            continue
    return results


def plan_finished(
    store: Store, older_than: timedelta, *, now: datetime | None = None
) -> tuple[list[Deletion], dict[str, str]]:
    """The deletions of finished tasks last committed longer ago than ``older_than``,
    each with its child tasks, and the tasks left out with why.

    A tree goes only whole: a finished task whose descendants are not all finished and
    that old is left out (a retention run never deletes a task still running)."""
    chosen = {
        t
        for status in FINISHED
        for t in select_tasks(store, status=status, older_than=older_than, now=now)
    }
    plans: dict[str, Deletion] = {}
    skipped: dict[str, str] = {}
    for root in sorted(chosen):
        if root in plans:
            continue
        try:
            tree = plan_deletion(store, [root], children="delete")
        except (UsageError, TaskNotFound) as exc:
            skipped[root] = str(exc)
            continue
        young = [p.task_id for p in tree if p.task_id not in chosen]
        if young:
            skipped[root] = f"its child task {young[0]!r} is not finished, or not that old"
            continue
        for plan in tree:
            plans.setdefault(plan.task_id, plan)
    return list(plans.values()), skipped
