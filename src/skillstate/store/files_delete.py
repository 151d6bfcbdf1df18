"""Deleting from the files store: a task's folder, an artifact's file.

**A task** is deleted by one ``rename`` of its folder to a hidden name in the store
directory (``.deleted-<folder>-<random>``), made durable with an fsync of the store
directory, then removed. The rename is the commit point: before it the task is whole,
after it the task is gone (a hidden name is never listed or loaded: a task folder's
name never starts with a dot). A crash after the rename leaves only the hidden folder,
which the next delete sweeps. The rename happens under the task's lock, so no commit,
prune or claim of the task is halfway through when it does; one waiting for the lock
then locks the folder that is there instead (:func:`.fileio.lock_folder`), a fresh
one, where its version check fails: nothing is written into the deleted folder.

**An artifact** with a grace period (``unused_since``) is renamed aside first, its
time of last put read from the renamed file, and only then removed, or renamed back
when it was put again since (:meth:`FilesStore.put_artifact` touches the file it
finds). A put racing the delete either touched the file before the rename (kept) or
found no file and wrote it again.
"""

from __future__ import annotations

import os
import secrets
import shutil
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from skillstate.store import fileio
from skillstate.store.base import check_task_id

if TYPE_CHECKING:
    from skillstate.store.files import FilesStore

__all__ = ["delete_artifact", "delete_task", "touch_artifact"]

_TRASH = ".deleted-"


def delete_task(store: FilesStore, task_id: str) -> bool:
    from skillstate.store import files

    name = files.task_dir_name(check_task_id(task_id))
    sweep(store)
    directory = store.root / name
    if not directory.is_dir():
        return False
    with store._locked(task_id, directory):
        found = (directory / files._HEAD).is_file()
        trash = store.root / f"{_TRASH}{name[:200]}-{secrets.token_hex(4)}"
        try:
            os.rename(directory, trash)
        except FileNotFoundError:
            return False  # another delete went first
        except OSError as exc:
            raise fileio.os_error("delete", directory, exc) from exc
        fileio.fsync_dir(store.root)
    shutil.rmtree(trash, ignore_errors=True)
    return found


def sweep(store: FilesStore) -> None:
    """Remove what a delete that crashed after its rename left behind."""
    for entry in fileio.listdir(store.root):
        if entry.startswith(_TRASH):
            shutil.rmtree(store.root / entry, ignore_errors=True)


def touch_artifact(path: os.PathLike[str]) -> bool:
    """Mark an existing artifact file as put now; False when there is none (any more)."""
    now = time.time_ns()  # the fine clock: the kernel's file times lag it by a tick
    try:
        os.utime(path, ns=(now, now))
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise fileio.os_error("touch", Path(path), exc) from exc
    return True


def delete_artifact(store: FilesStore, ref: str, unused_since: datetime | None) -> bool:
    from skillstate.store import files

    match = files._REF.fullmatch(ref)
    if match is None:
        return False
    folder = store.root / files._ARTIFACTS
    path = folder / f"sha256-{match.group(1)}"
    aside = folder / f"{_TRASH}{match.group(1)}-{secrets.token_hex(4)}"
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise fileio.os_error("delete", path, exc) from exc
    if unused_since is not None:
        put_at = datetime.fromtimestamp(aside.stat().st_mtime, timezone.utc)
        if put_at >= unused_since:
            os.replace(aside, path)  # put again meanwhile: the same bytes either way
            return False
    aside.unlink()
    fileio.fsync_dir(folder)
    return True
