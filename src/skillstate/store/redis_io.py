"""What the Redis store's operations and its two drivers say to each other (sans-I/O).

An operation (:mod:`.redis_ops`, :mod:`.redis_rewrite`) is a generator. It *yields*
what it needs the server to do, as a small frozen value:

* :class:`Call`: one command; the reply is redis-py's (its response callback applied);
* :class:`Batch`: commands in one pipeline, ``MULTI``/``EXEC`` when ``transaction``;
* :class:`Eval`: ``EVALSHA`` of a script (:func:`script` turns ``NOSCRIPT`` into
  ``SCRIPT LOAD`` and a second try);
* :class:`Watch` / :class:`Exec`: ``WATCH`` keys on a connection kept for the
  operation, read on it, then ``MULTI``/``EXEC`` there (``WatchError`` when a
  watched key moved meanwhile);

gets each reply sent back in (or redis-py's error thrown in, where the operation
can handle it: ``NOSCRIPT``, ``WatchError``) and returns the method's result.
:class:`~skillstate.store.redis.RedisStore` runs operations on redis-py's blocking
client, :class:`~skillstate.store.redis_async.AsyncRedisStore` on ``redis.asyncio``;
an error that escapes is translated by the driver
(:func:`~skillstate.store.redis_codec.store_error`). A driver decides only how to
wait (and may send :attr:`Eval.hot`, the commit, its fastest way).

:class:`Layout` is what both stores hold for their operations: the key prefix, the
masked URL, ``max_chain`` and what commits remember.
"""

from __future__ import annotations

import hashlib
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any, TypeVar, Union

__all__ = ["Batch", "Call", "Eval", "Exec", "Layout", "Lua", "Op", "Ops", "Watch", "scan", "script"]

T = TypeVar("T")

CACHE = 4096
"""Tasks whose chain counters (and commit keys) a store remembers, then forgets."""


# --------------------------------------------------------------------- what is yielded


@dataclass(frozen=True, slots=True)
class Call:
    """One command, e.g. ``Call(("HGET", key, "version"))``."""

    args: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Batch:
    """Commands sent in one pipeline; the reply is the list of theirs."""

    calls: tuple[Call, ...]
    transaction: bool
    """Wrapped in ``MULTI``/``EXEC``: applied all together."""


@dataclass(frozen=True, slots=True)
class Eval:
    """``EVALSHA`` of a loaded script: ``NOSCRIPT`` is thrown back in (see :func:`script`)."""

    sha: str
    keys: tuple[str, ...]
    args: tuple[Any, ...]
    hot: bool = False
    """The commit: a driver may send it its fastest way (the sync one packs it itself)."""


@dataclass(frozen=True, slots=True)
class Watch:
    """``WATCH`` the keys on a connection the driver keeps for this operation: the
    calls after it run there, until :class:`Exec` (or the operation's end) releases it."""

    keys: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Exec:
    """``MULTI``, the calls, ``EXEC`` on the watching connection; ``WatchError`` is
    thrown back in when a watched key changed (nothing was applied)."""

    calls: tuple[Call, ...]


Op = Union[Call, Batch, Eval, Watch, Exec]  # noqa: UP007 - a runtime alias, Python 3.10
Ops = Generator[Op, Any, T]
"""An operation: yields ops, is sent their replies, returns the method's result."""


@dataclass(frozen=True)
class Lua:
    """A script of :mod:`.redis_lua` and its SHA1 (what ``EVALSHA`` names it by)."""

    text: str
    sha: str = field(init=False)

    def __post_init__(self) -> None:
        digest = hashlib.sha1(self.text.encode(), usedforsecurity=False).hexdigest()
        object.__setattr__(self, "sha", digest)


def script(
    lua: Lua, keys: tuple[Any, ...], args: tuple[Any, ...], *, hot: bool = False
) -> Ops[Any]:
    """Run ``lua`` by its SHA; a server that lacks it (restarted, flushed) gets it loaded
    and the call sent once more: ``NOSCRIPT`` means nothing ran."""
    from redis.exceptions import NoScriptError

    call = Eval(lua.sha, keys, args, hot)
    try:
        return (yield call)
    except NoScriptError:
        yield Call(("SCRIPT", "LOAD", lua.text))
    return (yield call)


def scan(pattern: str) -> Ops[list[bytes]]:
    """Every key matching ``pattern`` (SCAN: the keyspace is walked, never blocked)."""
    found: dict[bytes, None] = {}  # SCAN may return a key twice
    cursor = 0
    while True:
        cursor, keys = yield Call(("SCAN", cursor, "MATCH", pattern, "COUNT", 1000))
        found.update(dict.fromkeys(keys))
        if int(cursor) == 0:
            return list(found)


# --------------------------------------------------------------------- the layout


class Layout:
    """What both Redis stores hold for their operations: where keys live, the URL
    errors name, the snapshot rule's ``max_chain`` and what commits remember."""

    def __init__(self, url: str, prefix: str, max_chain: int) -> None:
        self.url = url
        """The URL the store was opened from, with any password masked."""
        self.prefix = prefix
        self.max_chain = max_chain
        # task -> (version, chain_len, chain_bytes) after this store's last commit to
        # it: with it, commit knows whether the script will snapshot and compresses the
        # state only then. A stale or missing entry costs a compression, never a
        # wrong decision (the script decides; see redis_lua.COMMIT).
        self._chains: dict[str, tuple[int, int, int]] = {}
        self._commit_keys: dict[str, tuple[str, ...]] = {}

    def _key(self, kind: str, name: str | None = None) -> str:
        return f"{self.prefix}:{kind}" if name is None else f"{self.prefix}:{kind}:{name}"

    def commit_keys(self, task_id: str) -> tuple[str, ...]:
        """The KEYS of :data:`COMMIT` for a task (the same tuple for each of its commits)."""
        keys = self._commit_keys.get(task_id)
        if keys is None:
            kinds = ("task", "cp", "snap", "ev", None, "lease", "sum")
            keys = tuple(self._key("tasks") if k is None else self._key(k, task_id) for k in kinds)
            if len(self._commit_keys) >= CACHE:
                self._commit_keys.clear()
            self._commit_keys[task_id] = keys
        return keys
