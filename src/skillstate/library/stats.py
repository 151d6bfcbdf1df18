"""Each skill's record in a store: verified successes / attempts, read from the events.

The success rate a retriever's ranking uses (seed 004 §6.4: "adjust the ranking by
each skill's historical success rate"). An event of a skill that ran counts its
``attempts`` (every run, retries included) and, when its verdict passed, one
success; a refused decision (unknown skill, ``when`` false, bad params) never ran
and counts nothing.

Cost, per process and store (:func:`success_rates` keeps one per store): the first
refresh reads every task's events once; later refreshes list the heads
(``store.heads()``, one query) and read only the new events of tasks whose version
moved since (``store.events(id, since=...)``), so a finished task is never read
again. A refresh happens at most every ``max_age`` seconds (default 5), from the
decision's view, so the rates a decision sees may be that much behind the store.
Counts are by skill name, across its versions.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from skillstate.errors import StateCorrupted
from skillstate.events import Event
from skillstate.store.base import Store, is_reserved

__all__ = ["SkillRecord", "SuccessRates", "success_rates"]


@dataclass(frozen=True)
class SkillRecord:
    """One skill's record in a store."""

    successes: int = 0
    attempts: int = 0

    @property
    def rate(self) -> float | None:
        """``successes / attempts``; ``None`` for a skill that never ran."""
        return self.successes / self.attempts if self.attempts else None

    @property
    def weight(self) -> float:
        """The rate with one success and one failure added (Laplace): 0.5 for a skill
        that never ran, near 1 or 0 only after many runs. Ranking multiplies by it."""
        return (self.successes + 1) / (self.attempts + 2)


class SuccessRates:
    """The records of every skill in one store, kept up to date incrementally."""

    def __init__(self, store: Store, *, max_age: float = 5.0) -> None:
        self.store = store
        self.max_age = max_age
        """Seconds a refresh is good for (0: every :meth:`refresh` reads the store)."""
        self._read: dict[str, int] = {}
        """Per task: the version its events were read up to."""
        self._counts: dict[str, tuple[int, int]] = {}
        self._refreshed: float | None = None
        self._lock = threading.Lock()
        self.reads = 0
        """``store.events`` calls made so far (what a refresh cost)."""
        self.unreadable = 0
        """Tasks whose events did not read (skipped)."""

    def refresh(self, *, force: bool = False) -> None:
        """Read what the store gained since the last refresh (if ``max_age`` has passed)."""
        with self._lock:
            now = time.monotonic()
            if not force and self._refreshed is not None and now - self._refreshed < self.max_age:
                return
            for head in self.store.heads():
                task_id, version = head.task_id, head.version
                since = self._read.get(task_id, 0)
                if is_reserved(task_id) or version is None or version <= since:
                    continue  # unchanged since it was read: a finished task stays here
                self.reads += 1
                try:
                    events = self.store.events(task_id, since=since)
                except StateCorrupted:
                    self.unreadable += 1
                    events = []
                for event in events:
                    self._count(event)
                self._read[task_id] = max([version, *(e.version for e in events)])
            self._refreshed = time.monotonic()

    def record(self, skill: str) -> SkillRecord:
        successes, attempts = self._counts.get(skill, (0, 0))
        return SkillRecord(successes, attempts)

    def records(self) -> Mapping[str, SkillRecord]:
        """Every skill that ran in the store, by name."""
        with self._lock:
            return {name: SkillRecord(*counts) for name, counts in self._counts.items()}

    def _count(self, event: Event) -> None:
        if event.skill is None or event.verdict is None or event.attempts <= 0:
            return
        successes, attempts = self._counts.get(event.skill, (0, 0))
        self._counts[event.skill] = (successes + int(event.verdict.ok), attempts + event.attempts)


_STORES: dict[int, tuple[Any, SuccessRates]] = {}
_STORES_LOCK = threading.Lock()


def _forget(held: dict[int, Any], key: int) -> Callable[[object], None]:
    """A weakref callback removing ``key`` from ``held`` (bound now: at interpreter exit
    the module's globals may already be gone)."""

    def forget(_: object) -> None:
        held.pop(key, None)

    return forget


def success_rates(store: Store) -> SuccessRates:
    """The process's :class:`SuccessRates` of ``store`` (one per store object)."""
    with _STORES_LOCK:
        found = _STORES.get(id(store))
        if found is not None and found[0]() is store:
            return found[1]
        rates = SuccessRates(store)
        key = id(store)
        try:
            ref: Any = weakref.ref(store, _forget(_STORES, key))
        except TypeError:  # a store that cannot be weakly referenced: kept for the process
            ref = lambda: store  # noqa: E731
        _STORES[key] = (ref, rates)
        return rates
