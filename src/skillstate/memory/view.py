"""How a view shows the facts it recalled from other tasks.

The section is rendered from the card's ``recalled`` snapshot alone (so a view stays a
function of the card), the most recently written fact first, each with its scope and
provenance: the task, the version whose verified step wrote it, and the skill::

    Memory (from other tasks; verified there, may be out of date):
    - preferred_carrier: "DHL" [agent:orders; order-17@9 by record_carrier]

Under a view budget the section's lines go after the evidence summaries and before
the task's own failed attempts, steps and facts (priority 15,
:mod:`skillstate.state.budget`), the least recent first; the goal and the constraints
are never hidden.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

__all__ = ["HEADER", "memory_section", "recalled_lines"]

HEADER = "Memory (from other tasks; verified there, may be out of date):"


def recalled_lines(state: Any, value_chars: int) -> list[str]:
    """One line per recalled fact of the card ``state``, the most recent first."""
    lines = []
    for fact in getattr(state, "recalled", ()):
        text = json.dumps(fact.value, ensure_ascii=False, default=str)
        if len(text) > value_chars:
            text = text[: value_chars - 1] + "…"
        ref = f", {fact.artifact[:19]}" if fact.artifact else ""
        lines.append(f"- {fact.key}: {text} [{fact.scope}; {fact.provenance} by {fact.skill}{ref}]")
    return lines


def memory_section(lines: Sequence[str], hidden: int) -> list[str]:
    """The section (nothing when there is no fact); ``hidden``: lines the budget hid."""
    if not lines and not hidden:
        return []
    more = [f"- ({hidden} more hidden by the view budget)"] if hidden else []
    return [HEADER, *lines, *more]
