"""Redis store specifics the contract suite cannot see: URLs, layout, open errors, races.

The contract suite (``tests/contract``) already runs every Store behaviour against
Redis; these tests cover what is particular to it. Tests that need the server use
the contract suite's probe: they skip when Redis is down (fail in CI).
"""

from __future__ import annotations

import multiprocessing
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skillstate.errors import InvalidStoreURL, MissingExtra, StaleState, StoreError
from skillstate.events import Event
from skillstate.state.diff import make_patch
from skillstate.store import open_store
from skillstate.store.memory import MemoryStore
from skillstate.store.redis import RedisStore, _parse_url
from tests.contract.backends import drop_redis_data, redis_url_for


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    """A Redis URL with a prefix of this test's own; its keys are deleted afterwards."""
    yield redis_url_for(tmp_path)
    drop_redis_data()


def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def event(task_id: str, version: int, **action: Any) -> Event:
    return Event(task_id=task_id, version=version, actor="runtime", action={"kind": "t", **action})


class TestURL:
    @pytest.mark.parametrize(
        ("url", "client_url", "prefix", "masked"),
        [
            ("redis://localhost:6379/0", "redis://localhost:6379/0", "skillstate", None),
            ("redis://h", "redis://h", "skillstate", None),
            (
                "redis://:pw@h:1/2?prefix=app",
                "redis://:pw@h:1/2",
                "app",
                "redis://:***@h:1/2?prefix=app",
            ),
            (
                "rediss://user:p%40ss@h/0?socket_timeout=3&prefix=a%3Ab&max_connections=5",
                "rediss://user:p%40ss@h/0?socket_timeout=3&max_connections=5",
                "a:b",
                "rediss://user:***@h/0?socket_timeout=3&prefix=a%3Ab&max_connections=5",
            ),
            ("redis://user@h/0", "redis://user@h/0", "skillstate", None),
        ],
    )
    def test_prefix_is_stripped_and_password_masked(
        self, url: str, client_url: str, prefix: str, masked: str | None
    ) -> None:
        """The prefix never reaches redis-py; the URL shown never shows the password."""
        assert _parse_url(url) == (client_url, prefix, masked or url)

    @pytest.mark.parametrize(
        "url",
        [
            "redis://h/0?prefix=",
            "redis:///0",
            "postgres://h/0",
            "redis://h:notaport/0",
            "redis://h/notadb",
        ],
    )
    def test_bad_urls_are_usage_errors(self, url: str) -> None:
        """A URL that cannot name a Redis store is InvalidStoreURL, before any network."""
        with pytest.raises(InvalidStoreURL):
            RedisStore(url)


