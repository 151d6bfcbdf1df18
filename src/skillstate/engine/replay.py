"""Replaying a task's history: each step with the state before and after it.

Built from the store alone (events and kept checkpoints), so it works for any task
in any backend, after the fact. The first step that went wrong is the first whose
verify failed or that logged an error; the evaluation harness refines this with a
task's expected intermediate facts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from skillstate.errors import StoreError
from skillstate.store.base import Store

__all__ = ["Step", "timeline"]


@dataclass(frozen=True)
class Step:
    version: int
    actor: str
    label: str
    verdict: str | None
    error: str | None
    changes: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    """Top-level fields that changed: ``name -> (before, after)``."""

    def as_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "actor": self.actor,
            "label": self.label,
            "verdict": self.verdict,
            "error": self.error,
            "changes": {k: {"before": b, "after": a} for k, (b, a) in self.changes.items()},
        }


def timeline(store: Store, task_id: str) -> tuple[list[Step], int | None]:
    """Every committed step, and the version of the first bad one (``None``: none)."""
    kept = {info.version for info in store.checkpoints(task_id)}
    previous: dict[str, Any] = {}
    steps: list[Step] = []
    first_bad: int | None = None
    for event in store.events(task_id):
        after: dict[str, Any] = {}
        if event.version in kept:
            try:
                after = store.checkpoint(task_id, event.version).state
            except StoreError:
                after = {}
        changes = {
            key: (previous.get(key), after.get(key))
            for key in sorted(set(previous) | set(after))
            if previous.get(key) != after.get(key) and key != "version"
        }
        verdict = None
        if event.verdict is not None:
            verdict = "ok" if event.verdict.ok else f"failed: {event.verdict.reason}"
        steps.append(Step(event.version, event.actor, event.label, verdict, event.error, changes))
        failed = event.error or (event.verdict is not None and not event.verdict.ok)
        if first_bad is None and failed and event.action.get("kind") != "budget":
            first_bad = event.version
        previous = after or previous
    return steps, first_bad
