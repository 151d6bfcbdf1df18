"""Redis store: shared state for many worker processes or machines (``redis-py``).

URL: ``redis://[[user]:password@]host[:port][/db][?prefix=NAME]`` (``rediss://``
for TLS). Every key starts with ``NAME:`` (default ``skillstate``), so several
stores can share one Redis database. Other query parameters (``socket_timeout``,
``max_connections``...) go to redis-py unchanged; one that redis-py's connection
does not take (or that would change how values are encoded, like
``decode_responses``) is ``InvalidStoreURL`` naming it.

A server that cannot be reached (down, refusing, timing out, rejecting the
credentials, a database number it does not have) is
:class:`~skillstate.errors.StoreUnavailable` naming the URL with its password
masked, on opening and on any later call; other Redis errors are ``StoreError``.

Layout, per task ``ID`` (``P`` is the prefix)::

    P:task:ID    hash    version, head (the head document whole), chain_len,
                         chain_bytes, updated_at, digest (the head's checksum)
    P:cp:ID      hash    VERSION -> "KIND SIZE CREATED_AT PATCH"  (one per kept version)
    P:snap:ID    hash    VERSION -> snapshot text                 (snapshot versions only)
    P:sum:ID     hash    VERSION -> the version's checksum        (one per kept version)
    P:ev:ID      hash    VERSION -> event JSON without its patch  (never pruned)
    P:inbox:ID   list    messages posted to the task, oldest first (message n is
                         element n - 1): JSON of kind, at, body; never pruned
    P:lease:ID   hash    worker (absent once released), generation, expires
                         (ms since the epoch, the server's clock); never deleted,
                         so the generation survives releases and expiry
    P:tasks      zset    every task id (score 0: members sort by bytes = code points)
    P:art:REF    hash    data, media_type, created_at
    P:schema     hash    layout version -> when it was applied

The checkpoint record carries a short header (``S``/``D`` for snapshot or delta,
the body's size in bytes as stored, the commit time) so that
:meth:`RedisStore.checkpoints` never has to read snapshot bodies, and the patch
inline: it is usually small and every reader of a record wants it. Snapshots live
apart because they are large and only a rebuild needs them.

Snapshot bodies, patches and event texts of 768 characters or more are stored
zlib-compressed (level 1, as the SQLite store does): a NUL byte, then the zlib
stream. Every value stored before this (and every shorter one) is JSON text, which
never starts with NUL (JSON escapes control characters), so the marker is
unambiguous and data written uncompressed loads unchanged: no layout migration. The
head stays uncompressed: loading it is the hot read.

Versions written before checksums have no ``P:sum`` field and no ``digest`` in
the task hash: they load unverified, again without a migration. Layout 2 turned the lease from a
string expiring with ``PX`` into the hash above (``MIGRATIONS``); the
Lua scripts live in :mod:`skillstate.store.redis_lua`.

What each method asks of the server, and how it reads the replies, is written once
in :mod:`skillstate.store.redis_ops` (and :mod:`.redis_rewrite`) as generators that
yield the commands they need: this module runs them on redis-py's blocking client,
:class:`~skillstate.store.redis_async.AsyncRedisStore` on ``redis.asyncio``.

``commit`` is one Lua script, hence one round trip and atomic: it checks the
fencing token against the lease, compares the version, mirrors
:func:`skillstate.store.chain.take_snapshot` and writes everything. redis-py
retries a command whose connection broke (as its ``retry`` setting allows); if
the first attempt had landed, the retry finds the head moved and reports
``StaleState``, so a retried commit is never written twice.

The commit is the hot path, so it skips redis-py's generic command layer, which
cost more Python than everything else a commit does: the store packs the
``EVALSHA`` itself (the script's SHA and the task's keys packed once per task),
sends it on a connection of its own and reads the reply with redis-py's parser,
under redis-py's retry policy; ``NOSCRIPT`` (a restarted or flushed server) loads
the script and sends the commit once more. The reply of a commit that landed is
one string. The own connection is taken from the pool once and kept for commits
while no other thread commits (then a pooled one serves), and only from a pool of
16 connections or more (redis-py's default is 100): a store used for more than
commits then holds one connection more than before. Before each commit it is
checked with one ``poll`` (the pool's checkout check costs several syscalls): one
the server closed meanwhile is reconnected before anything is sent. A process
forked from the one that took it takes another. The blocking store's ``commit``
calls :mod:`.redis_commit` around its own ``EVALSHA`` instead of driving an operation.

Cross-key scripts mean a single Redis (or a primary with replicas), not Redis
Cluster: the keys of one task are not hash-tagged into one slot, and the ``tasks``
set spans all of them.
"""

