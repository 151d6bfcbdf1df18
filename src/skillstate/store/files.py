"""Files store: a directory of plain, human-readable files, one folder per task.

URLs: ``file:///absolute/dir`` or ``file://relative/dir`` (relative to the
working directory, as ``sqlite:///relative.db`` is).

Layout::

    DIR/<task>/head.json              the head state whole, its version, checksum and
                                      chain counters
    DIR/<task>/state_step_0001.yaml   one per kept version: a header (with the version's
                                      checksum), then the state (``stored_as: snapshot``)
                                      or the JSON Patch from the version before
                                      (``stored_as: delta``)
    DIR/<task>/events.jsonl           one event per line, without its patch
    DIR/<task>/lease.json             the lease: its worker (``null`` once released),
                                      expiry and generation (the fencing token)
    DIR/<task>/inbox.jsonl            messages posted to the task, one per line
                                      (:mod:`skillstate.store.files_inbox`)
    DIR/<task>/.lock                  what writers ``flock`` (never holds data)
    DIR/artifacts/sha256-<hex>        content-addressed artifacts

The files are meant to be read (and diffed, and grepped) by people: a checkpoint
is a YAML document showing either the whole state or exactly what the step
changed. The data model is the SQLite backend's, file by file.

**Checksums.** head.json carries ``digest``: ``sha256:`` of the state's JSON text
as :func:`~skillstate.store.chain.dumps` writes it; each YAML file carries the
version's (``sha256-sorted:``, the same over the JSON with keys sorted: see
:mod:`skillstate.store.chain`). Loading checks them, and that the state's
``task_id`` and ``version`` are the folder's and the header's, so a hand edit is
``StateCorrupted``, not a silently different state; to change a state, use
``skillstate set``/``edit``, which commit a new version. Files written before
checksums have no ``digest`` and load unverified.

**Format versions.** The format is versioned by its fields: every field added
since the first release (``digest``, the lease's ``generation``, a ``null``
worker) is optional to readers, which treat its absence as "written before".

**The commit point is the rename of head.json.** A commit, holding the task's
lock, writes the version's YAML file, appends its event line, then atomically
replaces head.json. A crash before that rename leaves the previous head in
place and some leftovers for the next version: a YAML file and maybe an event
line (maybe torn). Readers only trust what head.json's version covers, so they
ignore both; the next commit of that version overwrites the YAML file, cuts a
torn line off, and appends its own event line, which wins over the leftover one
(the last line for a version wins). No rollback step is needed, which is what
makes the scheme crash-safe without a journal.

Every file is written to a temporary name in the same directory, fsynced, then
renamed over the target, and the directory is fsynced: a reader never sees half
a file and a power cut never loses a rename that was reported done. Files are
created ``0600`` and directories ``0700``, whatever the umask (states may hold
personal data); a store directory that already exists keeps its mode.

A complete line of events.jsonl that does not parse cannot be a crashed append
(those are torn: no newline, and cut off by the next append), so it is
``StateCorrupted`` naming the line, never skipped.

Writers of one task (commit, prune, claim, release) serialize on ``flock`` of
``DIR/<task>/.lock``, opened anew by each operation: ``flock`` belongs to an open
file description, so this excludes other processes and, with a per-task
``threading.Lock`` in front, other threads. Readers take no lock: head.json is
only ever replaced whole, and versions at or below it are never rewritten (only
deleted by prune, which never deletes what a kept version needs).

Task ids become directory names by percent-encoding every byte outside
``[A-Za-z0-9._-]`` (and a leading ``.``), so ``a/b`` is ``a%2Fb``, ``..`` is
``%2E.``, nothing is hidden and :meth:`FilesStore.tasks` decodes the original
ids back. ASCII only: non-ASCII names would be renormalized by some filesystems
(macOS stores NFD), which would change the ids ``tasks()`` returns. Ids every
store refuses (:func:`~skillstate.store.base.check_task_id`) and ids longer than a
directory name can be are ``UsageError``.

The URL takes no query parameters: any is ``InvalidStoreURL`` naming it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import string
import threading
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import yaml

from skillstate._yaml import check_events
from skillstate.errors import (
    ArtifactNotFound,
    InvalidStoreURL,
    StaleState,
    StateCorrupted,
    StoreError,
    StoreNotFound,
    TaskNotFound,
    UsageError,
)
from skillstate.events import Event, utcnow
from skillstate.store import fileio, files_delete, files_inbox, files_restore, files_rewrite
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
    EncodedCommit,
    Row,
    chain_counters,
    check_chain_counters,
    check_fence,
    check_head,
    check_ttl,
    claim_generation,
    damaged_lease,
    dumps,
    encode_commit,
    held_lease,
    plan_prune,
    rebuild,
    repaired_generation,
    restore_event,
    salvage_lease,
    take_snapshot,
    verify_digest,
)
from skillstate.store.heads import head_info
from skillstate.store.restoring import plan_restore

__all__ = ["FilesStore", "task_dir_name", "task_id_from_dir"]

# The C implementations are several times faster; the pure ones read and write
# the same documents, so either may open a store the other wrote.
_YamlLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_YamlDumper: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
# No line folding: a long string stays on one line, which reads better in a diff
# and keeps the YAML a plain transcription of the JSON.
_YAML_WIDTH = 1 << 20

_HEAD = "head.json"
_EVENTS = "events.jsonl"
_LEASE = "lease.json"
_LOCK = ".lock"
_ARTIFACTS = "artifacts"
_STEP = re.compile(r"state_step_(\d+)\.yaml")
_REF = re.compile(r"sha256:([0-9a-f]{64})")
_SAFE = frozenset(string.ascii_letters + string.digits + "-_.")
_NAME_MAX = 255
"""Longest directory name POSIX filesystems accept, in bytes."""
_FILE_MODE = fileio.FILE_MODE


def task_dir_name(task_id: str) -> str:
    """The directory name of ``task_id``; raises ``UsageError`` for an id that cannot be one."""
    raw = check_task_id(task_id).encode("utf-8")
    name = "".join(
        chr(byte) if chr(byte) in _SAFE and not (i == 0 and byte == ord(".")) else f"%{byte:02X}"
        for i, byte in enumerate(raw)
    )
    if name.lower() == _ARTIFACTS:
        # The artifacts folder sits next to the tasks; an (encoded) first letter keeps
        # a task of that name apart from it, and still decodes to the same id.
        name = f"%{ord(name[0]):02X}{name[1:]}"
    if len(name) > _NAME_MAX:
        raise UsageError(
            f"invalid task id {task_id[:32]!r}...: {len(name)} bytes as a directory name, "
            f"more than {_NAME_MAX}"
        )
    return name


def task_id_from_dir(name: str) -> str | None:
    """The task id a directory name encodes, or ``None`` if it is not one this store made."""
    try:
        task_id = urllib.parse.unquote(name, errors="strict")
        canonical = task_dir_name(task_id)
    except (UnicodeDecodeError, UsageError):
        return None
    # A folder copied in by hand as "my task" would be looked up as "my%20task":
    # listing it would name a task that load() cannot find.
    return task_id if canonical == name else None


def _step_name(version: int) -> str:
    return f"state_step_{version:04d}.yaml"


@dataclass(frozen=True)
class _Head:
    version: int
    chain_len: Any
    chain_bytes: Any
    """The counters as stored: any JSON (checked on load, see ``check_chain_counters``)."""
    updated_at: datetime
    state: dict[str, Any]
    task_id: Any = None
    """What the header says (``None`` when it says nothing)."""
    digest: Any = None


class FilesStore:
    """A store in a directory tree of YAML, JSON and JSON Lines files."""

    def __init__(
        self,
        root: str | Path,
        *,
        url: str | None = None,
        max_chain: int = DEFAULT_MAX_CHAIN,
        create: bool = True,
    ) -> None:
        """Open the store in ``root``; with ``create`` (the default), create it first.

        ``create=False`` opens only a directory that exists (``StoreNotFound``
        otherwise) and creates nothing.
        """
        self.root = Path(root)
        self.url = url or f"file://{self.root}"
        self.max_chain = max_chain
        if not create and not self.root.exists():
            raise StoreNotFound(self.url)
        try:
            fileio.make_dirs(self.root)
        except OSError as exc:
            # A path that cannot hold the store is bad input, not a backend fault.
            raise InvalidStoreURL(
                f"cannot use {str(self.root)!r} as a store directory: {exc.strerror or exc}"
            ) from exc
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}

    @classmethod
    def from_url(cls, url: str, *, create: bool = True) -> FilesStore:
        path, _, query = url.split("://", 1)[1].partition("?")
        if query:
            names = sorted({p.partition("=")[0] for p in query.split("&") if p}) or [query]
            raise InvalidStoreURL(
                f"unknown file:// URL option(s): {', '.join(names)} (it takes none)"
            )
        if not path:
            raise InvalidStoreURL(f"{url!r} names no directory (try file://.skillstate/files)")
        return cls(path, url=url, create=create)

    # ------------------------------------------------------------------ protocol

    def load(self, task_id: str, *, verify: bool = True) -> Checkpoint:
        head = self._require_head(task_id, self._dir(task_id), verify=verify)
        return Checkpoint(task_id, head.version, head.state, head.updated_at)

    def commit(
        self,
        task_id: str,
        expected_version: int,
        state: Mapping[str, Any],
        event: Event,
        *,
        fence: int | None = None,
    ) -> int:
        directory = self._dir(task_id)
        enc = encode_commit(task_id, expected_version, state, event, fence=fence)
        with self._locked(task_id, directory):
            if enc.fence is not None:
                record = self._lease_record(task_id, directory)
                holder, generation = (record[0], record[2]) if record else (None, 0)
                check_fence(task_id, enc.fence, holder, generation)
            head = self._head(task_id, directory, verify=False)
            current = head.version if head else 0
            if current != enc.expected:
                raise StaleState(task_id, enc.expected, current)
            counters = chain_counters(head.chain_len, head.chain_bytes) if head else (0, 0)
            # Version 1 has nothing before it to be a delta on, whatever its patch says;
            # counters damaged outside skillstate are reset by a snapshot.
            snapshot = (
                head is None or counters is None or take_snapshot(*counters, enc, self.max_chain)
            )
            chain_len, chain_bytes = counters or (0, 0)
            if snapshot:
                chain_len, chain_bytes = 0, 0
            else:
                chain_len, chain_bytes = chain_len + 1, chain_bytes + len(enc.patch or "")
            now = utcnow()
            # Serialize everything first, so a value that cannot be written fails the
            # commit before any file is touched.
            try:
                step = _step_yaml(enc, snapshot, now).encode()
                line = (enc.event + "\n").encode()
                head_text = _head_json(enc, chain_len, chain_bytes, now).encode()
            except (UnicodeEncodeError, yaml.YAMLError) as exc:  # e.g. a lone surrogate
                raise StoreError(
                    f"state of {task_id!r} cannot be written as UTF-8 files: {_one_line(exc)}"
                ) from exc
            fileio.write_atomic(directory / _step_name(enc.version), step)
            fileio.append_line(directory / _EVENTS, line)
            fileio.write_atomic(directory / _HEAD, head_text)  # the commit point
        return enc.version

    def checkpoint(self, task_id: str, version: int) -> Checkpoint:
        directory = self._dir(task_id)
        head_version = self._head_version(task_id, directory)
        if version == head_version:
            return self.load(task_id)
        missing = StoreError(f"task {task_id!r} has no checkpoint at version {version}")
        if not 1 <= version < head_version:
            raise missing  # above the head: at most a crashed commit's leftover
        # Walk back to the snapshot this version is rebuilt from.
        chain: list[Row] = []
        cursor = version
        while cursor >= 1:
            row = self._row(task_id, directory, cursor)
            if row is None:
                break
            chain.append(row)
            if row.snapshot is not None:
                break
            cursor -= 1
        if not chain:
            raise missing
        chain.reverse()
        if chain[0].snapshot is None:
            if not (directory / _step_name(version)).exists():
                # A prune running meanwhile deleted this version along with its chain.
                raise missing
            gap = chain[0].version - 1
            reason = (
                f"{_step_name(gap)} is missing, and version {version} is rebuilt through it"
                if gap >= 1
                else "no snapshot to rebuild this version from"
            )
            raise StateCorrupted(task_id, gap if gap >= 1 else version, reason)
        return Checkpoint(task_id, version, rebuild(task_id, version, chain), chain[-1].created_at)

    def checkpoints(self, task_id: str) -> list[CheckpointInfo]:
        directory = self._dir(task_id)
        head = self._require_head(task_id, directory, verify=False)
        rows = (self._row(task_id, directory, v) for v in self._versions(directory, head.version))
        return [row.info(task_id) for row in rows if row is not None]

    def events(self, task_id: str, *, since: int = 0) -> list[Event]:
        directory = self._dir(task_id)
        lines = self._event_lines(task_id, directory, self._head_version(task_id, directory))
        picked = sorted(v for v in lines if v > since)
        events = []
        for version in picked:
            row = self._row(task_id, directory, version)  # None once pruned: no patch
            patch = row.patch if row else None
            events.append(restore_event(task_id, lines[version], patch, version))
        return events

    def tasks(self) -> list[str]:
        try:
            entries = list(os.scandir(self.root))
        except OSError as exc:
            raise fileio.os_error("list", self.root, exc) from exc
        found = []
        for entry in entries:
            task_id = task_id_from_dir(entry.name)
            # A folder with a lease but no head.json has never been committed to.
            if task_id is not None and os.path.isfile(os.path.join(entry.path, _HEAD)):
                found.append(task_id)
        return sorted(found)

    def heads(self) -> list[HeadInfo]:
        """A scan of the store directory: each task's head.json and lease.json, read once."""
        try:
            entries = list(os.scandir(self.root))
        except OSError as exc:
            raise fileio.os_error("list", self.root, exc) from exc
        infos = []
        for entry in entries:
            task_id = task_id_from_dir(entry.name)
            if task_id is None:
                continue
            directory = Path(entry.path)
            head: _Head | None = None
            problem = None
            try:
                head = self._head(task_id, directory, verify=False)
                if head is None:
                    continue  # never committed to (a lease but no head.json): not a task
            except (StateCorrupted, StoreError) as exc:
                problem = _reason(exc)
            record, lease_problem = None, None
            try:
                record = self._lease_record(task_id, directory)
            except (StateCorrupted, StoreError) as exc:
                lease_problem = _reason(exc)
            infos.append(
                head_info(
                    task_id,
                    head.version if head else None,
                    head.state if head else None,
                    head.updated_at if head else None,
                    record,
                    problem=problem,
                    lease_problem=lease_problem,
                )
            )
        return sorted(infos, key=lambda info: info.task_id)

    def prune(self, task_id: str, *, keep_last: int, keep_every: int | None = None) -> PruneResult:
        directory = self._dir(task_id)
        self._require_head(task_id, directory, verify=False)  # TaskNotFound before creating
        with self._locked(task_id, directory):
            head = self._require_head(task_id, directory, verify=False)
            versions = self._versions(directory, None)
            rows = (self._row(task_id, directory, v) for v in versions if v <= head.version)
            infos = [row.info(task_id) for row in rows if row is not None]
            kept, deleted = plan_prune(task_id, infos, keep_last=keep_last, keep_every=keep_every)
            # Newest first: chains run backwards, so if this stops halfway every file
            # still there still rebuilds.
            doomed = [_step_name(v) for v in sorted(deleted, reverse=True)]
            # Under the lock, files above the head and temporary files can only be
            # what a crashed writer left; they go too.
            doomed += [_step_name(v) for v in versions if v > head.version]
            doomed += [name for name in fileio.listdir(directory) if name.endswith(".tmp")]
            for name in doomed:
                with contextlib.suppress(FileNotFoundError):
                    fileio.unlink(directory / name)
            fileio.fsync_dir(directory)
        return PruneResult(task_id, kept, deleted)

    def claim(self, task_id: str, worker: str, ttl: float) -> Lease:
        directory = self._dir(task_id)
        seconds = check_ttl(ttl)
        with self._locked(task_id, directory):
            now = utcnow()
            current, last = self._held(task_id, directory, now.timestamp())
            generation = claim_generation(task_id, current, last, worker, now)
            lease = Lease(task_id, worker, now + timedelta(seconds=seconds), generation)
            self._write_lease(directory, lease.task_id, worker, lease.expires_at, generation)
        return lease

    def release(self, task_id: str, worker: str) -> None:
        directory = self._dir(task_id)
        if not directory.is_dir():
            return
        with self._locked(task_id, directory):
            try:
                record = self._lease_record(task_id, directory)
            except StateCorrupted:
                return  # a damaged lease is reported by claim and lease; force_release clears it
            if record is not None and record[0] == worker:
                self._write_lease(directory, task_id, None, record[1], record[2])

    def lease(self, task_id: str) -> Lease | None:
        return self._held(task_id, self._dir(task_id), None)[0]

    def force_release(self, task_id: str) -> Lease | None:
        directory = self._dir(task_id)
        if not directory.is_dir():
            return None
        with self._locked(task_id, directory):
            try:
                record = self._lease_record(task_id, directory)
            except StateCorrupted:  # not even JSON: nothing of it can be kept
                record = ("?", None, None)
            if record is None or record[0] is None:
                return None
            generation = repaired_generation(record[2])
            self._write_lease(directory, task_id, None, record[1], generation)
        return salvage_lease(task_id, *record)

    def put_artifact(self, data: bytes, *, media_type: str = "application/octet-stream") -> str:
        # media_type is not kept: the protocol never returns it, and the bytes are the
        # artifact. The name is the content hash, so an existing file is already right.
        ref = artifact_ref(data)
        folder = self.root / _ARTIFACTS
        path = folder / ref.replace(":", "-", 1)
        # Touched when present: its mtime is the last put, what gc's grace period reads.
        if files_delete.touch_artifact(path):
            return ref
        fileio.mkdir(folder, self.root)
        fileio.write_atomic(path, bytes(data))
        return ref

    def get_artifact(self, ref: str) -> bytes:
        match = _REF.fullmatch(ref)
        if match is None:  # also keeps a crafted ref from naming a path elsewhere
            raise ArtifactNotFound(f"no artifact {ref!r}")
        path = self.root / _ARTIFACTS / f"sha256-{match.group(1)}"
        try:
            return path.read_bytes()
        except FileNotFoundError:
            raise ArtifactNotFound(f"no artifact {ref!r}") from None
        except OSError as exc:
            raise fileio.os_error("read", path, exc) from exc

    def rewrite(self, task_id: str, expected_version: int, fn: Callable[[Any], Any]) -> int:
        """A copy of the task's folder swapped in atomically (:mod:`.files_rewrite`)."""
        return files_rewrite.rewrite(self, task_id, expected_version, fn)

    def artifact_refs(self) -> list[str]:
        return files_rewrite.artifact_refs(self)

    def replace_artifact(self, ref: str, data: bytes) -> None:
        files_rewrite.replace_artifact(self, ref, data)

    def delete_task(self, task_id: str) -> bool:
        """One rename of the task's folder aside, then its removal (:mod:`.files_delete`)."""
        return files_delete.delete_task(self, task_id)

    def delete_artifact(self, ref: str, *, unused_since: datetime | None = None) -> bool:
        return files_delete.delete_artifact(self, ref, unused_since)

    def post(self, task_id: str, kind: str, body: Mapping[str, Any]) -> int:
        """An fsynced append to ``inbox.jsonl`` under the task's lock (:mod:`.files_inbox`)."""
        return files_inbox.post(self, task_id, kind, body)

    def inbox(self, task_id: str, *, after: int = 0) -> list[InboxMessage]:
        return files_inbox.inbox(self, task_id, after)

    def restore(
        self,
        task_id: str,
        checkpoints: Sequence[Checkpoint],
        events: Sequence[Event],
        inbox: Sequence[InboxMessage],
        *,
        overwrite: bool = False,
    ) -> int:
        """Staged beside the task's folder, then swapped in (:mod:`.files_restore`)."""
        plan = plan_restore(task_id, checkpoints, events, inbox, max_chain=self.max_chain)
        files_restore.restore(self, plan, overwrite=overwrite)
        return plan.version

    def close(self) -> None:
        """Nothing to release: no file stays open between operations."""

    # ------------------------------------------------------------------ helpers

    def _dir(self, task_id: str) -> Path:
        return self.root / task_dir_name(task_id)

    @contextlib.contextmanager
    def _locked(self, task_id: str, directory: Path) -> Iterator[None]:
        """Hold the task's write lock against other threads, then other processes."""
        with self._guard:
            thread_lock = self._locks.setdefault(task_id, threading.Lock())
        with thread_lock:
            fd = fileio.lock_folder(directory, self.root, _LOCK)
            try:
                yield
            finally:
                os.close(fd)  # closing the last descriptor releases the flock

    def _head(self, task_id: str, directory: Path, *, verify: bool = True) -> _Head | None:
        """head.json read; ``verify`` checks its checksum and that it belongs here."""
        path = directory / _HEAD
        try:
            text = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise fileio.os_error("read", path, exc) from exc
        try:
            data = json.loads(text)
            head = _Head(
                version=data["version"],
                chain_len=data["chain_len"],
                chain_bytes=data["chain_bytes"],
                updated_at=_timestamp(data["updated_at"]),
                state=data["state"],
                task_id=data.get("task_id"),
                digest=data.get("digest"),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise StateCorrupted(
                task_id, None, f"{_HEAD} does not load ({_one_line(exc)})"
            ) from exc
        if not isinstance(head.version, int) or head.version < 1:
            raise StateCorrupted(task_id, None, f"{_HEAD} has no valid version")
        if not isinstance(head.state, dict):
            raise StateCorrupted(task_id, head.version, f"{_HEAD} holds no state object")
        if verify:
            if head.task_id is not None and head.task_id != task_id:
                raise StateCorrupted(
                    task_id,
                    head.version,
                    f"{_HEAD} says task {head.task_id!r}, but it is stored as {task_id!r}",
                    field="task_id",
                )
            if head.digest is not None:
                verify_digest(task_id, head.version, dumps(head.state), head.digest)
            check_head(task_id, head.version, head.state)
            check_chain_counters(task_id, head.version, head.chain_len, head.chain_bytes)
        return head

    def _head_version(self, task_id: str, directory: Path) -> int:
        """The head's version, without parsing its state when head.json is as commits write it.

        :func:`_head_json` puts the flat header first and the state after
        ``,\\n "state": ``; the header alone parses in microseconds where the state of a
        long task takes milliseconds. Any other layout (a hand-edited file) is read whole,
        as :meth:`_head` reads it, with its errors.
        """
        path = directory / _HEAD
        try:
            text = path.read_bytes()
        except FileNotFoundError:
            raise TaskNotFound(task_id) from None
        except OSError as exc:
            raise fileio.os_error("read", path, exc) from exc
        cut = text.find(b',\n "state": ')
        if cut != -1:
            try:
                header = json.loads(text[:cut] + b"}")
            except ValueError:
                header = None
            version = header.get("version") if isinstance(header, dict) else None
            if type(version) is int and version >= 1:
                return version
        return self._require_head(task_id, directory, verify=False).version

    def _require_head(self, task_id: str, directory: Path, *, verify: bool = True) -> _Head:
        head = self._head(task_id, directory, verify=verify)
        if head is None:
            raise TaskNotFound(task_id)
        return head

    def _versions(self, directory: Path, head: int | None) -> list[int]:
        """Versions with a YAML file, sorted; only those up to ``head`` unless it is None."""
        versions = []
        for name in fileio.listdir(directory):
            match = _STEP.fullmatch(name)
            if match is not None and _step_name(int(match.group(1))) == name:
                versions.append(int(match.group(1)))
        return sorted(v for v in versions if head is None or v <= head)

    def _row(self, task_id: str, directory: Path, version: int) -> Row | None:
        """The stored checkpoint of ``version``; ``None`` if it has no file (pruned)."""
        name = _step_name(version)
        try:
            text = (directory / name).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise fileio.os_error("read", directory / name, exc) from exc
        refused = check_events(text)
        if refused is not None:
            raise StateCorrupted(task_id, version, f"{name} refused: {refused}")
        try:
            doc = yaml.load(text, Loader=_YamlLoader)
        except yaml.YAMLError as exc:
            raise StateCorrupted(
                task_id, version, f"{name} is not valid YAML ({_one_line(exc)})"
            ) from exc
        try:
            return _parse_step(version, doc)
        except (ValueError, TypeError, KeyError) as exc:
            raise StateCorrupted(task_id, version, f"{name}: {_one_line(exc)}") from exc

    def _event_lines(self, task_id: str, directory: Path, head: int) -> dict[int, str]:
        """Each version's event line, up to ``head``; the last line of a version wins.

        A complete line that does not parse is ``StateCorrupted`` naming it: a crashed
        append only ever leaves a torn last line (no newline), which is skipped here
        and cut off by the next append.
        """
        path = directory / _EVENTS
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise fileio.os_error("read", path, exc) from exc
        lines: dict[int, str] = {}
        # The part after the last newline is a torn append (or nothing): never complete.
        for number, raw in enumerate(data.split(b"\n")[:-1], 1):
            try:
                text = raw.decode("utf-8")
                version = json.loads(text)["version"]
                if isinstance(version, bool) or not isinstance(version, int):
                    raise TypeError(f"version {version!r} is not a number")
            except (ValueError, KeyError, TypeError) as exc:
                raise StateCorrupted(
                    task_id, None, f"{_EVENTS} line {number} does not load ({_one_line(exc)})"
                ) from exc
            if 1 <= version <= head:
                lines[version] = text
        return lines

    def _lease_record(self, task_id: str, directory: Path) -> tuple[Any, Any, Any] | None:
        """``(worker, expires_at, generation)`` as lease.json has them; None if no file."""
        path = directory / _LEASE
        try:
            data = json.loads(path.read_bytes())
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise fileio.os_error("read", path, exc) from exc
        except ValueError as exc:
            raise damaged_lease(task_id, f"{_LEASE} is not JSON: {_one_line(exc)}") from exc
        if not isinstance(data, dict) or "worker" not in data:
            raise damaged_lease(task_id, f"{_LEASE} holds no lease record")
        # Files written before fencing have no generation: 0.
        return data["worker"], data.get("expires_at"), data.get("generation", 0)

    def _held(self, task_id: str, directory: Path, now: float | None) -> tuple[Lease | None, int]:
        record = self._lease_record(task_id, directory)
        if record is None:
            return None, 0
        return held_lease(task_id, *record, now=now)

    @staticmethod
    def _write_lease(
        directory: Path, task_id: str, worker: str | None, expires_at: Any, generation: Any
    ) -> None:
        if isinstance(expires_at, datetime):
            expires_at = expires_at.isoformat()
        # ASCII escapes: a worker name is anything the caller passed, and this way
        # any str (even one that is not valid Unicode) is written and read back.
        text = json.dumps(
            {
                "task_id": task_id,
                "worker": worker,
                "expires_at": expires_at,
                "generation": generation,
            }
        )
        fileio.write_atomic(directory / _LEASE, text.encode("ascii") + b"\n")


# ---------------------------------------------------------------------- encoding


def _step_yaml(enc: EncodedCommit, snapshot: bool, now: datetime) -> str:
    doc: dict[str, Any] = {
        "task_id": enc.task_id,
        "version": enc.version,
        "created_at": now.isoformat(),
        "digest": enc.version_digest,
        "stored_as": "snapshot" if snapshot else "delta",
    }
    if snapshot:
        doc["state"] = json.loads(enc.state)
    if enc.patch is not None:
        doc["patch"] = json.loads(enc.patch)
    text: str = yaml.dump(
        doc,
        Dumper=_YamlDumper,
        allow_unicode=True,
        sort_keys=False,
        default_flow_style=False,
        width=_YAML_WIDTH,
    )
    return text


def _parse_step(version: int, doc: Any) -> Row:
    """A :class:`Row` from a parsed YAML checkpoint; raises ValueError naming what is wrong."""
    if not isinstance(doc, dict):
        raise ValueError("not a mapping")
    if doc.get("version") != version:
        raise ValueError(f"header says version {doc.get('version')!r}")
    stored_as = doc.get("stored_as")
    patch = doc.get("patch")
    if patch is not None and not isinstance(patch, list):
        raise ValueError("patch is not a list of operations")
    if stored_as == "snapshot":
        state = doc.get("state")
        if not isinstance(state, dict):
            raise ValueError("snapshot has no state mapping")
        snapshot: str | None = dumps(state)
    elif stored_as == "delta":
        if patch is None:
            raise ValueError("delta has no patch")
        snapshot = None
    else:
        raise ValueError(f"stored_as is {stored_as!r}, not snapshot or delta")
    checksum = doc.get("digest")
    if checksum is not None and not isinstance(checksum, str):
        raise ValueError("digest is not text")
    return Row(
        version=version,
        snapshot=snapshot,
        patch=dumps(patch) if patch is not None else None,
        created_at=_timestamp(doc.get("created_at")),
        digest=checksum,
    )


def _head_json(enc: EncodedCommit, chain_len: int, chain_bytes: int, now: datetime) -> str:
    header = json.dumps(
        {
            "task_id": enc.task_id,
            "version": enc.version,
            "updated_at": now.isoformat(),
            "chain_len": chain_len,
            "chain_bytes": chain_bytes,
            "digest": enc.digest,
        },
        ensure_ascii=False,
    )
    # The state goes in as the text encode_commit made: no second serialization.
    return f'{header[:-1]},\n "state": {enc.state}}}\n'


def _timestamp(value: Any) -> datetime:
    # A hand-edited file may lose the quotes, and YAML then reads a datetime.
    stamp = value if isinstance(value, datetime) else datetime.fromisoformat(value)
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc)


def _reason(exc: StoreError) -> str:
    """What a per-task failure says, without the task (a listing names it already)."""
    return exc.reason if isinstance(exc, StateCorrupted) else str(exc)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())
