"""Who did what, and why: the identity a person's (or an API client's) commit records.

Every commit a person makes (``set``, ``edit``, ``rollback``, ``fork``, ``reply``,
``approve``, ``reject``, ``cancel``, ``send``, ``signal``, ``unlock``,
``--accept-definition``, ``extract --accept``, ``memory forget``, the inspector's
writes) carries an :class:`Identity` in its event: :attr:`~skillstate.events.Event.by`
and :attr:`~skillstate.events.Event.reason`. Who is, first found:

1. ``--actor`` (or the inspector token's name, or the actor a library call names);
2. ``$SKILLSTATE_ACTOR``;
3. the OS user (``unknown`` if there is none).

Why is ``--reason``, recorded when given. Both are checked (:func:`check_by`,
:func:`check_reason`): one printable line, bounded; a bad one is a one-line
:class:`~skillstate.errors.UsageError` (exit 2) and nothing is written.

A command states its identity once, around what it does (:func:`acting`); the
commits it makes read it (:func:`who`), as :func:`skillstate.engine.trace.current`
is read. A commit that takes what someone else posted (a message, a cancel, a
signal, read from the task's inbox, perhaps in a worker) passes the poster's
identity explicitly instead: the worker's own user did not send it.

A change that is not a commit of a task (``rekey`` rewrites stored bodies without
a new version) is recorded in a reserved audit record, ``skillstate:audit:NAME``,
one version per change, committed with the store's compare-and-set
(:func:`record`): ``skillstate log skillstate:audit:rekey`` lists them.
"""

from __future__ import annotations

import getpass
import os
import random
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from skillstate.errors import Conflict, StaleState, TaskNotFound, UsageError

if TYPE_CHECKING:  # the CLI imports this module: no pydantic model at import time
    from skillstate.events import Actor
    from skillstate.store.base import Store

__all__ = [
    "ACTOR_ENV",
    "AUDIT_PREFIX",
    "BY_CHARS",
    "REASON_CHARS",
    "Identity",
    "acting",
    "acting_as",
    "check_by",
    "check_reason",
    "current",
    "default_actor",
    "of_message",
    "record",
    "resolve",
    "who",
]

ACTOR_ENV = "SKILLSTATE_ACTOR"
"""Who acts when no ``--actor`` is given (else the OS user)."""
BY_CHARS = 100
"""The longest identity (``--actor``, a token's name)."""
REASON_CHARS = 1_000
"""The longest ``--reason``."""
AUDIT_PREFIX = "skillstate:audit:"
"""The reserved records of changes that are not a task's commits (:func:`record`)."""
PEOPLE: frozenset[str] = frozenset({"human", "user"})
"""Event actors whose commits record an identity."""

_CURRENT: ContextVar[Identity | None] = ContextVar("skillstate_identity", default=None)
_ATTEMPTS = 50


@dataclass(frozen=True)
class Identity:
    """Who made a change and why (see the module doc)."""

    by: str
    """A person's name, an API token's name, ``$SKILLSTATE_ACTOR`` or the OS user."""
    reason: str | None = None
    """Why, as given (``--reason``); ``None`` when nobody said."""


def _line_problem(text: str, limit: int) -> str | None:
    if not text:
        return "it is empty"
    if len(text) > limit:
        return f"it is {len(text):,} characters (at most {limit:,})"
    if not text.isprintable():  # newlines, tabs, control and bidi-override characters
        return "it must be one line of printable characters"
    return None


def check_by(value: str, *, what: str = "--actor") -> str:
    """``value`` stripped, if it is a fit identity; else a one-line ``UsageError``."""
    text = value.strip()
    found = _line_problem(text, BY_CHARS)
    if found is not None:
        raise UsageError(f"{what} refused: {found}; nothing was written")
    return text


def check_reason(value: str | None) -> str | None:
    """``value`` stripped (``None`` when blank), if it is a fit reason; else ``UsageError``."""
    text = (value or "").strip()
    if not text:
        return None
    found = _line_problem(text, REASON_CHARS)
    if found is not None:
        raise UsageError(f"--reason refused: {found}; nothing was written")
    return text


