"""Where a scope's facts live: one record in the store, committed and audited like a card.

Each scope is the reserved record ``skillstate:memory:<scope>`` (``skillstate log
skillstate:memory:agent:orders`` prints its history), a plain JSON document::

    {"task_id": ..., "version": N, "kind": "skillstate.memory", "scope": "agent:orders",
     "next": 8, "facts": {"f7": {"seq": 7, "key": ..., "value": ..., "task": ..., ...}}}

written with :meth:`~skillstate.store.base.Store.commit`, the store's compare-and-set,
as :mod:`skillstate.control.schedule_registry` keeps the schedules: no store needs
anything new. Two tasks writing one scope at once both land (the loser of the
compare-and-set reads the record again and applies its write to the winner's), every
change is an event with its JSON Patch and actor, and checkpoints and ``prune`` keep
or drop old versions as for any task. Task lists leave reserved records out.

Each fact is stored under ``f<seq>``, its number in the scope (1, 2, 3... in the order
written, never reused; ``next`` is the next one), not under its own key: a fact called
``api_token`` would otherwise be masked whole by the redaction policy (by key name),
record and all, and a list would make every change in its middle a patch of the whole
list. A change is a patch of the facts it adds and removes. A write is idempotent by
provenance: the same task and version writing the same keys again changes nothing.
"""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from skillstate._validation import first_error
from skillstate.audit import who
from skillstate.errors import Conflict, StaleState, StateCorrupted, TaskNotFound, UsageError
from skillstate.events import Actor, Event
from skillstate.memory.facts import Fact, Remembered, check_key, check_scope
from skillstate.state.diff import make_patch
from skillstate.store.base import RESERVED, Store

if TYPE_CHECKING:
    from skillstate.state.redact import Redactor

__all__ = [
    "KIND",
    "MAX_FACTS",
    "PREFIX",
    "Memory",
    "applied",
    "forget",
    "load_memory",
    "memory_scopes",
    "now",
    "prune",
    "record_id",
    "remember",
]

PREFIX = f"{RESERVED}memory:"
"""The ids memory records are stored under: ``skillstate:memory:<scope>``."""
KIND = "skillstate.memory"
MAX_FACTS = 500
"""Facts a scope keeps; a write past it drops the oldest written (named in its event).
Every task that reads the scope loads the record at each decision: keep it small."""
_ATTEMPTS = 64
"""Commits of one change before giving up on a record others keep changing."""


def now() -> datetime:
    """The current time (UTC): what facts are written and expire by (tests replace it)."""
    return datetime.now(timezone.utc)


def record_id(scope: str) -> str:
    """The store id of ``scope``'s record (``skillstate:memory:agent:orders``)."""
    return PREFIX + check_scope(scope)


@dataclass(frozen=True)
class Memory:
    """A scope's facts as one version of its record holds them."""

    scope: str
    version: int
    """The record's version (0: nothing was ever remembered in the scope)."""
    facts: tuple[Fact, ...] = field(default_factory=tuple)
    """Oldest written first, one per key."""
    next_seq: int = 1
    """The number the next fact written gets."""

    def live(self, at: datetime | None = None) -> tuple[Fact, ...]:
        """The facts not expired at ``at`` (default: now)."""
        when = at or now()
        return tuple(f for f in self.facts if f.live(when))

    def get(self, key: str) -> Fact | None:
        return next((f for f in self.facts if f.key == key), None)


def load_memory(store: Store, scope: str, *, known: Memory | None = None) -> Memory:
    """The facts of ``scope`` (expired ones included: :meth:`Memory.live` leaves them out).

    ``known``: a version read earlier, returned as it is when the record has not moved;
    when it has, only the facts written since are validated (a fact is never changed
    once written: a new value is a new fact number). A record that does not read as memory is
    ``StateCorrupted``; nothing is written over it (``skillstate log
    skillstate:memory:SCOPE`` shows its history)."""
    version, doc = _head(store, record_id(scope))
    if known is not None and known.scope == scope and known.version == version:
        return known
    return _parse(
        scope, version, doc, known if known is not None and known.scope == scope else None
    )


