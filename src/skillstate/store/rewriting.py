"""Rewriting a task's stored bodies in place, shared by every backend's ``Store.rewrite``.

:meth:`~skillstate.store.base.Store.rewrite` applies a function to every JSON body a
task has stored (the head, each kept snapshot, each kept patch, each event) and
writes back the ones that changed, with the checksums recomputed. What is
rewritten is data, never layout: versions, snapshot/delta kinds, event order,
timestamps and leases stay as they are. It exists for re-sealing values after a
key rotation (:mod:`skillstate.engine.rekey`), where a sealed string is replaced by
another sealing of the same plaintext.

:func:`plan_rewrite` does the work that does not depend on the backend: it reads
the bodies as a backend hands them over, checks them as a load would (the head's
checksum and identity, each kept version's checksum, every delta applying), applies
the function, and returns what to write. A backend then writes the plan in one
atomic step of its own. Nothing is written when the stored task is damaged
(``StateCorrupted``), when the function raises (its error propagates), or when the
function changes nothing.

**Checksums.** The head's is :func:`~skillstate.store.chain.digest` of its new text.
A version's is recomputed in the form it was stored with (``sha256-sorted:`` over the
rebuilt state, or ``sha256:`` over a snapshot's text), from the *new* bodies: a
version stored as a delta gets a new checksum whenever anything in its chain changed,
even when its own patch did not. A record stored without a checksum (written before
checksums existed) stays without one.

**Chain counters** (how many deltas and bytes follow the last snapshot) steer when
the next snapshot is taken; they are left as they are. A function that changes the
length of a patch therefore shifts that decision a little, never what loads.

**The function** receives a freshly parsed JSON value and returns it (unchanged) or
a replacement; it must not mutate its argument. It should change string leaves
only: it is applied to each body on its own, so the bodies stay consistent with
each other (a patch still applies to the state before it, the head still equals the
chain's last version) exactly when changing a leaf the same way everywhere keeps
them so, which leaf-wise functions do.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonpatch

from skillstate.errors import StateCorrupted, StoreError
from skillstate.store.chain import (
    SORTED_PREFIX,
    check_head,
    digest,
    dumps,
    load_document,
    read_head,
    sorted_digest,
    verify_document,
)

__all__ = ["Body", "JsonFn", "RewritePlan", "plan_rewrite", "rewrite_text"]

JsonFn = Callable[[Any], Any]
"""What :meth:`Store.rewrite` applies: a JSON value in, the same value or a replacement out."""


@dataclass(frozen=True)
class Body:
    """One kept version's stored bodies, as a backend reads (and then writes) them."""

    version: int
    snapshot: str | None
    """The state whole (a snapshot version), else ``None``."""
    patch: str | None
    """The version's patch: its delta, or (on a snapshot) the event's patch kept for the log."""
    digest: str | None
    """The version's checksum; ``None`` for a record written before checksums."""


@dataclass
class RewritePlan:
    """What :func:`plan_rewrite` decided to write; empty when nothing changed."""

    head: str | None = None
    """The new head text, or ``None`` when the head is unchanged."""
    head_digest: str | None = None
    """The new head's checksum (``None`` also when the head had none)."""
    rows: dict[int, Body] = field(default_factory=dict)
    """Kept versions whose snapshot, patch or checksum changed: their new bodies, whole."""
    events: dict[int, str] = field(default_factory=dict)
    """Events whose text changed, by version."""
    changed: int = 0
    """Bodies changed: the head, each snapshot, each patch, each event counts one."""


def rewrite_text(
    task_id: str, version: int | None, text: str, fn: JsonFn, *, what: str
) -> str | None:
    """``dumps(fn(json.loads(text)))`` when ``fn`` changes the value, else ``None``.

    ``what`` names the body in the ``StateCorrupted`` a body that is not JSON raises.
    """
    value = _parse(task_id, version, text, what)
    new = fn(value)
    if new is value or new == value:
        return None
    return _dumps(task_id, version, new, what)


def plan_rewrite(
    task_id: str,
    fn: JsonFn,
    *,
    version: int,
    head: str | bytes,
    head_digest: Any,
    rows: Sequence[Body],
    events: Mapping[int, str],
) -> RewritePlan:
    """What to write to apply ``fn`` to a task stored as ``head`` (at ``version``),
    ``rows`` (its kept versions, any order) and ``events`` (its event texts).

    Checks what it reads as loading does and raises ``StateCorrupted`` on damage;
    a function that breaks what it must keep (a delta no longer applies, a state no
    longer says which task and version it is) is a ``StoreError``. Either way, and
    when ``fn`` raises, nothing is to be written.
    """
    plan = RewritePlan()
    current = read_head(task_id, version, head, head_digest)
    new_head = fn(current)
    if new_head is not current and new_head != current:
        _check_state(task_id, version, new_head, "the head")
        plan.head = _dumps(task_id, version, new_head, "the head")
        plan.head_digest = digest(plan.head) if head_digest is not None else None
        plan.changed += 1
    chain = _Chain(task_id, fn)
    for row in sorted(rows, key=lambda body: body.version):
        body, changed = chain.snapshot(row) if row.snapshot is not None else chain.delta(row)
        if body != row:
            plan.rows[row.version] = body
            plan.changed += changed
    for number in sorted(events):
        text = rewrite_text(task_id, number, events[number], fn, what="its event")
        if text is not None:
            plan.events[number] = text
            plan.changed += 1
    return plan


