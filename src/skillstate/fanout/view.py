"""How a parent's view shows its children: the "Children" section.

Rendered from the card's ``children`` alone (a view stays a function of the card),
oldest first, one line each: the kind, the key, how it stands and what it returned
or why it failed, so the next decision can join, retry (``Spawn`` the same key
again), skip or fail::

    Children (tasks this task spawned):
    - channel email [completed]: email: score 5 -> {"channel": "email", "score": 5}
    - channel bad1 [failed]: channel 'bad1' could not be analysed

Under a view budget the lines go after the task's facts and before its typed fields
(priority 45, :mod:`skillstate.state.budget`), the oldest first.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

__all__ = ["HEADER", "children_lines", "children_section"]

HEADER = "Children (tasks this task spawned):"


def children_lines(state: Any, value_chars: int) -> list[str]:
    """One line per child record of the card ``state``, oldest first."""
    lines = []
    for record in getattr(state, "children", ()):
        text = record.error if record.status in ("failed", "cancelled") else record.summary
        if record.status == "completed" and record.outputs is not None:
            outputs = json.dumps(record.outputs, ensure_ascii=False, default=str)
            text = f"{text} -> {outputs}" if text else outputs
        text = text or ""
        if len(text) > value_chars:
            text = text[: value_chars - 1] + "…"
        tail = f": {text}" if text else ""
        lines.append(f"- {record.name} {record.key} [{record.status}]{tail}")
    return lines


def children_section(lines: Sequence[str], hidden: int) -> list[str]:
    """The section (nothing for a task with no children); ``hidden``: lines the budget hid."""
    if not lines and not hidden:
        return []
    more = [f"- ({hidden} earlier children hidden by the view budget)"] if hidden else []
    return [HEADER, *more, *lines]
