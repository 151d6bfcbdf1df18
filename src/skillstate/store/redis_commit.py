"""The Redis commit's arguments and its reply, shared by both drivers.

:func:`skillstate.store.redis_ops.commit` drives them as an operation (the async
store); the blocking store calls them around one ``EVALSHA`` of its own
(:meth:`~skillstate.store.redis.RedisStore.commit`), the hot path without the
generator's round trips. Either way the same checks, encoding and reply handling.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from typing import Any

from skillstate.errors import LeaseLost, StaleState, StateCorrupted, StoreError
from skillstate.events import Event
from skillstate.store.chain import (
    COMPRESS_FROM,
    EncodedCommit,
    check_fence,
    encode_commit,
    take_snapshot,
)
from skillstate.store.redis_codec import ZLIB, now_text, number, pack_bytes
from skillstate.store.redis_io import CACHE, Layout

__all__ = ["commit_args", "committed"]


def commit_args(
    store: Layout,
    task_id: str,
    expected_version: int,
    state: Mapping[str, Any],
    event: Event,
    *,
    fence: int | None,
) -> tuple[EncodedCommit, tuple[bytes, ...]]:
    """The checked, encoded commit and the ARGV of the COMMIT script
    (:data:`skillstate.store.redis_lua.COMMIT`) for it, in its order.

    Apart from :func:`~skillstate.store.redis_ops.commit` so the blocking store can
    send the script straight (:meth:`~skillstate.store.redis.RedisStore.commit`)
    without running an operation.
    """
    enc = encode_commit(task_id, expected_version, state, event, fence=fence)
    patch = enc.patch or ""
    chain = store._chains.get(task_id)
    if chain is not None and chain[0] == enc.expected:
        snapshot = take_snapshot(chain[1], chain[2], enc, store.max_chain)
    else:
        snapshot = True  # cannot tell: send the snapshot body in case
    state_text = enc.state.encode()
    if snapshot and len(enc.state) >= COMPRESS_FROM:
        body = ZLIB + zlib.compress(state_text, 1)
    else:
        body = b""
    return enc, (
        b"%d" % enc.expected,
        b"%d" % enc.version,
        state_text,
        pack_bytes(enc.event),
        pack_bytes(patch),
        b"1" if enc.is_delta else b"0",
        b"%d" % len(patch),
        b"%d" % len(enc.state),
        b"%d" % store.max_chain,
        now_text(),
        task_id.encode(),
        body,
        enc.digest.encode(),
        b"" if enc.fence is None else b"%d" % enc.fence,
        enc.version_digest.encode(),
    )


def committed(store: Layout, enc: EncodedCommit, reply: Any) -> int:
    """The new version from the COMMIT script's reply, or the error its refusal means."""
    task_id = enc.task_id
    if isinstance(reply, bytes):  # committed
        version, chain_len, chain_bytes = map(int, reply.split())
        if len(store._chains) >= CACHE:
            store._chains.clear()
        store._chains[task_id] = (version, chain_len, chain_bytes)
        return version
    if reply[0] == 2:
        _, holder, generation = [*reply, None, None][:3]
        check_fence(task_id, enc.fence, holder, number(generation))
        raise LeaseLost(task_id, enc.fence or 0, None)  # pragma: no cover - raced
    if reply[0] == 3:
        raise StateCorrupted(task_id, None, "the task record's version is not a number")
    if reply[0] != 0:  # pragma: no cover - the script returns nothing else
        raise StoreError(f"Redis store {store.url}: unexpected commit reply {reply!r}")
    raise StaleState(task_id, enc.expected, reply[1])