from __future__ import annotations

import os
import select
import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from datetime import datetime
from functools import partial
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

from skillstate.errors import InvalidStoreURL, MissingExtra, StoreNotFound, StoreUnavailable
from skillstate.events import Event
from skillstate.store import redis_delete, redis_restore, redis_rewrite
from skillstate.store import redis_ops as ops
from skillstate.store.base import (
    Checkpoint,
    CheckpointInfo,
    HeadInfo,
    InboxMessage,
    Lease,
    PruneResult,
)
from skillstate.store.chain import DEFAULT_MAX_CHAIN
from skillstate.store.redis_codec import one_line, store_error
from skillstate.store.redis_io import Batch, Call, Eval, Exec, Layout, Ops, Watch
from skillstate.store.redis_ops import MIGRATIONS
from skillstate.store.redis_url import DEFAULT_PREFIX
from skillstate.store.redis_url import parse_url as _parse_url
from skillstate.store.restoring import plan_restore

if TYPE_CHECKING:
    import redis

__all__ = ["DEFAULT_PREFIX", "MIGRATIONS", "RedisStore"]

T = TypeVar("T")

OPEN_TIMEOUT = 2.0
"""Seconds the opening ping may take: a server that is down fails fast, not after retries."""

_CACHE = 4096
"""Tasks whose packed commit head a store remembers (then forgotten)."""

_OWN_CONNECTION_FROM = 16
"""A pool of at least this many connections (redis-py's default is 100) lends one to
commits for good; a smaller one, sized on purpose by ``max_connections``, is left
whole and commits check a connection out per call."""