def memory_scopes(store: Store) -> list[str]:
    """Every scope with a record in the store, sorted."""
    return [t[len(PREFIX) :] for t in store.tasks() if t.startswith(PREFIX)]


def remember(
    store: Store,
    scope: str,
    entries: Sequence[Remembered],
    *,
    task: str,
    redactor: Redactor | None = None,
    cache: dict[str, Memory] | None = None,
) -> int:
    """Write ``entries`` (one verified step's writes to ``scope``) as facts of ``task``.

    Idempotent: when every key already holds this task's fact from the same version,
    nothing is written. Expired facts go in the same commit. Returns the record's
    version. ``redactor`` masks the entries' keys and values (by the key's name, by
    shape, exact secrets) before they are written: the runtime's come masked from the
    card already, so this is the second line; the rest of the record was masked when it
    was written. ``cache``: the scopes' last known versions (:func:`load_memory`'s
    ``known``), read and kept up to date."""
    if not entries:
        raise UsageError("remember() needs at least one entry")
    version = entries[0].version
    if any(e.version != version for e in entries):
        raise UsageError("remember() writes one step's entries at a time")
    if redactor is not None:
        entries = [_masked(e, redactor) for e in entries]
    for entry in entries:
        check_key(entry.key)

    def change(facts: list[Fact], at: datetime, numbers: Iterator[int]) -> dict[str, Any] | None:
        if all(_holds(facts, e.key, task, version) for e in entries):
            return None  # already written (a resumed flush, or a worker taken over)
        expired = _drop_expired(facts, at)
        for entry in entries:
            _drop_key(facts, entry.key)
            facts.append(_fact(entry, task, at, next(numbers)))
        evicted = [f.key for f in facts[: max(len(facts) - MAX_FACTS, 0)]]
        del facts[: len(evicted)]
        action: dict[str, Any] = {
            "kind": "remember",
            "task": task,
            "version": version,
            "skill": entries[0].skill,
            "step": entries[0].step,
            "keys": [e.key for e in entries],
        }
        if expired:
            action["expired"] = expired
        if evicted:
            action["evicted"] = evicted
        return action

    return _change(store, scope, change, actor="runtime", cache=cache)


def applied(store: Store, scope: str, task: str, version: int) -> bool:
    """Whether ``task``'s step at ``version`` already wrote to ``scope``: its facts are
    there, or (a later write replaced them) the record's events show the write."""
    memory = load_memory(store, scope)
    mine = [f for f in memory.facts if f.task == task and f.version == version]
    if mine:
        return True
    if memory.version == 0:
        return False
    return any(
        e.action.get("kind") == "remember"
        and e.action.get("task") == task
        and e.action.get("version") == version
        for e in store.events(record_id(scope))
    )


def forget(store: Store, scope: str, key: str, *, reason: str, actor: str) -> Fact:
    """Remove the fact ``key`` from ``scope`` (a person's decision: the event says who and
    why). Returns the fact removed; ``UsageError`` when there is none."""
    check_key(key)
    if not reason.strip():
        raise UsageError("forgetting a fact needs a reason (--reason), for the audit log")
    removed: list[Fact] = []

    def change(facts: list[Fact], at: datetime, numbers: Iterator[int]) -> dict[str, Any] | None:
        found = [f for f in facts if f.key == key]
        if not found:
            raise UsageError(f"no fact {key!r} in memory scope {scope!r}")
        removed[:] = found
        _drop_key(facts, key)
        return {"kind": "forget", "key": key, "reason": reason, "by": actor}

    _change(store, scope, change, actor="human")
    return removed[0]