class TestOpen:
    def test_missing_driver_names_the_extra(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without redis-py the module still imports; opening says which extra to install."""
        monkeypatch.setitem(sys.modules, "redis", None)
        with pytest.raises(MissingExtra, match=r"skillstate\[redis\]"):
            RedisStore("redis://127.0.0.1:6379/0")

    def test_unreachable_server_fails_fast_on_one_line(self) -> None:
        """Nothing listening: a one-line StoreError at once, with the password masked."""
        start = time.monotonic()
        with pytest.raises(StoreError) as info:
            RedisStore(f"redis://:hunter2@127.0.0.1:{unused_port()}/0?prefix=x")
        assert time.monotonic() - start < 2.0
        message = str(info.value)
        assert "\n" not in message
        assert "hunter2" not in message
        assert ":***@" in message
        assert info.value.__cause__ is not None

    @pytest.mark.services
    def test_open_store_dispatches_both_schemes(self, url: str) -> None:
        """``redis://`` opens a RedisStore; ``rediss://`` reaches it too (here: nothing listens)."""
        store = open_store(url)
        try:
            assert isinstance(store, RedisStore)
            assert store.url == url
        finally:
            store.close()
        with pytest.raises(StoreError, match="cannot reach Redis"):
            open_store(f"rediss://127.0.0.1:{unused_port()}/0")

    @pytest.mark.services
    def test_setup_is_idempotent(self, url: str) -> None:
        """setup() records the layout once, however often the store is opened or set up."""
        store = RedisStore(url)
        try:
            assert store.schema_versions() == [1]
            key = store._key("schema")
            first = store._client.hgetall(key)
            store.setup()
            store.setup()
            again = RedisStore(url)
            again.close()
            assert store.schema_versions() == [1]
            assert store._client.hgetall(key) == first  # applied_at was not rewritten
        finally:
            store.close()

    @pytest.mark.services
    def test_redis_errors_are_wrapped(self, url: str) -> None:
        """A driver error (here WRONGTYPE) surfaces as StoreError with the cause attached."""
        store = RedisStore(url)
        try:
            store._client.set(store._key("task", "t"), "not a hash")
            with pytest.raises(StoreError) as info:
                store.load("t")
            assert "WRONGTYPE" in str(info.value)
            assert info.value.__cause__ is not None
        finally:
            store.close()


@pytest.mark.services
@pytest.mark.parametrize("max_chain", [3, 100])
def test_snapshot_rule_matches_the_shared_one(url: str, max_chain: int) -> None:
    """The Lua snapshot decision equals chain.take_snapshot, non-ASCII text included.

    Chinese text makes byte and character lengths differ: counting bytes in Lua
    would snapshot at other versions than the reference backend does.
    """
    redis_store = RedisStore(url, max_chain=max_chain)
    reference = MemoryStore(max_chain=max_chain)
    try:
        previous: dict[str, Any] = {}
        for v in range(1, 80):
            lines = [*previous.get("log", []), f"第{v}步：" + "状态" * (v % 5)]
            state = {"task_id": "t", "version": v, "log": lines, "n": v}
            # Every 31st commit has no patch: a forced snapshot, then chains restart.
            patch = [] if v % 31 == 0 else make_patch(previous, state)
            step = Event(task_id="t", version=v, actor="runtime", action={}, patch=patch)
            for store in (redis_store, reference):
                store.commit("t", v - 1, state, step)
            previous = state
        got = [(i.version, i.snapshot, i.size) for i in redis_store.checkpoints("t")]
        want = [(i.version, i.snapshot, i.size) for i in reference.checkpoints("t")]
        assert got == want
        assert redis_store.checkpoint("t", 77).state == reference.checkpoint("t", 77).state
    finally:
        redis_store.close()


# ----------------------------------------------------------------------- the race

WORKERS = 4
STEPS = 200


def _race_writer(
    url: str, worker: int, barrier: Any, results: Any
) -> None:  # pragma: no cover - runs in a child process
    """Commit STEPS steps to task "race", reloading and retrying whenever another wins."""
    store = RedisStore(url)
    retries = 0
    try:
        barrier.wait()
        for i in range(STEPS):
            while True:
                head = store.load("race")
                version = head.version + 1
                state = {**head.state, "version": version, "log": [*head.state["log"], [worker, i]]}
                step = Event(
                    task_id="race",
                    version=version,
                    actor="runtime",
                    action={"kind": "race", "worker": worker, "i": i},
                    patch=make_patch(head.state, state),
                )
                try:
                    store.commit("race", head.version, state, step)
                    break
                except StaleState:
                    retries += 1
    finally:
        store.close()
    results.put((worker, retries))


@pytest.mark.services
def test_processes_racing_on_one_task_lose_nothing(url: str) -> None:
    """4 processes x 200 steps on one task: every step lands exactly once, in one line."""
    store = RedisStore(url)
    try:
        store.commit("race", 0, {"task_id": "race", "version": 1, "log": []}, event("race", 1))
        ctx = multiprocessing.get_context("spawn")
        barrier = ctx.Barrier(WORKERS)
        results = ctx.Queue()
        procs = [
            ctx.Process(target=_race_writer, args=(url, w, barrier, results))
            for w in range(WORKERS)
        ]
        for proc in procs:
            proc.start()
        retries = dict(results.get(timeout=60) for _ in procs)
        for proc in procs:
            proc.join(timeout=10)
            assert proc.exitcode == 0
        assert sorted(retries) == list(range(WORKERS))

        head = store.load("race")
        assert head.version == 1 + WORKERS * STEPS
        events = store.events("race")
        assert [e.version for e in events] == list(range(1, head.version + 1))
        steps = [(e.action["worker"], e.action["i"]) for e in events[1:]]
        assert sorted(steps) == [(w, i) for w in range(WORKERS) for i in range(STEPS)]
        # Each commit was built on the head it replaced: the log is the events, in order.
        assert [tuple(entry) for entry in head.state["log"]] == steps
        assert [c.version for c in store.checkpoints("race")] == list(range(1, head.version + 1))
        for v in (2, 137, 400, head.version - 1):
            assert store.checkpoint("race", v).state["log"] == head.state["log"][: v - 1]
    finally:
        store.close()
