"""In-process store: for tests, notebooks and the contract suite's reference.

It keeps exactly what a durable backend keeps (the serialized head, delta chains,
events without their patches) so that it behaves like one, prune included.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from skillstate.errors import ArtifactNotFound, LeaseHeld, StaleState, StoreError, TaskNotFound
from skillstate.events import Event, utcnow
from skillstate.store.base import Checkpoint, CheckpointInfo, Lease, PruneResult, artifact_ref
from skillstate.store.chain import (
    DEFAULT_MAX_CHAIN,
    Row,
    encode_commit,
    lease_expired,
    load_document,
    plan_prune,
    rebuild,
    restore_event,
    take_snapshot,
)

__all__ = ["MemoryStore"]


@dataclass
class _Task:
    version: int
    head: str
    updated_at: datetime
    chain_len: int = 0
    chain_bytes: int = 0
    rows: dict[int, Row] = field(default_factory=dict)
    events: list[tuple[int, str]] = field(default_factory=list)


class MemoryStore:
    """Keeps everything in dicts behind one lock. Nothing survives the process."""

    def __init__(self, url: str = "memory://", *, max_chain: int = DEFAULT_MAX_CHAIN) -> None:
        self.url = url
        self.max_chain = max_chain
        self._lock = threading.Lock()
        self._tasks: dict[str, _Task] = {}
        self._leases: dict[str, Lease] = {}
        self._artifacts: dict[str, bytes] = {}

    def load(self, task_id: str) -> Checkpoint:
        with self._lock:
            task = self._task(task_id)
            version, head, at = task.version, task.head, task.updated_at
        return Checkpoint(task_id, version, load_document(task_id, version, head), at)

    def commit(
        self, task_id: str, expected_version: int, state: Mapping[str, Any], event: Event
    ) -> int:
        enc = encode_commit(task_id, expected_version, state, event)
        now = utcnow()
        with self._lock:
            task = self._tasks.get(task_id)
            head = task.version if task else 0
            if head != enc.expected:
                raise StaleState(task_id, enc.expected, head)
            if task is None:
                task = _Task(version=0, head="", updated_at=now)
            snapshot = take_snapshot(task.chain_len, task.chain_bytes, enc, self.max_chain)
            if snapshot:
                task.chain_len, task.chain_bytes = 0, 0
            else:
                task.chain_len += 1
                task.chain_bytes += len(enc.patch or "")
            task.version, task.head, task.updated_at = enc.version, enc.state, now
            task.rows[enc.version] = Row(
                enc.version, enc.state if snapshot else None, enc.patch, now
            )
            task.events.append((enc.version, enc.event))
            self._tasks[task_id] = task
        return enc.version

    def checkpoint(self, task_id: str, version: int) -> Checkpoint:
        with self._lock:
            task = self._task(task_id)
            if version == task.version:
                head = task.head
                return Checkpoint(
                    task_id, version, load_document(task_id, version, head), task.updated_at
                )
            if version not in task.rows:
                raise StoreError(f"task {task_id!r} has no checkpoint at version {version}")
            chain = [task.rows[version]]
            while chain[0].snapshot is None and chain[0].version - 1 in task.rows:
                chain.insert(0, task.rows[chain[0].version - 1])
        return Checkpoint(task_id, version, rebuild(task_id, version, chain), chain[-1].created_at)

    def checkpoints(self, task_id: str) -> list[CheckpointInfo]:
        with self._lock:
            task = self._task(task_id)
            return [task.rows[v].info(task_id) for v in sorted(task.rows)]

    def events(self, task_id: str, *, since: int = 0) -> list[Event]:
        with self._lock:
            task = self._task(task_id)
            picked = [
                (text, task.rows[v].patch if v in task.rows else None)
                for v, text in task.events
                if v > since
            ]
        return [restore_event(task_id, text, patch) for text, patch in picked]

    def tasks(self) -> list[str]:
        with self._lock:
            return sorted(self._tasks)

    def prune(self, task_id: str, *, keep_last: int, keep_every: int | None = None) -> PruneResult:
        with self._lock:
            task = self._task(task_id)
            infos = [task.rows[v].info(task_id) for v in sorted(task.rows)]
            kept, deleted = plan_prune(task_id, infos, keep_last=keep_last, keep_every=keep_every)
            for version in deleted:
                del task.rows[version]
        return PruneResult(task_id, kept, deleted)

    def claim(self, task_id: str, worker: str, ttl: float) -> Lease:
        now = utcnow()
        with self._lock:
            current = self._leases.get(task_id)
            if not lease_expired(current, worker, now):
                assert current is not None
                raise LeaseHeld(task_id, current.worker, current.expires_at)
            lease = Lease(task_id, worker, now + timedelta(seconds=ttl))
            self._leases[task_id] = lease
        return lease

    def release(self, task_id: str, worker: str) -> None:
        with self._lock:
            current = self._leases.get(task_id)
            if current is not None and current.worker == worker:
                del self._leases[task_id]

    def put_artifact(self, data: bytes, *, media_type: str = "application/octet-stream") -> str:
        ref = artifact_ref(data)
        with self._lock:
            self._artifacts.setdefault(ref, bytes(data))
        return ref

    def get_artifact(self, ref: str) -> bytes:
        with self._lock:
            try:
                return self._artifacts[ref]
            except KeyError:
                raise ArtifactNotFound(f"no artifact {ref!r}") from None

    def close(self) -> None:
        pass

    def _task(self, task_id: str) -> _Task:
        task = self._tasks.get(task_id)
        if task is None:
            raise TaskNotFound(task_id)
        return task
