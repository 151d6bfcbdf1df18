"""Schedules: an agent, a clock, and the task each tick of the clock makes.

A :class:`Schedule` names an agent (``MODULE:ATTR``), when it ticks (a five-field
cron expression, or every N seconds) and the card fields each new task starts
with. The ticking itself is Celery beat's (:mod:`skillstate.workers.beat`); this
module only says *which* tick a moment belongs to and *which task* a tick makes:

* :meth:`Schedule.slot` is the latest scheduled time at or before a moment (UTC).
  Any process that fires for the same tick computes the same slot, whenever it
  fires (a beat restarted late, two beats by mistake).
* :meth:`Schedule.task_id` is ``NAME-<slot>`` (``nightly-20261203T0200Z``). Creating
  that task is the compare-and-set that makes a tick run at most once
  (:mod:`skillstate.control.ticks`).

Cron expressions are read by Celery's own parser (``celery.schedules.crontab``, the
one beat ticks with), in UTC; day of month and day of week must *both* match, as
in Celery (not either, as in Vixie cron). ``every`` ticks are aligned to the Unix
epoch: ``every=300`` ticks at :00, :05, :10... of each hour.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import date, datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from skillstate._validation import first_error
from skillstate.errors import MissingExtra, UsageError

if TYPE_CHECKING:
    from skillstate.engine.agent import Agent

__all__ = ["NAME_PATTERN", "Schedule", "card_fields_for", "check_name", "cron_slot", "parse_cron"]

NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
"""A schedule's name: it starts every task id the schedule makes, so it is kept to
characters every store and every shell take as they are."""
_RESERVED = frozenset({"task_id", "version", "inputs", "inputs_received", "replies_ahead"})
"""Card fields a schedule may not set: the task's identity, and its replies."""
_SEARCH_DAYS = 366 * 29
"""How far back a cron slot is looked for: day-of-month and day-of-week combinations
repeat within 28 years, so a cron with no slot in that span has none at all."""


