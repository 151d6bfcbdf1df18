"""Redis store: shared state for many worker processes or machines (``redis-py``).

URL: ``redis://[[user]:password@]host[:port][/db][?prefix=NAME]`` (``rediss://``
for TLS). Every key starts with ``NAME:`` (default ``skillstate``), so several
stores can share one Redis database. Other query parameters (``socket_timeout``,
``max_connections``...) go to redis-py unchanged.

Layout, per task ``ID`` (``P`` is the prefix)::

    P:task:ID    hash    version, head (the head document whole), chain_len,
                         chain_bytes, updated_at
    P:cp:ID      hash    VERSION -> "KIND SIZE CREATED_AT PATCH"  (one per kept version)
    P:snap:ID    hash    VERSION -> snapshot text                 (snapshot versions only)
    P:ev:ID      hash    VERSION -> event JSON without its patch  (never pruned)
    P:lease:ID   string  the holding worker, expiring with the lease (PX)
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

``commit`` is one Lua script, hence one round trip and atomic: it compares the
version, mirrors :func:`skillstate.store.chain.take_snapshot` and writes
everything. redis-py retries a command whose connection broke; if the first
attempt had landed, the retry finds the head moved and reports ``StaleState``, so
a retried commit is never written twice.

Cross-key scripts mean a single Redis (or a primary with replicas), not Redis
Cluster: the keys of one task are not hash-tagged into one slot, and the ``tasks``
set spans all of them.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from datetime import datetime, timezone
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

from skillstate.errors import (
    ArtifactNotFound,
    Conflict,
    InvalidStoreURL,
    LeaseHeld,
    MissingExtra,
    StaleState,
    StateCorrupted,
    StoreError,
    TaskNotFound,
)
from skillstate.events import Event, utcnow
from skillstate.store.base import Checkpoint, CheckpointInfo, Lease, PruneResult, artifact_ref
from skillstate.store.chain import (
    COMPRESS_FROM,
    DEFAULT_MAX_CHAIN,
    Row,
    encode_commit,
    load_document,
    plan_prune,
    rebuild,
    restore_event,
    take_snapshot,
)

if TYPE_CHECKING:
    import redis

__all__ = ["DEFAULT_PREFIX", "RedisStore"]

DEFAULT_PREFIX = "skillstate"

OPEN_TIMEOUT = 2.0
"""Seconds the opening ping may take: a server that is down fails fast, not after retries."""

_PRUNE_ATTEMPTS = 100
"""WATCH retries before prune gives up on a task that is committed to without pause."""

_CHUNK = 1000
"""Fields per HMGET/HDEL, so a long task never becomes one giant command."""

_COMPRESS_FROM = COMPRESS_FROM  # the rule every store shares (store.chain)
"""Bodies at least this many characters long are stored compressed (the SQLite store's
threshold: below it zlib costs more time per commit than the bytes are worth)."""

_ZLIB = b"\0"
"""Leads a compressed value. Stored JSON text never starts with (or contains) NUL."""

_CHAIN_CACHE = 4096
"""Tasks whose chain counters a store remembers from its own commits (then forgotten)."""


# --------------------------------------------------------------------- Lua scripts

# KEYS: task, cp, snap, ev, tasks
# ARGV: expected, version, state, event, patch ('' = none), is_delta ('1'/'0'),
#       len(patch), len(state), max_chain, now, task_id, body ('' = state as is)
# Returns {1, new_version, chain_len, chain_bytes} or {0, actual_head_version}.
#
# event, patch and body arrive as stored: compressed (binary) when long, which Lua
# strings carry unchanged. The snapshot decision is chain.take_snapshot verbatim. The
# two lengths come from Python because the rule counts the characters of the
# uncompressed texts (len(str)) while Lua's # counts bytes; the stored SIZE, in
# contrast, is the bytes stored, as CheckpointInfo.size is everywhere. body is the
# snapshot as it is to be stored (compressed) when Python expects a snapshot or cannot
# tell; when it is empty and the script snapshots anyway, the state is stored as is.
# The task hash is written last: Redis does not roll a script back, so if it were
# ever cut short (out of memory) the head would not have moved and the next commit
# of the same version simply overwrites the half-written fields.
_COMMIT = """
local cur = redis.call('HMGET', KEYS[1], 'version', 'chain_len', 'chain_bytes')
local head = tonumber(cur[1]) or 0
if head ~= tonumber(ARGV[1]) then
  return {0, head}
