"""Deleting, copying and pruning threads, within what a skillstate store allows.

A store never forgets a task and never deletes its head: versions only go away by
:meth:`~skillstate.store.base.Store.prune`, which keeps the head and any delta chain
a kept version needs. So every deletion is itself a commit, recorded in the task's
audit log like any step:

* ``delete_thread`` and ``prune(strategy="delete")`` commit an empty version (no
  checkpoint, no writes) as a snapshot, then prune the task to it: every body of
  the thread is deleted; what stays is the empty head and the audit log's events
  (which carry checkpoint ids, never channel values).
* ``prune(strategy="keep_latest")`` commits the latest checkpoint again, with its
  writes, as a snapshot, and prunes to it.
* ``delete_for_runs`` commits a version without the runs' checkpoints (the latest
  remaining one becomes the head). Checkpoints live in a delta chain, so the
  deleted ones are hidden from LangGraph at once, and their bodies leave the store
  with the versions around them (``skillstate prune``, or the thread's deletion).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from skillstate.errors import UsageError
from skillstate.integrations.langgraph._codec import Codec
from skillstate.integrations.langgraph._documents import (
    Doc,
    checkpoint_id,
    latest_id,
    newest_field,
    task_id_for,
    tombstone_body,
)
from skillstate.integrations.langgraph._index import DELETE, DELETE_THREAD, PUT, RESET
from skillstate.integrations.langgraph._tasks import TaskBook

__all__ = ["copy_thread", "delete_for_runs", "delete_thread", "prune"]

STRATEGIES = ("keep_latest", "delete")


def _thread_tasks(book: TaskBook, prefix: str, thread_id: str) -> list[str]:
    base = task_id_for(prefix, thread_id)
    return book.task_ids(f"{base}:", exact=base)


def _body(doc: Doc) -> Doc:
    return {k: v for k, v in doc.items() if k not in ("task_id", "version")}


def _where(head: Doc) -> tuple[str, str]:
    lg = head.get("langgraph") or {}
    return str(lg.get("thread_id", "")), str(lg.get("checkpoint_ns") or "")


def _facts(codec: Codec, doc: Doc) -> dict[str, Any]:
    """The event fields of a checkpoint rewritten by a copy or a reset."""
    metadata = codec.decode(doc.get("metadata")) or {}
    facts = {"checkpoint_id": checkpoint_id(doc), "parent_id": doc.get("parent_id")}
    for field in ("source", "step", "run_id"):
        if isinstance(metadata.get(field), (str, int)):
            facts[field] = metadata[field]
    return {k: v for k, v in facts.items() if v is not None}


def delete_thread(book: TaskBook, codec: Codec, prefix: str, thread_id: str) -> None:
    for task in _thread_tasks(book, prefix, thread_id):

        def build(head: Doc | None) -> tuple[Doc, dict[str, Any]] | None:
            if head is None or (head.get("checkpoint") is None and not head.get("writes")):
                return None  # nothing left to delete
            return tombstone_body(head, *_where(head)), {"kind": DELETE_THREAD}

        book.commit(task, build, snapshot=True)
        book.store.prune(task, keep_last=1)


def prune(
    book: TaskBook, codec: Codec, prefix: str, thread_ids: Sequence[str], *, strategy: str
) -> None:
    if strategy not in STRATEGIES:
        raise UsageError(f"prune strategy must be one of {', '.join(STRATEGIES)}, not {strategy!r}")
    for thread_id in thread_ids:
        if strategy == "delete":
            delete_thread(book, codec, prefix, thread_id)
            continue
        for task in _thread_tasks(book, prefix, thread_id):
            _keep_latest(book, codec, task)


def _keep_latest(book: TaskBook, codec: Codec, task: str) -> None:
    def build(head: Doc | None) -> tuple[Doc, dict[str, Any]] | None:
        newest = latest_id(head)
        if head is None or not newest:
            return None
        if checkpoint_id(head) == newest:
            base: Doc = head
        else:
            found = book.locate(task, newest)
            if found is None:
                return None
            base = found[1]
        rows = book.rows(task, newest, head)
        body = _body(base)
        body["writes"] = {newest: rows} if rows else {}
        body["newest"] = None
        return body, {"kind": RESET, **_facts(codec, base)}

    if book.commit(task, build, snapshot=True) is not None:
        book.store.prune(task, keep_last=1)


def delete_for_runs(book: TaskBook, codec: Codec, prefix: str, run_ids: Sequence[str]) -> None:
    runs = set(run_ids)
    if not runs:
        return
    for task in book.task_ids(f"{prefix}:"):
        index = book.index(task)
        gone = sorted(cid for cid, run in index.runs.items() if run in runs and cid in index.puts)
        if gone:
            _delete_checkpoints(book, task, set(gone))


def _delete_checkpoints(book: TaskBook, task: str, gone: set[str]) -> None:
    def build(head: Doc | None) -> tuple[Doc, dict[str, Any]] | None:
        if head is None:
            return None
        remaining = [cid for cid in book.index(task).newest_first() if cid not in gone]
        writes = {k: v for k, v in (head.get("writes") or {}).items() if k not in gone}
        if checkpoint_id(head) not in gone:
            body = _body(head)
        elif remaining and (found := book.locate(task, remaining[0])) is not None:
            # The head's checkpoint goes: the latest that stays becomes the head again.
            body = _body(found[1])
            rows = book.rows(task, remaining[0], head)
            if rows:
                writes[remaining[0]] = rows
        else:
            body = tombstone_body(head, *_where(head))
            writes = {}
        body["writes"] = writes
        body["newest"] = newest_field(checkpoint_id(body), remaining[0] if remaining else None)
        action: dict[str, Any] = {"kind": DELETE, "checkpoint_ids": sorted(gone)}
        if checkpoint_id(body):
            action["checkpoint_id"] = checkpoint_id(body)
        return body, action

    book.commit(task, build)


def copy_thread(book: TaskBook, codec: Codec, prefix: str, source: str, target: str) -> None:
    for task in _thread_tasks(book, prefix, source):
        _, head = book.head(task)
        if head is None:
            continue
        ns = _where(head)[1]
        dest = task_id_for(prefix, target, ns)
        for cid in sorted(book.index(task).puts):
            found = book.locate(task, cid)
            if found is None:
                continue
            doc, rows = found[1], book.rows(task, cid, head)

            def build(
                dest_head: Doc | None,
                doc: Doc = doc,
                rows: list[Any] = rows,
                cid: str = cid,
                ns: str = ns,
            ) -> tuple[Doc, dict[str, Any]]:
                body = _body(doc)
                body["langgraph"] = {"thread_id": target, "checkpoint_ns": ns}
                body["writes"] = {cid: rows} if rows else {}
                body["newest"] = newest_field(cid, max(cid, latest_id(dest_head) or ""))
                return body, {"kind": PUT, **_facts(codec, doc), "copied_from": source}

            book.commit(dest, build)
