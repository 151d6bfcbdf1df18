"""Delta chains, shared by every backend: encode a commit, rebuild a version, plan a prune.

A task's kept versions form chains: a full *snapshot* followed by *deltas*, each
the JSON Patch from the version before. A backend stores, per version, either the
snapshot text or the patch text (plus the patch of a snapshot version, for the
audit log), and per task the head document whole plus two counters: how many
deltas and how many bytes follow the last snapshot.

When to snapshot (:func:`take_snapshot`) follows the revlog rule: once the deltas
since the last snapshot add up to the size of the state itself, write the state
whole. Snapshot bytes then grow geometrically with the state, so the total stays
proportional to what actually changed: bytes per step stay flat whether the
state is a fixed-size card or grows every step. ``max_chain`` bounds how many
patches loading an old version may replay.

Backends keep this logic in one place so they cannot drift apart; the Redis
backend mirrors :func:`take_snapshot` in its Lua script.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import jsonpatch

from skillstate import _json
from skillstate.errors import StateCorrupted, StoreError
from skillstate.events import Event
from skillstate.state.diff import JsonDocument
from skillstate.store.base import CheckpointInfo, Lease, check_commit

__all__ = [
    "COMPRESS_FROM",
    "DEFAULT_MAX_CHAIN",
    "EncodedCommit",
    "Row",
    "compress",
    "decompress",
    "dumps",
    "encode_commit",
    "lease_expired",
    "load_document",
    "plan_prune",
    "rebuild",
    "restore_event",
    "take_snapshot",
]

DEFAULT_MAX_CHAIN = 500
"""At most this many deltas follow a snapshot: bounds the replay of an old version
(about 5 ms) without making a growing state pay for frequent full copies."""


COMPRESS_FROM = 768
"""Stored bodies (snapshots, patches, events) at least this many characters long are
zlib-compressed by the backends that store bytes. Agent text compresses about 3×;
below this size zlib costs more time per commit than the bytes are worth."""


def compress(text: str) -> bytes:
    """zlib level 1: on the commit path, speed matters more than the last few percent."""
    return zlib.compress(text.encode(), 1)


def decompress(task_id: str, version: int | None, data: bytes) -> str:
    """The text of a compressed body; a body that does not decompress is corrupted."""
    try:
        return zlib.decompress(data).decode()
    except (zlib.error, UnicodeDecodeError) as exc:
        raise StateCorrupted(task_id, version, f"stored body does not decompress ({exc})") from exc


def dumps(value: Any) -> str:
    """Compact JSON, the form every backend stores."""
    return _json.dumps(value)


@dataclass(frozen=True)
class EncodedCommit:
    """One commit, serialized once, ready for any backend to write."""

    task_id: str
    version: int
    """The version being written."""
    state: str
    """The new head document."""
    event: str
    """The event without its patch (the patch is stored once, with the checkpoint)."""
    patch: str | None
    """The event's patch, stored once with the checkpoint (``None`` when empty)."""
    is_delta: bool
    """Whether ``patch`` turns the previous version into this one (else: snapshot)."""

    @property
    def expected(self) -> int:
        return self.version - 1


def encode_commit(
    task_id: str, expected_version: int, state: Mapping[str, Any], event: Event
) -> EncodedCommit:
    """Check and serialize a commit; raises ``StoreError`` before anything is written."""
    version = check_commit(task_id, expected_version, state, event)
    try:
        document = state.text if isinstance(state, JsonDocument) else dumps(state)
    except (TypeError, ValueError) as exc:
        raise StoreError(f"state of {task_id!r} is not JSON-serializable: {exc}") from exc
    try:
        event_text = event.model_dump_json(exclude={"patch"}, exclude_none=True)
        patch_text = dumps(event.patch) if event.patch else None
    except (TypeError, ValueError) as exc:  # pydantic's serialization errors are ValueErrors
        raise StoreError(f"event of {task_id!r} is not serializable: {exc}") from exc
    return EncodedCommit(
        task_id=task_id,
        version=version,
        state=document,
        # None fields are left out (they are the defaults): events are most of the
        # bytes of a long task after its deltas.
        event=event_text,
        patch=patch_text,
        # Version 1 has nothing before it to apply a delta to: always a snapshot.
        is_delta=version > 1 and _is_delta(event.patch, version),
    )


def _is_delta(patch: Sequence[Mapping[str, Any]], version: int) -> bool:
    # Every real step changes /version, so a patch that does not set it was not built
    # from the stored head (or was not built at all): snapshot rather than trust it.
    return any(
        op.get("op") in {"replace", "add"}
        and op.get("path") == "/version"
        and op.get("value") == version
        for op in patch
    )


