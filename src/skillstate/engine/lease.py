"""Holding a task while a worker runs it: a lease claimed, kept alive, released.

The lease has two jobs. It is **coordination**: a second worker does not even start
(no wasted model calls, no effect probed twice) while the first is alive, and takes
over once the first is gone. And with its **fencing token** it is **safety**: every
commit carries the lease generation it was made under, and the store refuses a
commit whose generation is no longer the task's
(:class:`~skillstate.errors.LeaseLost`), so a worker that was taken over can never
write again, and an effect it ran meanwhile is found by the new holder's probe
instead of being repeated.

A lease must not lapse under a live worker: a step (a slow effect, a slow model)
can take longer than the TTL. :class:`Holder` renews it from a heartbeat thread
every third of the TTL for as long as it is held, independent of what the step is
doing; only a worker that is really gone (killed, frozen, cut off from the store)
lets it expire.

"Gone" also has a fast path: worker ids made by :func:`default_worker` are
``host:pid``, so a ``kill -9``'d CLI on the same host does not block a ``resume``
for a whole TTL.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from skillstate.errors import Conflict, LeaseHeld, LeaseLost, StoreError
from skillstate.store.base import Lease, Store

__all__ = ["Holder", "default_worker", "human_lease", "is_dead_local_worker"]


def default_worker() -> str:
    """``host:pid`` of this process."""
    return f"{socket.gethostname()}:{os.getpid()}"


def is_dead_local_worker(worker: str) -> bool:
    """Whether ``worker`` (``host:pid``, or ``role@host:pid``) is a process of this host
    that has exited: gone, or a zombie (exited, not yet reaped by its parent)."""
    host, sep, pid_text = worker.rpartition("@")[2].rpartition(":")
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
        return _zombie(pid)  # it exists, it is just not ours
    except OverflowError:
        return False  # not a pid at all
    # A zombie still answers signal 0: a worker whose parent (a supervisor, a test, a
    # shell) has not reaped it yet must not hold its task for a whole TTL.
    return _zombie(pid)


def _zombie(pid: int) -> bool:
    """Whether ``/proc`` says ``pid`` is a zombie (``Z``) or dead (``X``); False where
    there is no ``/proc`` (the lease then lapses after its TTL)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            text = stat.read()
    except OSError:
        return False
    # "pid (comm) S ...": comm may hold spaces and parentheses, the state follows the last ")".
    fields = text[text.rfind(b")") + 1 :].split()
    return bool(fields) and fields[0] in (b"Z", b"X")