def prune(
    store: Store,
    scopes: Iterable[str] | None = None,
    *,
    older_than: timedelta | None = None,
    actor: str,
) -> dict[str, list[str]]:
    """Drop expired facts, and with ``older_than`` those written longer ago, from ``scopes``
    (default: every scope in the store). Returns the keys dropped per scope that lost
    any; a scope with nothing to drop is not written."""
    if older_than is not None and older_than <= timedelta(0):
        raise UsageError("--older-than must be a positive duration")
    dropped: dict[str, list[str]] = {}
    for scope in list(scopes) if scopes is not None else memory_scopes(store):
        keys = _prune_scope(store, scope, older_than, actor)
        if keys:
            dropped[scope] = keys
    return dropped


def _prune_scope(store: Store, scope: str, older_than: timedelta | None, actor: str) -> list[str]:
    """:func:`prune` of one scope: the keys it dropped."""
    keys: list[str] = []

    def change(facts: list[Fact], at: datetime, numbers: Iterator[int]) -> dict[str, Any] | None:
        cutoff = at - older_than if older_than is not None else None
        gone = [
            f.key for f in facts if not f.live(at) or (cutoff is not None and f.written_at < cutoff)
        ]
        if not gone:
            return None
        keys[:] = gone
        facts[:] = [f for f in facts if f.key not in gone]
        action: dict[str, Any] = {"kind": "prune", "keys": gone, "by": actor}
        if older_than is not None:
            action["older_than_s"] = older_than.total_seconds()
        return action

    _change(store, scope, change, actor="human")
    return keys


# ---------------------------------------------------------------- the record


Change = Callable[[list[Fact], datetime, Iterator[int]], "dict[str, Any] | None"]
"""Changes the facts in place (a new fact takes its ``seq`` from the numbers given);
returns the event's action, or ``None``: nothing to write."""


def _change(
    store: Store,
    scope: str,
    change: Change,
    *,
    actor: Actor,
    cache: dict[str, Memory] | None = None,
) -> int:
    """Commit what ``change`` makes of the scope's facts, again on a record that moved."""
    rid = record_id(scope)
    cache = cache if cache is not None else {}
    for attempt in range(_ATTEMPTS):
        version, doc = _head(store, rid)
        known = cache.get(scope)
        if known is None or known.version != version:
            known = cache[scope] = _parse(scope, version, doc, known)
        facts = list(known.facts)
        numbers = itertools.count(known.next_seq)
        action = change(facts, now(), numbers)
        if action is None:
            return version
        next_seq = next(numbers)
        new, patch = _written(rid, scope, doc, version=version + 1, facts=facts, next_seq=next_seq)
        event = Event(
            task_id=rid, version=version + 1, actor=actor, action=action, patch=patch, **who(actor)
        )
        try:
            written = store.commit(rid, version, new, event)
        except StaleState:
            # Someone else wrote the scope: apply this change to theirs. A short random
            # pause keeps a crowd of writers from colliding in lockstep.
            time.sleep(random.uniform(0, 0.001 * min(attempt + 1, 20)))
            continue
        cache[scope] = Memory(scope, written, tuple(facts), next_seq)
        return written
    raise Conflict(
        f"memory scope {scope!r} kept changing under {_ATTEMPTS} attempts to commit; "
        "nothing was written"
    )


def _head(store: Store, rid: str) -> tuple[int, dict[str, Any] | None]:
    try:
        head = store.load(rid)
    except TaskNotFound:
        return 0, None
    return head.version, head.state


