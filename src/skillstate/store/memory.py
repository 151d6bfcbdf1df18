"""In-process store: for tests, notebooks and the contract suite's reference."""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Mapping
from typing import Any

from skillstate.errors import ArtifactNotFound, StaleState, StoreError, TaskNotFound
from skillstate.events import Event, utcnow
from skillstate.store.base import Checkpoint, artifact_ref, check_commit

__all__ = ["MemoryStore"]


class MemoryStore:
    """Keeps everything in dicts behind one lock. Nothing survives the process."""

    def __init__(self, url: str = "memory://") -> None:
        self.url = url
        self._lock = threading.Lock()
        self._checkpoints: dict[str, list[Checkpoint]] = {}
        self._events: dict[str, list[Event]] = {}
        self._artifacts: dict[str, bytes] = {}

    def load(self, task_id: str) -> Checkpoint:
        with self._lock:
            return self._copy(self._chain(task_id)[-1])

    def commit(
        self, task_id: str, expected_version: int, state: Mapping[str, Any], event: Event
    ) -> int:
        new_version = check_commit(task_id, expected_version, state, event)
        # Round-trip through JSON: what a real backend would store, and a copy the
        # caller cannot mutate afterwards.
        try:
            document = json.loads(json.dumps(state))
        except (TypeError, ValueError) as exc:
            raise StoreError(f"state of {task_id!r} is not JSON-serializable: {exc}") from exc
        with self._lock:
            chain = self._checkpoints.get(task_id, [])
            head = chain[-1].version if chain else 0
            if head != expected_version:
                raise StaleState(task_id, expected_version, head)
            chain.append(Checkpoint(task_id, new_version, document, utcnow()))
            self._checkpoints[task_id] = chain
            self._events.setdefault(task_id, []).append(event)
        return new_version

    def checkpoint(self, task_id: str, version: int) -> Checkpoint:
        with self._lock:
            for item in self._chain(task_id):
                if item.version == version:
                    return self._copy(item)
        raise StoreError(f"task {task_id!r} has no checkpoint at version {version}")

    def checkpoints(self, task_id: str) -> list[Checkpoint]:
        with self._lock:
            return [self._copy(c) for c in self._chain(task_id)]

    def events(self, task_id: str, *, since: int = 0) -> list[Event]:
        with self._lock:
            self._chain(task_id)
            return [e for e in self._events.get(task_id, []) if e.version > since]

    def tasks(self) -> list[str]:
        with self._lock:
            return sorted(self._checkpoints)

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

    def _chain(self, task_id: str) -> list[Checkpoint]:
        chain = self._checkpoints.get(task_id)
        if not chain:
            raise TaskNotFound(task_id)
        return chain

    @staticmethod
    def _copy(item: Checkpoint) -> Checkpoint:
        return Checkpoint(item.task_id, item.version, copy.deepcopy(item.state), item.created_at)