def take_snapshot(chain_len: int, chain_bytes: int, commit: EncodedCommit, max_chain: int) -> bool:
    """Whether this commit stores the state whole rather than as a delta."""
    if not commit.is_delta or commit.patch is None or chain_len + 1 > max_chain:
        return True
    return chain_bytes + len(commit.patch) >= len(commit.state)


@dataclass(frozen=True)
class Row:
    """One stored checkpoint as a backend reads it back."""

    version: int
    snapshot: str | None
    patch: str | None
    created_at: datetime

    def info(self, task_id: str) -> CheckpointInfo:
        body = self.snapshot if self.snapshot is not None else self.patch or ""
        return CheckpointInfo(
            task_id=task_id,
            version=self.version,
            created_at=self.created_at,
            snapshot=self.snapshot is not None,
            size=len(body.encode()),
        )


def load_document(task_id: str, version: int | None, text: str | bytes) -> dict[str, Any]:
    """Parse a stored state; a record that is not a JSON object is ``StateCorrupted``."""
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise StateCorrupted(task_id, version, f"stored state is not valid JSON ({exc})") from exc
    if not isinstance(document, dict):
        raise StateCorrupted(task_id, version, "stored state is not a JSON object")
    return document


def restore_event(task_id: str, text: str | bytes, patch: str | None) -> Event:
    """The event as committed, with its patch put back (if the delta is still kept)."""
    try:
        event = Event.model_validate_json(text)
        if patch is not None:
            event = event.model_copy(update={"patch": json.loads(patch)})
    except ValueError as exc:
        raise StateCorrupted(task_id, None, f"stored event does not load ({exc})") from exc
    return event


def rebuild(task_id: str, version: int, rows: Sequence[Row]) -> dict[str, Any]:
    """Replay ``rows`` (a snapshot, then consecutive deltas) up to ``version``.

    A gap, a missing snapshot or a patch that does not apply means the chain is
    broken: that is ``StateCorrupted``, never a silently different state.
    """
    if not rows or rows[0].snapshot is None:
        raise StateCorrupted(task_id, version, "no snapshot to rebuild this version from")
    if rows[-1].version != version:
        raise StateCorrupted(task_id, version, "the delta chain does not reach this version")
    document = load_document(task_id, rows[0].version, rows[0].snapshot)
    previous = rows[0].version
    for row in rows[1:]:
        if row.version != previous + 1:
            raise StateCorrupted(task_id, version, f"delta chain has a gap after {previous}")
        previous = row.version
        if row.snapshot is not None:
            # A later snapshot in the range is authoritative: start again from it.
            document = load_document(task_id, row.version, row.snapshot)
            continue
        if row.patch is None:
            raise StateCorrupted(task_id, row.version, "delta has no patch")
        try:
            ops = json.loads(row.patch)
            document = jsonpatch.apply_patch(document, ops, in_place=True)
        except (ValueError, jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
            raise StateCorrupted(task_id, row.version, f"delta does not apply ({exc})") from exc
    return document


def plan_prune(
    task_id: str, infos: Sequence[CheckpointInfo], *, keep_last: int, keep_every: int | None
) -> tuple[list[int], list[int]]:
    """``(kept, deleted)`` versions for a retention policy. Never breaks a chain.

    Kept: the head, the last ``keep_last`` versions, every ``keep_every``-th one;
    then, for each of those stored as a delta, every row back to its snapshot.
    """
    if keep_last < 1:
        raise StoreError("keep_last must be >= 1: the head is always kept")
    if keep_every is not None and keep_every < 1:
        raise StoreError("keep_every must be >= 1")
    ordered = sorted(infos, key=lambda info: info.version)
    if not ordered:
        return [], []
    wanted = {info.version for info in ordered[-keep_last:]}
    if keep_every:
        wanted |= {info.version for info in ordered if info.version % keep_every == 0}
    kept: set[int] = set()
    for index, info in enumerate(ordered):
        if info.version not in wanted:
            continue
        cursor = index
        while True:
            kept.add(ordered[cursor].version)
            if ordered[cursor].snapshot:
                break
            cursor -= 1
            if cursor < 0 or ordered[cursor].version != ordered[cursor + 1].version - 1:
                raise StateCorrupted(
                    task_id, info.version, "delta chain is broken: refusing to prune"
                )
    deleted = [info.version for info in ordered if info.version not in kept]
    return sorted(kept), deleted


def lease_expired(lease: Lease | None, worker: str, now: datetime | None = None) -> bool:
    """Whether ``worker`` may take (or renew) ``lease``."""
    if lease is None or lease.worker == worker:
        return True
    return lease.expires_at <= (now or datetime.now(timezone.utc))
