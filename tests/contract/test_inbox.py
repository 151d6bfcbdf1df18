"""The inbox contract (``Store.post`` / ``Store.inbox``): every backend, sync and async."""

from __future__ import annotations

import multiprocessing
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from skillstate.errors import MessageRefused, TaskNotFound, UsageError
from skillstate.events import Event
from skillstate.store import open_store
from skillstate.store.base import InboxMessage, Store
from skillstate.store.inbox import MAX_BODY_BYTES
from tests.contract.backends import URLS, Factory

THREADS = 8
POSTS = 25


def create(store: Store, task_id: str = "t") -> None:
    state = {"task_id": task_id, "version": 1, "facts": {}}
    store.commit(task_id, 0, state, Event(task_id=task_id, version=1, actor="runtime", action={}))


class TestPost:
    def test_messages_are_numbered_from_one_in_order(self, store: Store) -> None:
        """Posts get 1, 2, 3 and come back oldest first with their kind and body."""
        create(store)
        before = datetime.now(timezone.utc) - timedelta(seconds=5)
        assert store.post("t", "message", {"text": "first"}) == 1
        assert store.post("t", "cancel", {"reason": "no longer needed", "compensate": True}) == 2
        assert store.post("t", "signal", {"name": "paid", "data": {"工单": [1, 2.5, None]}}) == 3
        messages = store.inbox("t")
        assert [(m.seq, m.kind) for m in messages] == [(1, "message"), (2, "cancel"), (3, "signal")]
        assert messages[1].body == {"reason": "no longer needed", "compensate": True}
        assert messages[2].body == {"name": "paid", "data": {"工单": [1, 2.5, None]}}
        assert all(isinstance(m, InboxMessage) for m in messages)
        assert all(before <= m.at <= datetime.now(timezone.utc) for m in messages)
        assert all(m.at.utcoffset() == timedelta(0) for m in messages)

    def test_after_reads_only_later_messages(self, store: Store) -> None:
        """``after=n`` returns the messages numbered above n (none past the last)."""
        create(store)
        for n in range(5):
            store.post("t", "message", {"n": n})
        assert [m.seq for m in store.inbox("t", after=3)] == [4, 5]
        assert store.inbox("t", after=5) == []
        assert [m.body["n"] for m in store.inbox("t", after=0)] == [0, 1, 2, 3, 4]

    def test_an_empty_inbox(self, store: Store) -> None:
        """A task nobody posted to has an empty inbox."""
        create(store)
        assert store.inbox("t") == []

    def test_inboxes_are_per_task(self, store: Store) -> None:
        """Each task numbers its own messages from 1."""
        create(store, "a")
        create(store, "b")
        assert store.post("a", "message", {"to": "a"}) == 1
        assert store.post("b", "message", {"to": "b"}) == 1
        assert store.post("a", "message", {"to": "a"}) == 2
        assert [m.body["to"] for m in store.inbox("a")] == ["a", "a"]
        assert [m.body["to"] for m in store.inbox("b")] == ["b"]

    def test_post_leaves_the_card_alone(self, store: Store) -> None:
        """A post writes no version and no event: the holder's next commit still lands."""
        create(store)
        store.post("t", "message", {"text": "hi"})
        assert store.load("t").version == 1
        assert len(store.events("t")) == 1
        state = {"task_id": "t", "version": 2, "facts": {}}
        store.commit("t", 1, state, Event(task_id="t", version=2, actor="runtime", action={}))
        assert store.load("t").version == 2

    def test_unknown_task_is_refused(self, store: Store) -> None:
        """Posting to, or reading, a task never committed is TaskNotFound."""
        with pytest.raises(TaskNotFound):
            store.post("missing", "message", {"text": "hello?"})
        with pytest.raises(TaskNotFound):
            store.inbox("missing")
        create(store)
        assert store.inbox("t") == []

    def test_invalid_task_id_is_refused(self, store: Store) -> None:
        """A task id no store can hold is a UsageError, as for every method."""
        with pytest.raises(UsageError):
            store.post("", "message", {})
        with pytest.raises(UsageError):
            store.inbox("a\x00b")

    def test_body_size_is_bounded(self, store: Store) -> None:
        """A body of MAX_BODY_BYTES as JSON is taken; one byte more is refused unwritten."""
        create(store)
        frame = len('{"text":""}')
        fits = {"text": "x" * (MAX_BODY_BYTES - frame)}
        assert store.post("t", "message", fits) == 1
        with pytest.raises(MessageRefused, match="limit"):
            store.post("t", "message", {"text": "x" * (MAX_BODY_BYTES - frame + 1)})
        # Multi-byte characters count as their UTF-8 bytes.
        with pytest.raises(MessageRefused, match="limit"):
            store.post("t", "message", {"text": "状" * (MAX_BODY_BYTES // 3)})
        assert [m.seq for m in store.inbox("t")] == [1]
        assert store.inbox("t")[0].body == fits

    @pytest.mark.parametrize(
        ("kind", "body"),
        [
            ("", {}),
            ("Message", {}),
            ("x" * 33, {}),
            ("has space", {}),
            ("message", ["not", "an", "object"]),
            ("message", {"n": float("nan")}),
            ("message", {"obj": object()}),
            ("message", {"text": "\ud800"}),
        ],
    )
    def test_bad_messages_are_refused(self, store: Store, kind: str, body: Any) -> None:
        """A bad kind or a body that is not a storable JSON object: refused, nothing written."""
        create(store)
        with pytest.raises(MessageRefused):
            store.post("t", kind, body)
        assert store.inbox("t") == []
        assert store.post("t", "message", {"ok": True}) == 1

    def test_messages_survive_reopening(self, backend: Factory, tmp_path: Path) -> None:
        """What was posted is there after the store is closed and opened again."""
        first = backend(tmp_path)
        create(first)
        first.post("t", "message", {"text": "kept"})
        first.close()
        again = backend(tmp_path)
        try:
            if not again.tasks():
                pytest.skip("this backend keeps nothing across opens (memory)")
            assert [(m.seq, m.body) for m in again.inbox("t")] == [(1, {"text": "kept"})]
            assert again.post("t", "message", {"text": "next"}) == 2
        finally:
            again.close()

    def test_prune_keeps_the_inbox(self, store: Store) -> None:
        """Pruning checkpoints never drops messages."""
        create(store)
        for v in range(2, 6):
            state = {"task_id": "t", "version": v, "facts": {"n": v}}
            store.commit(
                "t", v - 1, state, Event(task_id="t", version=v, actor="runtime", action={})
            )
        store.post("t", "message", {"text": "hi"})
        store.prune("t", keep_last=1)
        assert [m.seq for m in store.inbox("t")] == [1]


class TestConcurrentPosts:
    def test_threads_posting_at_once_lose_and_repeat_nothing(self, store: Store) -> None:
        """8 threads x 25 posts: numbers 1..200, each message once, each thread's in order."""
        create(store)
        barrier = threading.Barrier(THREADS)
        returned: list[tuple[int, int, int]] = []
        lock = threading.Lock()

        def poster(worker: int) -> None:
            barrier.wait()
            for i in range(POSTS):
                seq = store.post("t", "message", {"worker": worker, "i": i})
                with lock:
                    returned.append((seq, worker, i))

        threads = [threading.Thread(target=poster, args=(w,)) for w in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        check_posts(store, returned, THREADS)


def _process_poster(url: str, worker: int, barrier: Any, results: Any) -> None:
    store = open_store(url)
    try:
        barrier.wait(timeout=60)
        returned = [
            (store.post("t", "message", {"worker": worker, "i": i}), worker, i)
            for i in range(POSTS)
        ]
    finally:
        store.close()
    results.put(returned)


@pytest.mark.parametrize("backend_url", sorted(URLS))
def test_processes_posting_at_once(backend_url: str, tmp_path: Path) -> None:
    """Two processes x 25 posts on one task: numbers 1..50, no message lost or repeated."""
    url = URLS[backend_url](tmp_path)
    store = open_store(url)
    create(store)
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_process_poster, args=(url, w, barrier, results)) for w in (0, 1)]
    try:
        for proc in procs:
            proc.start()
        returned = [item for _ in procs for item in results.get(timeout=120)]
        for proc in procs:
            proc.join(timeout=60)
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
                proc.join()
    assert [proc.exitcode for proc in procs] == [0, 0]
    check_posts(store, returned, 2)
    store.close()


def check_posts(store: Store, returned: list[tuple[int, int, int]], writers: int) -> None:
    """Every post got its own number, the inbox holds exactly the posts under them."""
    total = writers * POSTS
    assert sorted(seq for seq, _, _ in returned) == list(range(1, total + 1))
    messages = store.inbox("t")
    assert [m.seq for m in messages] == list(range(1, total + 1))
    by_seq = {m.seq: (m.body["worker"], m.body["i"]) for m in messages}
    assert {seq: (w, i) for seq, w, i in returned} == by_seq
    for worker in range(writers):
        mine = [i for _, (w, i) in sorted(by_seq.items()) if w == worker]
        assert mine == list(range(POSTS))  # one writer's posts keep their order
