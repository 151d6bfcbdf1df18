"""File effects that carry their idempotency key, so the file itself can be asked.

Two shapes of file effect:

* **Append a line** (a ledger, an audit log): :func:`append_once` writes the record
  ``<key>\\t<line>\\n`` unless a record with that key is already in the file, and
  :func:`appended` answers whether it is. The check and the append happen under an
  exclusive ``flock`` on the file, so two processes appending the same key write it
  once; the record is one ``write`` on an ``O_APPEND`` descriptor, then ``fsync``.
  Undoing is appending too, as a ledger would: :func:`retract` writes
  ``-<key>\\t<reason>``, after which the key's line no longer counts (a compensation
  that is safe to repeat, and history that is never rewritten).
* **Replace a whole file** (a report, an export): :func:`write_once` writes the new
  content to a temporary file, fsyncs it and renames it over the target (readers see
  the old content or the new, never half of it), and records the key in a sidecar
  file ``<name>.keys`` next to the target; :func:`written` reads it back.

The order inside :func:`write_once`, and why each crash point is detected:

1. Lock ``<name>.keys``; if the key is recorded ``done``, stop.
2. Write and fsync ``.<name>.<random>.tmp``.
3. Append ``<key>\\tpending <sha256 of the new content>`` to ``<name>.keys``; fsync.
4. Rename the temporary file over the target; fsync the directory.
5. Append ``<key>\\tdone <sha256>``; fsync.

A crash before 3 leaves no record (the effect did not happen; the stray temporary
file is removed by the next call). A crash between 3 and 5 leaves ``pending``: the
effect happened exactly when the target's content has the recorded digest, which is
what :func:`written` compares. Before a later :func:`write_once` replaces the
content, it marks every ``pending`` key whose digest matches the content ``done``,
so the answer for an older key survives the overwrite.

Limits: one host, a local filesystem with working ``flock`` (not NFS), and files
that only these helpers write. A record whose write was cut short (a crash in the
middle of ``write``) has no final newline; it is not counted, and the next
:func:`append_once` cuts it off under the lock. :func:`written` also answers true
when the target already held exactly this key's content before the crash, since the
world then looks as if the effect had happened. Every check reads the whole file:
fine for ledgers and reports, not for gigabytes.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Union

from skillstate.errors import UsageError

__all__ = ["append_once", "appended", "entries", "retract", "write_once", "written"]

StrPath = Union[str, "os.PathLike[str]"]

_MODE = 0o644
_RETRACT = "-"
"""Marks a retraction record: ``-<key>``. Keys may not start with it."""
_PENDING = "pending"
_DONE = "done"
_TEMP = re.compile(r"\.(?P<name>.+)\.[0-9a-f]{32}\.tmp")


# ---------------------------------------------------------------- lines


def append_once(path: StrPath, line: str, key: str) -> bool:
    """Append ``line`` under ``key`` unless a record with ``key`` is already in the file.

    Returns True when this call appended it (and fsynced it), False when it was there.
    The file is created if needed. ``line`` may not contain a line break; ``key`` may
    not contain a tab or a line break.
    """
    _check_key(key)
    if "\n" in line or "\r" in line:
        raise UsageError(f"a line may not contain a line break: {line!r}")
    target = Path(path)
    with _locked(target, exclusive=True) as fd:
        text = _complete(fd)
        if key in _live(_records(text)):
            return False
        _append(fd, key, line)
        if not text:
            _fsync_dir(target.parent)  # the file may be new: make its name durable too
        return True


def retract(path: StrPath, key: str, reason: str = "retracted") -> bool:
    """Undo ``key``'s line by appending a retraction; True when there was one to undo.

    Safe to repeat (a compensation that a crash makes run twice retracts once).
    """
    _check_key(key)
    if "\n" in reason or "\r" in reason:
        raise UsageError(f"a reason may not contain a line break: {reason!r}")
    target = Path(path)
    try:
        with _locked(target, exclusive=True) as fd:
            if key not in _live(_records(_complete(fd))):
                return False
            _append(fd, _RETRACT + key, reason)
            return True
    except FileNotFoundError:
        return False


def appended(path: StrPath, key: str) -> bool:
    """Whether the file holds a complete, unretracted record with ``key``."""
    _check_key(key)
    return any(found == key for found, _ in entries(path))


def entries(path: StrPath) -> list[tuple[str, str]]:
    """Every complete, unretracted ``(key, line)`` record, in the order appended.

    For a skill's ``verify``: "the record for this key is there exactly once".
    """
    try:
        with _locked(Path(path), exclusive=False) as fd:
            return list(_live(_records(_read(fd))).items())
    except FileNotFoundError:
        return []


def _live(records: Iterator[tuple[str, str]]) -> dict[str, str]:
    """Key -> line of the records not retracted since (insertion order kept)."""
    live: dict[str, str] = {}
    for key, line in records:
        if key.startswith(_RETRACT):
            live.pop(key[len(_RETRACT) :], None)
        elif key not in live:
            live[key] = line
    return live


# ---------------------------------------------------------------- whole files


def write_once(path: StrPath, data: bytes, key: str) -> bool:
    """Replace the file's content with ``data`` atomically, once per ``key``.

    Returns True when this call wrote it, False when the write with ``key`` had
    already happened (also when a crash cut it off before it was fully recorded).
    """
    _check_key(key)
    target = Path(path)
    digest = hashlib.sha256(data).hexdigest()
    with _locked(_keys_path(target), exclusive=True) as fd:
        records = _complete(fd)
        done, pending = _states(records)
        if key in done:
            return False
        current = _digest_of(target)
        # A crash after the rename: the content says the effect happened; finish it.
        if current is not None and current in pending.get(key, ()):
            _append(fd, key, f"{_DONE} {current}")
            return False
        # Other keys interrupted the same way: record them before their content goes.
        for other, digests in pending.items():
            if other not in done and current in digests:
                _append(fd, other, f"{_DONE} {current}")
        _remove_stale_temps(target)
        temp = _write_temp(target, data)
        _append(fd, key, f"{_PENDING} {digest}")
        if not records:
            _fsync_dir(target.parent)  # a new .keys file: its name must outlive a crash too
        _publish(temp, target)
        _append(fd, key, f"{_DONE} {digest}")
        return True


def written(path: StrPath, key: str) -> bool:
    """Whether :func:`write_once` with ``key`` happened, even if a crash cut off its record."""
    _check_key(key)
    target = Path(path)
    try:
        with _locked(_keys_path(target), exclusive=False) as fd:
            done, pending = _states(_read(fd))
            if key in done:
                return True
            # Under the shared lock no write_once is between its steps: a pending key
            # is from a writer that died, and the content tells whether it renamed.
            return key in pending and _digest_of(target) in pending[key]
    except FileNotFoundError:
        return False


# ---------------------------------------------------------------- steps (private)


def _write_temp(target: Path, data: bytes) -> Path:
    """Step 2: the new content, durable in a temporary file next to the target."""
    temp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, _MODE)
    try:
        _write_all(fd, data)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        temp.unlink(missing_ok=True)
        raise
    os.close(fd)
    return temp


def _publish(temp: Path, target: Path) -> None:
    """Step 4: the rename that makes the content visible, then durable."""
    os.replace(temp, target)
    _fsync_dir(target.parent)


def _remove_stale_temps(target: Path) -> None:
    # Called under the exclusive lock: any temporary file of ours is from a dead writer.
    directory = target.parent
    for name in os.listdir(directory):
        match = _TEMP.fullmatch(name)
        if match and match["name"] == target.name:
            with contextlib.suppress(FileNotFoundError):
                (directory / name).unlink()


# ---------------------------------------------------------------- records


@contextlib.contextmanager
def _locked(path: Path, *, exclusive: bool) -> Iterator[int]:
    """An open descriptor of ``path`` under flock: exclusive (created) or shared (must exist)."""
    if exclusive:
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
    else:
        flags = os.O_RDONLY | os.O_CLOEXEC
    fd = os.open(path, flags, _MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield fd
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _read(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def _complete(fd: int) -> bytes:
    """The file's complete records, under the exclusive lock; a torn last record is cut off.

    Every writer holds the lock and writes whole records, so a tail without a newline
    can only be left by a writer that died in the middle of its ``write``.
    """
    data = _read(fd)
    end = data.rfind(b"\n") + 1
    if end != len(data):
        os.ftruncate(fd, end)
        os.fsync(fd)
    return data[:end]


def _records(data: bytes) -> Iterator[tuple[str, str]]:
    """``(key, line)`` of every newline-terminated record; other lines are skipped."""
    for raw in data.split(b"\n")[:-1]:  # the piece after the last newline is not complete
        key, sep, line = raw.decode("utf-8", errors="replace").partition("\t")
        if sep and key:
            yield key, line


def _states(data: bytes) -> tuple[set[str], dict[str, set[str]]]:
    """From a ``.keys`` file: the keys recorded done, and each pending key's digests."""
    done: set[str] = set()
    pending: dict[str, set[str]] = {}
    for key, line in _records(data):
        state, _, digest = line.partition(" ")
        if state == _DONE:
            done.add(key)
        elif state == _PENDING:
            pending.setdefault(key, set()).add(digest)
    return done, pending


def _append(fd: int, key: str, line: str) -> None:
    """One record, written with one ``write`` on the O_APPEND descriptor, then fsynced."""
    _write_all(fd, f"{key}\t{line}\n".encode())
    os.fsync(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _digest_of(path: Path) -> str | None:
    digest = hashlib.sha256()
    try:
        with path.open("rb") as handle:
            while chunk := handle.read(1 << 16):
                digest.update(chunk)
    except FileNotFoundError:
        return None
    return digest.hexdigest()


def _fsync_dir(directory: Path) -> None:
    # A new or renamed directory entry is only durable once the directory is fsynced.
    fd = os.open(directory, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _keys_path(target: Path) -> Path:
    return target.with_name(target.name + ".keys")


def _check_key(key: str) -> None:
    if not isinstance(key, str) or not key or any(c in key for c in "\t\r\n"):
        raise UsageError(f"an idempotency key must be non-empty, without tabs or breaks: {key!r}")
    if key.startswith(_RETRACT):
        raise UsageError(f"an idempotency key may not start with {_RETRACT!r}: {key!r}")
