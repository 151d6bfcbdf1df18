"""Re-sealing after a key rotation: every stored secret moved under the new key.

``SKILLSTATE_KEY=NEW,OLD`` makes new writes seal under ``NEW`` while ``OLD`` still
opens what it sealed. Old checkpoints, though, stay sealed under ``OLD`` until
something rewrites them, and nothing else does: they are history. So before ``OLD``
can go, :func:`rekey_task` (``skillstate rekey``) rewrites every task's stored
bodies in place (:meth:`~skillstate.store.base.Store.rewrite`): the head, every
kept snapshot, every kept delta patch (a patch that set a sensitive field carries
its token) and every event. Every string that is a sealed value
(:func:`~skillstate.state.secrets.is_sealed`), wherever it sits in the JSON, is
opened with whichever key opens it and, unless that is already the first key,
sealed again under the first key. :func:`rekey_artifacts` does the same for
artifacts sealed at rest (:mod:`skillstate.store.sealing`), in place under their
refs (:meth:`~skillstate.store.base.Store.replace_artifact`).

* Values already under the first key stay byte for byte: nothing is rewritten that
  does not need it, and a second run changes nothing.
* One old token becomes one new token everywhere in a task (the head, the snapshot
  and the patch that hold it), so the bodies stay consistent with each other: every
  delta still takes the version before it to the version after, as ``doctor`` checks.
* A task is rewritten all or nothing (the store's atomic rewrite): a crash leaves it
  as it was or done. Tasks are independent, so running again after a crash finishes
  what is left (done tasks have nothing left to re-seal).
* A sealed value that no key opens refuses the task (``SecretKeyMissing``, naming it)
  before anything of it is written.
* The task's lease is held for the rewrite, as every writer holds it: a worker
  running the task refuses the rekey (``LeaseHeld``), and once the rekey holds it no
  worker that was taken over can commit a step it computed from the old bodies.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from skillstate.engine.lease import Holder, default_worker
from skillstate.errors import Conflict, LeaseHeld, SecretKeyMissing, StaleState
from skillstate.events import utcnow
from skillstate.state.secrets import ENV_KEY, PREFIX, _keyring, is_sealed
from skillstate.store.base import Store
from skillstate.store.sealing import MAGIC, is_sealed_artifact, seal_artifact

if TYPE_CHECKING:
    from cryptography.fernet import Fernet

__all__ = ["RekeyResult", "rekey_artifacts", "rekey_task", "require_key"]

_ATTEMPTS = 10
"""Rewrites of one task before giving up on a head that keeps moving (``Conflict``)."""

LEASE_TTL = 60.0
"""Seconds of the lease a rekey holds on a task (renewed while it works, as a runtime's)."""


@dataclass(frozen=True)
class RekeyResult:
    """What :func:`rekey_task` did to one task."""

    task_id: str
    values: int
    """Distinct sealed values re-sealed under the first key (0: nothing was left to do)."""
    bodies: int
    """Stored bodies rewritten (the head, snapshots, patches, events)."""


def require_key() -> tuple[Fernet, tuple[Fernet, ...]]:
    """``(the first key, the others)`` of ``SKILLSTATE_KEY``; ``SecretKeyMissing`` when unset."""
    ring = _keyring()
    if ring is None:
        raise SecretKeyMissing(
            f"rekey needs {ENV_KEY}: the new key first, then the old ones it replaces "
            f"({ENV_KEY}=NEW,OLD); nothing was rewritten"
        )
    return ring.primary, ring.others


def rekey_task(store: Store, task_id: str, *, worker: str | None = None) -> RekeyResult:
    """Re-seal every value of ``task_id`` that is not under the first key, in place.

    Holds the task's lease meanwhile (``worker``, default ``host:pid``): a live worker
    holding it is ``LeaseHeld`` (nothing written). A sealed value that no key opens is
    ``SecretKeyMissing`` naming the task (nothing written); damage is ``StateCorrupted``.
    """
    primary, others = require_key()
    store.load(task_id, verify=False)  # TaskNotFound before a lease is taken
    worker = worker or default_worker()
    current = store.lease(task_id)
    if current is not None and current.worker == worker and current.expires_at > utcnow():
        # A runtime of this very process holds it: claiming would renew (and releasing
        # would drop) that runtime's lease instead of waiting for it.
        raise LeaseHeld(task_id, current.worker, current.expires_at)
    holder = Holder(store, task_id, worker, LEASE_TTL)
    holder.acquire()
    try:
        for _ in range(_ATTEMPTS):
            head = store.load(task_id, verify=False).version
            resealer = _Resealer(task_id, primary, others)
            try:
                bodies = store.rewrite(task_id, head, resealer)
            except StaleState:
                continue  # a writer without the lease (a person's edit) committed: again
            return RekeyResult(task_id, len(resealer.resealed), bodies)
    finally:
        holder.release()
    raise Conflict(
        f"task {task_id!r} kept moving during {_ATTEMPTS} rekey attempts; nothing was "
        "rewritten, run rekey again"
    )


def rekey_artifacts(store: Store, *, on_artifact: Callable[[str], None] | None = None) -> int:
    """Re-seal every artifact sealed under a key other than the first; returns how many.

    Each artifact is replaced on its own (atomically), under the same ref. One that no
    key opens stops the run with ``SecretKeyMissing`` naming it; those before it are
    done, and a second run (with the missing key added) picks up the rest.
    ``on_artifact`` is called with each ref re-sealed.
    """
    from cryptography.fernet import InvalidToken

    primary, others = require_key()
    count = 0
    for ref in store.artifact_refs():
        data = store.get_artifact(ref)
        if not is_sealed_artifact(data):
            continue  # stored in the clear (written without a key): not ours to seal
        token = data[len(MAGIC) :]
        if _opens(primary, token, InvalidToken):
            continue
        plain = next(
            (text for key in others if (text := _opens(key, token, InvalidToken)) is not None),
            None,
        )
        if plain is None:
            raise SecretKeyMissing(
                f"artifact {ref} is sealed with a key that is not in {ENV_KEY}; add that key "
                "and run rekey again (artifacts before it were re-sealed)"
            )
        store.replace_artifact(ref, seal_artifact(plain))
        count += 1
        if on_artifact is not None:
            on_artifact(ref)
    return count


def _opens(key: Fernet, token: bytes, invalid: type[Exception]) -> bytes | None:
    try:
        return key.decrypt(token)
    except invalid:
        return None


class _Resealer:
    """The function :meth:`Store.rewrite` applies: every sealed string, re-sealed.

    Pure (a body that holds nothing to change comes back as the same object; one that
    does comes back as a copy) and consistent: each old token maps to one new token
    for the whole task, however many bodies hold it.
    """

    def __init__(self, task_id: str, primary: Fernet, others: tuple[Fernet, ...]) -> None:
        from cryptography.fernet import InvalidToken

        self.task_id = task_id
        self.primary = primary
        self.others = others
        self.invalid = InvalidToken
        self.tokens: dict[str, str] = {}
        """Every sealed string met so far, and what it becomes (itself when under the first key)."""
        self.resealed: set[str] = set()
        """The old tokens re-sealed."""

    def __call__(self, value: Any) -> Any:
        if isinstance(value, str):
            return self._reseal(value) if is_sealed(value) else value
        if isinstance(value, list):
            copied: list[Any] | None = None
            for index, item in enumerate(value):
                new = self(item)
                if new is not item:
                    if copied is None:
                        copied = list(value)
                    copied[index] = new
            return value if copied is None else copied
        if isinstance(value, dict):
            changed: dict[str, Any] | None = None
            for name, item in value.items():
                new = self(item)
                if new is not item:
                    if changed is None:
                        changed = dict(value)
                    changed[name] = new
            return value if changed is None else changed
        return value

    def _reseal(self, text: str) -> str:
        new = self.tokens.get(text)
        if new is None:
            new = self._open_and_seal(text)
            self.tokens[text] = new
        return text if new == text else new

    def _open_and_seal(self, text: str) -> str:
        token = text[len(PREFIX) :].encode("ascii")
        if _opens(self.primary, token, self.invalid) is not None:
            return text
        for key in self.others:
            plain = _opens(key, token, self.invalid)
            if plain is not None:
                self.resealed.add(text)
                return PREFIX + self.primary.encrypt(plain).decode("ascii")
        raise SecretKeyMissing(
            f"task {self.task_id!r} holds a value sealed with a key that is not in {ENV_KEY}; "
            "add that key (after the new one) and run rekey again; nothing of this task "
            "was rewritten"
        )
