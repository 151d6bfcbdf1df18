"""The export file: a versioned, checksummed zip of whole tasks (``skillstate export``).

Layout (format 1)::

    manifest.json                  format, version, tasks, and every member's sha256
    manifest.sha256                "sha256:<hex>" of manifest.json's exact bytes
    tasks/<n>/checkpoints.jsonl    one kept version per line: version, created_at, state
    tasks/<n>/events.jsonl         one event per line, every field, its patch included
    tasks/<n>/inbox.jsonl          one message per line: seq, kind, at, body
    artifacts/sha256-<hex>         the bytes of each artifact the tasks reference

States are written as the store keeps them: sealed values stay ``enc:v1:`` tokens
and nothing is unsealed. :func:`write_archive` writes to a temporary file beside the
target, fsyncs it and renames it into place, so after a crash (``kill -9``) the target
is the previous file or the whole new one, never a partial one.

:func:`read_archive` checks everything before anything is used: the zip reads, the
manifest matches its checksum, the format is this one, every member is listed and
matches its sha256, and every record validates. Anything else is one
:class:`ArchiveRefused` line (exit 2).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import zipfile
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from skillstate.errors import ArchiveRefused
from skillstate.events import Event
from skillstate.ops.portable import TaskRecords
from skillstate.store.base import Checkpoint, InboxMessage

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "Manifest",
    "read_archive",
    "write_archive",
]

FORMAT = "skillstate-tasks"
FORMAT_VERSION = 1
"""Raised when the layout changes; a reader refuses versions it does not know."""

_MANIFEST = "manifest.json"
_MANIFEST_SUM = "manifest.sha256"


class ManifestTask(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task_id: str
    folder: str
    version: int
    checkpoints: int
    events: int
    inbox: int
    artifacts: list[str]
    missing_artifacts: list[str] = []


class Manifest(BaseModel):
    """``manifest.json``."""

    model_config = ConfigDict(extra="forbid")
    format: str
    format_version: int
    created_at: datetime
    skillstate: str
    tasks: list[ManifestTask]
    members: dict[str, str]
    """Member name -> ``sha256:<hex>`` of its bytes."""


def write_archive(path: str | Path, tasks: Iterable[TaskRecords]) -> Manifest:
    """Write ``tasks`` to ``path`` atomically (temp file, fsync, rename); the manifest."""
    target = Path(path)
    temp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.partial")
    try:
        with zipfile.ZipFile(temp, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            manifest = _write_members(archive, list(tasks))
        _fsync(temp)
        os.replace(temp, target)
        _fsync_dir(target.parent)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return manifest


def _write_members(archive: zipfile.ZipFile, tasks: list[TaskRecords]) -> Manifest:
    from skillstate import __version__

    members: dict[str, str] = {}

    def put(name: str, data: bytes) -> None:
        archive.writestr(name, data)
        members[name] = "sha256:" + hashlib.sha256(data).hexdigest()

    entries = []
    written: set[str] = set()
    for number, records in enumerate(tasks, 1):
        folder = f"tasks/{number}"
        put(
            f"{folder}/checkpoints.jsonl",
            _lines(
                {"version": c.version, "created_at": c.created_at.isoformat(), "state": c.state}
                for c in records.checkpoints
            ),
        )
        put(f"{folder}/events.jsonl", _lines(e.model_dump(mode="json") for e in records.events))
        put(
            f"{folder}/inbox.jsonl",
            _lines(
                {"seq": m.seq, "kind": m.kind, "at": m.at.isoformat(), "body": m.body}
                for m in records.inbox
            ),
        )
        for ref, data in records.artifacts.items():
            if ref not in written:
                put(_artifact_member(ref), data)
                written.add(ref)
        entries.append(
            ManifestTask(
                task_id=records.task_id,
                folder=folder,
                version=records.version,
                checkpoints=len(records.checkpoints),
                events=len(records.events),
                inbox=len(records.inbox),
                artifacts=sorted(records.artifacts),
                missing_artifacts=records.missing,
            )
        )
    manifest = Manifest(
        format=FORMAT,
        format_version=FORMAT_VERSION,
        created_at=datetime.now(timezone.utc),
        skillstate=__version__,
        tasks=entries,
        members=members,
    )
    text = manifest.model_dump_json(indent=1).encode()
    archive.writestr(_MANIFEST, text)
    archive.writestr(_MANIFEST_SUM, "sha256:" + hashlib.sha256(text).hexdigest())
    return manifest


def read_archive(path: str | Path) -> tuple[Manifest, list[TaskRecords]]:
    """Every task in the file at ``path``, checked whole; ``ArchiveRefused`` otherwise."""
    where = str(path)
    try:
        with zipfile.ZipFile(path) as archive:
            manifest = _manifest(archive, where)
            names = set(archive.namelist()) - {_MANIFEST, _MANIFEST_SUM}
            if names != set(manifest.members):
                raise ArchiveRefused(f"{where}: its members are not the ones its manifest lists")
            blobs = {name: _member(archive, name, manifest, where) for name in sorted(names)}
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError) as exc:
        raise ArchiveRefused(f"{where} is not a whole skillstate export ({exc})") from exc
    except FileNotFoundError as exc:
        raise ArchiveRefused(f"{where}: no such file") from exc
    except OSError as exc:
        raise ArchiveRefused(f"{where} cannot be read ({exc.strerror or exc})") from exc
    return manifest, [_task(entry, blobs, where) for entry in manifest.tasks]


def _manifest(archive: zipfile.ZipFile, where: str) -> Manifest:
    try:
        text = archive.read(_MANIFEST)
        expected = archive.read(_MANIFEST_SUM).decode("ascii").strip()
    except KeyError as exc:
        raise ArchiveRefused(f"{where} is not a skillstate export (no manifest)") from exc
    if "sha256:" + hashlib.sha256(text).hexdigest() != expected:
        raise ArchiveRefused(f"{where}: its manifest does not match its checksum (changed)")
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise ArchiveRefused(f"{where}: its manifest is not JSON ({exc})") from exc
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise ArchiveRefused(f"{where} is not a skillstate export (format {_get(raw, 'format')!r})")
    if raw.get("format_version") != FORMAT_VERSION:
        raise ArchiveRefused(
            f"{where} is export format {raw.get('format_version')!r}; this skillstate reads "
            f"format {FORMAT_VERSION}"
        )
    try:
        return Manifest.model_validate(raw)
    except ValidationError as exc:
        raise ArchiveRefused(f"{where}: its manifest does not validate ({_first(exc)})") from exc


def _member(archive: zipfile.ZipFile, name: str, manifest: Manifest, where: str) -> bytes:
    data = archive.read(name)
    if "sha256:" + hashlib.sha256(data).hexdigest() != manifest.members[name]:
        raise ArchiveRefused(f"{where}: member {name} does not match its checksum (changed)")
    return data


def _task(entry: ManifestTask, blobs: dict[str, bytes], where: str) -> TaskRecords:
    folder = entry.folder
    try:
        points = [
            Checkpoint(
                entry.task_id, r["version"], r["state"], datetime.fromisoformat(r["created_at"])
            )
            for r in _read_lines(blobs[f"{folder}/checkpoints.jsonl"])
        ]
        events = [Event.model_validate(r) for r in _read_lines(blobs[f"{folder}/events.jsonl"])]
        inbox = [
            InboxMessage(r["seq"], r["kind"], r["body"], datetime.fromisoformat(r["at"]))
            for r in _read_lines(blobs[f"{folder}/inbox.jsonl"])
        ]
        artifacts = {ref: blobs[_artifact_member(ref)] for ref in entry.artifacts}
    except ValidationError as exc:
        raise ArchiveRefused(f"{where}: task {entry.task_id!r}: {_first(exc)}") from exc
    except (KeyError, TypeError, ValueError) as exc:
        raise ArchiveRefused(f"{where}: task {entry.task_id!r} does not read ({exc!r})") from exc
    if not points or points[-1].version != entry.version:
        raise ArchiveRefused(f"{where}: task {entry.task_id!r} has no head checkpoint")
    return TaskRecords(entry.task_id, points, events, inbox, artifacts, entry.missing_artifacts)


def _artifact_member(ref: str) -> str:
    return "artifacts/" + ref.replace(":", "-")


def _lines(records: Iterable[dict[str, Any]]) -> bytes:
    return b"".join(
        json.dumps(r, ensure_ascii=False, separators=(",", ":")).encode() + b"\n" for r in records
    )


def _read_lines(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in data.decode("utf-8").splitlines() if line]


def _get(raw: Any, key: str) -> Any:
    return raw.get(key) if isinstance(raw, dict) else None


def _first(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(p) for p in error["loc"])
    return f"{where}: {error['msg']}" if where else str(error["msg"])


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
