"""A task's full step history, read from its event log.

The card keeps only the most recent step records (``AgentState.MAX_STEPS``): what
a decision needs. Every record is also in the event that committed it, as the
patch that added it, so the whole history stays one read away without the card
(or the cost of a step) growing with the task.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from skillstate.events import Event
from skillstate.state.model import StepRecord
from skillstate.store.base import Store

__all__ = ["find_step", "step_records"]

_PATH = "/completed_steps"


def step_records(events: Iterable[Event]) -> Iterator[StepRecord]:
    """Every step record the events committed, in commit order."""
    for event in events:
        for op in event.patch:
            record = _added(event, op)
            if record is not None:
                yield record


def find_step(store: Store, task_id: str, step_id: str) -> StepRecord | None:
    """The record of step ``step_id`` of a task, from its event log (``None``: no such step)."""
    for record in step_records(e for e in store.events(task_id) if e.step_id == step_id):
        if record.id == step_id:
            return record
    return None


def _added(event: Event, op: dict[str, Any]) -> StepRecord | None:
    path, kind, value = op.get("path"), op.get("op"), op.get("value")
    if kind == "add" and path == f"{_PATH}/-" and isinstance(value, dict):
        return StepRecord.model_validate(value)
    if kind in {"add", "replace"} and path == _PATH and isinstance(value, list):
        # The list was rewritten (a stale step removed, an old event): the step this
        # event committed is the record carrying its step id.
        for item in reversed(value):
            if isinstance(item, dict) and event.step_id and item.get("id") == event.step_id:
                return StepRecord.model_validate(item)
    return None
