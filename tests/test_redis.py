"""Redis store specifics the contract suite cannot see: URLs, layout, open errors.

The contract suite (``tests/contract``) already runs every Store behaviour against
Redis; these tests cover what is particular to it. Tests that need the server use
the contract suite's probe: they skip when Redis is down (fail in CI).
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skillstate.errors import InvalidStoreURL, MissingExtra, StoreError
from skillstate.events import Event
from skillstate.state.diff import make_patch
from skillstate.store import open_store
from skillstate.store.chain import dumps
from skillstate.store.memory import MemoryStore
from skillstate.store.redis import MIGRATIONS, RedisStore, _parse_url
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
            assert store.schema_versions() == [v for v, _ in MIGRATIONS]
            key = store._key("schema")
            first = store._client.hgetall(key)
            store.setup()
            store.setup()
            again = RedisStore(url)
            again.close()
            assert store.schema_versions() == [v for v, _ in MIGRATIONS]
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


def stored_size(text: str) -> int:
    """Bytes the Redis store keeps for a body: zlib after a NUL from 768 characters on."""
    if len(text) < 768:
        return len(text.encode())
    return 1 + len(zlib.compress(text.encode(), 1))


@pytest.mark.services
@pytest.mark.parametrize("max_chain", [3, 100])
@pytest.mark.parametrize("remembers", [True, False])
def test_snapshot_rule_matches_the_shared_one(url: str, max_chain: int, remembers: bool) -> None:
    """The Lua snapshot decision equals chain.take_snapshot, non-ASCII text included.

    Chinese text makes byte and character lengths differ: counting bytes in Lua
    would snapshot at other versions than the reference backend does. The state
    grows past the compression threshold: the rule still counts the characters of
    the uncompressed texts, while the sizes reported are the (compressed) bytes
    stored. ``remembers=False`` is a store that never knows the chain counters
    (as after another process's commit): it sends every snapshot body, and the
    script still decides.
    """
    redis_store = RedisStore(url, max_chain=max_chain)
    reference = MemoryStore(max_chain=max_chain)
    try:
        previous: dict[str, Any] = {}
        bodies: dict[int, tuple[str, str]] = {}  # version -> (state, patch) texts
        for v in range(1, 80):
            lines = [*previous.get("log", []), f"第{v}步：" + "状态" * (v % 5)]
            state = {"task_id": "t", "version": v, "log": lines, "n": v}
            # Every 31st commit has no patch: a forced snapshot, then chains restart.
            patch = [] if v % 31 == 0 else make_patch(previous, state)
            step = Event(task_id="t", version=v, actor="runtime", action={}, patch=patch)
            for store in (redis_store, reference):
                store.commit("t", v - 1, state, step)
            if not remembers:
                redis_store._chains.clear()
            bodies[v] = (dumps(state), dumps(patch) if patch else "")
            previous = state
        assert len(bodies[79][0]) >= 768  # later snapshots are compressed
        got = [(i.version, i.snapshot, i.size) for i in redis_store.checkpoints("t")]
        want = [
            (i.version, i.snapshot, stored_size(bodies[i.version][0 if i.snapshot else 1]))
            for i in reference.checkpoints("t")
        ]
        assert got == want
        for v in (30, 31, 62, 77):
            assert redis_store.checkpoint("t", v).state == reference.checkpoint("t", v).state
        assert redis_store.events("t") == reference.events("t")
    finally:
        redis_store.close()


def big_state(task_id: str, v: int, notes: int) -> dict[str, Any]:
    """A state whose JSON is several KB, non-ASCII included; more notes, more KB."""
    return {
        "task_id": task_id,
        "version": v,
        "notes": [f"note {i}: ünïcödé 状态 " + "x" * (i % 7) * 40 for i in range(notes)],
    }


@pytest.mark.services
def test_large_bodies_are_stored_compressed_and_round_trip(url: str) -> None:
    """Snapshot, patch and event of 768+ characters are zlib behind a NUL byte in Redis.

    The raw values decompress to exactly the texts committed; load, checkpoint and
    events give back what was committed; sizes are the bytes stored. A store whose
    idea of the chain is wrong (it expects a delta, the script snapshots) stores that
    snapshot uncompressed: still correct, and it loads.
    """
    store = RedisStore(url)
    raw = store._client
    try:
        states = [big_state("big", 1, 40), big_state("big", 2, 44), big_state("big", 3, 45)]
        long_text = "détail " * 200
        steps = [
            Event(
                task_id="big",
                version=v,
                actor="runtime",
                action={"kind": "t", "text": long_text},
                patch=make_patch(states[v - 2] if v > 1 else {}, states[v - 1]),
            )
            for v in (1, 2, 3)
        ]
        for v in (1, 2):
            store.commit("big", v - 1, states[v - 1], steps[v - 1])

        snapshot = raw.hget(store._key("snap", "big"), "1")
        assert snapshot is not None
        assert snapshot[:1] == b"\0"
        assert zlib.decompress(snapshot[1:]).decode() == dumps(states[0])
        assert len(snapshot) < len(dumps(states[0]).encode()) // 2

        record = raw.hget(store._key("cp", "big"), "2")
        assert record is not None
        kind, size, _, patch = record.split(b" ", 3)
        assert kind == b"D"  # a delta: the patch is smaller than the state
        assert len(dumps(steps[1].patch)) >= 768
        assert patch[:1] == b"\0"
        assert zlib.decompress(patch[1:]).decode() == dumps(steps[1].patch)
        assert int(size) == len(patch)

        text = raw.hget(store._key("ev", "big"), "2")
        assert text is not None
        assert text[:1] == b"\0"
        assert Event.model_validate_json(zlib.decompress(text[1:])) == steps[1].model_copy(
            update={"patch": []}
        )

        infos = store.checkpoints("big")
        assert [(i.version, i.snapshot, i.size) for i in infos] == [
            (1, True, len(snapshot)),
            (2, False, len(patch)),
        ]

        # Wrong chain counters: the store expects a delta (sends no snapshot body),
        # but max_chain=1 makes the script snapshot. It stores the state as is.
        store.max_chain = 1
        store._chains["big"] = (2, 0, 0)
        store.commit("big", 2, states[2], steps[2])
        plain = raw.hget(store._key("snap", "big"), "3")
        assert plain == dumps(states[2]).encode()

        again = RedisStore(url)  # no cache: reads only what Redis holds
        try:
            assert again.load("big").state == states[2]
            for v in (1, 2, 3):
                assert again.checkpoint("big", v).state == states[v - 1]
            assert again.events("big") == steps
        finally:
            again.close()
    finally:
        store.close()


@pytest.mark.services
def test_values_written_uncompressed_still_load(url: str) -> None:
    """Data from before compression (long JSON stored as is) loads and can be built on."""
    store = RedisStore(url)
    raw = store._client
    try:
        states = [big_state("old", 1, 40), big_state("old", 2, 44)]
        long_text = "détail " * 200
        steps = [
            Event(
                task_id="old",
                version=v,
                actor="runtime",
                action={"kind": "t", "text": long_text},
                patch=make_patch(states[v - 2] if v > 1 else {}, states[v - 1]),
            )
            for v in (1, 2)
        ]
        texts = [
            (dumps(s), dumps(e.patch), e.model_dump_json(exclude={"patch"}))
            for s, e in zip(states, steps, strict=True)
        ]
        assert all(len(t) >= 768 for group in texts for t in group)
        now = "2024-05-01T12:00:00+00:00"
        # What the store wrote before: version 1 a snapshot, version 2 a delta.
        raw.hset(store._key("cp", "old"), "1", f"S {len(texts[0][0].encode())} {now} {texts[0][1]}")
        raw.hset(store._key("snap", "old"), "1", texts[0][0])
        raw.hset(store._key("cp", "old"), "2", f"D {len(texts[1][1].encode())} {now} {texts[1][1]}")
        raw.hset(store._key("ev", "old"), mapping={"1": texts[0][2], "2": texts[1][2]})
        raw.zadd(store._key("tasks"), {"old": 0})
        raw.hset(
            store._key("task", "old"),
            mapping={
                "version": 2,
                "head": texts[1][0],
                "chain_len": 1,
                "chain_bytes": len(texts[1][1]),
                "updated_at": now,
            },
        )

        fresh = RedisStore(url)
        try:
            assert fresh.load("old").state == states[1]
            assert fresh.checkpoint("old", 1).state == states[0]
            assert fresh.events("old") == steps
            assert [(i.version, i.snapshot, i.size) for i in fresh.checkpoints("old")] == [
                (1, True, len(texts[0][0].encode())),
                (2, False, len(texts[1][1].encode())),
            ]
            # A new commit continues the old chain (a delta), and the old rows still load.
            state3 = big_state("old", 3, 45)
            step3 = event("old", 3).model_copy(update={"patch": make_patch(states[1], state3)})
            fresh.commit("old", 2, state3, step3)
            assert fresh.checkpoints("old")[-1].snapshot is False
            for v, want in ((1, states[0]), (2, states[1]), (3, state3)):
                assert fresh.checkpoint("old", v).state == want
            assert fresh.events("old") == [*steps, step3]
        finally:
            fresh.close()
    finally:
        store.close()


def card(task_id: str, version: int) -> dict[str, Any]:
    return {"task_id": task_id, "version": version, "n": version}


def commit_next(store: RedisStore, task_id: str, version: int) -> int:
    """Commit ``version`` of a small card over ``version - 1``; the version written."""
    before = card(task_id, version - 1) if version > 1 else {}
    state = card(task_id, version)
    step = event(task_id, version).model_copy(update={"patch": make_patch(before, state)})
    return store.commit(task_id, version - 1, state, step)


@pytest.mark.services
def test_commit_reloads_a_script_the_server_lost(url: str) -> None:
    """After ``SCRIPT FLUSH`` (as after a server restart) the next commit loads COMMIT again.

    The store sends COMMIT packed by itself, not through redis-py's ``Script``:
    ``NOSCRIPT`` means nothing ran, so it loads the script and sends the commit once more.
    """
    store = RedisStore(url)
    try:
        assert commit_next(store, "t", 1) == 1
        store._client.script_flush()
        assert commit_next(store, "t", 2) == 2
        assert store.load("t").state == card("t", 2)
        assert [i.version for i in store.checkpoints("t")] == [1, 2]
    finally:
        store.close()


@pytest.mark.services
def test_commit_survives_its_connection_being_killed(url: str) -> None:
    """The server drops the commit connection: redis-py's retry reconnects and sends again."""
    store = RedisStore(url)
    try:
        commit_next(store, "t", 1)
        own = store._own
        assert own is not None  # commits use a connection of their own
        own.send_command("CLIENT", "ID")
        client_id = own.read_response()
        assert store._client.client_kill_filter(_id=client_id) == 1
        assert commit_next(store, "t", 2) == 2
        assert store.load("t").version == 2
        assert len(store.events("t")) == 2  # written once
    finally:
        store.close()


@pytest.mark.services
def test_commits_from_threads_and_a_forked_child(url: str) -> None:
    """Threads share the commit connection or take pooled ones; a forked child opens its own."""
    store = RedisStore(url)
    try:
        commit_next(store, "parent", 1)  # the commit connection exists before the fork
        errors: list[BaseException] = []

        def writer(task_id: str) -> None:
            try:
                for v in range(1, 31):
                    assert commit_next(store, task_id, v) == v
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(f"thread-{i}",)) for i in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        for i in range(6):
            assert store.load(f"thread-{i}").version == 30

        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child reports through its exit status
            code = 1
            try:
                code = 0 if commit_next(store, "child", 1) == 1 else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert commit_next(store, "parent", 2) == 2  # the parent's connection is intact
        assert store.load("child").version == 1
        assert store.load("parent").state == card("parent", 2)
    finally:
        store.close()


@pytest.mark.services
def test_a_small_pool_lends_commits_no_connection(url: str) -> None:
    """``max_connections=1``: commits check the one connection out and back, so reads work."""
    store = RedisStore(f"{url}&max_connections=1")
    try:
        for v in (1, 2, 3):
            commit_next(store, "t", v)
            assert store.load("t").version == v
        assert store._own is None
    finally:
        store.close()
