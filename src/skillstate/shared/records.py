"""What the card keeps of shared records (both runtime-owned fields).

* ``shared_snapshots``: each declared record as the task's views show it, with the
  version it was read at (:class:`SharedSnapshot`). A view is a function of the card
  alone, and a write is a compare-and-set against the version the decision saw.
* ``shared_pending``: a verified step's write, committed with the step and written to
  the record right after (:class:`SharedWrite`). Non-empty on a head only when a crash
  came in between: the runtime settles it (probing the record's audit for the
  write's tag) before anything else is written to the task.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

__all__ = ["SharedSnapshot", "SharedWrite"]


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class SharedSnapshot(_Record):
    """One shared record as this task read it."""

    name: str
    """The record kind, as the agent declares it (``case``)."""
    key: str
    """Its key, filled from the card (``C-17``)."""
    version: int
    """The record's version (0: nobody wrote it yet; the value is the declared default)."""
    value: Any = None
    """The value (JSON, masked like the card)."""
    writer: str | None = None
    """``task@version`` of the write that made this version, ``None`` for version 0."""


class SharedWrite(_Record):
    """A verified step's write to a shared record, waiting to reach it."""

    name: str
    key: str
    base: int
    """The record version the step's decision saw: the compare-and-set expects it."""
    value: Any = None
    """The new value (JSON, validated against the schema, masked like the card)."""
    skill: str
    step: str
    """The step record's id (``0007-add_note``)."""
    version: int
    """The task's version whose commit recorded the write (the step's): a conflict
    restores the card of the version before it."""
    tag: str
    """``task@version`` of the commit that recorded the write: found in the record's
    events, it proves the write landed (a resumed task never writes it twice)."""
