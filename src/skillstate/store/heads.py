"""Building :class:`~skillstate.store.base.HeadInfo` rows for :meth:`Store.heads`.

Every backend reads its heads and leases in bulk its own way (one query, a
pipeline, a directory scan); what it read goes through :func:`head_info`, so that
every backend lists the same fields the same way, damaged records included: a
head or lease that does not read becomes a ``problem``, never an exception.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from skillstate._json import get_path
from skillstate.errors import StateCorrupted
from skillstate.store.base import HeadInfo, Lease
from skillstate.store.chain import held_lease, load_document, salvage_lease

__all__ = ["SUMMARY_PATHS", "head_info", "summary_field"]

SUMMARY_PATHS = (
    "status",
    "current_step",
    "agent",
    "steps_taken",
    "usage.prompt",
    "usage.completion",
    "wait.deadline",
    "parent.task_id",
)
"""The card values :meth:`Store.heads` reports (dotted paths), in the order backends
extract them."""


def summary_field(value: Any) -> str | None:
    """A card field as :class:`HeadInfo` holds it: text as it is, other JSON as JSON text."""
    if value is None or isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        return repr(value)


def head_info(
    task_id: str,
    version: Any,
    head: str | bytes | Mapping[str, Any] | None,
    updated_at: datetime | Callable[[], datetime] | None,
    lease: tuple[Any, Any, Any] | None = None,
    *,
    fields: Sequence[Any] | None = None,
    problem: str | None = None,
    lease_problem: str | None = None,
) -> HeadInfo:
    """One task's :class:`HeadInfo` from what its backend stored.

    ``version`` is the stored version as read; ``head`` the head document (JSON text,
    or an object the backend parsed already), unless the backend extracted
    ``fields`` (the values of :data:`SUMMARY_PATHS`) itself; ``updated_at`` the commit
    time, or a function reading it that raises ``StateCorrupted``; ``lease`` the
    stored lease record ``(worker, expires, generation)`` (``None``: the task has
    none); ``problem`` and ``lease_problem`` damage the backend found itself.
    """
    number = version if isinstance(version, int) and not isinstance(version, bool) else None
    if number is None and problem is None:
        problem = f"its version {version!r} is not a number"
    when: datetime | None = None
    try:
        when = updated_at() if callable(updated_at) else updated_at
    except StateCorrupted as exc:
        problem = problem or exc.reason
    values: Sequence[Any] = (None,) * len(SUMMARY_PATHS)
    if fields is not None:
        values = fields
    elif problem is None or head is not None:
        try:
            if head is None:
                raise StateCorrupted(task_id, number, "the task record has no head")
            document = head if isinstance(head, Mapping) else load_document(task_id, number, head)
            if not isinstance(document, Mapping):
                raise StateCorrupted(task_id, number, "stored state is not a JSON object")
            values = [get_path(document, path) for path in SUMMARY_PATHS]
        except StateCorrupted as exc:
            problem = problem or exc.reason
    held, unreadable = _lease(task_id, lease)
    lease_problem = lease_problem or unreadable
    status, step, agent = (summary_field(v) for v in values[:3])
    steps, prompt, completion = (_count(v) for v in values[3:6])
    wait_until = _moment(values[6]) if len(values) > 6 else None
    parent = values[7] if len(values) > 7 and isinstance(values[7], str) else None
    return HeadInfo(
        task_id=task_id,
        version=number,
        updated_at=when,
        status=status,
        current_step=step,
        agent=agent,
        steps=steps,
        tokens=None if prompt is None and completion is None else (prompt or 0) + (completion or 0),
        lease=held,
        wait_until=wait_until,
        parent=parent,
        problem=_one_line(problem),
        lease_problem=_one_line(lease_problem),
    )


def _count(value: Any) -> int | None:
    """A stored count: an integer (not a bool), else ``None``."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _moment(value: Any) -> datetime | None:
    """A stored ISO 8601 time as an aware UTC datetime, else ``None``."""
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment.astimezone(timezone.utc) if moment.utcoffset() is not None else None


def _lease(task_id: str, record: tuple[Any, Any, Any] | None) -> tuple[Lease | None, str | None]:
    """The held lease of a stored record (or what salvages of it), and why it does not read."""
    if record is None:
        return None, None
    worker, expires, generation = record
    try:
        return held_lease(task_id, worker, expires, generation)[0], None
    except StateCorrupted as exc:
        if worker is None:
            return None, exc.reason
        return salvage_lease(task_id, worker, expires, generation), exc.reason


def _one_line(text: str | None) -> str | None:
    return " ".join(text.split()) if text is not None else None
