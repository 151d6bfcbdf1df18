"""``rewrite`` and the artifacts of the files store (:mod:`skillstate.store.files`).

Kept apart so the store's module stays readable; the layout is described there.

**A rewrite swaps in a copy of the task's folder.** Holding the task's lock, it
builds the folder's new version beside it, as a hidden sibling
``DIR/.rewrite-<tag>-<random>``: the files that change are written new (and
fsynced), every other file is hard-linked (no copy; files here are only ever
replaced by rename, or appended to, never rewritten in place). Then one
``renameat2(RENAME_EXCHANGE)`` (``renamex_np(RENAME_SWAP)`` on macOS) swaps the two
folders: the task's name points at the new tree, the hidden name at the old one,
which is deleted. The exchange is a single atomic step of the filesystem, so after a
``kill -9`` (or a power cut, once the directory fsyncs are done) at any instant the
task's folder is either the old tree or the new one, never a mix and never missing.
What a crash leaves is a hidden ``.rewrite-*`` folder (an unfinished copy, or the
old tree): ``tasks()`` never lists it (it is no task's encoded name), and the next
rewrite of the same task (the tag is a hash of the task's folder name) deletes it.

The folder's ``.lock`` is hard-linked too, so both trees share the lock file: a
writer that opened the old ``.lock`` and waits on its ``flock`` while the rewrite
runs still excludes, once it has the lock, every writer that opens the new one.
Readers take no lock (as everywhere in this store): one that straddles the exchange
reads some files from each tree, and each tree is complete and self-consistent.

Left out of the new tree: temporary files and checkpoint files above the head
(what a crashed writer left; readers ignore them and prune deletes them) and, when
``events.jsonl`` is rewritten, a torn last line (what a crashed append left; the
next append cuts it off anyway). Complete event lines above the head are rewritten
like the rest.

A filesystem without an atomic directory exchange gets a one-line ``StoreError``
and nothing is written: a two-rename swap would leave the task missing for a
moment, and missing for good after a crash between the renames.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import json
import os
import secrets
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from skillstate.errors import ArtifactNotFound, StaleState, StateCorrupted, StoreError
from skillstate.store import fileio
from skillstate.store.chain import dumps
from skillstate.store.rewriting import Body, plan_rewrite, rewrite_text

if TYPE_CHECKING:
    from skillstate.store.files import FilesStore

__all__ = ["artifact_refs", "exchange", "replace_artifact", "rewrite"]

_PREFIX = ".rewrite-"
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2  # linux/fs.h
_RENAME_SWAP = 2  # macOS sys/stdio.h


def rewrite(
    store: FilesStore, task_id: str, expected_version: int, fn: Callable[[Any], Any]
) -> int:
    """:meth:`Store.rewrite` on the files store (see the module docstring)."""
    from skillstate.store import files

    directory = store._dir(task_id)
    store._require_head(task_id, directory, verify=False)  # TaskNotFound before creating
    with store._locked(task_id, directory):
        tag = hashlib.sha256(directory.name.encode()).hexdigest()[:16]
        _sweep(store.root, tag)
        head = store._require_head(task_id, directory, verify=True)
        if head.version != expected_version:
            raise StaleState(task_id, expected_version, head.version)
        docs: dict[int, dict[str, Any]] = {}
        bodies: list[Body] = []
        for version in store._versions(directory, head.version):
            doc = _step_doc(task_id, directory, version)
            if doc is None:
                continue  # pruned meanwhile: not possible under the lock, but harmless
            docs[version] = doc
            try:
                row = files._parse_step(version, doc)
            except (ValueError, TypeError, KeyError) as exc:
                name = files._step_name(version)
                raise StateCorrupted(task_id, version, f"{name}: {files._one_line(exc)}") from exc
            bodies.append(Body(version, row.snapshot, row.patch, row.digest))
        raw_head = json.loads(_read(directory / files._HEAD))
        plan = plan_rewrite(
            task_id,
            fn,
            version=head.version,
            head=dumps(head.state),
            head_digest=head.digest,
            rows=bodies,
            events={},
        )
        lines, changed_lines = _events(task_id, directory, fn)
        changed = plan.changed + changed_lines
        if not changed:
            return 0
        new_files: dict[str, bytes] = {}
        if plan.head is not None:
            new_files[files._HEAD] = _head_text(raw_head, plan.head, plan.head_digest)
        for version, body in plan.rows.items():
            new_files[files._step_name(version)] = _step_text(docs[version], body)
        if changed_lines:
            new_files[files._EVENTS] = b"".join(line + b"\n" for line in lines)
        _swap_in(store.root, directory, tag, new_files, head.version)
    return changed


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise fileio.os_error("read", path, exc) from exc


def _step_doc(task_id: str, directory: Path, version: int) -> dict[str, Any] | None:
    from skillstate.store import files

    name = files._step_name(version)
    try:
        text = (directory / name).read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise fileio.os_error("read", directory / name, exc) from exc
    try:
        doc = yaml.load(text, Loader=files._YamlLoader)
    except yaml.YAMLError as exc:
        reason = files._one_line(exc)
        raise StateCorrupted(task_id, version, f"{name} is not valid YAML ({reason})") from exc
    if not isinstance(doc, dict):
        raise StateCorrupted(task_id, version, f"{name}: not a mapping")
    return doc


def _events(task_id: str, directory: Path, fn: Callable[[Any], Any]) -> tuple[list[bytes], int]:
    """Every complete line of events.jsonl, rewritten; and how many changed."""
    from skillstate.store import files

    path = directory / files._EVENTS
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return [], 0
    except OSError as exc:
        raise fileio.os_error("read", path, exc) from exc
    lines: list[bytes] = []
    changed = 0
    for number, raw in enumerate(data.split(b"\n")[:-1], 1):
        try:
            text = raw.decode("utf-8")
            version = json.loads(text)["version"]
            if isinstance(version, bool) or not isinstance(version, int):
                raise TypeError(f"version {version!r} is not a number")
        except (ValueError, KeyError, TypeError) as exc:
            raise StateCorrupted(
                task_id,
                None,
                f"{files._EVENTS} line {number} does not load ({files._one_line(exc)})",
            ) from exc
        new = rewrite_text(task_id, version, text, fn, what="its event")
        if new is None:
            lines.append(raw)
        else:
            lines.append(new.encode())
            changed += 1
    return lines, changed


def _head_text(raw: dict[str, Any], state: str, checksum: str | None) -> bytes:
    """head.json as the store writes it (its header fields in their order, then the state)."""
    header = {key: value for key, value in raw.items() if key != "state"}
    if checksum is not None:
        header["digest"] = checksum
    text = json.dumps(header, ensure_ascii=False)
    return f'{text[:-1]},\n "state": {state}}}\n'.encode()


def _step_text(doc: dict[str, Any], body: Body) -> bytes:
    """A checkpoint's YAML with its bodies and checksum replaced, every other field kept."""
    from skillstate.store import files

    new = dict(doc)
    if body.snapshot is not None:
        new["state"] = json.loads(body.snapshot)
    if body.patch is not None:
        new["patch"] = json.loads(body.patch)
    if body.digest is not None:
        new["digest"] = body.digest
    text: str = yaml.dump(
        new,
        Dumper=files._YamlDumper,
        allow_unicode=True,
        sort_keys=False,
        default_flow_style=False,
        width=files._YAML_WIDTH,
    )
    return text.encode()


