"""The ``Store`` protocol: where states, their checkpoints, events and artifacts live.

Every backend implements the same small protocol and passes the same contract
suite (``tests/contract/``). The store is schema-agnostic: it keeps plain JSON
documents; validating them into a state class is the runtime's job, which is what
lets a later schema migration read old checkpoints.

The hard rules every backend keeps:

* :meth:`Store.commit` is an atomic compare-and-set on the version. Either the new
  head, its checkpoint and its event are all written, or none is; a writer that
  read an old version gets :class:`~skillstate.errors.StaleState`.
* Checkpoints are *deltas*: the event's JSON Patch is what is stored for most
  versions, with a full snapshot only when the chain since the last one has grown
  as large as the state itself (or ``max_chain`` long). Bytes per step therefore
  stay flat however large the state grows, and any kept version loads exactly.
* The head is stored whole, so loading it never replays a chain.
* :meth:`Store.prune` never deletes the head and never breaks a delta chain.
* Every version carries a checksum: the head ``sha256:`` of its exact JSON text
  (:func:`skillstate.store.chain.digest`), each stored version the same over its
  JSON with keys sorted (:func:`skillstate.store.chain.sorted_digest`, since a
  delta does not keep key order). :meth:`Store.load` and :meth:`Store.checkpoint`
  verify them, so a record changed outside skillstate is
  :class:`~skillstate.errors.StateCorrupted`, never silently loaded. Records
  written before checksums existed load unverified.
* :meth:`Store.rewrite` changes stored bodies in place (re-sealing after a key
  rotation): atomically per task, checksums recomputed, never the versions, the
  layout or the event order (:mod:`skillstate.store.rewriting`).
* :meth:`Store.post` appends a message to a task's *inbox* and :meth:`Store.inbox`
  reads it back: an append-only list per task, apart from the card, numbered
  1, 2, 3... with no gap and no repeat however many writers post at once. It is
  how the world reaches a task a worker holds (whose card only the holder may
  commit): the runtime reads what it has not seen at a step boundary and records
  how far it read in its own commit (:mod:`skillstate.control.inbox`).
* A task id is a non-empty string without NUL that encodes as UTF-8
  (:func:`check_task_id`); every method refuses any other before touching the
  backend.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Protocol, runtime_checkable

from skillstate.errors import StoreError, UsageError
from skillstate.events import Event

__all__ = [
    "Checkpoint",
    "CheckpointInfo",
    "HeadInfo",
    "InboxMessage",
    "Lease",
    "PruneResult",
    "Store",
    "artifact_ref",
    "check_commit",
    "check_task_id",
    "is_reserved",
]


@dataclass(frozen=True)
class Checkpoint:
    """One committed version of a task's state."""

    task_id: str
    version: int
    """1 for the first commit; the head has the highest."""
    state: dict[str, Any]
    """The state as plain JSON (``AgentState.to_json()``)."""
    created_at: datetime
    """When the version was committed (UTC)."""


@dataclass(frozen=True)
class CheckpointInfo:
    """What :meth:`Store.checkpoints` lists: a kept version, without its state."""

    task_id: str
    version: int
    created_at: datetime
    snapshot: bool
    """True when the version is stored whole; False when it is a delta on the previous one."""
    size: int
    """Bytes of the stored body (the snapshot, or the patch)."""


@dataclass(frozen=True)
class InboxMessage:
    """One message in a task's inbox (:meth:`Store.post`, :meth:`Store.inbox`)."""

    seq: int
    """Its place in the task's inbox: 1 for the first message, then 2, 3... with no gap."""
    kind: str
    """What it is (``"message"``, ``"cancel"``, ``"signal"``...): a short lower-case name."""
    body: dict[str, Any]
    """Its content, as plain JSON (at most :data:`skillstate.store.inbox.MAX_BODY_BYTES`)."""
    at: datetime
    """When it was posted (UTC)."""