end
local chain_len = tonumber(cur[2]) or 0
local chain_bytes = tonumber(cur[3]) or 0
local version, state, patch = ARGV[2], ARGV[3], ARGV[5]
local patch_len, state_len = tonumber(ARGV[7]), tonumber(ARGV[8])
local snapshot
if ARGV[6] ~= '1' or patch == '' or chain_len + 1 > tonumber(ARGV[9]) then
  snapshot = true
else
  snapshot = chain_bytes + patch_len >= state_len
end
local now = ARGV[10]
if snapshot then
  local body = ARGV[12]
  if body == '' then
    body = state
  end
  chain_len, chain_bytes = 0, 0
  redis.call('HSET', KEYS[2], version, 'S ' .. #body .. ' ' .. now .. ' ' .. patch)
  redis.call('HSET', KEYS[3], version, body)
else
  chain_len, chain_bytes = chain_len + 1, chain_bytes + patch_len
  redis.call('HSET', KEYS[2], version, 'D ' .. #patch .. ' ' .. now .. ' ' .. patch)
end
redis.call('HSET', KEYS[4], version, ARGV[4])
if head == 0 then
  redis.call('ZADD', KEYS[5], 0, ARGV[11])
end
redis.call('HSET', KEYS[1], 'version', version, 'head', state, 'chain_len', chain_len,
  'chain_bytes', chain_bytes, 'updated_at', now)
return {1, tonumber(version), chain_len, chain_bytes}
"""

# KEYS: task, cp, snap; ARGV: version
# Returns {0} (no task), {1, head, updated_at} (the head), {3} (no such version) or
# {2, snapshot|false, record(v), record(v-1), ..., record(start)}: the records back to
# the nearest snapshot, or to the first gap (then rebuild reports the broken chain).
# One script rather than a walk from Python: the walk is a chain of dependent reads,
# and a concurrent prune cannot slip between them.
_CHECKPOINT = """
local head = redis.call('HMGET', KEYS[1], 'version', 'head', 'updated_at')
if not head[1] then
  return {0}
end
local v = tonumber(ARGV[1])
if tonumber(head[1]) == v then
  return {1, head[2], head[3]}
end
local out = {2, false}
local u = v
while u >= 1 do
  local rec = redis.call('HGET', KEYS[2], u)
  if not rec then
    break
  end
  out[#out + 1] = rec
  if string.sub(rec, 1, 1) == 'S' then
    out[2] = redis.call('HGET', KEYS[3], u)
    break
  end
  u = u - 1
end
if #out == 2 then
  return {3}
end
return out
"""

# KEYS: lease; ARGV: worker, ttl_ms
# Returns {1, worker, ttl_ms, sec, usec} (claimed) or {0, holder, pttl_ms, sec, usec}.
# Redis expires the key itself, so a dead worker's lease disappears without anyone
# comparing clocks; expires_at is reported from the server's TIME, the clock that
# expiry runs on. TIME comes after the write: Redis < 5 forbids writes after a
# non-deterministic command in a script.
_CLAIM = """
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then
  local t = redis.call('TIME')
  return {0, holder, redis.call('PTTL', KEYS[1]), t[1], t[2]}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
local t = redis.call('TIME')
return {1, ARGV[1], tonumber(ARGV[2]), t[1], t[2]}
"""

# KEYS: lease; ARGV: worker. Deletes the lease only if this worker holds it.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
end
return 0
"""


# --------------------------------------------------------------------- layout migrations


def _initial_layout(client: redis.Redis, prefix: str) -> None:
    """Layout 1 is the one described in the module docstring: nothing to convert."""


# Versioned, append-only, like the SQLite store's MIGRATIONS. Several processes may
# open a store at once and run a missing step concurrently, so every step must be
# idempotent; the version is recorded (HSETNX) only after its step has run.
MIGRATIONS: tuple[tuple[int, Callable[[redis.Redis, str], None]], ...] = ((1, _initial_layout),)


# --------------------------------------------------------------------- the store


class RedisStore:
    """A store in a Redis database, shared by every process that opens the same URL."""

    def __init__(
        self, url: str = "redis://127.0.0.1:6379/0", *, max_chain: int = DEFAULT_MAX_CHAIN
    ) -> None:
        client_url, prefix, masked = _parse_url(url)
        self.url = masked
        self.prefix = prefix
        self.max_chain = max_chain
        self._closed = False
        # task -> (version, chain_len, chain_bytes) after this store's last commit to
        # it: with it, commit knows whether the script will snapshot and compresses the
        # state only then. A stale or missing entry costs a compression, never a
        # wrong decision (the script decides; see _COMMIT).
        self._chains: dict[str, tuple[int, int, int]] = {}
        module = _redis()
        self._redis = module
        self._ping(module, client_url)
        try:
            self._client: redis.Redis = module.Redis.from_url(client_url)
        except ValueError as exc:
            raise InvalidStoreURL(f"bad Redis URL {masked!r}: {exc}") from exc
        # register_script only hashes the text; EVALSHA loads it on first use.
        self._commit = self._client.register_script(_COMMIT)
        self._checkpoint = self._client.register_script(_CHECKPOINT)
        self._claim = self._client.register_script(_CLAIM)
        self._release = self._client.register_script(_RELEASE)
        try:
            self.setup()
        except BaseException:
            self.close()
            raise

    @classmethod
    def from_url(cls, url: str) -> RedisStore:
        return cls(url)

    # ------------------------------------------------------------------ schema

    def setup(self) -> None:
        """Apply the layout migrations this database lacks. Safe to call any number of times."""
        key = self._key("schema")
        with self._errors():
            done = set(self.schema_versions())
            for version, migrate in MIGRATIONS:
                if version in done:
                    continue
                migrate(self._client, self.prefix)
                self._client.hsetnx(key, str(version), utcnow().isoformat())

    def schema_versions(self) -> list[int]:
        """Layout versions recorded in this database, oldest first."""
        with self._errors():
            fields = self._client.hkeys(self._key("schema"))
        return sorted(int(f) for f in fields)

    # ------------------------------------------------------------------ protocol

    def load(self, task_id: str) -> Checkpoint:
        with self._errors():
            version, head, updated_at = self._client.hmget(
                self._key("task", task_id), ["version", "head", "updated_at"]
            )
        if version is None:
            raise TaskNotFound(task_id)
        number = int(version)
        if head is None or updated_at is None:
            raise StateCorrupted(task_id, number, "the task record has no head")
        state = load_document(task_id, number, head)
        return Checkpoint(task_id, number, state, _time(task_id, number, updated_at))

    def commit(
        self, task_id: str, expected_version: int, state: Mapping[str, Any], event: Event
    ) -> int:
        enc = encode_commit(task_id, expected_version, state, event)
        patch = enc.patch or ""
        chain = self._chains.get(task_id)
        if chain is not None and chain[0] == enc.expected:
            snapshot = take_snapshot(chain[1], chain[2], enc, self.max_chain)
        else:
            snapshot = True  # cannot tell: send the snapshot body in case
        body = _pack(enc.state) if snapshot and len(enc.state) >= _COMPRESS_FROM else ""
        with self._errors():
            reply = self._commit(
                keys=[
                    self._key("task", task_id),
                    self._key("cp", task_id),
                    self._key("snap", task_id),
                    self._key("ev", task_id),
                    self._key("tasks"),
                ],
                args=[
                    enc.expected,
                    enc.version,
                    enc.state,
                    _pack(enc.event),
                    _pack(patch),
                    1 if enc.is_delta else 0,
                    len(patch),
                    len(enc.state),
                    self.max_chain,
                    utcnow().isoformat(),
                    task_id,
                    body,
                ],
            )
        result = cast("list[int]", reply)
        if not result[0]:
            raise StaleState(task_id, enc.expected, result[1])
        _, version, chain_len, chain_bytes = result
        if len(self._chains) >= _CHAIN_CACHE:
            self._chains.clear()
        self._chains[task_id] = (version, chain_len, chain_bytes)
        return version

    def checkpoint(self, task_id: str, version: int) -> Checkpoint:
        with self._errors():
            reply = cast(
                "list[Any]",
                self._checkpoint(
                    keys=[
                        self._key("task", task_id),
                        self._key("cp", task_id),
                        self._key("snap", task_id),
                    ],
                    args=[version],
                ),
            )
        kind = cast("int", reply[0])
        if kind == 0:
            raise TaskNotFound(task_id)
        if kind == 1:
            head, updated_at = cast("tuple[bytes, bytes]", reply[1:])
            state = load_document(task_id, version, head)
            return Checkpoint(task_id, version, state, _time(task_id, version, updated_at))
        if kind == 3:
            raise StoreError(f"task {task_id!r} has no checkpoint at version {version}")
        body = cast("bytes | None", reply[1])
        records = cast("list[bytes]", reply[2:])  # newest first
        start = version - len(records) + 1
        rows: list[Row] = []
        for number, record in enumerate(reversed(records), start):
            is_snapshot, _, created_at, stored = _header(task_id, number, record)
            patch = _unpack(task_id, number, stored)
            # Only the oldest record can be a snapshot (the walk stops there); a body
            # that has gone missing stays None and rebuild reports the broken chain.
            snapshot = _unpack(task_id, number, body) if is_snapshot and body is not None else None
            rows.append(Row(number, snapshot, patch or None, created_at))
        return Checkpoint(task_id, version, rebuild(task_id, version, rows), rows[-1].created_at)

    def checkpoints(self, task_id: str) -> list[CheckpointInfo]:
        with self._errors():
            pipe = self._client.pipeline(transaction=True)
            pipe.exists(self._key("task", task_id))
            pipe.hgetall(self._key("cp", task_id))
            exists, records = cast("tuple[int, dict[bytes, bytes]]", pipe.execute())
        if not exists:
            raise TaskNotFound(task_id)
        return [
            _info(task_id, version, records[field])
            for version, field in sorted((int(field), field) for field in records)
        ]

    def events(self, task_id: str, *, since: int = 0) -> list[Event]:
        with self._errors():
            head = self._client.hget(self._key("task", task_id), "version")
            if head is None:
                raise TaskNotFound(task_id)
            versions = list(range(max(since, 0) + 1, int(head) + 1))
            # Versions above the head read now are not asked for: the answer is the
            # log as of that head. Events are never deleted, so the second read sees
            # every one of them; a checkpoint pruned meanwhile only drops a patch,
            # which is what events() returns for a pruned version anyway.
            pipe = self._client.pipeline(transaction=False)
            for start in range(0, len(versions), _CHUNK):
                chunk = versions[start : start + _CHUNK]
                pipe.hmget(self._key("ev", task_id), chunk)
                pipe.hmget(self._key("cp", task_id), chunk)
            replies = cast("list[list[bytes | None]]", pipe.execute() if versions else [])
        texts = [text for reply in replies[0::2] for text in reply]
        records = [record for reply in replies[1::2] for record in reply]
        events = []
        for version, text, record in zip(versions, texts, records, strict=True):
            if text is None:
                raise StateCorrupted(task_id, version, "the event of this version is missing")
            stored = _header(task_id, version, record)[3] if record is not None else b""
            patch = _unpack(task_id, version, stored) or None
            events.append(restore_event(task_id, _unpack(task_id, version, text), patch))
        return events

    def tasks(self) -> list[str]:
        with self._errors():
            members = self._client.zrange(self._key("tasks"), 0, -1)
        return sorted(cast("bytes", m).decode() for m in members)

    def prune(self, task_id: str, *, keep_last: int, keep_every: int | None = None) -> PruneResult:
        task_key, cp_key = self._key("task", task_id), self._key("cp", task_id)
        watch_error = self._redis.exceptions.WatchError
        with self._errors():
            for _ in range(_PRUNE_ATTEMPTS):
                # plan_prune runs here, in Python, so the retention rule is the one every
                # backend shares; WATCH makes the plan and the delete one atomic step
                # (a commit or another prune in between makes EXEC fail, and we replan).
                with self._client.pipeline(transaction=True) as pipe:
                    try:
                        # Pipeline.watch is the one redis-py method left unannotated.
                        watch = cast("Callable[..., bool]", pipe.watch)
                        watch(task_key, cp_key)
                        if not pipe.exists(task_key):
                            raise TaskNotFound(task_id)
                        records = cast("dict[bytes, bytes]", pipe.hgetall(cp_key))
                        infos = [_info(task_id, int(f), r) for f, r in records.items()]
                        kept, deleted = plan_prune(
                            task_id, infos, keep_last=keep_last, keep_every=keep_every
                        )
                        if deleted:
                            pipe.multi()
                            for start in range(0, len(deleted), _CHUNK):
                                chunk = deleted[start : start + _CHUNK]
                                pipe.hdel(cp_key, *chunk)
                                pipe.hdel(self._key("snap", task_id), *chunk)
                            pipe.execute()
                    except watch_error:
                        continue
                return PruneResult(task_id, kept, deleted)
        raise Conflict(
            f"task {task_id!r} changed during each of {_PRUNE_ATTEMPTS} prune attempts; "
            "nothing was deleted"
        )

    def claim(self, task_id: str, worker: str, ttl: float) -> Lease:
        if not math.isfinite(ttl):
            raise StoreError(f"lease ttl must be a finite number of seconds, got {ttl}")
        # PX takes whole milliseconds > 0; a ttl that rounds to nothing expires at once.
        ttl_ms = max(1, round(ttl * 1000))
        with self._errors():
            reply = self._claim(keys=[self._key("lease", task_id)], args=[worker, ttl_ms])
        ok, holder, left_ms, sec, usec = cast("tuple[int, bytes, int, bytes, bytes]", reply)
        expires_at = datetime.fromtimestamp(
            int(sec) + int(usec) / 1e6 + max(left_ms, 0) / 1000, timezone.utc
        )
        if not ok:
            raise LeaseHeld(task_id, holder.decode(), expires_at)
        return Lease(task_id, worker, expires_at)

    def release(self, task_id: str, worker: str) -> None:
        with self._errors():
            self._release(keys=[self._key("lease", task_id)], args=[worker])

    def put_artifact(self, data: bytes, *, media_type: str = "application/octet-stream") -> str:
        ref = artifact_ref(data)
        key = self._key("art", ref)
        with self._errors():
            # Content-addressed: the same ref always means the same bytes, so the first
            # writer wins every field and a second put changes nothing.
            pipe = self._client.pipeline(transaction=True)
            pipe.hsetnx(key, "data", bytes(data))
            pipe.hsetnx(key, "media_type", media_type)
            pipe.hsetnx(key, "created_at", utcnow().isoformat())
            pipe.execute()
        return ref

    def get_artifact(self, ref: str) -> bytes:
        with self._errors():
            data = self._client.hget(self._key("art", ref), "data")
        if data is None:
            raise ArtifactNotFound(f"no artifact {ref!r}")
        return cast("bytes", data)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        client: redis.Redis | None = getattr(self, "_client", None)
        if client is not None:
            # Closing sockets to a server that is gone: nothing is left to release.
            with suppress(self._redis.exceptions.RedisError):
                client.close()

    # ------------------------------------------------------------------ helpers

    def _key(self, kind: str, name: str | None = None) -> str:
        return f"{self.prefix}:{kind}" if name is None else f"{self.prefix}:{kind}:{name}"

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """Translate redis-py's errors into StoreError, keeping the original as the cause."""
        try:
            yield
        except self._redis.exceptions.RedisError as exc:
            raise StoreError(f"Redis error on {self.url}: {_one_line(exc)}") from exc

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
        except ValueError as exc:
            raise InvalidStoreURL(f"bad Redis URL {self.url!r}: {_one_line(exc)}") from exc
        try:
            probe.ping()
        except module.exceptions.RedisError as exc:
            raise StoreError(f"cannot reach Redis at {self.url}: {_one_line(exc)}") from exc
        finally:
            probe.close()


# --------------------------------------------------------------------- module helpers


def _redis() -> ModuleType:
    """redis-py, imported on first use so that the core install does not need it."""
    try:
        import redis
        import redis.backoff
        import redis.exceptions
        import redis.retry
    except ImportError as exc:
        raise MissingExtra("Redis store needs: pip install 'skillstate[redis]'") from exc
    return redis


def _parse_url(url: str) -> tuple[str, str, str]:
    """``(URL for redis-py, key prefix, URL with the password masked)``."""
    parts = urlsplit(url)
    masked = _mask(url)
    if parts.scheme not in {"redis", "rediss"}:
        raise InvalidStoreURL(f"not a Redis URL: {masked!r} (expected redis:// or rediss://)")
    if not parts.hostname:
        raise InvalidStoreURL(f"Redis URL {masked!r} names no host (try redis://localhost:6379/0)")
    try:
        parts.port  # noqa: B018 - urlsplit checks the port only when asked for it
    except ValueError as exc:
        raise InvalidStoreURL(f"Redis URL {masked!r} has a bad port ({exc})") from exc
    db = parts.path.strip("/")
    if db and not db.isdigit():
        # redis-py would quietly fall back to database 0: say so instead.
        raise InvalidStoreURL(f"Redis URL {masked!r}: the path must be a database number")
    prefix = DEFAULT_PREFIX
    kept: list[str] = []
    # Split by hand rather than parse and re-encode: redis-py must see its own
    # parameters exactly as written.
    for item in parts.query.split("&"):
        if unquote(item.partition("=")[0]) != "prefix":
            if item:
                kept.append(item)
            continue
        prefix = parse_qsl(item, keep_blank_values=True)[0][1]
        if not prefix:
            raise InvalidStoreURL(f"Redis URL {masked!r} has an empty prefix")
    client_url = urlunsplit(parts._replace(query="&".join(kept)))
    return client_url, prefix, masked


def _mask(url: str) -> str:
    """The URL with any password replaced by ``***`` (user names stay: they help debugging)."""
    parts = urlsplit(url)
    userinfo, at, host = parts.netloc.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    user = userinfo.partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _time(task_id: str, version: int | None, text: bytes | str) -> datetime:
    try:
        raw = text.decode() if isinstance(text, bytes) else text
        return datetime.fromisoformat(raw)
    except ValueError as exc:
        raise StateCorrupted(task_id, version, f"bad timestamp {text!r}") from exc


def _header(task_id: str, version: int, record: bytes) -> tuple[bool, int, datetime, bytes]:
    """Split a checkpoint record into ``(snapshot, size, created_at, patch as stored)``."""
    try:
        # Split the bytes, not decoded text: the patch may be compressed (binary).
        kind, size, created, patch = record.split(b" ", 3)
        if kind not in {b"S", b"D"}:
            raise ValueError(f"unknown kind {kind!r}")
        snapshot, number = kind == b"S", int(size)
    except ValueError as exc:
        raise StateCorrupted(task_id, version, f"bad checkpoint record ({exc})") from exc
    return snapshot, number, _time(task_id, version, created), patch


def _pack(text: str) -> str | bytes:
    """``text`` as stored: compressed (after the marker) when long, else as is."""
    if len(text) < _COMPRESS_FROM:
        return text
    return _ZLIB + zlib.compress(text.encode(), 1)


def _unpack(task_id: str, version: int, value: bytes) -> str:
    """A stored value back as text; one without the marker was stored uncompressed."""
    try:
        if value[:1] == _ZLIB:
            return zlib.decompress(value[1:]).decode()
        return value.decode()
    except (zlib.error, UnicodeDecodeError) as exc:
        raise StateCorrupted(task_id, version, f"stored value does not decode ({exc})") from exc


def _info(task_id: str, version: int, record: bytes) -> CheckpointInfo:
    snapshot, size, created_at, _ = _header(task_id, version, record)
    return CheckpointInfo(task_id, version, created_at, snapshot, size)
