"""Holding a task while a worker runs it: a lease claimed, renewed, released.

The lease is coordination, not safety: the store's version check already makes
sure two workers never both apply a step. What the lease adds is that a second
worker does not even start (no wasted model calls, no effect probed twice)
while the first is alive, and that it can take over once the first is gone.

"Gone" means the lease expired (the holder stopped renewing), or, faster, the
holder was a process on this same host that no longer exists: worker ids made
by :func:`default_worker` are ``host:pid``, so a ``kill -9``'d CLI does not
block a ``resume`` for a whole TTL.
"""

from __future__ import annotations

import os
import socket
import time

from skillstate.errors import LeaseHeld
from skillstate.store.base import Store

__all__ = ["Holder", "default_worker", "is_dead_local_worker"]


def default_worker() -> str:
    """``host:pid`` of this process."""
    return f"{socket.gethostname()}:{os.getpid()}"


def is_dead_local_worker(worker: str) -> bool:
    """Whether ``worker`` names a process of this host that has exited."""
    host, sep, pid_text = worker.rpartition(":")
    if not sep or host != socket.gethostname() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # it exists, it is just not ours
    return False


class Holder:
    """Claims a task for one worker and keeps the claim fresh."""

    def __init__(self, store: Store, task_id: str, worker: str, ttl: float) -> None:
        self.store = store
        self.task_id = task_id
        self.worker = worker
        self.ttl = ttl
        self._renewed = 0.0

    def acquire(self) -> None:
        """Claim the task; raises :class:`LeaseHeld` while a live worker holds it."""
        try:
            self.store.claim(self.task_id, self.worker, self.ttl)
        except LeaseHeld as exc:
            if not is_dead_local_worker(exc.holder):
                raise
            # Releasing names the dead holder: if another worker took over meanwhile,
            # this is a no-op and the claim below fails with its LeaseHeld.
            self.store.release(self.task_id, exc.holder)
            self.store.claim(self.task_id, self.worker, self.ttl)
        self._renewed = time.monotonic()

    def renew(self) -> None:
        """Extend the lease once a third of its TTL has passed (cheap to call every step)."""
        if time.monotonic() - self._renewed >= self.ttl / 3:
            self.store.claim(self.task_id, self.worker, self.ttl)
            self._renewed = time.monotonic()

    def release(self) -> None:
        self.store.release(self.task_id, self.worker)