@dataclass(frozen=True)
class Lease:
    """A worker's claim on a task, valid until ``expires_at`` unless renewed."""

    task_id: str
    worker: str
    expires_at: datetime
    generation: int = 0
    """The fencing token: it grows by one each time a *different* worker takes the
    task (a fresh claim, or a takeover of an expired lease); renewing keeps it. A
    commit that carries an older generation than the task's is refused
    (:class:`~skillstate.errors.LeaseLost`), so a worker that was taken over can
    never write again."""

    def live(self, now: datetime | None = None) -> bool:
        """Whether the lease still holds at ``now`` (default: the current time)."""
        return self.expires_at > (now or datetime.now(timezone.utc))


@dataclass(frozen=True)
class HeadInfo:
    """What :meth:`Store.heads` lists per task: its head's summary, read as stored.

    Nothing here is validated against an agent's state class or checked against the
    head's checksum: it is what the store holds, for listing. A record that does not
    read is still listed, with ``problem`` saying why.
    """

    task_id: str
    version: int | None
    """The stored version (``None`` when the record's version does not read)."""
    updated_at: datetime | None
    """When the head was committed (UTC; ``None`` when the stored time does not read)."""
    status: str | None = None
    current_step: str | None = None
    agent: str | None = None
    """The card's ``status``, ``current_step`` and ``agent`` as stored: text as it is,
    another JSON value as its JSON text, ``None`` when absent or the head does not read."""
    steps: int | None = None
    """The card's ``steps_taken`` (steps completed over the task's life), ``None`` when
    it is absent or not an integer (a card older than the field)."""
    tokens: int | None = None
    """Model tokens the task has used, prompt plus completion (the card's ``usage``);
    ``None`` when the card records no usage."""
    lease: Lease | None = None
    """The task's lease while a worker holds it, live or expired; ``None`` when none
    does (never claimed, or released)."""
    wait_until: datetime | None = None
    """The deadline of the card's ``wait`` (UTC) while the task waits for a time or a
    signal with a timeout (:mod:`skillstate.control.waits`); ``None`` otherwise, or when
    the stored value does not read as a time."""
    parent: str | None = None
    """The card's ``parent.task_id``: the task that spawned this one (fan-out,
    :mod:`skillstate.fanout`); ``None`` for a root task or a head that does not read."""
    problem: str | None = None
    """Why the head record does not read (not JSON, not an object, no version...): one
    line. ``None`` when it reads."""
    lease_problem: str | None = None
    """Why the stored lease does not read; ``lease`` is then what could be salvaged
    (an unreadable expiry as ``datetime.max``)."""


@dataclass(frozen=True)
class PruneResult:
    """What :meth:`Store.prune` did."""

    task_id: str
    kept: list[int] = field(default_factory=list)
    deleted: list[int] = field(default_factory=list)


