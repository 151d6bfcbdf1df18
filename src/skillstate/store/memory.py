"""In-process store: for tests, notebooks and the contract suite's reference.

It keeps exactly what a durable backend keeps (the serialized head and its
checksum, delta chains, events without their patches, lease records) so that it
behaves like one, prune, checksums and damaged records included.

URL: ``memory://``; it takes no options. It holds nothing before it is opened, so
``open_store("memory://", create=False)`` opens an empty store like any other open:
there is nothing on disk or on a server to create or to find.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from skillstate.errors import (
    ArtifactNotFound,
    InvalidStoreURL,
    StaleState,
    StoreError,
    TaskExists,
    TaskNotFound,
)
from skillstate.events import Event, utcnow
from skillstate.store.base import (
    Checkpoint,
    CheckpointInfo,
    HeadInfo,
    InboxMessage,
    Lease,
    PruneResult,
    artifact_ref,
    check_task_id,
)
from skillstate.store.chain import (
    DEFAULT_MAX_CHAIN,
    Row,
    chain_counters,
    check_chain_counters,
    check_fence,
    check_ttl,
    claim_generation,
    encode_commit,
    held_lease,
    plan_prune,
    read_head,
    rebuild,
    repaired_generation,
    restore_event,
    salvage_lease,
    take_snapshot,
)
from skillstate.store.heads import head_info
from skillstate.store.inbox import encode_message, read_message
from skillstate.store.restoring import plan_restore
from skillstate.store.rewriting import Body, plan_rewrite

__all__ = ["MemoryStore"]


@dataclass
class _Task:
    version: int
    head: str
    updated_at: datetime
    digest: str | None = None
    chain_len: int = 0
    chain_bytes: int = 0
    rows: dict[int, Row] = field(default_factory=dict)
    events: list[tuple[int, str]] = field(default_factory=list)
    inbox: list[tuple[str, str, datetime]] = field(default_factory=list)
    """Posted messages as stored (kind, body JSON, time); message n is ``inbox[n - 1]``."""


@dataclass
class _LeaseRecord:
    """A lease as stored: ``worker`` is ``None`` once released; the generation stays."""

    worker: Any
    expires: Any
    """Seconds since the epoch."""
    generation: Any


class MemoryStore:
    """Keeps everything in dicts behind one lock. Nothing survives the process."""

    def __init__(self, url: str = "memory://", *, max_chain: int = DEFAULT_MAX_CHAIN) -> None:
        _check_url(url)
        self.url = url
        self.max_chain = max_chain
        self._lock = threading.Lock()
        self._tasks: dict[str, _Task] = {}
        self._leases: dict[str, _LeaseRecord] = {}
        self._artifacts: dict[str, bytes] = {}
        self._put_at: dict[str, datetime] = {}

    @classmethod
    def from_url(cls, url: str = "memory://", *, create: bool = True) -> MemoryStore:
        """``memory://``; ``create`` changes nothing (see the module docstring)."""
        return cls(url)

    def load(self, task_id: str, *, verify: bool = True) -> Checkpoint:
        check_task_id(task_id)
        with self._lock:
            task = self._task(task_id)
            version, head, at, checksum = task.version, task.head, task.updated_at, task.digest
            counters = (task.chain_len, task.chain_bytes)
        if verify:
            check_chain_counters(task_id, version, *counters)
        state = read_head(task_id, version, head, checksum, verify=verify)
        return Checkpoint(task_id, version, state, at)

    def commit(
        self,
        task_id: str,
        expected_version: int,
        state: Mapping[str, Any],
        event: Event,
        *,
        fence: int | None = None,
    ) -> int:
        enc = encode_commit(task_id, expected_version, state, event, fence=fence)
        now = utcnow()
        with self._lock:
            record = self._leases.get(task_id)
            holder, generation = (record.worker, record.generation) if record else (None, 0)
            check_fence(task_id, enc.fence, holder, generation)
            task = self._tasks.get(task_id)
            head = task.version if task else 0
            if head != enc.expected:
                raise StaleState(task_id, enc.expected, head)
            if task is None:
                task = _Task(version=0, head="", updated_at=now)
            counters = chain_counters(task.chain_len, task.chain_bytes)
            snapshot = counters is None or take_snapshot(*counters, enc, self.max_chain)
            if snapshot:
                task.chain_len, task.chain_bytes = 0, 0
            else:
                task.chain_len += 1
                task.chain_bytes += len(enc.patch or "")
            task.version, task.head, task.updated_at = enc.version, enc.state, now
            task.digest = enc.digest
            task.rows[enc.version] = Row(
                enc.version, enc.state if snapshot else None, enc.patch, now, enc.version_digest
            )
            task.events.append((enc.version, enc.event))
            self._tasks[task_id] = task
        return enc.version

    def checkpoint(self, task_id: str, version: int) -> Checkpoint:
        check_task_id(task_id)
        with self._lock:
            task = self._task(task_id)
            is_head = version == task.version
            if not is_head:
                if version not in task.rows:
                    raise StoreError(f"task {task_id!r} has no checkpoint at version {version}")
                chain = [task.rows[version]]
                while chain[0].snapshot is None and chain[0].version - 1 in task.rows:
                    chain.insert(0, task.rows[chain[0].version - 1])
        if is_head:
            return self.load(task_id)
        return Checkpoint(task_id, version, rebuild(task_id, version, chain), chain[-1].created_at)

    def checkpoints(self, task_id: str) -> list[CheckpointInfo]:
        check_task_id(task_id)
        with self._lock:
            task = self._task(task_id)
            return [task.rows[v].info(task_id) for v in sorted(task.rows)]

    def events(self, task_id: str, *, since: int = 0) -> list[Event]:
        check_task_id(task_id)
        with self._lock:
            task = self._task(task_id)
            picked = [
                (v, text, task.rows[v].patch if v in task.rows else None)
                for v, text in task.events
                if v > since
            ]
        return [restore_event(task_id, text, patch, v) for v, text, patch in picked]

    def tasks(self) -> list[str]:
        with self._lock:
            return sorted(self._tasks)

    def heads(self) -> list[HeadInfo]:
        with self._lock:
            tasks = [
                (t, task.version, task.head, task.updated_at) for t, task in self._tasks.items()
            ]
            leases = {t: (r.worker, r.expires, r.generation) for t, r in self._leases.items()}
        return [
            head_info(task_id, version, head, updated_at, leases.get(task_id))
            for task_id, version, head, updated_at in sorted(tasks)
        ]

    def prune(self, task_id: str, *, keep_last: int, keep_every: int | None = None) -> PruneResult:
        check_task_id(task_id)
        with self._lock:
            task = self._task(task_id)
            infos = [task.rows[v].info(task_id) for v in sorted(task.rows)]
            kept, deleted = plan_prune(task_id, infos, keep_last=keep_last, keep_every=keep_every)
            for version in deleted:
                del task.rows[version]
        return PruneResult(task_id, kept, deleted)

    def claim(self, task_id: str, worker: str, ttl: float) -> Lease:
        check_task_id(task_id)
        seconds = check_ttl(ttl)
        with self._lock:
            now = time.time()
            record = self._leases.get(task_id)
            current, last = self._held(task_id, record, now)
            generation = claim_generation(task_id, current, last, worker, _utc(now))
            lease = Lease(task_id, worker, _utc(now + seconds), generation)
            self._leases[task_id] = _LeaseRecord(worker, now + seconds, generation)
        return lease

    def release(self, task_id: str, worker: str) -> None:
        check_task_id(task_id)
        with self._lock:
            record = self._leases.get(task_id)
            if record is not None and record.worker == worker:
                record.worker = None

    def lease(self, task_id: str) -> Lease | None:
        check_task_id(task_id)
        with self._lock:
            return self._held(task_id, self._leases.get(task_id), time.time())[0]

    def force_release(self, task_id: str) -> Lease | None:
        check_task_id(task_id)
        with self._lock:
            record = self._leases.get(task_id)
            if record is None or record.worker is None:
                return None
            dropped = salvage_lease(task_id, record.worker, record.expires, record.generation)
            record.worker = None
            record.generation = repaired_generation(record.generation)
        return dropped

    def put_artifact(self, data: bytes, *, media_type: str = "application/octet-stream") -> str:
        ref = artifact_ref(data)
        with self._lock:
            self._artifacts.setdefault(ref, bytes(data))
            self._put_at[ref] = utcnow()  # the last put: what gc's grace is measured from
        return ref

    def get_artifact(self, ref: str) -> bytes:
        with self._lock:
            try:
                return self._artifacts[ref]
            except KeyError:
                raise ArtifactNotFound(f"no artifact {ref!r}") from None

    def rewrite(self, task_id: str, expected_version: int, fn: Callable[[Any], Any]) -> int:
        """Atomic under the store's lock: the plan is made, then assigned in one go."""
        check_task_id(task_id)
        with self._lock:
            task = self._task(task_id)
            if task.version != expected_version:
                raise StaleState(task_id, expected_version, task.version)
            bodies = [Body(v, r.snapshot, r.patch, r.digest) for v, r in task.rows.items()]
            plan = plan_rewrite(
                task_id,
                fn,
                version=task.version,
                head=task.head,
                head_digest=task.digest,
                rows=bodies,
                events=dict(task.events),
            )
            if plan.head is not None:
                task.head, task.digest = plan.head, plan.head_digest
            for version, body in plan.rows.items():
                task.rows[version] = dataclasses.replace(
                    task.rows[version], snapshot=body.snapshot, patch=body.patch, digest=body.digest
                )
            if plan.events:
                task.events = [(v, plan.events.get(v, text)) for v, text in task.events]
        return plan.changed

    def artifact_refs(self) -> list[str]:
        with self._lock:
            return sorted(self._artifacts)

    def delete_task(self, task_id: str) -> bool:
        check_task_id(task_id)
        with self._lock:
            self._leases.pop(task_id, None)
            return self._tasks.pop(task_id, None) is not None

    def delete_artifact(self, ref: str, *, unused_since: datetime | None = None) -> bool:
        with self._lock:
            if ref not in self._artifacts:
                return False
            put_at = self._put_at.get(ref)
            if unused_since is not None and put_at is not None and put_at >= unused_since:
                return False
            del self._artifacts[ref]
            self._put_at.pop(ref, None)
            return True

    def replace_artifact(self, ref: str, data: bytes) -> None:
        with self._lock:
            if ref not in self._artifacts:
                raise ArtifactNotFound(f"no artifact {ref!r}")
            self._artifacts[ref] = bytes(data)

    def post(self, task_id: str, kind: str, body: Mapping[str, Any]) -> int:
        text = encode_message(task_id, kind, body)
        with self._lock:
            task = self._task(task_id)
            task.inbox.append((kind, text, utcnow()))
            return len(task.inbox)

    def inbox(self, task_id: str, *, after: int = 0) -> list[InboxMessage]:
        check_task_id(task_id)
        with self._lock:
            stored = list(enumerate(self._task(task_id).inbox, 1))[max(after, 0) :]
        return [read_message(task_id, seq, kind, text, at) for seq, (kind, text, at) in stored]

    def restore(
        self,
        task_id: str,
        checkpoints: Sequence[Checkpoint],
        events: Sequence[Event],
        inbox: Sequence[InboxMessage],
        *,
        overwrite: bool = False,
    ) -> int:
        plan = plan_restore(task_id, checkpoints, events, inbox, max_chain=self.max_chain)
        task = _Task(
            version=plan.version,
            head=plan.head,
            updated_at=plan.updated_at,
            digest=plan.head_digest,
            chain_len=plan.chain_len,
            chain_bytes=plan.chain_bytes,
            rows={
                r.version: Row(r.version, r.snapshot, r.patch, r.created_at, r.digest)
                for r in plan.rows
            },
            events=[(e.version, e.text) for e in plan.events],
            inbox=[(m.kind, m.body, m.at) for m in plan.inbox],
        )
        with self._lock:
            if task_id in self._tasks and not overwrite:
                raise TaskExists(f"task {task_id!r} already exists in {self.url}; nothing written")
            self._tasks[task_id] = task
        return plan.version

    def close(self) -> None:
        pass

    def _task(self, task_id: str) -> _Task:
        task = self._tasks.get(task_id)
        if task is None:
            raise TaskNotFound(task_id)
        return task

    @staticmethod
    def _held(task_id: str, record: _LeaseRecord | None, now: float) -> tuple[Lease | None, int]:
        if record is None:
            return None, 0
        return held_lease(task_id, record.worker, record.expires, record.generation, now=now)


def _utc(stamp: float) -> datetime:
    return datetime.fromtimestamp(stamp, timezone.utc)


def _check_url(url: str) -> None:
    """``memory://`` takes no options: any query parameter is refused by name."""
    query = urlsplit(url).query
    names = sorted({name for name, _ in parse_qsl(query, keep_blank_values=True)})
    if names or (query and not names):
        shown = ", ".join(names) or query
        raise InvalidStoreURL(f"unknown memory:// URL option(s): {shown} (it takes none)")