class RedisStore(Layout):
    """A store in a Redis database, shared by every process that opens the same URL."""

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        max_chain: int = DEFAULT_MAX_CHAIN,
        create: bool = True,
    ) -> None:
        """Connect (a short ping first) and apply missing layout migrations.

        There is nothing to create on a Redis server, but a store exists once
        something was stored under its prefix: ``create=False`` opens only a prefix
        that holds skillstate data (its layout record or its task index), and is
        ``StoreNotFound`` naming the URL otherwise, having written nothing.
        """
        module = _redis()
        self._redis = module
        client_url, prefix, masked = _parse_url(url, module)
        super().__init__(masked, prefix, max_chain)
        self._closed = False
        self._ping(module, client_url)
        try:
            self._client: redis.Redis = module.Redis.from_url(client_url)
        except (TypeError, ValueError) as exc:
            raise InvalidStoreURL(f"bad Redis URL {masked!r}: {one_line(exc)}") from exc
        # COMMIT is sent packed by this store (see _hot): its keys -> the packed
        # EVALSHA, SHA and keys that start each commit of the task.
        self._commit_heads: dict[tuple[str, ...], tuple[int, bytes]] = {}
        # The connection commits use while no other thread does (see _send). It is
        # one of the pool's, kept out of it: only when the pool has many to spare.
        self._own: Any = None
        self._own_lock = threading.Lock()
        pool_size = getattr(self._client.connection_pool, "max_connections", 0)
        self._own_ok = isinstance(pool_size, int) and pool_size >= _OWN_CONNECTION_FROM
        try:
            if not create and not self._exists():
                raise StoreNotFound(self.url, f"no skillstate data under prefix {prefix!r}")
            self.setup()
        except BaseException:
            self.close()
            raise

    @classmethod
    def from_url(cls, url: str, *, create: bool = True) -> RedisStore:
        return cls(url, create=create)

    # ------------------------------------------------------------------ schema

    def setup(self) -> None:
        """Apply the layout migrations this database lacks. Safe to call any number of times."""
        self._run(ops.setup(self))

    def _exists(self) -> bool:
        """Whether anything of a store is under the prefix: its layout record or task index."""
        return self._run(ops.exists(self))

    def schema_versions(self) -> list[int]:
        """Layout versions recorded in this database, oldest first.

        A record that is not a layout version, or names one newer than this code
        knows, is a one-line ``StoreError``: the store is not opened on a guess.
        """
        return self._run(ops.schema_versions(self))

    # ------------------------------------------------------------------ protocol

    def load(self, task_id: str, *, verify: bool = True) -> Checkpoint:
        return self._run(ops.load(self, task_id, verify))

    def commit(
        self,
        task_id: str,
        expected_version: int,
        state: Mapping[str, Any],
        event: Event,
        *,
        fence: int | None = None,
    ) -> int:
        # The hot path: ops.commit's work called straight (see redis_commit).
        enc, args = ops.commit_args(self, task_id, expected_version, state, event, fence=fence)
        return ops.committed(self, enc, self._commit(self.commit_keys(task_id), args))

    def checkpoint(self, task_id: str, version: int) -> Checkpoint:
        return self._run(ops.checkpoint(self, task_id, version))

    def checkpoints(self, task_id: str) -> list[CheckpointInfo]:
        return self._run(ops.checkpoints(self, task_id))

    def events(self, task_id: str, *, since: int = 0) -> list[Event]:
        return self._run(ops.events(self, task_id, since))

    def tasks(self) -> list[str]:
        return self._run(ops.tasks(self))

    def heads(self) -> list[HeadInfo]:
        return self._run(ops.heads(self))

    def prune(self, task_id: str, *, keep_last: int, keep_every: int | None = None) -> PruneResult:
        return self._run(ops.prune(self, task_id, keep_last, keep_every))

    def claim(self, task_id: str, worker: str, ttl: float) -> Lease:
        return self._run(ops.claim(self, task_id, worker, ttl))

    def release(self, task_id: str, worker: str) -> None:
        self._run(ops.release(self, task_id, worker))

    def lease(self, task_id: str) -> Lease | None:
        return self._run(ops.lease(self, task_id))

    def force_release(self, task_id: str) -> Lease | None:
        return self._run(ops.force_release(self, task_id))

    def post(self, task_id: str, kind: str, body: Mapping[str, Any]) -> int:
        return self._run(ops.post(self, task_id, kind, body))

    def inbox(self, task_id: str, *, after: int = 0) -> list[InboxMessage]:
        return self._run(ops.inbox(self, task_id, after))

    def put_artifact(self, data: bytes, *, media_type: str = "application/octet-stream") -> str:
        return self._run(ops.put_artifact(self, data, media_type))

    def get_artifact(self, ref: str) -> bytes:
        return self._run(ops.get_artifact(self, ref))

    def rewrite(self, task_id: str, expected_version: int, fn: Callable[[Any], Any]) -> int:
        """WATCH, read, plan, write in one MULTI/EXEC (:mod:`.redis_rewrite`)."""
        return self._run(redis_rewrite.rewrite(self, task_id, expected_version, fn))

    def artifact_refs(self) -> list[str]:
        return self._run(redis_rewrite.artifact_refs(self))

    def replace_artifact(self, ref: str, data: bytes) -> None:
        self._run(redis_rewrite.replace_artifact(self, ref, data))

    def restore(
        self,
        task_id: str,
        checkpoints: Sequence[Checkpoint],
        events: Sequence[Event],
        inbox: Sequence[InboxMessage],
        *,
        overwrite: bool = False,
    ) -> int:
        """``WATCH`` then one ``MULTI``/``EXEC`` (:mod:`~skillstate.store.redis_restore`)."""
        plan = plan_restore(task_id, checkpoints, events, inbox, max_chain=self.max_chain)
        return self._run(redis_restore.restore(self, plan, overwrite=overwrite))

    def delete_task(self, task_id: str) -> bool:
        return self._run(redis_delete.delete_task(self, task_id))

    def delete_artifact(self, ref: str, *, unused_since: datetime | None = None) -> bool:
        return self._run(redis_delete.delete_artifact(self, ref, unused_since))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        client: redis.Redis | None = getattr(self, "_client", None)
        if client is not None:
            # Closing sockets to a server that is gone: nothing is left to release.
            with suppress(self._redis.exceptions.RedisError):
                client.close()

    # ------------------------------------------------------------------ the driver

    def _run(self, operation: Ops[T]) -> T:
        """Run one operation of :mod:`.redis_ops` to its result, blocking on each reply.

        redis-py's errors go back into the operation (it handles ``NOSCRIPT`` and
        ``WatchError``); one it lets out is translated (``StoreUnavailable`` when
        the server cannot be reached), with the original as the cause.
        """
        errors = self._redis.exceptions.RedisError
        watching: Any = None  # the pipeline holding a WATCH, from Watch to Exec
        reply: Any = None
        error: Exception | None = None
        try:
            while True:
                try:
                    op = operation.send(reply) if error is None else operation.throw(error)
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]
                reply = error = None
                try:
                    if isinstance(op, Watch):
                        if watching is not None:
                            watching.reset()
                        watching = self._client.pipeline(transaction=True)
                        watching.watch(*op.keys)
                    else:
                        reply = self._do(op, watching)
                except errors as exc:
                    error = exc
        except errors as exc:
            raise store_error(self.url, exc) from exc
        finally:
            operation.close()
            if watching is not None:
                watching.reset()

    def _do(self, op: Call | Batch | Eval | Exec, watching: Any) -> Any:
        # A pipeline with nothing queued is falsy: hence "is None", never "or".
        client: Any = self._client if watching is None else watching
        if isinstance(op, Call):
            return client.execute_command(*op.args)
        if isinstance(op, Eval):
            if op.hot:
                return self._hot(op)
            return client.execute_command("EVALSHA", op.sha, len(op.keys), *op.keys, *op.args)
        if isinstance(op, Batch):
            pipe: Any = self._client.pipeline(transaction=op.transaction)
        else:  # Exec: the transaction on the watching connection
            pipe = watching
            pipe.multi()
        with pipe:
            for call in op.calls:
                pipe.execute_command(*call.args)
            return pipe.execute()

    def _hot(self, op: Eval) -> Any:
        """Send one ``EVALSHA`` (the commit) packed by the store: one round trip."""
        return self._send(self._pack(op.sha, op.keys, op.args))

    def _commit(self, keys: tuple[str, ...], args: tuple[bytes, ...]) -> Any:
        """The commit script's reply, sent as :meth:`_hot` sends it. ``NOSCRIPT`` (a
        restarted or flushed server: nothing ran) loads the script and sends it once
        more; any other Redis error is translated as ``_run`` translates it."""
        exceptions = self._redis.exceptions
        try:
            command = self._pack(ops.COMMIT.sha, keys, args)
            try:
                return self._send(command)
            except exceptions.NoScriptError:
                client: Any = self._client
                client.execute_command("SCRIPT", "LOAD", ops.COMMIT.text)
            return self._send(command)
        except exceptions.RedisError as exc:
            raise store_error(self.url, exc) from exc

    def _pack(self, sha: str, keys: tuple[str, ...], args: tuple[Any, ...]) -> bytes:
        """``EVALSHA`` of the commit script as the Redis protocol (RESP) frames it.

        This is what redis-py's command call does, minus its generic command layer
        (argument encoding, per-call bookkeeping), which cost a commit more than the
        round trip itself: redis-py's retry policy (a broken connection is dropped,
        reconnected and the command sent again), the reply read by redis-py's parser.
        The SHA and the task's keys are packed once per task.

        The connection is the store's own commit connection while no other thread
        is using it (checking one out of the pool and back costs a commit several
        syscalls), else a pooled one: see :data:`_OWN_CONNECTION_FROM`.
        """
        head = self._commit_heads.get(keys)
        if head is None:
            parts = [b"EVALSHA", sha.encode(), b"%d" % len(keys)]
            parts += [key.encode() for key in keys]
            head = (len(parts), b"".join(map(_bulk, parts)))
            if len(self._commit_heads) >= _CACHE:
                self._commit_heads.clear()
            self._commit_heads[keys] = head
        count, packed = head
        # Each argument's frame around it, joined once: a long argument (the state) is
        # copied once, not into its frame and then into the command.
        parts = [b"*%d\r\n" % (count + len(args)), packed]
        for arg in args:
            parts += (b"$%d\r\n" % len(arg), arg, b"\r\n")
        return b"".join(parts)

    def _send(self, command: bytes) -> Any:
        if self._own_ok and self._own_lock.acquire(blocking=False):
            try:
                conn = self._own
                if conn is None or conn.pid != os.getpid():
                    # None yet, or inherited through a fork: its socket is the parent's.
                    conn = self._own = self._client.connection_pool.get_connection()
                elif not _idle(conn):
                    # Closed by the server since the last commit (its idle timeout, a
                    # restart): reconnect before sending, as the pool does on checkout,
                    # so that the command goes out once, on a live connection.
                    conn.disconnect()
                return _call(conn, command)
            finally:
                self._own_lock.release()
        pool = self._client.connection_pool
        conn = pool.get_connection()
        try:
            return _call(conn, command)
        finally:
            pool.release(conn)

    def _ping(self, module: ModuleType, client_url: str) -> None:
        # A throwaway client without retries and with short timeouts: the pooled client
        # retries failed connections with backoff (seconds), which is right for a blip
        # mid-run but makes "the server is not there" take far too long to say.
        retry = module.retry.Retry(module.backoff.NoBackoff(), 0)
        try:
            probe = module.Redis.from_url(
                client_url,
                socket_connect_timeout=OPEN_TIMEOUT,
                socket_timeout=OPEN_TIMEOUT,
                retry=retry,
            )
        except (TypeError, ValueError) as exc:
            raise InvalidStoreURL(f"bad Redis URL {self.url!r}: {one_line(exc)}") from exc
        try:
            probe.ping()
        except TypeError as exc:  # an option the connection class does not take
            raise InvalidStoreURL(f"bad Redis URL {self.url!r}: {one_line(exc)}") from exc
        except module.exceptions.RedisError as exc:
            # Refused, timed out, bad credentials, no such database number: all mean
            # this store cannot be used, whatever redis-py calls them.
            raise StoreUnavailable(f"cannot reach Redis at {self.url}: {one_line(exc)}") from exc
        finally:
            probe.close()