@runtime_checkable
class Store(Protocol):
    """Persistence for tasks: memory, SQLite, files, PostgreSQL, Redis."""

    url: str
    """The URL the store was opened from, with any password masked."""

    def load(self, task_id: str, *, verify: bool = True) -> Checkpoint:
        """The head version. Raises :class:`~skillstate.errors.TaskNotFound`.

        The head is checked before it is returned: its checksum must match (a head
        edited outside skillstate is :class:`~skillstate.errors.StateCorrupted`), and
        its ``task_id`` and ``version`` fields must be the task and version it is
        stored as. ``verify=False`` skips both checks and returns the head as stored
        (it must still be a JSON object): what a repair (``set``, ``edit``) reads a
        damaged head with. :attr:`Checkpoint.version` is always the stored version,
        whatever the document says.
        """
        ...

    def commit(
        self,
        task_id: str,
        expected_version: int,
        state: Mapping[str, Any],
        event: Event,
        *,
        fence: int | None = None,
    ) -> int:
        """Write ``state`` as version ``expected_version + 1`` with its event, atomically.

        ``expected_version`` is the version the writer read (0 to create the task).
        Raises :class:`~skillstate.errors.StaleState` and writes nothing when the
        stored head is not ``expected_version``. Returns the new version.

        ``fence`` is the writer's lease generation (:attr:`Lease.generation`). When
        given, the commit also checks, in the same atomic step, that the task's
        lease still has that generation, and raises
        :class:`~skillstate.errors.LeaseLost` (writing nothing) when another worker
        has claimed it since. ``None`` skips the check (a person's edit, a
        single-process embedding without leases).

        ``event.patch`` must turn the stored head into ``state`` (the runtime
        builds it so); the store keeps it as the version's delta. A patch that
        does not set ``/version`` is taken as unknown and the version is
        snapshotted instead.
        """
        ...

    def checkpoint(self, task_id: str, version: int) -> Checkpoint:
        """Any kept version, rebuilt exactly. Raises ``TaskNotFound`` or ``StoreError``.

        The rebuilt document is checked against the version's checksum (and every
        snapshot on the way against its own): a mismatch is ``StateCorrupted``."""
        ...

    def checkpoints(self, task_id: str) -> list[CheckpointInfo]:
        """Every kept version, oldest first, without states (cheap)."""
        ...

    def events(self, task_id: str, *, since: int = 0) -> list[Event]:
        """Events of versions ``> since``, oldest first, as stored.

        Events outlive pruning; a pruned version's event comes back without its patch.
        A stored event that does not parse is ``StateCorrupted`` naming it; an event
        that is missing altogether is left out, so the gap shows as a missing version
        (no backend fills it in or hides it).
        """
        ...

    def tasks(self) -> list[str]:
        """Ids of every task in the store, sorted."""
        ...

    def heads(self) -> list[HeadInfo]:
        """Every task's head summary and lease, sorted by task id (read-only, bulk).

        One pass over the store, not a :meth:`load` per task: for listing many tasks.
        Heads are read as stored (no checksum, no validation); a head or lease that
        does not read is listed with :attr:`HeadInfo.problem` (or ``lease_problem``)
        instead of raising. Only the store being unreachable raises.
        """
        ...

    def prune(self, task_id: str, *, keep_last: int, keep_every: int | None = None) -> PruneResult:
        """Delete old checkpoints, keeping the last ``keep_last`` versions, every
        ``keep_every``-th version, the head, and whatever snapshot and deltas a kept
        version is rebuilt from. Events are kept. Atomic."""
        ...

    def claim(self, task_id: str, worker: str, ttl: float) -> Lease:
        """Hold ``task_id`` for ``ttl`` seconds (renewing if ``worker`` holds it already).

        Raises :class:`~skillstate.errors.LeaseHeld` while another worker's lease
        is live; an expired lease is taken over. The lease coordinates workers;
        the version check in :meth:`commit` is what keeps the state safe, and the
        returned :attr:`Lease.generation`, passed to :meth:`commit` as ``fence``,
        keeps a worker that was taken over from writing.

        The generation is 1 for the first claim ever, and grows by one whenever a
        claim is not a renewal: after a release, or when another worker takes an
        expired lease over. The holder renewing keeps it, even if its lease had
        expired, as long as nobody claimed the task in between. A stored lease whose
        expiry or generation is unreadable (or absurdly far in the future) is
        ``StateCorrupted`` naming the task; :meth:`force_release` clears it.
        ``ttl`` must be finite and at most a year
        (:data:`skillstate.store.chain.MAX_LEASE_TTL`).
        """
        ...

    def release(self, task_id: str, worker: str) -> None:
        """Drop ``worker``'s lease on ``task_id``; a no-op when it holds none.

        The task's lease generation is kept (the next claim gets the next one)."""
        ...

    def lease(self, task_id: str) -> Lease | None:
        """The task's current lease, live or expired; ``None`` when it has none
        (never claimed, or released). A damaged lease is ``StateCorrupted``."""
        ...

    def force_release(self, task_id: str) -> Lease | None:
        """Drop whoever's lease on ``task_id`` (an operator's ``unlock``); returns it.

        The generation is kept, so the worker that held it can no longer commit
        (a commit fenced with it is refused until someone claims the task, and then
        the claim has the next generation). ``None`` when no lease was held.

        A damaged lease is cleared too; what it returns then is what could be read
        (an unreadable expiry as ``datetime.max``, an unreadable generation as 0, and
        the stored generation is reset to the current Unix time in seconds, above
        any a claim could have handed out)."""
        ...

    def put_artifact(self, data: bytes, *, media_type: str = "application/octet-stream") -> str:
        """Store raw bytes, content-addressed; returns ``sha256:<hex>``. Idempotent."""
        ...

    def get_artifact(self, ref: str) -> bytes:
        """Bytes stored under ``ref``. Raises :class:`~skillstate.errors.ArtifactNotFound`."""
        ...

    def rewrite(self, task_id: str, expected_version: int, fn: Callable[[Any], Any]) -> int:
        """Apply ``fn`` to every JSON body the task has stored and write back what changed.

        The bodies are the head, every kept snapshot, every kept delta patch (and the
        event patch a snapshot version keeps) and every event (its JSON, without the
        patch). ``fn`` gets each one freshly parsed and returns it unchanged or a
        replacement; it must not mutate its argument, and it changes string leaves
        only, never structure (:mod:`skillstate.store.rewriting`). The checksums the
        store keeps are recomputed; versions, event order, which versions are
        snapshots or deltas, timestamps and leases stay as they are. Returns how many
        bodies changed (0 writes nothing).

        Atomic per task: after a crash at any instant the task is all-old or all-new.
        Raises :class:`~skillstate.errors.StaleState` and writes nothing when the head
        is no longer ``expected_version``; ``StateCorrupted`` (nothing written) when
        what is stored does not check out as a load would; whatever ``fn`` raises
        propagates, with nothing written.

        The version does not move, so a writer that read the head before the rewrite
        and commits after it is not refused by the version check: callers that
        rewrite a task a worker may be running hold its lease (as
        :func:`skillstate.engine.rekey.rekey_task` does), which fences such commits.
        """
        ...

    def artifact_refs(self) -> list[str]:
        """The refs of every stored artifact, sorted."""
        ...

    def replace_artifact(self, ref: str, data: bytes) -> None:
        """Store ``data`` under the existing ``ref``, replacing its bytes (atomically).

        The ref stays the artifact's name, so events and evidence that point at it
        stay valid; it is no longer the hash of the bytes: a re-sealed artifact's ref
        is the hash of its first sealing. (A later :meth:`put_artifact` of the first
        bytes keeps the replaced ones: refs are written once.) Raises
        :class:`~skillstate.errors.ArtifactNotFound` when nothing is stored under ``ref``.
        """
        ...

    def delete_task(self, task_id: str) -> bool:
        """Remove every record of the task, atomically: its head, kept versions, events,
        inbox and lease. Returns whether anything was there.

        After a crash at any instant the task is whole or gone. Artifacts are left
        alone (other tasks may share them: :mod:`skillstate.ops.delete` decides), and so
        are records under :data:`RESERVED`. A writer that read the task before commits
        nothing after (its version check fails); a commit of version 1 creates the
        task afresh.
        """
        ...

    def delete_artifact(self, ref: str, *, unused_since: datetime | None = None) -> bool:
        """Remove the artifact stored under ``ref``; whether there was one to remove.

        With ``unused_since``, only when it was last put before that time, checked
        atomically with the removal: :meth:`put_artifact` of bytes already stored marks
        them as put again, so a writer that puts an artifact and then commits a
        reference to it keeps it through a garbage collection (:mod:`skillstate.ops.gc`).
        """
        ...

    def post(self, task_id: str, kind: str, body: Mapping[str, Any]) -> int:
        """Append a message to the task's inbox; returns its sequence number.

        The first message of a task is 1, each later one the next number: two writers
        posting at once (threads, processes, hosts) get different numbers and both
        messages are kept. The append is atomic and durable when it returns: after a
        crash the message is there whole or not at all. The card is not touched, so a
        post never conflicts with the worker holding the task.

        ``kind`` is a short lower-case name (:data:`skillstate.store.inbox.KIND`);
        ``body`` a JSON object of at most
        :data:`~skillstate.store.inbox.MAX_BODY_BYTES` bytes as compact UTF-8 JSON.
        Anything else is :class:`~skillstate.errors.MessageRefused` and nothing is
        written; a task that was never committed is
        :class:`~skillstate.errors.TaskNotFound`.
        """
        ...

    def inbox(self, task_id: str, *, after: int = 0) -> list[InboxMessage]:
        """The task's messages numbered above ``after``, oldest first.

        ``TaskNotFound`` for a task that was never committed; a stored message that
        does not read is ``StateCorrupted`` naming it. Messages are kept for the
        task's life (:meth:`prune` keeps them, as it keeps events).
        """
        ...

    def restore(
        self,
        task_id: str,
        checkpoints: Sequence[Checkpoint],
        events: Sequence[Event],
        inbox: Sequence[InboxMessage],
        *,
        overwrite: bool = False,
    ) -> int:
        """Write a whole task from elsewhere (``import``, ``copy``) in one atomic step.

        ``checkpoints`` are its kept versions (the highest is the head), ``events``
        every event it has (a kept version's carries its patch), ``inbox`` its messages
        numbered 1, 2, 3... After a crash at any instant the task is whole or absent
        (with ``overwrite``, whole or still the old one). What is written loads and
        verifies like anything committed (:mod:`skillstate.store.restoring`); no lease is
        written. A task that exists is :class:`~skillstate.errors.TaskExists` unless
        ``overwrite``; a set of records that does not hold together (a kept version
        without its event, a state naming another task) is ``StoreError``; either way
        nothing is written. Artifacts are put beforehand (:meth:`put_artifact`).
        Returns the head version.
        """
        ...

    def close(self) -> None:
        """Release connections. Safe to call twice."""
        ...