def default_actor() -> str:
    """``$SKILLSTATE_ACTOR``, else the OS user's name (``unknown`` if there is none)."""
    given = os.environ.get(ACTOR_ENV, "").strip()
    if given:
        return given
    try:
        return getpass.getuser()
    except Exception:  # no user name in the environment or the password database
        return "unknown"


def resolve(actor: str | None = None, reason: str | None = None) -> Identity:
    """The identity of a command: ``actor``, else ``$SKILLSTATE_ACTOR``, else the OS
    user; each checked (``UsageError``, one line, naming where the bad value came from)."""
    if actor is not None:
        by = check_by(actor)
    elif os.environ.get(ACTOR_ENV, "").strip():
        by = check_by(os.environ[ACTOR_ENV], what=f"${ACTOR_ENV}")
    else:
        by = check_by(default_actor(), what="the OS user name")
    return Identity(by=by, reason=check_reason(reason))


@contextmanager
def acting(identity: Identity) -> Iterator[Identity]:
    """Record ``identity`` in the people's commits made inside the block."""
    token = _CURRENT.set(identity)
    try:
        yield identity
    finally:
        _CURRENT.reset(token)


@contextmanager
def acting_as(actor: str | None = None, reason: str | None = None) -> Iterator[Identity]:
    """:func:`acting` with :func:`resolve`'s identity: what a command wraps itself in."""
    with acting(resolve(actor, reason)) as identity:
        yield identity


def current() -> Identity | None:
    """The identity the enclosing :func:`acting` stated, if any."""
    return _CURRENT.get()


def who(actor: Actor, given: Identity | None = None) -> dict[str, str]:
    """The ``by``/``reason`` fields of an event by ``actor``: ``given`` when there is one
    (whoever commits it: a signal someone sent is consumed by the runtime); else none
    for the runtime's own commits; else the enclosing :func:`acting`'s identity, else
    (a library call that stated none) ``$SKILLSTATE_ACTOR`` or the OS user, cut to fit."""
    if given is None and actor not in PEOPLE:
        return {}
    identity = given or current()
    if identity is None:
        by = " ".join(default_actor().split())[:BY_CHARS] or "unknown"
        return {"by": by}
    fields = {"by": identity.by}
    if identity.reason:
        fields["reason"] = identity.reason
    return fields


def of_message(body: Mapping[str, Any], *, by: str = "by") -> Identity | None:
    """The identity an inbox message carries (its ``by`` or ``actor`` and its ``reason``);
    ``None`` for one posted before identities were (or with none that fits)."""
    name, why = body.get(by), body.get("reason")
    if not isinstance(name, str) or _line_problem(name.strip(), BY_CHARS) is not None:
        return None
    fits = isinstance(why, str) and _line_problem(why.strip(), REASON_CHARS) is None
    return Identity(by=name.strip(), reason=why.strip() if fits and isinstance(why, str) else None)


def record(
    store: Store, name: str, action: Mapping[str, Any], identity: Identity | None = None
) -> int:
    """Append ``action`` to the audit record ``skillstate:audit:NAME`` as one version
    (compare-and-set, again on a record that moved); returns the version written.

    The record's document only counts its entries; each version's event holds the
    action, who and why, as a task's events do.
    """
    from skillstate.events import Event
    from skillstate.state.diff import make_patch

    rid = AUDIT_PREFIX + name
    for attempt in range(_ATTEMPTS):
        try:
            head = store.load(rid)
            version, doc = head.version, dict(head.state)
        except TaskNotFound:
            version, doc = 0, {}
        new = {"task_id": rid, "version": version + 1, "kind": "audit", "name": name}
        event = Event(
            task_id=rid,
            version=version + 1,
            actor="human",
            action=dict(action),
            patch=make_patch(doc, new),
            **who("human", identity),
        )
        try:
            return store.commit(rid, version, new, event)
        except StaleState:
            time.sleep(random.uniform(0, 0.001 * min(attempt + 1, 20)))
    raise Conflict(f"audit record {rid!r} kept changing; nothing was recorded")
