"""``FilesStore.restore``: a whole task built beside its folder, then swapped in.

The task's files (head.json, one YAML file per kept version, events.jsonl,
inbox.jsonl) are written to a staging folder in the store's root, fsynced, and the
staging folder is exchanged with the task's folder in one atomic step
(:func:`~skillstate.store.files_rewrite.exchange`), holding the task's lock. The
lock file (and, on an overwrite, the lease with its generation) are hard-linked
into the staging folder first, so writers waiting on the lock keep waiting on the
same file. After a crash at any instant the task's folder is the old one (no
task, or the task being overwritten) or the new one, whole; a staging folder left
behind starts with ``.`` and is never listed as a task.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from typing import TYPE_CHECKING, Any

import yaml

from skillstate.errors import StoreError, TaskExists
from skillstate.store import fileio
from skillstate.store.files_inbox import INBOX
from skillstate.store.files_rewrite import _link, _write_new, exchange
from skillstate.store.restoring import RestorePlan, RestoreRow

if TYPE_CHECKING:
    from skillstate.store.files import FilesStore

__all__ = ["restore"]

_PREFIX = ".restore-"


def restore(store: FilesStore, plan: RestorePlan, *, overwrite: bool) -> None:
    """Write ``plan`` into ``store`` (module docstring)."""
    from skillstate.store import files

    task_id = plan.task_id
    try:
        new_files = _render(plan)
    except (UnicodeEncodeError, yaml.YAMLError) as exc:
        raise StoreError(f"task {task_id!r} cannot be written as UTF-8 files: {exc}") from exc
    directory = store._dir(task_id)
    with store._locked(task_id, directory):
        if (directory / files._HEAD).exists() and not overwrite:
            raise TaskExists(f"task {task_id!r} already exists in {store.url}; nothing was written")
        staging = store.root / f"{_PREFIX}{secrets.token_hex(6)}"
        try:
            staging.mkdir(mode=fileio.DIR_MODE)
            os.chmod(staging, fileio.DIR_MODE)
        except OSError as exc:
            raise fileio.os_error("create", staging, exc) from exc
        try:
            for name, data in new_files.items():
                _write_new(staging / name, data)
            for name in (files._LOCK, files._LEASE):
                if (directory / name).exists():
                    _link(str(directory / name), staging / name)
            fileio.fsync_dir(staging)
            exchange(staging, directory)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        fileio.fsync_dir(store.root)
        shutil.rmtree(staging, ignore_errors=True)  # now the old folder


def _render(plan: RestorePlan) -> dict[str, bytes]:
    from skillstate.store import files

    header = json.dumps(
        {
            "task_id": plan.task_id,
            "version": plan.version,
            "updated_at": plan.updated_at.isoformat(),
            "chain_len": plan.chain_len,
            "chain_bytes": plan.chain_bytes,
            "digest": plan.head_digest,
        },
        ensure_ascii=False,
    )
    rendered = {files._HEAD: f'{header[:-1]},\n "state": {plan.head}}}\n'.encode()}
    for row in plan.rows:
        rendered[files._step_name(row.version)] = _step(plan.task_id, row).encode()
    rendered[files._EVENTS] = "".join(e.text + "\n" for e in plan.events).encode()
    if plan.inbox:
        rendered[INBOX] = "".join(
            f'{{"seq":{m.seq},"kind":{json.dumps(m.kind)},"at":"{m.at.isoformat()}",'
            f'"body":{m.body}}}\n'
            for m in plan.inbox
        ).encode("utf-8")
    return rendered


def _step(task_id: str, row: RestoreRow) -> str:
    from skillstate.store import files

    doc: dict[str, Any] = {
        "task_id": task_id,
        "version": row.version,
        "created_at": row.created_at.isoformat(),
        "digest": row.digest,
        "stored_as": "snapshot" if row.snapshot is not None else "delta",
    }
    if row.snapshot is not None:
        doc["state"] = json.loads(row.snapshot)
    if row.patch is not None:
        doc["patch"] = json.loads(row.patch)
    text: str = yaml.dump(
        doc,
        Dumper=files._YamlDumper,
        allow_unicode=True,
        sort_keys=False,
        default_flow_style=False,
        width=files._YAML_WIDTH,
    )
    return text