def artifact_ref(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


RESERVED = "skillstate:"
"""The prefix of records skillstate keeps in a store beside the tasks (the schedules:
``skillstate:schedules``). No task is created under it, and task lists leave them out."""


def is_reserved(task_id: str) -> bool:
    """Whether ``task_id`` names one of skillstate's own records, not a task."""
    return task_id.startswith(RESERVED)


def check_task_id(task_id: object) -> str:
    """``task_id`` if every backend can store it; else a one-line ``UsageError``.

    A task id is a non-empty string without NUL characters that encodes as UTF-8
    (lone surrogates, which a non-UTF-8 command line turns into, do not).
    """
    if not isinstance(task_id, str) or not task_id:
        raise UsageError(f"invalid task id {task_id!r}: it must be a non-empty string")
    if "\x00" in task_id:
        raise UsageError(f"invalid task id {task_id!r}: it contains a NUL character")
    try:
        task_id.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise UsageError(
            f"invalid task id {task_id!r}: it is not valid Unicode text "
            f"({exc.reason} at position {exc.start})"
        ) from exc
    return task_id


def check_commit(
    task_id: str, expected_version: int, state: Mapping[str, Any], event: Event
) -> int:
    """Shared argument checks of ``commit``; returns the version being written.

    A mismatch here is a caller bug, not a race, so it is a plain ``StoreError``
    (an invalid task id is a ``UsageError``).
    """
    check_task_id(task_id)
    new_version = expected_version + 1
    if expected_version < 0:
        raise StoreError(f"expected_version must be >= 0, got {expected_version}")
    if state.get("task_id") != task_id or event.task_id != task_id:
        raise StoreError(f"state and event must both belong to task {task_id!r}")
    if state.get("version") != new_version or event.version != new_version:
        raise StoreError(
            f"committing over version {expected_version} must write version {new_version} "
            f"(state has {state.get('version')}, event has {event.version})"
        )
    return new_version