def _parse(
    scope: str, version: int, doc: dict[str, Any] | None, known: Memory | None = None
) -> Memory:
    if doc is None:
        return Memory(scope, 0)
    rid = PREFIX + scope
    raw, next_seq = doc.get("facts"), doc.get("next")
    if (
        doc.get("kind") != KIND
        or doc.get("scope") != scope
        or not isinstance(raw, dict)
        or not isinstance(next_seq, int)
    ):
        raise StateCorrupted(rid, version, f"it is not a {KIND} record of scope {scope!r}")
    facts: list[Fact] = []
    seen = {f"f{f.seq}": f for f in known.facts} if known is not None else {}
    for name, body in raw.items():
        old = seen.get(name)
        if old is not None and isinstance(body, dict) and _same(old, body):
            facts.append(old)  # written once, never changed: validated when first read
            continue
        try:
            fact = Fact.model_validate(body)
        except ValidationError as exc:
            raise StateCorrupted(rid, version, f"fact {name}: {first_error(exc)}") from None
        if name != f"f{fact.seq}" or fact.seq >= next_seq:
            raise StateCorrupted(rid, version, f"fact {name} is numbered {fact.seq}")
        facts.append(fact)
    facts.sort(key=lambda f: f.seq)  # a delta chain need not keep the keys' order
    return Memory(scope, version, tuple(facts), next_seq)


def _same(fact: Fact, body: dict[str, Any]) -> bool:
    """Whether ``body`` is the stored form of ``fact``, by its provenance (a number is only
    ever given again after someone rolled the record back)."""
    return (
        body.get("key") == fact.key
        and body.get("task") == fact.task
        and body.get("version") == fact.version
        and body.get("step") == fact.step
    )


def _written(
    rid: str,
    scope: str,
    doc: dict[str, Any] | None,
    *,
    version: int,
    facts: Sequence[Fact],
    next_seq: int,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The record's next document and the patch to it from ``doc``: the facts kept are
    the stored ones as stored, so the patch names only those removed and added (diffing
    the whole document would cost as much as the scope is large)."""
    if doc is None:
        new = {
            "task_id": rid,
            "version": version,
            "kind": KIND,
            "scope": scope,
            "next": next_seq,
            "facts": {f"f{f.seq}": f.model_dump(mode="json") for f in facts},
        }
        return new, make_patch({}, new)
    stored: dict[str, Any] = doc["facts"]
    wanted = {f"f{f.seq}": f for f in facts}
    gone = [name for name in stored if name not in wanted]
    added = {name: f.model_dump(mode="json") for name, f in wanted.items() if name not in stored}
    kept = {name: body for name, body in stored.items() if name in wanted}
    new = {**doc, "version": version, "next": next_seq, "facts": {**kept, **added}}
    patch: list[dict[str, Any]] = [{"op": "remove", "path": f"/facts/{n}"} for n in gone]
    patch += [{"op": "add", "path": f"/facts/{n}", "value": v} for n, v in added.items()]
    patch += [
        {"op": "replace", "path": "/next", "value": next_seq},
        {"op": "replace", "path": "/version", "value": version},
    ]
    return new, patch


def _fact(entry: Remembered, task: str, at: datetime, seq: int) -> Fact:
    expires = at + timedelta(seconds=entry.ttl) if entry.ttl is not None else None
    return Fact(
        seq=seq,
        key=entry.key,
        value=entry.value,
        task=task,
        version=entry.version,
        skill=entry.skill,
        step=entry.step,
        artifact=entry.artifact,
        written_at=at,
        expires_at=expires,
    )


def _masked(entry: Remembered, redactor: Redactor) -> Remembered:
    """``entry`` with its key and value masked as the card masks them (the value as if it
    sat under its key: a value under ``api_token`` is masked whole)."""
    key = redactor.text(entry.key)
    value = redactor.json({entry.key: entry.value})[entry.key]
    if key is entry.key and value is entry.value:
        return entry
    return entry.model_copy(update={"key": key, "value": value})


def _holds(facts: Sequence[Fact], key: str, task: str, version: int) -> bool:
    return any(f.key == key and f.task == task and f.version == version for f in facts)


def _drop_key(facts: list[Fact], key: str) -> None:
    facts[:] = [f for f in facts if f.key != key]


def _drop_expired(facts: list[Fact], at: datetime) -> list[str]:
    gone = [f.key for f in facts if not f.live(at)]
    if gone:
        facts[:] = [f for f in facts if f.live(at)]
    return gone
