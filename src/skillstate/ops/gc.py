"""Artifact garbage collection: remove artifacts no task or record references.

Mark, then sweep with a grace period:

1. *cut* = now − ``grace`` (default one hour);
2. list the stored artifacts;
3. mark: every ref any task, kept version, event, inbox message or reserved record
   holds (:mod:`skillstate.ops.refs`);
4. sweep: each listed artifact not marked is removed with
   ``Store.delete_artifact(ref, unused_since=cut)``: only if its last put is older
   than the cut, checked atomically with the removal by the store.

Why this is safe against a writer committing a reference while gc runs. A writer
that references an artifact puts it first (the runtime stores evidence, then commits
the card that names it), and :meth:`Store.put_artifact` of bytes already stored
marks them as put again. So for an artifact gc is about to remove while a writer
references it, either

* the writer's put came before the sweep's removal: the put time is after the cut
  (the put is recent: a step does not take longer than the grace period), the
  store's check fails, the artifact stays; or
* the put came after the removal: it stored the bytes again.

An artifact put after step 2 is never listed, so never considered. What the grace
period does not cover is a writer that commits a ref it did not put within the
grace period (a ref copied from another task's card without putting its bytes):
keep ``grace`` longer than any such hand-off.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from skillstate.errors import UsageError
from skillstate.ops.refs import store_refs
from skillstate.store.base import Store

__all__ = ["DEFAULT_GRACE", "Collected", "collect"]

DEFAULT_GRACE = timedelta(hours=1)


@dataclass(frozen=True)
class Collected:
    """What :func:`collect` found and did."""

    stored: int
    """Artifacts listed."""
    referenced: int
    """Of them, referenced by some record (kept)."""
    removed: list[str] = field(default_factory=list)
    """Unreferenced and put before the cut: removed (or, dry run, to remove)."""
    recent: list[str] = field(default_factory=list)
    """Unreferenced but put after the cut: kept until a later run."""
    dry_run: bool = False


def collect(
    store: Store,
    *,
    grace: timedelta = DEFAULT_GRACE,
    dry_run: bool = False,
    now: datetime | None = None,
    before_sweep: Callable[[list[str]], None] | None = None,
) -> Collected:
    """Remove the artifacts nothing references whose last put is older than ``grace``.

    ``dry_run`` removes nothing and lists every unreferenced artifact as removable
    (it cannot read put times: the store checks them only as it removes).
    ``before_sweep`` is called with the candidates between mark and sweep (tests use
    it to race a writer against the sweep)."""
    if grace < timedelta(0):
        raise UsageError("--grace must not be negative")
    cut = (now or datetime.now(timezone.utc)) - grace
    listed = store.artifact_refs()
    marked = store_refs(store)
    candidates = [ref for ref in listed if ref not in marked]
    referenced = len(listed) - len(candidates)
    if dry_run:
        return Collected(len(listed), referenced, candidates, dry_run=True)
    if before_sweep is not None:
        before_sweep(candidates)
    removed: list[str] = []
    recent: list[str] = []
    for ref in candidates:
        (removed if store.delete_artifact(ref, unused_since=cut) else recent).append(ref)
    return Collected(len(listed), referenced, removed, recent)
