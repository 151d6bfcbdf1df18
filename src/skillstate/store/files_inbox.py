"""The inbox of the files store (:mod:`skillstate.store.files`): ``DIR/<task>/inbox.jsonl``.

One message per line, as JSON: ``{"seq": n, "kind": ..., "at": ISO 8601, "body": {...}}``.

A post holds the task's write lock (the one commits take), reads the number of the
last complete line, and appends its own line with
:func:`~skillstate.store.fileio.append_line`, which fsyncs before it returns. So
concurrent posts take turns and never share a number, and a ``kill -9`` mid-post
leaves at most a torn last line (no newline): readers ignore it, and the next
post cuts it off before appending. The message is whole or absent.

Readers take no lock, as everywhere in this store: the file is only ever appended
to, and only complete lines count. A complete line that does not parse cannot be a
crashed append, so it is ``StateCorrupted`` naming it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skillstate.errors import StateCorrupted
from skillstate.events import utcnow
from skillstate.store import fileio
from skillstate.store.base import InboxMessage
from skillstate.store.inbox import MAX_BODY_BYTES, encode_message, read_message

if TYPE_CHECKING:
    from skillstate.store.files import FilesStore

__all__ = ["INBOX", "inbox", "post"]

INBOX = "inbox.jsonl"

_TAIL = 2 * (MAX_BODY_BYTES + 1024)
"""Bytes from the end that always hold the last complete line: at most one torn line
and one complete one, each shorter than a body plus its frame, end the file."""


def post(store: FilesStore, task_id: str, kind: str, body: Mapping[str, Any]) -> int:
    """:meth:`Store.post` on the files store (see the module docstring)."""
    text = encode_message(task_id, kind, body)
    directory = store._dir(task_id)
    store._require_head(task_id, directory, verify=False)  # TaskNotFound before creating
    with store._locked(task_id, directory):
        path = directory / INBOX
        seq = _last_seq(task_id, path) + 1
        at = utcnow().isoformat()
        line = f'{{"seq":{seq},"kind":{json.dumps(kind)},"at":"{at}","body":{text}}}\n'
        fileio.append_line(path, line.encode("utf-8"))
    return seq


def inbox(store: FilesStore, task_id: str, after: int) -> list[InboxMessage]:
    """:meth:`Store.inbox` on the files store."""
    directory = store._dir(task_id)
    store._require_head(task_id, directory, verify=False)
    path = directory / INBOX
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise fileio.os_error("read", path, exc) from exc
    messages = []
    # The part after the last newline is a torn append (or nothing): never a message.
    for number, raw in enumerate(data.split(b"\n")[:-1], 1):
        message = _parse(task_id, number, raw)
        if message.seq > after:
            messages.append(message)
    return messages


def _last_seq(task_id: str, path: Path) -> int:
    """The number of the last complete line (0 when there is none)."""
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            handle.seek(max(0, size - _TAIL))  # the last complete line is in the tail
            tail = handle.read()
    except FileNotFoundError:
        return 0
    except OSError as exc:
        raise fileio.os_error("read", path, exc) from exc
    offset = max(0, size - _TAIL)
    complete = tail.split(b"\n")[:-1]
    if offset:
        complete = complete[1:]  # the window starts inside a line
    if complete:
        return _parse(task_id, 0, complete[-1]).seq
    if offset:
        raise StateCorrupted(task_id, None, f"the last line of {INBOX} is longer than any post")
    return 0


def _parse(task_id: str, number: int, raw: bytes) -> InboxMessage:
    where = f"{INBOX} line {number}" if number else f"the last line of {INBOX}"
    try:
        record = json.loads(raw.decode("utf-8"))
        seq, kind, body = record["seq"], record["kind"], record["body"]
        at = datetime.fromisoformat(record["at"])
    except (ValueError, KeyError, TypeError) as exc:
        raise StateCorrupted(task_id, None, f"{where} does not load ({exc})") from exc
    return read_message(task_id, seq, kind, body, at)