def _swap_in(root: Path, directory: Path, tag: str, new_files: dict[str, bytes], head: int) -> None:
    """Build the new tree beside ``directory`` and exchange the two (module docstring)."""
    from skillstate.store import files

    staging = root / f"{_PREFIX}{tag}-{secrets.token_hex(4)}"
    try:
        staging.mkdir(mode=fileio.DIR_MODE)
        os.chmod(staging, fileio.DIR_MODE)
    except OSError as exc:
        raise fileio.os_error("create", staging, exc) from exc
    try:
        for entry in os.scandir(directory):
            name = entry.name
            match = files._STEP.fullmatch(name)
            if name.endswith(".tmp") or (match is not None and int(match.group(1)) > head):
                continue  # a crashed writer's leftovers (module docstring)
            if name in new_files:
                _write_new(staging / name, new_files[name])
            elif entry.is_dir(follow_symlinks=False):
                shutil.copytree(entry.path, staging / name, symlinks=True, copy_function=_link)
            else:
                _link(entry.path, staging / name)
        fileio.fsync_dir(staging)
        exchange(staging, directory)
    except BaseException:
        # Before the exchange this is the unfinished copy; the exchange either happened
        # (and raised nothing) or did not: the task's folder is untouched.
        shutil.rmtree(staging, ignore_errors=True)
        raise
    fileio.fsync_dir(root)
    shutil.rmtree(staging, ignore_errors=True)  # now the old tree


