"""Durable file operations for the files store: atomic writes, appends, private modes.

Every file is written to a temporary name in the same directory, fsynced, then
renamed over the target, and the directory is fsynced. Files are created ``0600``
and directories ``0700``, whatever the umask: states may hold personal data.
Failures are one-line ``StoreError``s naming the path.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import tempfile
from pathlib import Path

from skillstate.errors import StoreError

__all__ = [
    "DIR_MODE",
    "FILE_MODE",
    "append_line",
    "fsync_dir",
    "listdir",
    "make_dirs",
    "mkdir",
    "os_error",
    "unlink",
    "write_atomic",
]

FILE_MODE = 0o600
"""States may hold personal data: every file is private to its owner (as mkstemp makes it)."""
DIR_MODE = 0o700
"""And so is every directory the store creates."""


def os_error(action: str, path: Path, exc: OSError) -> StoreError:
    return StoreError(f"cannot {action} {str(path)!r}: {exc.strerror or exc}")


def listdir(directory: Path) -> list[str]:
    try:
        return os.listdir(directory)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise os_error("list", directory, exc) from exc


def make_dirs(directory: Path) -> None:
    """Create ``directory`` and its missing parents, each owner-only (raises OSError)."""
    missing = [d for d in (directory, *directory.parents) if not d.is_dir()]
    for path in reversed(missing):
        try:
            path.mkdir(mode=DIR_MODE)
        except FileExistsError:
            if not path.is_dir():
                raise
            continue
        os.chmod(path, DIR_MODE)  # the umask may have taken bits off


def mkdir(directory: Path, parent: Path) -> None:
    """Create ``directory`` (one level, owner-only) and make its entry in ``parent`` durable."""
    if directory.is_dir():
        return
    try:
        directory.mkdir(mode=DIR_MODE)
        os.chmod(directory, DIR_MODE)  # whatever the umask
    except FileExistsError:
        return  # another writer made it first
    except OSError as exc:
        raise os_error("create", directory, exc) from exc
    fsync_dir(parent)


def unlink(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise os_error("delete", path, exc) from exc


def fsync_dir(directory: Path) -> None:
    """Make renames, creations and deletions in ``directory`` durable."""
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        if exc.errno == errno.EINVAL:
            return  # some filesystems cannot fsync a directory; nothing more to do there
        raise os_error("sync", directory, exc) from exc


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: readers see the old file or the new one, never a mix."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            os.fchmod(fd, FILE_MODE)  # mkstemp's 0600, less whatever the umask took
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError as exc:
        raise os_error("write", path, exc) from exc
    fsync_dir(path.parent)


def append_line(path: Path, line: bytes) -> None:
    """Append one line durably, first cutting off a torn line a crashed writer left.

    The caller holds the task's lock, so nobody else is appending.
    """
    created = not path.exists()
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, FILE_MODE)
        try:
            if created:
                os.fchmod(fd, FILE_MODE)  # whatever the umask
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                os.ftruncate(fd, _end_of_last_line(fd, size))
            view = memoryview(line)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise os_error("append to", path, exc) from exc
    if created:
        fsync_dir(path.parent)


def _end_of_last_line(fd: int, size: int, chunk: int = 1 << 16) -> int:
    """Offset just past the last newline in the file (0 when there is none)."""
    end = size
    while end > 0:
        start = max(0, end - chunk)
        found = os.pread(fd, end - start, start).rfind(b"\n")
        if found >= 0:
            return start + found + 1
        end = start
    return 0


def lock_folder(directory: Path, parent: Path, name: str) -> int:
    """``directory/name`` opened (created ``0600``) and ``flock``ed: the caller closes it.

    The lock file locked is the one in the folder *now*: a folder renamed away while
    this waited (a deleted task, :mod:`skillstate.store.files_delete`) is not the
    task's any more and writing there would be lost, so the lock is taken again on
    the folder that is there (a new, empty one, where the writer's version check fails).
    """
    lock_path = directory / name
    while True:
        mkdir(directory, parent)
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
            if os.fstat(fd).st_mode & 0o777 != FILE_MODE:
                os.fchmod(fd, FILE_MODE)  # created under a umask that took bits off
        except OSError as exc:
            raise os_error("open", lock_path, exc) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            held, there = os.fstat(fd), os.stat(lock_path)
        except FileNotFoundError:
            os.close(fd)
            continue
        except OSError as exc:
            os.close(fd)
            raise os_error("lock", lock_path, exc) from exc
        if (held.st_dev, held.st_ino) == (there.st_dev, there.st_ino):
            return fd
        os.close(fd)
