"""Celery beat over the store's schedules: ``skillstate beat``.

Celery beat does the ticking (its loop, its heap of due entries, ``crontab``); this
module gives it a scheduler whose entries are the store's schedules
(:mod:`skillstate.control.schedule_registry`, read again every ``refresh`` seconds,
so a schedule added or removed on any machine is picked up without a restart) and
whose "send the due task" creates the tick's skillstate task and enqueues it
(:func:`skillstate.control.ticks.fire`).

What survives a restart is in the store, not in a ``celerybeat-schedule`` file:
each entry starts from its schedule's creation time, so a beat (re)started after a
tick it missed runs that tick once, at once: Celery's catch-up, limited to the most
recent missed tick (the slot of "now"). A tick that ran already finds its task and
does nothing, so restarts, catch-ups and even a second beat never make a tick's task
twice. Ticks missed before the most recent one are not run.

A tick is created and sent under SIGTERM and SIGINT held back: beat stopped the
polite way (``kill``, Ctrl-C, a supervisor's stop) finishes the tick in hand and
exits after it, never between "created" and "sent", where the task would wait
for a worker's sweeper (``--sweep-after``, ten minutes by default).

Celery is imported here and in :mod:`skillstate.workers.celery_app` only.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from skillstate.control.schedule_registry import load_registry
from skillstate.control.schedules import Schedule, parse_cron
from skillstate.control.ticks import fire
from skillstate.errors import AgentNotAllowed, MissingExtra, UsageError
from skillstate.store.base import Store
from skillstate.workers.settings import Message

try:
    from celery import Celery
    from celery.beat import ScheduleEntry, Scheduler
    from celery.schedules import schedstate, schedule
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise MissingExtra("skillstate beat needs Celery: pip install 'skillstate[celery]'") from exc

__all__ = ["TICK", "Every", "StoreScheduler", "run_beat"]

TICK = "skillstate.schedule_tick"
"""The name beat's entries carry (a label in beat's log: no Celery task by that name
is ever sent; a tick enqueues ``skillstate.advance`` for the task it creates)."""

log = logging.getLogger("skillstate.schedules")


class Every(schedule):  # type: ignore[misc]  # celery ships no type hints
    """Every ``seconds``, on the Unix-epoch grid (``every=60``: each minute at :00).

    Celery's own ``schedule`` counts from the last run, so a late run shifts every
    later one; aligned ticks keep each tick's slot, and so its task id, the same for
    every beat that fires it."""

    def __init__(self, seconds: int, nowfun: Callable[[], datetime] | None = None) -> None:
        super().__init__(run_every=timedelta(seconds=seconds), nowfun=nowfun)
        self.step = seconds

    def _slot(self, when: datetime) -> int:
        return int(self.maybe_make_aware(when).timestamp() // self.step)

    def remaining_estimate(self, last_run_at: datetime) -> timedelta:
        now = self.maybe_make_aware(self.now()).timestamp()
        return timedelta(seconds=(self._slot(last_run_at) + 1) * self.step - now)

    def is_due(self, last_run_at: datetime) -> Any:
        now = self.maybe_make_aware(self.now())
        wait = (self._slot(now) + 1) * self.step - now.timestamp()
        return schedstate(self._slot(now) > self._slot(last_run_at), wait)

    def __reduce__(self) -> Any:
        return self.__class__, (self.step, self.nowfun)


class StoreScheduler(Scheduler):  # type: ignore[misc]  # celery ships no type hints
    """A Celery beat scheduler whose entries are the store's schedules.

    ``allowed`` says which agent references this beat may import (a schedule's agent
    is data in the store, as a card's is); ``send`` enqueues a message; ``clock``
    replaces Celery's ``app.now`` (tests drive beat's ticks with it)."""

    data: dict[str, ScheduleEntry]

    def __init__(
        self,
        *args: Any,
        store: Store,
        allowed: Callable[[str], bool],
        send: Callable[[Message], None],
        refresh: float = 10.0,
        clock: Callable[[], datetime] | None = None,
        **kwargs: Any,
    ) -> None:
        self.store = store
        self.allowed = allowed
        self.send = send
        self.refresh = refresh
        self.clock = clock
        self.schedules: dict[str, Schedule] = {}
        self.version: int | None = None
        """The registry version the entries were built from (``None``: never read)."""
        self._read_at = float("-inf")
        self._agents: dict[str, Any] = {}
        super().__init__(*args, **kwargs)

    # -------------------------------------------------------------- the entries

    def setup_schedule(self) -> None:
        # No default entries (Celery's backend cleanup): only the store's schedules.
        self.reload(force=True)

    def get_schedule(self) -> dict[str, ScheduleEntry]:
        self.reload()
        return self.data

    schedule = property(get_schedule, Scheduler.set_schedule)

    def reload(self, *, force: bool = False) -> None:
        """Read the registry again if ``refresh`` seconds have passed (or ``force``).

        An entry whose schedule did not change keeps its place (its last run); an
        unreadable store keeps the entries as they were, with a warning."""
        if not force and time.monotonic() - self._read_at < self.refresh:
            return
        self._read_at = time.monotonic()
        try:
            registry = load_registry(self.store)
        except Exception as exc:  # the store is down or the record damaged: keep ticking
            log.warning("beat: could not read the schedules (%s); keeping the ones known", exc)
            return
        if registry.version == self.version:
            return
        entries: dict[str, ScheduleEntry] = {}
        for name, item in registry.schedules.items():
            entry = self._entry(item)
            known = self.data.get(name)
            entries[name] = known if known is not None and known == entry else entry
        added = sorted(entries.keys() - self.data.keys())
        removed = sorted(self.data.keys() - entries.keys())
        self.data, self.schedules, self.version = (
            entries,
            dict(registry.schedules),
            registry.version,
        )
        for name in added:
            log.info("beat: schedule %s: %s", name, self.schedules[name].spec)
        for name in removed:
            log.info("beat: schedule %s removed", name)

    def _entry(self, item: Schedule) -> ScheduleEntry:
        if item.every is not None:
            clock: Any = Every(item.every, nowfun=self.clock)
        else:
            clock = parse_cron(str(item.cron))
            clock.nowfun = self.clock
        # The fingerprint makes a schedule removed and added again (other fields, same
        # clock) a new entry rather than the old one with its last run.
        body = json.dumps(item.model_dump(mode="json"), sort_keys=True).encode()
        return self.Entry(
            name=item.name,
            task=TICK,
            schedule=clock,
            args=(hashlib.sha256(body).hexdigest()[:16],),
            options={"queue": item.queue},
            # From the schedule's creation, not from beat's start: a tick missed while
            # no beat ran is caught up once (see the module's doc).
            last_run_at=item.created_at,
            app=self.app,
        )

    # -------------------------------------------------------------- a due entry

    def apply_async(
        self, entry: ScheduleEntry, producer: Any = None, advance: bool = True, **kwargs: Any
    ) -> None:
        """Fire the entry's tick: create its task (at most once) and send it.

        A tick that fails is logged and not retried (beat moves on to the next one)."""
        entry = self.reserve(entry) if advance else entry
        item = self.schedules.get(entry.name)
        if item is None:  # pragma: no cover - removed between the heap and here
            return
        now = self.clock() if self.clock is not None else self.app.now()
        when = now.isoformat(timespec="seconds")
        try:
            with _stops_held():
                tick = fire(self.store, item, self._agent(item.agent), now, self.send)
        except UsageError as exc:  # the agent is not allowed, its card refuses the fields
            log.warning(
                "schedule %s: tick at %s skipped, nothing created: %s", entry.name, when, exc
            )
            return
        except Exception as exc:  # the store or the broker: one failure must not stop beat
            log.warning(
                "schedule %s: tick at %s failed: %s (a task created but not sent is "
                "requeued by the workers' sweeper; the next tick runs as usual)",
                item.name,
                when,
                exc,
            )
            return
        log.info("schedule %s: %s", entry.name, tick.describe())

    def _agent(self, ref: str) -> Any:
        from skillstate.engine.agent import load_agent

        if ref not in self._agents:
            if not self.allowed(ref):
                raise AgentNotAllowed(
                    f"agent {ref!r} is not allowed on this beat (skillstate beat --agent "
                    f"{ref}, or [tool.skillstate] agents)"
                )
            self._agents[ref] = load_agent(ref, search_cwd=True)
        return self._agents[ref]

    @property
    def info(self) -> str:
        return f"    . schedules -> {self.store.url} (read every {self.refresh:g}s)"


_STOPS = {signal.SIGTERM, signal.SIGINT}


@contextmanager
def _stops_held() -> Iterator[None]:
    """SIGTERM and SIGINT held back for the block, handled when it ends.

    Celery beat's handlers raise ``SystemExit`` wherever the main thread is; held
    back, they land after the tick's send instead of between its commit and its
    send. The Python handlers are swapped for one that only notes the signal, and
    the noted ones are raised again, to the handlers put back, once the block ends.
    A signal mask would not do: it is per thread, and a process-directed signal
    goes to any thread that does not block it (a store's pool or checkpoint thread),
    after which Python runs the handler in the main thread all the same; and a mask
    left blocked would be inherited by every process started after it. Only the main
    thread runs Python's handlers, so elsewhere (an embedded beat) there is nothing
    to hold. SIGKILL is never held: a hung broker still yields to it, and the
    sweeper covers that case."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted: list[int] = []
    previous: dict[int, Any] = {}
    try:
        for stop in _STOPS:
            previous[stop] = signal.signal(stop, lambda signum, frame: noted.append(signum))
        yield
    finally:
        for held, handler in previous.items():
            # None: a handler not installed from Python; the default is what it did.
            signal.signal(held, handler if handler is not None else signal.SIG_DFL)
        for signum in dict.fromkeys(noted):
            signal.raise_signal(signum)  # to the handler just put back, as if it came now


def run_beat(
    app: Celery,
    store: Store,
    *,
    agents: frozenset[str] = frozenset(),
    refresh: float = 10.0,
    loglevel: str = "INFO",
) -> None:
    """Run Celery beat over ``store``'s schedules until SIGTERM or SIGINT.

    ``agents`` are references this beat may import besides the configured allow-list
    (as ``skillstate worker --agent``)."""
    from skillstate.config import allowed_agents, load_config
    from skillstate.workers.celery_app import enqueue

    permitted = allowed_agents(load_config()) | agents
    app.conf.update(timezone="UTC", enable_utc=True)  # cron expressions are UTC
    factory = functools.partial(
        StoreScheduler,
        store=store,
        allowed=permitted.__contains__,
        send=lambda message: enqueue(app, message),
        refresh=refresh,
    )
    app.Beat(scheduler=factory, max_interval=refresh, loglevel=loglevel).run()