class _Chain:
    """The kept versions walked in order, replaying the old and (once they differ) the
    new chain.

    ``old`` is the state the stored bodies rebuild (each version is checked against its
    stored checksum on the way); ``new`` the state the rewritten bodies will rebuild,
    kept only while it differs from ``old`` (``dirty``), so a chain nothing changed in
    costs one replay.
    """

    def __init__(self, task_id: str, fn: JsonFn) -> None:
        self.task_id = task_id
        self.fn = fn
        self.old: Any = None
        self.new: Any = None
        self.dirty = False
        self.previous = 0

    def snapshot(self, row: Body) -> tuple[Body, int]:
        """A snapshot version's new bodies and how many of them changed."""
        assert row.snapshot is not None
        task_id, version = self.task_id, row.version
        snapshot, patch, checksum, changed = row.snapshot, row.patch, row.digest, 0
        self.old = load_document(task_id, version, row.snapshot)
        verify_document(task_id, version, self.old, row.digest)
        candidate = self.fn(load_document(task_id, version, row.snapshot))
        self.dirty = candidate is not self.old and candidate != self.old
        self.new = None
        if self.dirty:
            _check_state(task_id, version, candidate, "the snapshot")
            snapshot = _dumps(task_id, version, candidate, "the snapshot")
            checksum = _checksum(row.digest, candidate, snapshot)
            self.new = candidate
            changed += 1
        if row.patch is not None:  # the event's patch, kept for the log: not in the chain
            text = rewrite_text(task_id, version, row.patch, self.fn, what="its patch")
            if text is not None:
                patch = text
                changed += 1
        self.previous = version
        return Body(version, snapshot, patch, checksum), changed

    def delta(self, row: Body) -> tuple[Body, int]:
        """A delta version's new bodies and how many of them changed."""
        task_id, version = self.task_id, row.version
        if self.old is None or version != self.previous + 1:
            raise StateCorrupted(task_id, version, "no snapshot to rebuild this version from")
        if row.patch is None:
            raise StateCorrupted(task_id, version, "delta has no patch")
        patch, checksum, changed = row.patch, row.digest, 0
        ops = _parse(task_id, version, row.patch, "its patch")
        new_ops = self.fn(_parse(task_id, version, row.patch, "its patch"))
        if new_ops is not ops and new_ops != ops:
            patch = _dumps(task_id, version, new_ops, "its patch")
            changed += 1
            if not self.dirty:
                self.new, self.dirty = copy.deepcopy(self.old), True
        if self.dirty:
            self.new = _apply(task_id, version, self.new, new_ops, rewritten=True)
        self.old = _apply(task_id, version, self.old, ops, rewritten=False)
        verify_document(task_id, version, self.old, row.digest)
        if self.dirty:
            _check_state(task_id, version, self.new, "the rebuilt state")
            checksum = _checksum(row.digest, self.new, None)
        self.previous = version
        return Body(version, None, patch, checksum), changed


def _checksum(stored: str | None, document: Any, text: str | None) -> str | None:
    """A version's new checksum, in the form ``stored`` has (none when it has none)."""
    if stored is None:
        return None
    if stored.startswith(SORTED_PREFIX):
        return sorted_digest(document)
    return digest(text if text is not None else dumps(document))


def _apply(task_id: str, version: int, document: Any, ops: Any, *, rewritten: bool) -> Any:
    try:
        return jsonpatch.apply_patch(document, ops, in_place=True)
    except (
        ValueError,
        TypeError,
        jsonpatch.JsonPatchException,
        jsonpatch.JsonPointerException,
    ) as exc:
        if rewritten:
            raise StoreError(
                f"task {task_id!r} version {version}: the rewritten delta does not apply "
                f"({exc}); the rewrite must keep the structure; nothing was written"
            ) from exc
        raise StateCorrupted(task_id, version, f"delta does not apply ({exc})") from exc


def _check_state(task_id: str, version: int, document: Any, what: str) -> None:
    if not isinstance(document, dict):
        raise StoreError(
            f"task {task_id!r} version {version}: the rewrite made {what} something other "
            "than a JSON object; nothing was written"
        )
    try:
        check_head(task_id, version, document)
    except StateCorrupted as exc:
        raise StoreError(
            f"task {task_id!r} version {version}: the rewrite changed which task or version "
            f"{what} is ({exc.reason}); nothing was written"
        ) from exc


def _parse(task_id: str, version: int | None, text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise StateCorrupted(task_id, version, f"{what} is not valid JSON ({exc})") from exc


def _dumps(task_id: str, version: int | None, value: Any, what: str) -> str:
    try:
        return dumps(value)
    except (TypeError, ValueError) as exc:
        raise StoreError(
            f"task {task_id!r}: the rewrite made {what} something that is not JSON ({exc}); "
            "nothing was written"
        ) from exc
