"""``SkillstateSaver``: a LangGraph checkpointer on any skillstate store.

A LangGraph user keeps their graph and gets skillstate's storage: deltas instead
of full copies, every backend (memory, SQLite, files, PostgreSQL, Redis), sealed
sensitive channels, and ``skillstate doctor``, ``show``, ``log`` and the inspector on
every thread (its tasks are ordinary skillstate tasks, see
:mod:`~skillstate.integrations.langgraph._documents` for their layout).

Store calls are synchronous; the async methods run them in a worker thread
(``asyncio.to_thread``), as LangGraph's own SQLite saver does.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from types import TracebackType
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from skillstate.errors import UsageError
from skillstate.integrations.langgraph import _maintenance
from skillstate.integrations.langgraph._codec import Codec
from skillstate.integrations.langgraph._documents import (
    DEFAULT_PREFIX,
    Doc,
    checkpoint_id,
    latest_id,
    merge_writes,
    put_body,
    read_tuple,
    task_id_for,
    with_writes,
)
from skillstate.integrations.langgraph._index import WRITES
from skillstate.integrations.langgraph._tasks import TaskBook
from skillstate.store import Store, open_store

__all__ = ["SkillstateSaver"]


class SkillstateSaver(BaseCheckpointSaver[int]):
    """A LangGraph checkpoint saver that keeps each thread as skillstate tasks.

    ``store`` is any :class:`~skillstate.store.base.Store`; :meth:`from_url` opens one.
    ``sensitive`` names channels whose values (and the writes to them) are sealed with
    ``SKILLSTATE_KEY`` before they reach the store; without a key such a value is
    refused (:class:`~skillstate.errors.SecretKeyMissing`), never written in the
    clear. ``serde`` is LangGraph's serializer (default ``JsonPlusSerializer``);
    ``native_json`` stores values that are plain JSON as themselves, so deltas and
    the inspector see their structure (default: only with the default serializer,
    so an ``EncryptedSerializer`` encrypts every value). ``prefix`` starts every
    task id (``langgraph:THREAD[:NS]``).
    """

    def __init__(
        self,
        store: Store,
        *,
        serde: SerializerProtocol | None = None,
        sensitive: Iterable[str] = (),
        native_json: bool | None = None,
        prefix: str = DEFAULT_PREFIX,
        close_store: bool = False,
    ) -> None:
        super().__init__(serde=serde)
        if isinstance(sensitive, str):
            raise UsageError("sensitive= takes channel names (a list), not one string")
        if not prefix or ":" in prefix:
            raise UsageError(f"prefix must be non-empty and without ':', got {prefix!r}")
        self.store = store
        self.prefix = prefix
        self.sensitive = frozenset(sensitive)
        self.native_json = native_json
        self._book = TaskBook(store)
        self._close_store = close_store

    @classmethod
    def from_url(cls, url: str | None = None, **options: Any) -> SkillstateSaver:
        """A saver on the store a URL names (``sqlite:///graph.db``, ``postgresql://...``,
        ``redis://...``; see :func:`~skillstate.store.open_store`); closing the saver
        closes the store."""
        return cls(open_store(url), close_store=True, **options)

    def _codec(self) -> Codec:
        # Built on each use from ``self.serde``: ``with_allowlist`` clones the saver
        # and swaps its serializer.
        native = self.native_json
        if native is None:
            native = isinstance(self.serde, JsonPlusSerializer)
        return Codec(self.serde, native=native, sensitive=self.sensitive)

    def close(self) -> None:
        """Close the store if this saver opened it (:meth:`from_url`). Safe twice."""
        if self._close_store:
            self.store.close()

    def __enter__(self) -> SkillstateSaver:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> SkillstateSaver:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.to_thread(self.close)

    def _task(self, config: RunnableConfig) -> str:
        conf = config.get("configurable") or {}
        return task_id_for(self.prefix, conf.get("thread_id"), conf.get("checkpoint_ns", ""))

    # ------------------------------------------------------------ reading

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (its ``checkpoint_id``, else the thread's latest)."""
        task = self._task(config)
        wanted = config["configurable"].get("checkpoint_id")
        if wanted:
            # A named checkpoint is found through the index: the head is not read
            # unless it holds the checkpoint's writes (see TaskBook.find).
            found = self._book.find(task, str(wanted))
            return None if found is None else read_tuple(self._codec(), task, *found)
        version, head = self._book.head(task)
        cid = latest_id(head)
        if head is None or not cid:
            return None
        return self._tuple(task, cid, version, head)

    def _tuple(self, task: str, cid: str, version: int, head: Doc) -> CheckpointTuple | None:
        if checkpoint_id(head) != cid:
            found = self._book.find(task, cid)
            return None if found is None else read_tuple(self._codec(), task, *found)
        rows = self._book.rows(task, cid, head)
        return read_tuple(self._codec(), task, version, head, rows)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first: of one thread namespace (of every namespace when
        the config has no ``checkpoint_ns``; of every thread when ``config`` is None),
        whose metadata has ``filter``'s values, before ``before``, at most ``limit``."""
        conf = (config or {}).get("configurable") or {}
        only = conf.get("checkpoint_id")
        below = (before or {}).get("configurable", {}).get("checkpoint_id")
        candidates: builtins.list[tuple[str, str]] = []
        heads: dict[str, tuple[int, Doc]] = {}
        for task in self._list_tasks(config):
            version, head = self._book.head(task)
            if head is None:
                continue
            heads[task] = (version, head)
            for cid in self._book.index(task).newest_first():
                if (only is None or cid == only) and (below is None or cid < below):
                    candidates.append((cid, task))
        candidates.sort(reverse=True)
        left = limit
        for cid, task in candidates:
            if left is not None and left <= 0:
                return
            found = self._tuple(task, cid, *heads[task])
            if found is None or not _matches(found.metadata, filter):
                continue
            if left is not None:
                left -= 1
            yield found

    def _list_tasks(self, config: RunnableConfig | None) -> builtins.list[str]:
        if config is None:
            return self._book.task_ids(f"{self.prefix}:")
        conf = config.get("configurable") or {}
        if conf.get("checkpoint_ns") is not None:
            return [self._task(config)]
        base = task_id_for(self.prefix, conf.get("thread_id"))
        return self._book.task_ids(f"{base}:", exact=base)

    # ------------------------------------------------------------ writing

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Commit ``checkpoint`` as the next version of its thread namespace's task."""
        task = self._task(config)
        codec = self._codec()

        def build(head: Doc | None) -> tuple[Doc, dict[str, Any]]:
            return put_body(
                codec,
                head,
                config=config,
                checkpoint=checkpoint,
                metadata=metadata,
                new_versions=new_versions,
            )

        self._book.commit(task, build)
        conf = config["configurable"]
        return {
            "configurable": {
                "thread_id": conf["thread_id"],
                "checkpoint_ns": conf.get("checkpoint_ns") or "",
                "checkpoint_id": checkpoint["id"],
            }
        }

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Save a task's writes on the checkpoint ``config`` names (one commit; none
        when they are all saved already)."""
        task = self._task(config)
        cid = str(config["configurable"]["checkpoint_id"])
        codec = self._codec()

        def build(head: Doc | None) -> tuple[Doc, dict[str, Any]] | None:
            rows = merge_writes(codec, self._book.rows(task, cid, head), writes, task_id, task_path)
            if rows is None:
                return None
            if head is None:
                conf = config["configurable"]
                head = {
                    "status": "running",
                    "langgraph": {
                        "thread_id": str(conf["thread_id"]),
                        "checkpoint_ns": conf.get("checkpoint_ns") or "",
                    },
                    "checkpoint": None,
                }
            return with_writes(head, cid, rows), {"kind": WRITES, "checkpoint_id": cid}

        self._book.commit(task, build)

    # ------------------------------------------------------------ maintenance

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint and write of ``thread_id`` (all its namespaces).

        Each task gets a final, empty version (recorded in its audit log) and is pruned
        to it: the checkpoints' bodies are deleted from the store."""
        _maintenance.delete_thread(self._book, self._codec(), self.prefix, thread_id)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) made by the runs ``run_ids``."""
        _maintenance.delete_for_runs(self._book, self._codec(), self.prefix, run_ids)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and write of one thread to another, oldest first."""
        _maintenance.copy_thread(
            self._book, self._codec(), self.prefix, source_thread_id, target_thread_id
        )

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: keep only each namespace's latest checkpoint; ``delete``: all."""
        _maintenance.prune(self._book, self._codec(), self.prefix, thread_ids, strategy=strategy)

    # ------------------------------------------------------------ async

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        def collect() -> builtins.list[CheckpointTuple]:
            return builtins.list(self.list(config, filter=filter, before=before, limit=limit))

        for item in await asyncio.to_thread(collect):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)


def _matches(metadata: Any, wanted: dict[str, Any] | None) -> bool:
    if not wanted:
        return True
    found = cast("dict[str, Any]", metadata or {})
    return all(key in found and found[key] == value for key, value in wanted.items())
