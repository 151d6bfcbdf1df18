"""Fingerprints: digests of the world a step relied on, re-checked on resume.

A skill that edits a file, or reads a row, records what it saw
(``ctx.fingerprint(path)``). Steps are trusted because they were verified *then*;
when a task resumes later, the runtime recomputes every fingerprint of its
completed steps, and a step whose world has changed since is marked stale and
put back on the plan rather than trusted.

Kinds are pluggable: ``file`` (sha256 of the bytes, ``absent`` when missing) is
built in; :func:`register_fingerprint_kind` adds others (a URL's ETag, a row's
``updated_at``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

from skillstate.errors import UsageError
from skillstate.state.model import Fingerprint

__all__ = ["ABSENT", "current_digest", "file_digest", "register_fingerprint_kind", "take"]

ABSENT = "absent"
"""The digest of something that does not exist (a deleted file)."""

DigestFn = Callable[[str], str]


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
        # Unreadable is not "unchanged": report it as its own digest so it compares unequal.
        return f"error:{type(exc).__name__}"
    return "sha256:" + digest.hexdigest()


_KINDS: dict[str, DigestFn] = {"file": file_digest}


def register_fingerprint_kind(kind: str, digest: DigestFn) -> None:
    """Teach the runtime to recompute fingerprints of ``kind`` (``digest(target) -> str``)."""
    if not kind or not kind.isidentifier():
        raise UsageError(f"fingerprint kind must be an identifier, got {kind!r}")
    _KINDS[kind] = digest


def current_digest(kind: str, target: str) -> str:
    """Recompute a fingerprint now."""
    try:
        fn = _KINDS[kind]
    except KeyError:
        known = ", ".join(sorted(_KINDS))
        raise UsageError(f"unknown fingerprint kind {kind!r}; registered: {known}") from None
    return fn(target)


def take(target: str, *, kind: str = "file") -> Fingerprint:
    """A fingerprint of ``target`` as it is now."""
    return Fingerprint(kind=kind, target=target, digest=current_digest(kind, target))