def _write_new(path: Path, data: bytes) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, fileio.FILE_MODE)
        try:
            os.fchmod(fd, fileio.FILE_MODE)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise fileio.os_error("write", path, exc) from exc


def _link(source: str, target: str | Path) -> None:
    """Hard-link ``source`` as ``target``; copy where the filesystem cannot link."""
    try:
        os.link(source, target, follow_symlinks=False)
    except OSError as exc:
        if exc.errno not in {errno.EPERM, errno.EXDEV, errno.EMLINK, errno.ENOTSUP}:
            raise
        shutil.copy2(source, target, follow_symlinks=False)


def _sweep(root: Path, tag: str) -> None:
    """Delete what a crashed rewrite of this task left (the caller holds the task's lock)."""
    for name in fileio.listdir(root):
        if name.startswith(f"{_PREFIX}{tag}-"):
            shutil.rmtree(root / name, ignore_errors=True)


def exchange(first: Path, second: Path) -> None:
    """Swap two directories in one atomic step, or raise a one-line ``StoreError``."""
    libc = ctypes.CDLL(None, use_errno=True)
    a, b = os.fsencode(first), os.fsencode(second)
    call: Any = None
    args: tuple[Any, ...] = ()
    if sys.platform.startswith("linux"):
        call = getattr(libc, "renameat2", None)  # glibc 2.28 and later
        types = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
        args = (_AT_FDCWD, a, _AT_FDCWD, b, _RENAME_EXCHANGE)
    elif sys.platform == "darwin":
        call = getattr(libc, "renamex_np", None)
        types = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint]
        args = (a, b, _RENAME_SWAP)
    unsupported = (
        f"cannot rewrite {str(second)!r}: {{}} offers no atomic directory exchange "
        "(renameat2 RENAME_EXCHANGE); nothing was written"
    )
    if call is None:
        raise StoreError(unsupported.format("this system"))
    call.argtypes = types
    call.restype = ctypes.c_int
    if call(*args) != 0:
        code = ctypes.get_errno()
        if code in {errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP}:
            raise StoreError(unsupported.format("its filesystem"))
        raise fileio.os_error("exchange", second, OSError(code, os.strerror(code)))


def artifact_refs(store: FilesStore) -> list[str]:
    from skillstate.store import files

    refs = []
    for name in fileio.listdir(store.root / files._ARTIFACTS):
        ref = name.replace("-", ":", 1)
        if files._REF.fullmatch(ref):
            refs.append(ref)
    return sorted(refs)


def replace_artifact(store: FilesStore, ref: str, data: bytes) -> None:
    """Atomically replace the artifact's file (temporary file, fsync, rename)."""
    from skillstate.store import files

    match = files._REF.fullmatch(ref)
    path = store.root / files._ARTIFACTS / f"sha256-{match.group(1)}" if match else None
    if path is None or not path.is_file():
        raise ArtifactNotFound(f"no artifact {ref!r}")
    fileio.write_atomic(path, bytes(data))
