"""The ``Store`` protocol: where states, their checkpoints, events and artifacts live.

Every backend implements the same small protocol and passes the same contract
suite (``tests/contract/``). The store is schema-agnostic: it keeps plain JSON
documents; validating them into a state class is the runtime's job, which is what
lets a later schema migration read old checkpoints.

The one hard rule: :meth:`Store.commit` is an atomic compare-and-set. Either the
new state, its checkpoint and its event are all written, or none is.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from skillstate.errors import StoreError
from skillstate.events import Event

__all__ = ["Checkpoint", "Store", "artifact_ref", "check_commit"]


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


@runtime_checkable
class Store(Protocol):
    """Persistence for tasks. Implementations: memory, SQLite (more in extras)."""

    url: str
    """The URL the store was opened from, with any password masked."""

    def load(self, task_id: str) -> Checkpoint:
        """The head version. Raises :class:`~skillstate.errors.TaskNotFound`."""
        ...

    def commit(
        self, task_id: str, expected_version: int, state: Mapping[str, Any], event: Event
    ) -> int:
        """Write ``state`` as version ``expected_version + 1`` with its event, atomically.

        ``expected_version`` is the version the writer read (0 to create the task).
        Raises :class:`~skillstate.errors.StaleState` and writes nothing when the
        stored head is not ``expected_version``. Returns the new version.
        """
        ...

    def checkpoint(self, task_id: str, version: int) -> Checkpoint:
        """Any committed version. Raises ``TaskNotFound`` or ``StoreError``."""
        ...

    def checkpoints(self, task_id: str) -> list[Checkpoint]:
        """Every kept version, oldest first."""
        ...

    def events(self, task_id: str, *, since: int = 0) -> list[Event]:
        """Events of versions ``> since``, oldest first."""
        ...

    def tasks(self) -> list[str]:
        """Ids of every task in the store, sorted."""
        ...

    def put_artifact(self, data: bytes, *, media_type: str = "application/octet-stream") -> str:
        """Store raw bytes, content-addressed; returns ``sha256:<hex>``. Idempotent."""
        ...

    def get_artifact(self, ref: str) -> bytes:
        """Bytes stored under ``ref``. Raises :class:`~skillstate.errors.ArtifactNotFound`."""
        ...

    def close(self) -> None:
        """Release connections. Safe to call twice."""
        ...


def artifact_ref(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def check_commit(
    task_id: str, expected_version: int, state: Mapping[str, Any], event: Event
) -> int:
    """Shared argument checks of ``commit``; returns the version being written.

    A mismatch here is a caller bug, not a race, so it is a plain ``StoreError``.
    """
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