# --------------------------------------------------------------------- module helpers


def _redis() -> ModuleType:
    """redis-py, imported on first use so that the core install does not need it."""
    try:
        import redis
        import redis.backoff
        import redis.connection
        import redis.exceptions
        import redis.retry
    except ImportError as exc:
        raise MissingExtra("Redis store needs: pip install 'skillstate[redis]'") from exc
    return redis


def _bulk(data: bytes) -> bytes:
    """One argument of a command as the Redis protocol (RESP) frames it."""
    return b"$%d\r\n%b\r\n" % (len(data), data)


def _idle(conn: Any) -> bool:
    """Whether a connection kept between commits is still as it was left: connected
    (or not yet), with nothing to read: no end of stream, no stray reply.

    One ``poll`` with no wait: the checks the pool makes on every checkout
    (``can_read``) cost several syscalls.
    """
    sock = getattr(conn, "_sock", None)
    if sock is None:
        return True  # not connected: sending connects it
    pending = getattr(sock, "pending", None)  # TLS: bytes already decrypted
    if pending is not None and pending():
        return False
    if not hasattr(select, "poll"):  # pragma: no cover - Windows
        return not conn.can_read()
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return not poller.poll(0)


def _call(conn: Any, command: bytes) -> Any:
    """A packed command's reply on ``conn``, retried as redis-py retries its commands."""
    return conn.retry.call_with_retry(
        partial(_send_packed, conn, command), lambda _error: conn.disconnect()
    )


def _send_packed(conn: Any, command: bytes) -> Any:
    """Write a packed command on ``conn`` and read its reply (raises the server's error)."""
    conn.send_packed_command([command])
    return conn.read_response()
