"""The saver's tasks: committing with compare-and-set, reading heads and old versions.

One :class:`Entry` per task keeps what the saver knows of it: the head it last
committed or loaded (and the :class:`~skillstate.state.diff.Differ` that made it, so
the next commit serializes only what changed), and its :class:`Index`. An entry's
lock serializes this process's writers of one task (LangGraph saves from
background threads); other processes are kept out by the store's compare-and-set:
a commit on a head that moved raises ``StaleState``, and the operation is rebuilt
on the new head and committed again.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from skillstate.errors import Conflict, StaleState, StateCorrupted, StoreError, TaskNotFound
from skillstate.events import Event
from skillstate.integrations.langgraph._documents import Row, checkpoint_id
from skillstate.integrations.langgraph._index import Index
from skillstate.state.diff import Differ
from skillstate.store.base import Store

__all__ = ["ATTEMPTS", "Build", "Entry", "TaskBook"]

ATTEMPTS = 50
"""Commits of one operation before giving up on a head other processes keep moving."""

Doc = dict[str, Any]
Build = Callable[[Doc | None], "tuple[Doc, dict[str, Any]] | None"]
"""Makes the next document and its event action from the head (``None``: no commit)."""

_MISSING = object()


@dataclass
class Entry:
    """What the saver knows of one task."""

    lock: threading.RLock = field(default_factory=threading.RLock)
    loaded: bool = False
    version: int = 0
    """The head's version (0: the task does not exist yet)."""
    doc: Doc | None = None
    differ: Differ = field(default_factory=Differ)
    index: Index = field(default_factory=Index)