class Holder:
    """Claims a task for one worker and keeps the claim alive until released."""

    def __init__(
        self, store: Store, task_id: str, worker: str, ttl: float, *, heartbeat: bool = True
    ) -> None:
        if ttl <= 0:
            raise ValueError("lease ttl must be > 0")
        self.store = store
        self.task_id = task_id
        self.worker = worker
        self.ttl = ttl
        self.lease: Lease | None = None
        self.lost: str | None = None
        """Why the lease was lost (taken over, or not renewable), if it was."""
        self._heartbeat = heartbeat
        self._renewed = 0.0
        self._next_beat = 0.0
        # Held by a renewal and by release(), so a heartbeat cannot renew a lease the
        # worker has just released (that would hold the task for a whole TTL more).
        self._lock = threading.Lock()
        self._released = False

    @property
    def fence(self) -> int | None:
        """The fencing token every commit made under this lease carries."""
        return self.lease.generation if self.lease is not None else None

    def acquire(self) -> Lease:
        """Claim the task; raises :class:`LeaseHeld` while a live worker holds it."""
        try:
            self.lease = self.store.claim(self.task_id, self.worker, self.ttl)
        except LeaseHeld as exc:
            if not is_dead_local_worker(exc.holder):
                raise
            # Releasing names the dead holder: if another worker took over meanwhile,
            # this is a no-op and the claim below fails with its LeaseHeld.
            self.store.release(self.task_id, exc.holder)
            self.lease = self.store.claim(self.task_id, self.worker, self.ttl)
        self._renewed = time.monotonic()
        if self._heartbeat:
            _HEARTBEAT.add(self)
        return self.lease

    def renew(self) -> None:
        """Extend the lease once a third of its TTL has passed (cheap to call every step).

        Raises :class:`LeaseLost` when another worker has taken the task over.
        """
        self.check()
        if time.monotonic() - self._renewed >= self.ttl / 3:
            with self._lock:
                self._renew()

    def check(self) -> None:
        """Raise :class:`LeaseLost` if the lease was lost (before running an effect)."""
        if self.lost is not None:
            raise LeaseLost(self.task_id, self.fence or 0, None)

    def release(self) -> None:
        _HEARTBEAT.discard(self)
        with self._lock:  # waits for a renewal in flight
            self._released = True
        if self.lost is None:
            self.store.release(self.task_id, self.worker)

    def due(self) -> float:
        """When (``time.monotonic()``) the heartbeat renews next: a third of the TTL after
        the last renewal, or after the last attempt that failed."""
        return max(self._renewed, self._next_beat) + self.ttl / 3

    # ------------------------------------------------------------------ internals

    def _renew(self) -> None:
        try:
            lease = self.store.claim(self.task_id, self.worker, self.ttl)
        except LeaseHeld as exc:
            self.lost = f"taken over by {exc.holder}"
            raise LeaseLost(self.task_id, self.fence or 0, None) from exc
        if self.lease is not None and lease.generation != self.lease.generation:
            # Someone held it in between and let it go: our earlier commits' fence is
            # gone, so this worker must not go on as if nothing happened.
            self.lost = f"generation moved from {self.lease.generation} to {lease.generation}"
            raise LeaseLost(self.task_id, self.lease.generation, lease.generation)
        self.lease = lease
        self._renewed = time.monotonic()

    def beat(self) -> bool:
        """Renew from the heartbeat; never raises. False once the lease is gone for good
        (released, or lost: recorded in :attr:`lost`, and the next commit is fenced)."""
        with self._lock:
            if self._released or self.lost is not None:
                return False
            try:
                self._renew()
            except Conflict:
                return False
            except StoreError:
                # The store hiccupped: try again a third of the TTL on, before it runs out.
                self._next_beat = time.monotonic()
            return True


class _Heartbeat:
    """One daemon thread per process renews every held lease when it is due.

    A thread per lease cost a thread start and a join per call of ``Runtime.step``
    (about a third of a millisecond on a busy machine); one shared thread that
    sleeps until the next renewal is due costs nothing per call.
    """

    def __init__(self) -> None:
        self._holders: set[Holder] = set()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None

    def add(self, holder: Holder) -> None:
        with self._wake:
            self._holders.add(holder)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="skillstate-lease-heartbeat", daemon=True
                )
                self._thread.start()
            self._wake.notify()

    def discard(self, holder: Holder) -> None:
        with self._wake:
            self._holders.discard(holder)

    def _run(self) -> None:
        while True:
            with self._wake:
                now = time.monotonic()
                due = [h for h in self._holders if h.due() <= now]
                if not due:
                    wait = min((h.due() for h in self._holders), default=now + 60.0) - now
                    self._wake.wait(timeout=max(wait, 0.01))
                    continue
            for holder in due:  # outside the condition: a renewal is a store round trip
                if not holder.beat():
                    self.discard(holder)


_HEARTBEAT = _Heartbeat()


@contextmanager
def human_lease(store: Store, task_id: str) -> Iterator[int | None]:
    """Hold ``task_id`` for a person's change (``set``, ``edit``, ``rollback``, ``fork``).

    A person's change goes through the same gate as a step: it waits for no one, but
    is refused (:class:`LeaseHeld`, exit 3) while a live worker (or a ``rekey``) holds
    the task, and its commit carries the lease's fencing token. Yields the token.
    """
    holder = Holder(store, task_id, f"human@{default_worker()}", ttl=60, heartbeat=False)
    holder.acquire()
    try:
        yield holder.fence
    finally:
        holder.release()
