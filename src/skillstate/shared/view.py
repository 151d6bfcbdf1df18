"""How a view shows the shared records: a section per record, from the card's snapshot.

Rendered from ``shared_snapshots`` alone (a view stays a function of the card)::

    Shared: case (v3, key C-17; other tasks write it too)
    - notes: ["refund approved", "carrier called"]
    - owner: "ana"

Under a view budget the field lines go after the completed steps and before the
task's own facts (priority 35, :mod:`skillstate.state.budget`), the last field first;
the header stays, with a marker of how many lines were hidden.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, NamedTuple

__all__ = ["SharedLine", "shared_lines", "shared_section"]


class SharedLine(NamedTuple):
    """One field line of a record's section."""

    record: int
    """Which snapshot (its index in the card's ``shared_snapshots``)."""
    text: str


def shared_lines(state: Any, value_chars: int) -> list[SharedLine]:
    """One line per top-level field of each shared record the card holds."""
    lines: list[SharedLine] = []
    for i, snap in enumerate(getattr(state, "shared_snapshots", ())):
        value = snap.value
        items = value.items() if isinstance(value, dict) else [("value", value)]
        for name, item in items:
            text = json.dumps(item, ensure_ascii=False, default=str)
            if len(text) > value_chars:
                text = text[: value_chars - 1] + "…"
            lines.append(SharedLine(i, f"- {name}: {text}"))
    return lines


def shared_section(
    state: Any, lines: Sequence[SharedLine], kept: Sequence[SharedLine] | None = None
) -> list[str]:
    """The card's record sections: ``lines`` from :func:`shared_lines`, of which the view
    budget ``kept`` these (``None``: all); a hidden line leaves a marker."""
    shown = lines if kept is None else kept
    out: list[str] = []
    for i, snap in enumerate(getattr(state, "shared_snapshots", ())):
        out.append(
            f"Shared: {snap.name} (v{snap.version}, key {snap.key}; other tasks write it too)"
        )
        mine = [line.text for line in shown if line.record == i]
        out += mine
        hidden = sum(line.record == i for line in lines) - len(mine)
        if hidden > 0:
            out.append(f"- ({hidden} more hidden by the view budget)")
    return out