class TaskBook:
    """The tasks of one saver, over one store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._entries: dict[str, Entry] = {}
        self._lock = threading.Lock()

    def entry(self, task_id: str) -> Entry:
        with self._lock:
            found = self._entries.get(task_id)
            if found is None:
                found = self._entries[task_id] = Entry()
            return found

    # ------------------------------------------------------------ reading

    def head(self, task_id: str) -> tuple[int, Doc | None]:
        """The stored head (read from the store every time: others may write it)."""
        entry = self.entry(task_id)
        with entry.lock:
            try:
                loaded = self.store.load(task_id)
            except TaskNotFound:
                entry.loaded, entry.version, entry.doc = True, 0, None
                return 0, None
            if not (entry.loaded and entry.version == loaded.version):
                # Versions are written once, so an equal version is the same head: keep
                # the differ's own copy of it, whose serialized fields it remembers.
                entry.loaded, entry.version, entry.doc = True, loaded.version, loaded.state
            return entry.version, entry.doc

    def version(self, task_id: str, version: int) -> Doc | None:
        """The document of a kept version; ``None`` when it was pruned."""
        entry = self.entry(task_id)
        if entry.loaded and entry.version == version and entry.doc is not None:
            return entry.doc
        try:
            return self.store.checkpoint(task_id, version).state
        except StoreError as exc:
            # A version that is not kept is a plain StoreError; damage, an unreachable
            # store, a missing task are subclasses and must not read as "pruned".
            if type(exc) is StoreError:
                return None
            raise

    def index(self, task_id: str) -> Index:
        """The task's index, brought up to date with its audit log."""
        entry = self.entry(task_id)
        with entry.lock:
            entry.index.refresh(self.store, task_id)
            return entry.index

    def locate(self, task_id: str, cid: str) -> tuple[int, Doc] | None:
        """The version holding checkpoint ``cid`` and its document (``None``: none)."""
        index = self.index(task_id)
        version = index.puts.get(cid)
        if version is None:
            return None
        doc = self.version(task_id, version)
        if doc is None:
            return None
        if checkpoint_id(doc) != cid:
            raise StateCorrupted(task_id, version, f"its audit log says it holds checkpoint {cid}")
        return version, doc

    def find(self, task_id: str, cid: str) -> tuple[int, Doc, list[Row]] | None:
        """Checkpoint ``cid`` as ``(version, document, its pending writes)``, reading as
        few versions as the index allows (``None``: no such checkpoint, or pruned).

        The version that last changed ``cid``'s writes usually still holds ``cid``
        itself (a superstep's writes are committed on its checkpoint), so one read
        gives both; the head is read only when it is that version. Every read is
        checked as always: the head against its checksum, an older version rebuilt
        and checked against its own.
        """
        entry = self.entry(task_id)
        if entry.loaded and checkpoint_id(entry.doc) == cid:
            # Most likely still the head (the latest, named by id): one verified load,
            # and its writes are on it.
            version, head = self.head(task_id)
            if head is not None and checkpoint_id(head) == cid:
                return version, head, self.rows(task_id, cid, head)
        try:
            index = self.index(task_id)
        except TaskNotFound:
            return None
        put = index.puts.get(cid)
        last = index.writes_version(cid)
        if put is None or last is None:
            return None
        newest = index.seen
        written = self._at(task_id, last, newest)
        if written is not None and checkpoint_id(written) == cid:
            version, doc = last, written
        else:
            found = self._at(task_id, put, newest)
            if found is None:
                return None
            if checkpoint_id(found) != cid:
                raise StateCorrupted(task_id, put, f"its audit log says it holds checkpoint {cid}")
            version, doc = put, found
        rows = ((written or {}).get("writes") or {}).get(cid, [])
        return version, doc, list(rows)

    def _at(self, task_id: str, version: int, newest: int) -> Doc | None:
        """The document of ``version``; the head is loaded (and verified) when it is."""
        if version >= newest:
            loaded, head = self.head(task_id)
            if loaded == version and head is not None:
                return head
        return self.version(task_id, version)

    def rows(self, task_id: str, cid: str, head: Mapping[str, Any] | None) -> list[Row]:
        """The pending writes saved for checkpoint ``cid`` so far."""
        writes = (head or {}).get("writes") or {}
        if cid in writes:
            return list(writes[cid])
        if checkpoint_id(head) == cid:
            return []
        version = self.index(task_id).writes_version(cid)
        doc = self.version(task_id, version) if version is not None else None
        return list(((doc or {}).get("writes") or {}).get(cid, []))

    def task_ids(self, prefix: str, *, exact: str | None = None) -> list[str]:
        """Task ids that equal ``exact`` or start with ``prefix`` (sorted)."""
        tasks = self.store.tasks()
        start = bisect.bisect_left(tasks, exact if exact is not None else prefix)
        found: list[str] = []
        for task_id in tasks[start:]:
            if task_id == exact or task_id.startswith(prefix):
                found.append(task_id)
            elif task_id > prefix:
                break
        return found

    # ------------------------------------------------------------ writing

    def commit(self, task_id: str, build: Build, *, snapshot: bool = False) -> int | None:
        """Commit what ``build`` makes of the head, retrying on a moved head.

        ``snapshot=True`` commits without a delta (an empty patch), so the store keeps
        the version whole and a prune can then drop everything before it: what a
        deletion needs. Returns the new version, ``None`` when ``build`` made nothing.
        """
        entry = self.entry(task_id)
        with entry.lock:
            for _ in range(ATTEMPTS):
                if not entry.loaded:
                    self.head(task_id)
                made = build(entry.doc)
                if made is None:
                    return None
                body, action = made
                version = entry.version + 1
                new = {"task_id": task_id, "version": version, **body}
                before = entry.doc or {}
                if snapshot:
                    patch: list[dict[str, Any]] = []
                    doc: Doc = new
                else:
                    changed = {k for k, v in new.items() if before.get(k, _MISSING) is not v}
                    patch, doc = entry.differ.diff(before, new, changed=changed)
                event = Event(
                    task_id=task_id, version=version, actor="runtime", action=action, patch=patch
                )
                try:
                    self.store.commit(task_id, version - 1, doc, event)
                except StaleState:
                    entry.loaded = False  # someone else committed: rebuild on their head
                    continue
                entry.version, entry.doc = version, doc
                if entry.index.seen == version - 1:
                    entry.index.apply(version, action)
                return version
        raise Conflict(
            f"task {task_id!r}: the head kept moving under {ATTEMPTS} attempts to commit; "
            "nothing was written"
        )
