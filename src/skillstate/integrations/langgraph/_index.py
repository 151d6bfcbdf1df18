"""Which version of a task holds which LangGraph checkpoint, read from its audit log.

Every commit the saver makes carries an event whose ``action`` says what it did
(``langgraph.put`` of a checkpoint id, ``langgraph.writes`` to one, a reset or a
deletion). Folding those actions gives, per checkpoint id, the version that holds
the checkpoint and the last version that changed its pending writes, without
reading any state. The fold is incremental (``events(task, since=...)``), so a
saver that keeps its index pays for the events it has not seen yet, nothing more.
The head is never looked up here: it is loaded directly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from skillstate.store.base import Store

__all__ = ["DELETE", "DELETE_THREAD", "PUT", "RESET", "WRITES", "Index"]

PUT = "langgraph.put"
WRITES = "langgraph.writes"
RESET = "langgraph.reset"
"""Every checkpoint but ``checkpoint_id`` is gone (``prune(strategy="keep_latest")``)."""
DELETE = "langgraph.delete"
"""The ``checkpoint_ids`` are gone (``delete_for_runs``); ``checkpoint_id`` was restored."""
DELETE_THREAD = "langgraph.delete_thread"
"""Every checkpoint is gone."""


@dataclass
class Index:
    """Checkpoint id -> versions, for one task."""

    seen: int = 0
    """The last version folded in."""
    puts: dict[str, int] = field(default_factory=dict)
    """The version holding each checkpoint (the latest put of it)."""
    writes: dict[str, int] = field(default_factory=dict)
    """The last version that changed each checkpoint's writes, when after its put."""
    runs: dict[str, str] = field(default_factory=dict)
    """The run that made each checkpoint (its metadata's ``run_id``), when known."""

    def apply(self, version: int, action: Mapping[str, Any]) -> None:
        kind, cid = action.get("kind"), action.get("checkpoint_id")
        if kind in (RESET, DELETE_THREAD):
            self.puts.clear()
            self.writes.clear()
            self.runs.clear()
        elif kind == DELETE:
            for gone in action.get("checkpoint_ids") or ():
                self.puts.pop(gone, None)
                self.writes.pop(gone, None)
                self.runs.pop(gone, None)
        if isinstance(cid, str):
            if kind == WRITES:
                self.writes[cid] = version
            elif kind in (PUT, RESET, DELETE):
                # A reset or a restore writes the checkpoint again, with its writes.
                self.puts[cid] = version
                self.writes.pop(cid, None)
                run = action.get("run_id")
                if isinstance(run, str):
                    self.runs[cid] = run
        self.seen = max(self.seen, version)

    def refresh(self, store: Store, task_id: str) -> None:
        """Fold in the events committed since the last refresh (by anyone).

        The last event already folded in is asked for again: a store answers an empty
        range by loading the task's head to tell "no new events" from "no task", and
        the head can be far larger than one event (a growing transcript)."""
        events = store.events(task_id, since=max(0, self.seen - 1))
        if self.seen and (not events or events[0].version != self.seen):
            # The version folded in last is gone: the task was deleted and made again.
            self.seen = 0
            self.puts.clear()
            self.writes.clear()
            self.runs.clear()
            events = store.events(task_id)
        for event in events:
            if event.version > self.seen:
                self.apply(event.version, event.action)

    def writes_version(self, cid: str) -> int | None:
        """The version whose document holds ``cid``'s complete pending writes."""
        put = self.puts.get(cid)
        if put is None:
            return None
        return max(put, self.writes.get(cid, 0))

    def newest_first(self) -> list[str]:
        """Every live checkpoint id, newest first (ids sort as they were made)."""
        return sorted(self.puts, reverse=True)
