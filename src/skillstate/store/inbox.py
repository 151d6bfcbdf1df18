"""What every store's inbox shares: the checks on a posted message and how it is read back.

A task's inbox (:meth:`~skillstate.store.base.Store.post`,
:meth:`~skillstate.store.base.Store.inbox`) is append-only and lives beside the
card, not in it: a worker holding the task commits the card under its lease, so
anyone else who wrote the card would make the worker's next commit conflict. A
message is checked once, here, before any backend touches it, and every backend
stores the same compact JSON text, so what one store accepts every store accepts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from skillstate.errors import MessageRefused, StateCorrupted
from skillstate.store.base import InboxMessage, check_task_id

__all__ = ["KIND", "MAX_BODY_BYTES", "encode_message", "read_message"]

KIND = re.compile(r"[a-z][a-z0-9_.-]{0,31}")
"""A message kind: a lower-case name of at most 32 characters (``message``, ``cancel``)."""

MAX_BODY_BYTES = 64 * 1024
"""The largest body, as compact UTF-8 JSON. A message is a note to a task, not its
data: what is larger belongs in an artifact, and the message carries its ref."""


def encode_message(task_id: str, kind: str, body: Mapping[str, Any]) -> str:
    """The body as stored (compact JSON text), after every check a post makes.

    An invalid task id is ``UsageError``; a bad kind or body ``MessageRefused``.
    """
    check_task_id(task_id)
    if not isinstance(kind, str) or KIND.fullmatch(kind) is None:
        raise MessageRefused(
            f"invalid message kind {kind!r}: a lower-case name of at most 32 characters"
        )
    if not isinstance(body, Mapping):
        raise MessageRefused(f"a message body is a JSON object, not {type(body).__name__}")
    try:
        text = json.dumps(dict(body), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        size = len(text.encode("utf-8"))
    except (TypeError, ValueError, RecursionError) as exc:
        raise MessageRefused(f"the message body is not storable JSON: {exc}") from exc
    if size > MAX_BODY_BYTES:
        raise MessageRefused(
            f"the message body is {size:,} bytes as JSON (the limit is {MAX_BODY_BYTES:,}); "
            "store large content as an artifact and send its ref"
        )
    return text


def read_message(task_id: str, seq: Any, kind: Any, text: Any, at: datetime) -> InboxMessage:
    """A stored message back; one that does not read is ``StateCorrupted`` naming it.

    ``text`` is the body as stored (JSON text or its UTF-8 bytes), or already parsed.
    """
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        body = json.loads(text) if isinstance(text, str) else text
    except (TypeError, ValueError) as exc:
        raise StateCorrupted(task_id, None, f"inbox message {seq} does not load ({exc})") from exc
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
        raise StateCorrupted(task_id, None, f"an inbox message has no valid number ({seq!r})")
    if not isinstance(kind, str) or not isinstance(body, dict):
        raise StateCorrupted(task_id, None, f"inbox message {seq} has no kind or no body")
    return InboxMessage(seq=seq, kind=kind, body=body, at=at)
