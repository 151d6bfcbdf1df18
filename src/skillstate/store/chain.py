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

**Checksums.** The head is stored with :func:`digest` of its JSON text exactly as
:func:`dumps` writes it (``sha256:HEX``), and loading it checks the stored text
(:func:`read_head`). Each version that may be stored as a delta is stored with
:func:`sorted_digest` of the state it is: the same hash over the JSON text with
object keys sorted (``sha256-sorted:HEX``); a version that can only be a
snapshot gets the head's form. Rebuilding a version checks each snapshot it
starts from and the rebuilt document against it (:func:`rebuild`). Deltas use
the key-order-free form because a JSON Patch does not carry key order: a delta
may rebuild its state with keys in another order than the text that was
committed (a key re-added, a value whose keys were reordered), which is the same
state, not damage. A record without a digest was written before checksums and
loads unverified.

**Leases.** The claim rule (:func:`claim_generation`), the fencing check
(:func:`check_fence`) and the reading of a stored lease (:func:`read_lease`,
which reports a damaged one) are here too, for the backends that decide in
Python; PostgreSQL and Redis decide on the server and mirror them.
"""

from __future__ import annotations

import hashlib
import math
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import jsonpatch

from skillstate import _json
from skillstate.errors import LeaseHeld, LeaseLost, StateCorrupted, StoreError
from skillstate.events import Event
from skillstate.state.diff import JsonDocument
from skillstate.store.base import CheckpointInfo, Lease, check_commit
from skillstate.store.replay import apply_patch

__all__ = [
    "CHECKSUM_MISMATCH",
    "COMPRESS_FROM",
    "DEFAULT_MAX_CHAIN",
    "LEASE_HORIZON",
    "MAX_LEASE_TTL",
    "SORTED_PREFIX",
    "UNREADABLE_EXPIRY",
    "EncodedCommit",
    "Row",
    "chain_counters",
    "check_chain_counters",
    "check_fence",
    "check_head",
    "check_ttl",
    "claim_generation",
    "compress",
    "damaged_lease",
    "decompress",
    "digest",
    "dumps",
    "encode_commit",
    "held_lease",
    "lease_expired",
    "load_document",
    "plan_prune",
    "read_head",
    "read_lease",
    "rebuild",
    "repaired_generation",
    "restore_event",
    "salvage_lease",
    "sorted_digest",
    "take_snapshot",
    "verify_digest",
    "verify_document",
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


CHECKSUM_MISMATCH = "its checksum does not match: it was changed outside skillstate"
"""The reason of the ``StateCorrupted`` a record failing its checksum raises."""


def digest(text: str | bytes) -> str:
    """The checksum stored with the head: ``sha256:`` + hex of its UTF-8 JSON text."""
    data = text.encode() if isinstance(text, str) else text
    return "sha256:" + hashlib.sha256(data).hexdigest()


SORTED_PREFIX = "sha256-sorted:"
"""Leads a :func:`sorted_digest`; a plain ``sha256:`` is a :func:`digest` of exact text."""


def sorted_digest(document: Any) -> str:
    """The checksum of a version: :func:`digest` of its JSON with object keys sorted.

    Two documents get the same one exactly when they are equal as JSON, whatever
    the order of their keys (``1`` and ``1.0`` still differ).
    """
    return SORTED_PREFIX + hashlib.sha256(_sorted_text(document).encode()).hexdigest()


def _sorted_text(document: Any, *, legacy: bool = False) -> str:
    encode = _json.dumps_sorted_stdlib if legacy else _json.dumps_sorted
    try:
        return encode(document)
    except TypeError:  # keys of mixed types do not sort; as JSON they are all strings
        return encode(_json.loads(dumps(document)))


def verify_document(task_id: str, version: int | None, document: Any, expected: Any) -> None:
    """Raise ``StateCorrupted`` unless ``document`` has the stored checksum ``expected``.

    ``expected`` is a :func:`sorted_digest`, a :func:`digest` (checked against
    ``dumps(document)``), or ``None`` (written before checksums: not verified).
    A checksum written before the store used orjson may hash the stdlib's text,
    which writes some exponents differently (``1e-07``): that text is tried too.
    """
    if expected is None:
        return
    if isinstance(expected, bytes):
        expected = expected.decode("ascii", "replace")
    try:
        if isinstance(expected, str) and expected.startswith(SORTED_PREFIX):
            found = sorted_digest(document)
            if found != expected:
                legacy = _sorted_text(document, legacy=True)
                found = SORTED_PREFIX + hashlib.sha256(legacy.encode()).hexdigest()
        else:
            found = digest(dumps(document))
            if found != expected:
                found = digest(_json.dumps_stdlib(document))
    except (TypeError, ValueError, UnicodeEncodeError) as exc:  # a NaN a patch smuggled in
        raise StateCorrupted(task_id, version, f"rebuilt state is not JSON ({exc})") from exc
    if found != expected:
        raise StateCorrupted(task_id, version, CHECKSUM_MISMATCH)


def verify_digest(task_id: str, version: int | None, text: str | bytes, expected: Any) -> None:
    """Raise ``StateCorrupted`` unless ``text`` has the stored checksum ``expected``.

    ``None`` (a record written before checksums) is not verified. A stored checksum
    that is not text cannot match anything: that is a mismatch too.
    """
    if expected is None:
        return
    if isinstance(expected, bytes):
        expected = expected.decode("ascii", "replace")
    if expected != digest(text):
        raise StateCorrupted(task_id, version, CHECKSUM_MISMATCH)


def check_head(task_id: str, version: int, document: Mapping[str, Any]) -> None:
    """A stored state must say it is the task and version it is stored as.

    Every commit writes ``task_id`` and ``version`` into the state it stores, so a
    document that disagrees with its row was changed (or moved) outside skillstate.
    """
    for field, expected in (("task_id", task_id), ("version", version)):
        found = document.get(field)
        if found != expected or type(found) is not type(expected):
            raise StateCorrupted(
                task_id,
                version,
                f"the stored state says {found!r}, but it is stored as {expected!r}",
                field=field,
            )


def read_head(
    task_id: str, version: int, text: str | bytes, checksum: Any, *, verify: bool = True
) -> dict[str, Any]:
    """Parse a stored head; with ``verify``, check its checksum and that it belongs here."""
    if verify:
        verify_digest(task_id, version, text, checksum)
    document = load_document(task_id, version, text)
    if verify:
        check_head(task_id, version, document)
    return document


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
    digest: str = ""
    """The checksum of the head text ``state`` (:func:`digest`), stored with the head."""
    version_digest: str = ""
    """The checksum of the version, stored with its snapshot or delta: :func:`sorted_digest`
    when it may be stored as a delta, else the same as :attr:`digest`."""
    fence: int | None = None
    """The lease generation the commit must be made under (``None``: no check)."""

    @property
    def expected(self) -> int:
        return self.version - 1


def encode_commit(
    task_id: str,
    expected_version: int,
    state: Mapping[str, Any],
    event: Event,
    *,
    fence: int | None = None,
) -> EncodedCommit:
    """Check and serialize a commit; raises ``StoreError`` before anything is written."""
    version = check_commit(task_id, expected_version, state, event)
    if fence is not None and (isinstance(fence, bool) or not isinstance(fence, int)):
        raise StoreError(f"fence must be a lease generation (an int) or None, got {fence!r}")
    try:
        document = state.text if isinstance(state, JsonDocument) else dumps(state)
    except (TypeError, ValueError) as exc:
        raise StoreError(f"state of {task_id!r} is not JSON-serializable: {exc}") from exc
    try:
        event_text = event.model_dump_json(exclude={"patch"}, exclude_none=True)
        patch_text = dumps(event.patch) if event.patch else None
    except (TypeError, ValueError) as exc:  # pydantic's serialization errors are ValueErrors
        raise StoreError(f"event of {task_id!r} is not serializable: {exc}") from exc
    # Version 1 has nothing before it to apply a delta to: always a snapshot.
    is_delta = version > 1 and _is_delta(event.patch, version)
    try:
        checksum = digest(document)
        # A version stored whole is checked against its exact text, like the head; one
        # that may become a delta against the key-order-free form (see the module doc).
        version_checksum = sorted_digest(state) if is_delta else checksum
    except UnicodeEncodeError as exc:  # a lone surrogate: no backend can store it
        raise StoreError(
            f"state of {task_id!r} cannot be written: it is not valid Unicode text "
            f"({exc.reason} at position {exc.start})"
        ) from exc
    return EncodedCommit(
        task_id=task_id,
        version=version,
        state=document,
        # None fields are left out (they are the defaults): events are most of the
        # bytes of a long task after its deltas.
        event=event_text,
        patch=patch_text,
        is_delta=is_delta,
        digest=checksum,
        version_digest=version_checksum,
        fence=fence,
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


def chain_counters(chain_len: Any, chain_bytes: Any) -> tuple[int, int] | None:
    """The stored chain counters as counts, or ``None`` when either is damaged.

    They are written by skillstate alone (whole numbers, 0 or more); Redis hands them
    back as text, SQLite and JSON files can hold any type. A commit over damaged
    counters takes a snapshot, which resets them (:func:`take_snapshot` needs counts).
    """
    length, size = _count(chain_len), _count(chain_bytes)
    if length is None or size is None:
        return None
    return length, size


def check_chain_counters(task_id: str, version: int, chain_len: Any, chain_bytes: Any) -> None:
    """``StateCorrupted`` naming a stored chain counter that is not a count.

    A negative ``chain_len`` would stop snapshots for as many commits (loading an old
    version then replays that many patches), and one that is not a number failed the
    next commit with a raw TypeError: both are damage, reported on load and by
    ``doctor``. Any commit (a ``set`` or ``edit``, which load without this check)
    writes a snapshot and fresh counters.
    """
    for name, value in (("chain_len", chain_len), ("chain_bytes", chain_bytes)):
        if _count(value) is None:
            shown = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
            raise StateCorrupted(
                task_id,
                version,
                f"its chain counter {name} is {str(shown)[:40]!r}, not a whole number "
                "of 0 or more (changed outside skillstate); a set or edit rewrites it",
            )


def _count(value: Any) -> int | None:
    """A stored counter as an int (Redis's digits included), ``None`` if it is not one."""
    if isinstance(value, bytes | str):
        text = value.decode("ascii", "replace") if isinstance(value, bytes) else value
        # ASCII digits only (str.isdigit takes "²"), and few of them: never int("9" * 5000).
        return int(text) if 0 < len(text) <= 18 and text.isascii() and text.isdigit() else None
    if type(value) is int and value >= 0:
        return value
    return None


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
    digest: str | None = None
    """The version's checksum (:func:`sorted_digest`); ``None`` for a row written before
    checksums."""

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
        document = _json.loads(text)
    except ValueError as exc:
        raise StateCorrupted(task_id, version, f"stored state is not valid JSON ({exc})") from exc
    except RecursionError:
        raise StateCorrupted(task_id, version, "stored state is nested too deeply") from None
    if not isinstance(document, dict):
        raise StateCorrupted(task_id, version, "stored state is not a JSON object")
    return document


def restore_event(
    task_id: str, text: str | bytes, patch: str | None, version: int | None = None
) -> Event:
    """The event as committed, with its patch put back (if the delta is still kept).

    An event that does not parse is ``StateCorrupted`` naming ``version`` (the
    version it is stored under), never skipped: the audit trail does not hide damage.
    """
    try:
        event = Event.model_validate_json(text)
        if patch is not None:
            event = event.model_copy(update={"patch": _json.loads(patch)})
    except ValueError as exc:
        reason = " ".join(str(exc).split())
        raise StateCorrupted(task_id, version, f"stored event does not load ({reason})") from exc
    except RecursionError:
        raise StateCorrupted(task_id, version, "stored event is nested too deeply") from None
    if version is not None and (event.task_id != task_id or event.version != version):
        raise StateCorrupted(
            task_id,
            version,
            f"the stored event says task {event.task_id!r} version {event.version}",
            field="event",
        )
    return event


def rebuild(task_id: str, version: int, rows: Sequence[Row]) -> dict[str, Any]:
    """Replay ``rows`` (a snapshot, then consecutive deltas) up to ``version``.

    A gap, a missing snapshot or a patch that does not apply means the chain is
    broken: that is ``StateCorrupted``, never a silently different state. Each
    snapshot's text is checked against its row's checksum, and the rebuilt document
    against the checksum of ``version`` (rows without one are not checked).
    """
    if not rows or rows[0].snapshot is None:
        raise StateCorrupted(task_id, version, "no snapshot to rebuild this version from")
    if rows[-1].version != version:
        raise StateCorrupted(task_id, version, "the delta chain does not reach this version")
    document = _snapshot(task_id, rows[0])
    previous = rows[0].version
    for row in rows[1:]:
        if row.version != previous + 1:
            raise StateCorrupted(task_id, version, f"delta chain has a gap after {previous}")
        previous = row.version
        if row.snapshot is not None:
            # A later snapshot in the range is authoritative: start again from it.
            document = _snapshot(task_id, row)
            continue
        if row.patch is None:
            raise StateCorrupted(task_id, row.version, "delta has no patch")
        try:
            # The document and the parsed patch are this rebuild's own: applied in place.
            document = apply_patch(document, _json.loads(row.patch))
        except (
            ValueError,
            TypeError,  # a damaged patch jsonpatch trips over (e.g. removing from a string)
            jsonpatch.JsonPatchException,
            jsonpatch.JsonPointerException,
        ) as exc:
            raise StateCorrupted(task_id, row.version, f"delta does not apply ({exc})") from exc
        except RecursionError:
            raise StateCorrupted(task_id, row.version, "delta is nested too deeply") from None
    last = rows[-1]
    if last.snapshot is None:
        verify_document(task_id, version, document, last.digest)
    if not isinstance(document, dict):
        raise StateCorrupted(task_id, version, "rebuilt state is not a JSON object")
    check_head(task_id, version, document)
    return document


def _snapshot(task_id: str, row: Row) -> dict[str, Any]:
    assert row.snapshot is not None
    document = load_document(task_id, row.version, row.snapshot)
    verify_document(task_id, row.version, document, row.digest)
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


# ---------------------------------------------------------------------- leases

MAX_LEASE_TTL = 366 * 24 * 3600.0
"""The longest lease a claim may take, in seconds (a year). A stored expiry further
off than this (plus :data:`_LEASE_SLACK` for clocks) cannot have come from a claim:
it is a damaged lease."""

_LEASE_SLACK = 24 * 3600.0

LEASE_HORIZON = MAX_LEASE_TTL + _LEASE_SLACK
"""Seconds ahead of now beyond which a stored expiry is damage, not a claim's."""

UNREADABLE_EXPIRY = datetime.max.replace(tzinfo=timezone.utc)
"""What :func:`salvage_lease` reports for an expiry that cannot be read."""


def check_ttl(ttl: float) -> float:
    """``ttl`` as float seconds, if a claim may ask for it; else ``StoreError``."""
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not math.isfinite(ttl):
        raise StoreError(f"lease ttl must be a finite number of seconds, got {ttl!r}")
    if ttl > MAX_LEASE_TTL:
        raise StoreError(f"lease ttl must be at most {MAX_LEASE_TTL:.0f} seconds, got {ttl!r}")
    return float(ttl)


def damaged_lease(task_id: str, reason: str) -> StateCorrupted:
    """The error for a stored lease that cannot be read back as one a claim wrote."""
    return StateCorrupted(
        task_id, None, f"its lease is damaged ({reason}); force-release it to clear it"
    )


def _is_generation(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _epoch(value: Any) -> float | None:
    """Seconds since the epoch from a stored expiry: a number, ISO 8601 text or a datetime."""
    if isinstance(value, bytes):
        try:
            value = value.decode()
        except UnicodeDecodeError:
            return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            try:
                value = datetime.fromisoformat(value)
            except ValueError:
                return None
    if isinstance(value, datetime):
        stamp = value if value.tzinfo else value.replace(tzinfo=timezone.utc)
        return stamp.timestamp()
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def read_lease(
    task_id: str, worker: Any, expires: Any, generation: Any, *, now: float | None = None
) -> Lease:
    """A stored lease held by ``worker``, checked; a damaged one is ``StateCorrupted``.

    ``expires`` is seconds since the epoch (or ISO text, or a datetime). An expiry
    that does not read as a time, lies before 1970, or lies further ahead than any
    claim can reach, and a generation that is not a non-negative integer, make the
    lease damaged: it is reported, never silently taken over or trusted.
    """
    if not isinstance(worker, str):
        raise damaged_lease(task_id, f"its worker {worker!r} is not text")
    if not _is_generation(generation):
        raise damaged_lease(task_id, f"its generation {generation!r} is not a counter")
    stamp = _epoch(expires)
    if stamp is None or stamp < 0:
        raise damaged_lease(task_id, f"its expiry {expires!r} is not a time")
    limit = (time.time() if now is None else now) + LEASE_HORIZON
    if stamp > limit:
        raise damaged_lease(task_id, f"its expiry {expires!r} is absurdly far in the future")
    try:
        expires_at = datetime.fromtimestamp(stamp, timezone.utc)
    except (OverflowError, OSError, ValueError) as exc:  # pragma: no cover - bounded above
        raise damaged_lease(task_id, f"its expiry {expires!r} is not a time") from exc
    return Lease(task_id, worker, expires_at, generation)


def held_lease(
    task_id: str, worker: Any, expires: Any, generation: Any, *, now: float | None = None
) -> tuple[Lease | None, int]:
    """``(the held lease or None, the task's last generation)`` from a stored lease record.

    ``worker`` is ``None`` when the lease was released (the record keeps only the
    generation then). A damaged record is ``StateCorrupted`` (:func:`read_lease`).
    """
    if worker is None:
        if not _is_generation(generation):
            raise damaged_lease(task_id, f"its generation {generation!r} is not a counter")
        return None, generation
    lease = read_lease(task_id, worker, expires, generation, now=now)
    return lease, lease.generation


def salvage_lease(task_id: str, worker: Any, expires: Any, generation: Any) -> Lease:
    """What :meth:`Store.force_release` reports having dropped: whatever reads.

    An unreadable expiry becomes :data:`UNREADABLE_EXPIRY`, an unreadable generation 0,
    a worker that is not text its ``repr``.
    """
    try:
        return read_lease(task_id, worker, expires, generation)
    except StateCorrupted:
        pass
    stamp = _epoch(expires)
    try:
        expires_at = (
            datetime.fromtimestamp(stamp, timezone.utc) if stamp is not None else UNREADABLE_EXPIRY
        )
    except (OverflowError, OSError, ValueError):
        expires_at = UNREADABLE_EXPIRY
    return Lease(
        task_id,
        worker if isinstance(worker, str) else repr(worker),
        expires_at,
        generation if _is_generation(generation) else 0,
    )


def repaired_generation(generation: Any) -> int:
    """The generation to keep when a lease is force-released.

    A readable one is kept. An unreadable one is replaced by the current Unix time in
    seconds: above any generation a claim could have handed out, so no fence that a
    worker holds can match it, and the next claim counts on from there.
    """
    return generation if _is_generation(generation) else int(time.time())


def claim_generation(
    task_id: str, current: Lease | None, generation: int, worker: str, now: datetime
) -> int:
    """The generation a claim by ``worker`` gets; ``LeaseHeld`` while another holds it.

    ``current`` is the held lease (live or expired; ``None`` when never claimed or
    released) and ``generation`` the task's last generation (0 if never claimed).
    The holder renewing keeps its generation, even after its lease expired; any
    other claim (a takeover, or a claim after a release) gets the next one.
    """
    if current is None:
        return generation + 1
    if current.worker == worker:
        return current.generation
    if current.expires_at > now:
        raise LeaseHeld(task_id, current.worker, current.expires_at)
    return max(generation, current.generation) + 1


def check_fence(task_id: str, fence: int | None, worker: Any, generation: Any) -> None:
    """``LeaseLost`` unless the task's lease is held with generation ``fence``.

    ``worker`` is the stored holder (``None`` when released or never claimed).
    ``fence=None`` checks nothing. Expiry does not matter: a lease nobody took over
    is still the holder's.
    """
    if fence is None:
        return
    if worker is None:
        raise LeaseLost(task_id, fence, None)
    if not _is_generation(generation):
        raise damaged_lease(task_id, f"its generation {generation!r} is not a counter")
    if generation != fence:
        raise LeaseLost(task_id, fence, generation)
