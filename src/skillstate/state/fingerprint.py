"""Fingerprints: digests of the world a step relied on, re-checked on resume.

A skill that edits a file, or reads a row, records what it saw
(``ctx.fingerprint(path)``). Steps are trusted because they were verified *then*;
when a task resumes later, the runtime recomputes every fingerprint of its
completed steps, and a step whose world has changed since is marked stale and
put back on the plan rather than trusted (with every later step that read what it
wrote: :mod:`skillstate.engine.stale`).

Kinds are pluggable. Built in:

* ``file``: sha256 of the file's bytes, ``absent`` when it is missing;
* ``sqlite``: the rows of a query on an SQLite file, target ``"<db path>::<query>"``
  (:func:`sqlite_target` builds it);
* ``http``: a URL's ``ETag`` (else ``Last-Modified``, else a digest of its body).

:func:`register_fingerprint_kind` adds others: any SQL database through
:func:`~skillstate.state.fingerprint_kinds.sql_digest`, an authenticated URL through
:func:`~skillstate.state.fingerprint_kinds.http_digest`, or a probe of your own (a
row's ``updated_at``, an object's version id).

A resource that cannot be read is never "unchanged": its digest is an
``error:...`` value that compares unequal to everything, itself included, so a
step that relied on it goes stale rather than being trusted. Taking a fingerprint
of one (``ctx.fingerprint``) raises :class:`~skillstate.errors.FingerprintUnavailable`:
a step cannot record that it relied on something it could not see.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

from skillstate.errors import FingerprintUnavailable, UsageError
from skillstate.state.fingerprint_kinds import (
    ERROR,
    http_digest,
    sql_digest,
    sqlite_digest,
    sqlite_target,
)
from skillstate.state.model import Fingerprint

__all__ = [
    "ABSENT",
    "ERROR",
    "DigestFn",
    "current_digest",
    "file_digest",
    "http_digest",
    "register_fingerprint_kind",
    "same",
    "sql_digest",
    "sqlite_target",
    "take",
]

ABSENT = "absent"
"""The digest of something that does not exist (a deleted file, a 404)."""

DigestFn = Callable[[str], str]
"""``digest(target) -> str``: the same text for the same world, another one when it
changed. Raising, or returning ``error:...``, means "could not tell" (stale)."""


def file_digest(path: str) -> str:
    """``sha256:<hex>`` of the file's bytes, or :data:`ABSENT`."""
    digest = hashlib.sha256()
    try:
        with Path(path).open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 16), b""):
                digest.update(block)
    except FileNotFoundError:
        return ABSENT
    except OSError as exc:
        # Unreadable is not "unchanged": an error digest never compares equal.
        return f"{ERROR}{type(exc).__name__}"
    return "sha256:" + digest.hexdigest()


_KINDS: dict[str, DigestFn] = {
    "file": file_digest,
    "sqlite": sqlite_digest,
    "http": http_digest(),
}


def register_fingerprint_kind(kind: str, digest: DigestFn) -> None:
    """Teach the runtime to recompute fingerprints of ``kind`` (``digest(target) -> str``).

    A skill then records one with ``ctx.fingerprint(target, kind=kind)``. Register it
    where the agent is defined, so every process that resumes its tasks knows it.
    """
    if not kind or not kind.isidentifier():
        raise UsageError(f"fingerprint kind must be an identifier, got {kind!r}")
    if not callable(digest):
        raise UsageError(f"fingerprint kind {kind!r}: digest must be a function target -> str")
    _KINDS[kind] = digest


def current_digest(kind: str, target: str) -> str:
    """Recompute a fingerprint now; ``error:...`` when the resource cannot be read.

    Raises :class:`~skillstate.errors.UsageError` for a kind nobody registered (in this
    process): that is a setup mistake, not a changed world.
    """
    try:
        fn = _KINDS[kind]
    except KeyError:
        known = ", ".join(sorted(_KINDS))
        raise UsageError(
            f"unknown fingerprint kind {kind!r}; registered: {known} "
            "(register_fingerprint_kind where the agent is defined)"
        ) from None
    try:
        digest = fn(target)
    except Exception as exc:  # a user's probe failing means "could not tell", i.e. stale
        return f"{ERROR}{type(exc).__name__}"
    if not isinstance(digest, str) or not digest:
        return f"{ERROR}digest of kind {kind!r} is not a non-empty str"
    return digest


def same(recorded: str, now: str) -> bool:
    """Whether a fingerprint still holds: equal digests, neither of them an error."""
    return recorded == now and not now.startswith(ERROR)


def take(target: str, *, kind: str = "file") -> Fingerprint:
    """A fingerprint of ``target`` as it is now.

    Raises :class:`~skillstate.errors.FingerprintUnavailable` when it cannot be read.
    """
    digest = current_digest(kind, target)
    if digest.startswith(ERROR):
        raise FingerprintUnavailable(kind, target, digest[len(ERROR) :])
    return Fingerprint(kind=kind, target=target, digest=digest)