class Schedule(BaseModel):
    """One schedule, as the registry keeps it (:mod:`skillstate.control.schedule_registry`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    """Unique in the store; the prefix of every task id it makes."""
    agent: str
    """The agent reference (``MODULE:ATTR``). Beat imports it only if the operator
    allowed it, as workers do."""
    cron: str | None = None
    """Five fields (minute hour day-of-month month day-of-week), UTC."""
    every: int | None = Field(default=None, ge=1)
    """Seconds between ticks, aligned to the Unix epoch (instead of ``cron``)."""
    fields: dict[str, Any] = Field(default_factory=dict)
    """Card fields of each new task, as stored (sensitive values sealed)."""
    queue: str
    """The queue each new task is sent to."""
    created_at: datetime
    """When the schedule was registered (UTC): ticks before it are never run."""
    created_by: str = ""

    @model_validator(mode="after")
    def _consistent(self) -> Schedule:
        if (self.cron is None) == (self.every is None):
            raise ValueError("a schedule has either cron or every")
        check_name(self.name)
        if self.cron is not None:
            parse_cron(self.cron)
        if self.created_at.tzinfo is None:
            raise ValueError("created_at must say its time zone")
        return self

    @property
    def spec(self) -> str:
        """The clock, as people write it: ``cron */5 * * * *`` or ``every 30s``."""
        return f"cron {self.cron}" if self.cron is not None else f"every {self.every}s"

    def slot(self, now: datetime) -> datetime | None:
        """The tick ``now`` belongs to: the latest scheduled time at or before it (UTC).

        ``None`` when there is none since the schedule was created (a schedule
        never runs a tick from before it existed)."""
        now = _utc(now)
        if self.every is not None:
            stamp = now.timestamp()
            found: datetime | None = datetime.fromtimestamp(
                stamp - stamp % self.every, timezone.utc
            )
        else:
            found = cron_slot(str(self.cron), now)
        if found is None or found < self.created_at:
            return None
        return found

    def task_id(self, slot: datetime) -> str:
        """The task the tick at ``slot`` makes: ``NAME-20261203T0501Z`` (cron) or
        ``NAME-20261203T050130Z`` (every, to the second)."""
        form = "%Y%m%dT%H%MZ" if self.cron is not None else "%Y%m%dT%H%M%SZ"
        return f"{self.name}-{_utc(slot).strftime(form)}"


def check_name(name: str) -> str:
    """``name`` if it can name a schedule; else a one-line ``UsageError``."""
    if not NAME_PATTERN.fullmatch(name):
        raise UsageError(
            f"invalid schedule name {name!r}: 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


def parse_cron(expr: str) -> Any:
    """Celery's ``crontab`` for a five-field expression; a one-line ``UsageError`` if
    it does not parse (or names a day no month has, as ``0 0 30 2 *``)."""
    try:
        from celery.schedules import ParseException, crontab
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise MissingExtra("schedules tick with Celery: pip install 'skillstate[celery]'") from exc
    parts = expr.split()
    if len(parts) != 5:
        raise UsageError(
            f"invalid cron expression {expr!r}: it needs five fields "
            "(minute hour day-of-month month day-of-week), UTC"
        )
    minute, hour, day_of_month, month, day_of_week = parts
    try:
        return crontab(minute, hour, day_of_week, day_of_month, month)
    except (ParseException, ValueError, TypeError, IndexError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"invalid cron expression {expr!r}: {reason}") from None


def cron_slot(expr: str, now: datetime) -> datetime | None:
    """The latest minute at or before ``now`` (UTC) that ``expr`` matches.

    Each of the five fields must match, as Celery's ``crontab`` fires (day of week
    0 is Sunday). Walks back a day at a time, so a yearly cron costs at most a year
    of cheap day checks."""
    cron = parse_cron(expr)
    now = _utc(now).replace(second=0, microsecond=0)
    day: date = now.date()
    for back in range(_SEARCH_DAYS):
        if (
            day.month in cron.month_of_year
            and day.day in cron.day_of_month
            and day.isoweekday() % 7 in cron.day_of_week
        ):
            found = _latest_in_day(cron, day, now if back == 0 else None)
            if found is not None:
                return found
        day -= timedelta(days=1)
    return None


def _latest_in_day(cron: Any, day: date, limit: datetime | None) -> datetime | None:
    """The latest matching minute of ``day``, not after ``limit`` (when given)."""
    for hour in sorted(cron.hour, reverse=True):
        if limit is not None and hour > limit.hour:
            continue
        minutes = [
            m for m in cron.minute if limit is None or hour < limit.hour or m <= limit.minute
        ]
        if minutes:
            return datetime(day.year, day.month, day.day, hour, max(minutes), tzinfo=timezone.utc)
    return None


def card_fields_for(agent: Agent[Any], fields: Mapping[str, Any]) -> dict[str, Any]:
    """``fields`` (``--set``) as a schedule stores them, checked against ``agent``'s card.

    The values must make a valid new card (the agent's state class and invariants),
    exactly as they will at every tick; sensitive fields are sealed (which needs
    ``SKILLSTATE_KEY``); a value the agent's redaction policy would mask is refused
    (a tick's card would get ``***`` instead of it). One-line ``UsageError`` else.
    """
    reserved = sorted(_RESERVED & fields.keys())
    if reserved:
        raise UsageError(f"--set {reserved[0]}: a schedule sets it for each task itself")
    try:
        state = agent.new_state("schedule-check", **fields)
    except UsageError as exc:
        raise UsageError(
            str(exc).replace("for task 'schedule-check'", "for the schedule")
        ) from None
    except ValidationError as exc:  # pragma: no cover - new_state translates these
        raise UsageError(f"invalid --set: {first_error(exc, 'state')}") from None
    broken = agent.broken_invariant(state)
    if broken is not None:
        raise UsageError(f"the schedule's tasks would start broken: invariant {broken}")
    stored: dict[str, Any] = state.to_json(fields.keys())
    masked = agent.redaction.redactor().json(stored)
    for name in sorted(stored):
        if masked.get(name) != stored[name]:
            raise UsageError(
                f"--set {name}: the value looks like a secret (the agent's redaction policy "
                f"masks it in a card); declare {name!r} Sensitive[...] so it is kept sealed"
            )
    return stored


def _utc(when: datetime) -> datetime:
    if when.tzinfo is None:
        return when.replace(tzinfo=timezone.utc)
    return when.astimezone(timezone.utc)
