"""One LangGraph thread namespace as a skillstate task: task ids, documents, tuples.

Each ``(thread_id, checkpoint_ns)`` is one task, ``langgraph:THREAD`` (or
``langgraph:THREAD:NS`` for a subgraph's namespace; both parts percent-encoded, so
the mapping is one to one). Each version of the task is one operation on the
thread (a checkpoint put, writes saved, a deletion), and its document holds one
checkpoint::

    {"task_id": ..., "version": 7, "status": "running", "steps_taken": 3,
     "langgraph": {"thread_id": "t1", "checkpoint_ns": ""},
     "checkpoint": {"v": 4, "id": "1f0...", "ts": ..., "channel_versions": {...},
                    "versions_seen": {...}, "updated_channels": [...]},
     "metadata": {"source": "loop", "step": 3, "parents": {}},
     "parent_id": "1f0...", "newest": null,
     "writes": {"1f0...": [[TASK_ID, IDX, CHANNEL, VALUE, TASK_PATH], ...]},
     "channel:messages": [...], "channel:count": 3}

Channels are top-level keys so that the store's differ serializes and compares only
the ones a step changed (a channel LangGraph did not give a new version keeps the
very object the head had). ``writes`` holds the pending writes of the document's
checkpoint, plus writes that arrived for another one: LangGraph saves in the
background, so a node's writes can reach the saver before the checkpoint they
belong to, or after the next one (a resumed old checkpoint). ``newest`` is the
greatest checkpoint id of the task (LangGraph's "latest") when it is not the head's
own checkpoint, ``null`` when it is (the usual case, which then costs no bytes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast
from urllib.parse import quote

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_serializable_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.types import INTERRUPT

from skillstate.errors import SecretKeyMissing, StateCorrupted, UsageError
from skillstate.integrations.langgraph._codec import Codec, Undecodable

__all__ = [
    "CHANNEL",
    "DEFAULT_PREFIX",
    "Doc",
    "Row",
    "checkpoint_id",
    "config_for",
    "latest_id",
    "merge_writes",
    "newest_field",
    "put_body",
    "read_tuple",
    "task_id_for",
    "thread_prefix",
    "tombstone_body",
    "with_writes",
]

DEFAULT_PREFIX = "langgraph"
CHANNEL = "channel:"
"""Prefix of the document keys that hold channel values."""

Row = list[Any]
"""A stored pending write: ``[task_id, idx, channel, value, task_path]``."""

Doc = dict[str, Any]


def _part(text: object, what: str) -> str:
    if not isinstance(text, str):
        raise UsageError(f"LangGraph {what} must be a string, got {text!r}")
    try:
        return quote(text, safe="")
    except UnicodeEncodeError as exc:
        raise UsageError(f"LangGraph {what} {text!r} is not valid Unicode text") from exc


def task_id_for(prefix: str, thread_id: object, checkpoint_ns: object = "") -> str:
    """The skillstate task of one thread namespace (``prefix:THREAD[:NS]``)."""
    if thread_id is None or thread_id == "":
        raise UsageError("a LangGraph config needs configurable.thread_id")
    base = f"{prefix}:{_part(thread_id, 'thread_id')}"
    ns = _part(checkpoint_ns or "", "checkpoint_ns")
    return f"{base}:{ns}" if ns else base


def thread_prefix(prefix: str, thread_id: object) -> str:
    """What the task ids of every namespace of ``thread_id`` start with (or equal)."""
    return task_id_for(prefix, thread_id)


def checkpoint_id(doc: Mapping[str, Any] | None) -> str | None:
    """The id of the checkpoint a document holds (``None``: a deleted thread)."""
    if not doc:
        return None
    checkpoint = doc.get("checkpoint")
    return checkpoint.get("id") if isinstance(checkpoint, dict) else None


def latest_id(doc: Mapping[str, Any] | None) -> str | None:
    """The greatest checkpoint id of the task whose head is ``doc`` (LangGraph's latest)."""
    return (doc or {}).get("newest") or checkpoint_id(doc)


def newest_field(cid: str | None, newest: str | None) -> str | None:
    """What ``newest`` holds for a document of checkpoint ``cid``."""
    return None if newest == cid else newest


def config_for(thread_id: str, checkpoint_ns: str, cid: str) -> RunnableConfig:
    ids = {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns, "checkpoint_id": cid}
    return {"configurable": ids}


_START = "__start__"
_TASKS = "__pregel_tasks"
_BRANCH = "branch:to:"


def _status(rows: Sequence[Row] | None, *, finished: bool = False) -> str:
    """The card's status as skillstate says it: ``waiting_user`` while the checkpoint
    holds an interrupt, ``completed`` once the graph has nothing left to run (see
    :func:`_finished`), else ``running``."""
    if any(row[2] == INTERRUPT for row in rows or ()):
        return "waiting_user"
    return "completed" if finished else "running"


def _finished(checkpoint: Mapping[str, Any], values: Mapping[str, Any]) -> bool:
    """Whether no node is left to run from ``checkpoint`` (its graph reached END).

    LangGraph runs a node when a trigger channel of the node holds a value (is in
    ``values``) with a newer version than the node has seen. The saver has no graph,
    so it reads the triggers LangGraph's graphs use: ``branch:to:NODE`` for a node,
    ``__start__`` for the input, and pending ``Send`` packets; with none pending the
    thread is finished (and listed ``completed``, not ``running``, by ``skillstate
    tasks``). A checkpoint before any step, or one it cannot read, is not finished.
    """
    versions = checkpoint.get("channel_versions") or {}
    seen = checkpoint.get("versions_seen") or {}
    if not versions or not isinstance(seen, Mapping) or values.get(_TASKS):
        return False
    for channel, version in versions.items():
        if channel not in values:
            continue  # consumed: nothing there to trigger a node
        if channel == _START:
            node = _START
        elif channel.startswith(_BRANCH):
            node = channel.removeprefix(_BRANCH)
        else:
            continue  # a state channel: it triggers nothing by itself
        before = (seen.get(node) or {}).get(channel)
        try:
            if before is None or version > before:
                return False
        except TypeError:  # versions of two kinds (another saver's): cannot tell
            return False
    return True


def put_body(
    codec: Codec,
    head: Mapping[str, Any] | None,
    *,
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    new_versions: ChannelVersions,
) -> tuple[Doc, dict[str, Any]]:
    """The document of a put (without ``task_id``/``version``) and its event action."""
    conf = config["configurable"]
    cid = str(checkpoint["id"])
    parent = conf.get("checkpoint_id")
    values = checkpoint["channel_values"]
    versions = checkpoint["channel_versions"]
    head = head or {}
    # Channels LangGraph did not bump keep the head's stored object (and its
    # sealed token): the differ then skips them without serializing them again.
    extends = parent is not None and checkpoint_id(head) == parent
    head_versions = head["checkpoint"].get("channel_versions", {}) if extends else {}
    saved = get_serializable_checkpoint_metadata(config, metadata)
    writes = {k: rows for k, rows in (head.get("writes") or {}).items() if k >= cid}
    newest = max(cid, latest_id(head) or "")
    step = saved.get("step")
    body: Doc = {
        "status": _status(writes.get(cid), finished=_finished(checkpoint, values)),
        "steps_taken": step if type(step) is int and step >= 0 else 0,
        "langgraph": {
            "thread_id": str(conf["thread_id"]),
            "checkpoint_ns": conf.get("checkpoint_ns") or "",
        },
        "checkpoint": codec.encode_record(
            {k: v for k, v in checkpoint.items() if k != "channel_values"}
        ),
        "metadata": codec.encode_record(dict(saved)),
        "parent_id": parent,
        "newest": newest_field(cid, newest),
        "writes": writes,
    }
    for name, version in versions.items():
        if name not in values:
            continue
        key = CHANNEL + name
        same = name not in new_versions and head_versions.get(name) == version
        if extends and same and key in head:
            body[key] = head[key]
        else:
            body[key] = codec.encode(values[name], name)
    action = {"kind": "langgraph.put", "checkpoint_id": cid, "parent_id": parent}
    for field in ("source", "step", "run_id"):
        if isinstance(saved.get(field), (str, int)):
            action[field] = saved.get(field)
    return body, {k: v for k, v in action.items() if v is not None}


def merge_writes(
    codec: Codec,
    rows: Sequence[Row],
    writes: Sequence[tuple[str, Any]],
    task_id: str,
    task_path: str,
) -> list[Row] | None:
    """``rows`` with ``writes`` added as LangGraph's savers do; ``None`` if nothing changed.

    A regular write is keyed by ``(task_id, its index)`` and never overwritten (a
    retried task saves the same writes again); the special ones (errors, interrupts,
    resumes) have fixed negative indices and the latest wins.
    """
    by_key = {(row[0], row[1]): row for row in rows}
    changed = False
    for idx, (channel, value) in enumerate(writes):
        widx = WRITES_IDX_MAP.get(channel, idx)
        key = (task_id, widx)
        if widx >= 0 and key in by_key:
            continue
        row = [task_id, widx, channel, codec.encode(value, channel), task_path]
        if by_key.get(key) != row:
            by_key[key] = row
            changed = True
    if not changed:
        return None
    return sorted(by_key.values(), key=lambda r: writes_sort_key(r[4], r[0], r[1]))


def with_writes(head: Mapping[str, Any], cid: str, rows: list[Row]) -> Doc:
    """The head document with checkpoint ``cid``'s writes replaced by ``rows``."""
    body = {k: v for k, v in head.items() if k not in ("task_id", "version")}
    body["writes"] = {**(head.get("writes") or {}), cid: rows}
    if checkpoint_id(head) == cid:
        # Whether the graph had finished was read from the checkpoint when it was put.
        body["status"] = _status(rows, finished=head.get("status") == "completed")
    return body


def tombstone_body(head: Mapping[str, Any] | None, thread_id: str, checkpoint_ns: str) -> Doc:
    """What a deleted thread namespace's head holds: no checkpoint, no writes."""
    lg = (head or {}).get("langgraph") or {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}
    return {
        "status": "deleted",
        "steps_taken": 0,
        "langgraph": lg,
        "checkpoint": None,
        "writes": {},
    }


def read_tuple(
    codec: Codec, task_id: str, version: int, doc: Mapping[str, Any], rows: Sequence[Row]
) -> CheckpointTuple:
    """The LangGraph tuple a stored document (and the writes found for it) stand for."""
    try:
        lg = doc["langgraph"]
        thread_id, ns = str(lg["thread_id"]), str(lg.get("checkpoint_ns") or "")
        checkpoint = cast("dict[str, Any]", codec.decode(doc["checkpoint"]))
        cid = str(checkpoint["id"])
        checkpoint["channel_values"] = codec.decode_values(
            {
                name: doc[CHANNEL + name]
                for name in checkpoint.get("channel_versions", {})
                if CHANNEL + name in doc
            }
        )
        metadata = codec.decode(doc.get("metadata")) or {}
        pending = [(str(r[0]), str(r[2]), codec.decode(r[3], str(r[2]))) for r in rows]
    except SecretKeyMissing:
        raise
    except (Undecodable, KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        raise StateCorrupted(task_id, version, f"not a LangGraph checkpoint ({exc})") from exc
    parent = doc.get("parent_id")
    return CheckpointTuple(
        config=config_for(thread_id, ns, cid),
        checkpoint=cast("Checkpoint", checkpoint),
        metadata=cast("CheckpointMetadata", metadata),
        parent_config=config_for(thread_id, ns, str(parent)) if parent else None,
        pending_writes=pending,
    )
