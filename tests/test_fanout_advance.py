"""Child tasks on workers, without a broker: which messages a fan-out sends, and when
(``skillstate.workers.children``, through ``Advancer.advance`` on a SQLite store).

Real workers with kill -9 are in ``test_fanout_workers.py``.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from benchmarks.fanout import AGENTS, PARENT, parent

from skillstate import Runtime
from skillstate.effects import files
from skillstate.store.base import Store
from skillstate.store.sqlite import SQLiteStore
from skillstate.workers import Advancer, Message, WorkerSettings, children
from skillstate.workers.sweep import requeue_stranded, stranded


class Sent:
    """The enqueue callback: what was sent, and whether the parent's lease was held then."""

    def __init__(self, store: Store, parent_id: str = "P") -> None:
        self.store = store
        self.parent_id = parent_id
        self.messages: list[tuple[Message, bool]] = []

    def __call__(self, message: Message, countdown: float) -> None:
        self.messages.append((message, self.store.lease(self.parent_id) is not None))

    def to(self, task_id: str) -> list[Message]:
        return [m for m, _ in self.messages if m.task_id == task_id]

    def take(self) -> list[Message]:
        out = [m for m, _ in self.messages]
        self.messages.clear()
        return out


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    db = SQLiteStore(tmp_path / "state.db")
    yield db
    db.close()


def _advancer(store: Store) -> Advancer:
    settings = WorkerSettings(store_url=store.url, lease_ttl=5.0)
    return Advancer(store, settings, allowed=frozenset(AGENTS))


def _parent(store: Store, tmp_path: Path, items: int = 3, parts: int = 1) -> str:
    ledger = str(tmp_path / "ledger.txt")
    Runtime(parent, store).start("P", ledger=ledger, items=items, parts=parts, delay=0.0)
    return ledger


def _children(store: Store) -> list[str]:
    return [record.task_id for record in Runtime(parent, store).load("P").children]


def _joins(store: Store) -> int:
    return sum(e.action.get("kind") == "join" for e in store.events("P"))


def _spawned(store: Store, tmp_path: Path, sent: Sent, items: int = 3) -> str:
    ledger = _parent(store, tmp_path, items=items)
    outcome = _advancer(store).advance(Message("P", 1, "m1"), sent)
    assert outcome.kind == "waiting_children", outcome
    return ledger


def test_a_parent_slice_sends_each_child_a_message_under_its_lease(
    store: Store, tmp_path: Path
) -> None:
    sent = Sent(store)
    _spawned(store, tmp_path, sent)
    ids = _children(store)
    assert len(ids) == 3
    assert [(m.task_id, m.expected, held) for m, held in sent.messages] == [
        (child, store.load(child).version, True) for child in ids
    ]
    assert store.lease("P") is None
    assert Runtime(parent, store).load("P").status.value == "waiting_children"


def test_only_the_last_child_to_end_wakes_the_parent_and_the_join_runs_once(
    store: Store, tmp_path: Path
) -> None:
    sent = Sent(store)
    ledger = _spawned(store, tmp_path, sent)
    advancer = _advancer(store)
    messages = sent.take()
    for n, message in enumerate(messages, 1):
        outcome = advancer.advance(message, sent)
        assert outcome.kind == "completed", outcome
        assert len(sent.to("P")) == (n == len(messages))  # the wake, by the last one only
    [wake] = sent.take()
    assert wake.task_id == "P"
    assert advancer.advance(wake, sent).kind == "completed"
    assert _joins(store) == 1
    assert [line for _, line in files.entries(ledger) if line.startswith("join ")] == [
        "join 3/3 children completed, 3 part(s) fetched"
    ]
    version = store.load("P").version
    again = advancer.advance(wake, sent)  # a duplicate wake: the parent has moved on
    assert again.kind == "stale"
    assert (store.load("P").version, _joins(store)) == (version, 1)


def test_a_redelivery_that_finds_the_child_ended_wakes_the_parent(
    store: Store, tmp_path: Path
) -> None:
    """The child's worker was killed between its last commit and the wake."""
    sent = Sent(store)
    _spawned(store, tmp_path, sent)
    first = sent.take()
    runtime = Runtime(parent.children["item"].agent(parent, "item"), store)  # no worker: no wake
    for message in first:
        assert runtime.run(message.task_id).stopped == "completed"
    outcome = _advancer(store).advance(first[-1], sent)
    assert outcome.kind == "stale"
    assert [m.task_id for m in sent.take()] == ["P"]
    assert "woke parent P" in outcome.detail


def test_wakes_dropped_while_the_parent_was_held_are_made_up_after_release(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Children that end while the parent's slice still holds its lease send wakes that
    find it held; the parent's slice looks again once it has released."""
    _parent(store, tmp_path)
    advancer = _advancer(store)
    dispatch = children.dispatch
    dropped: list[str] = []

    def fast_children(store_: Store, parent_id: str, queue: str, enqueue: Any) -> Any:
        inner = Sent(store)
        result = dispatch(store_, parent_id, queue, inner)
        for message in inner.take():  # a fast worker runs each child at once
            assert advancer.advance(message, inner).kind == "completed"
        for wake in inner.take():  # the last child's wake: the parent is still held
            dropped.append(advancer.advance(wake, inner).kind)
        return result

    monkeypatch.setattr("skillstate.workers.advance.dispatch", fast_children)
    sent = Sent(store)
    outcome = advancer.advance(Message("P", 1, "m1"), sent)
    assert outcome.kind == "waiting_children"
    assert dropped == ["held"]
    [again] = sent.take()
    assert again.task_id == "P"
    assert "requeued for the join" in outcome.detail
    assert advancer.advance(again, sent).kind == "completed"
    assert _joins(store) == 1


def test_the_sweeper_sends_a_parent_whose_children_ended_a_message(
    store: Store, tmp_path: Path
) -> None:
    sent = Sent(store)
    _spawned(store, tmp_path, sent)
    first = sent.take()
    runtime = Runtime(parent.children["item"].agent(parent, "item"), store)
    for message in first[:-1]:
        runtime.run(message.task_id)
    # A child is still to run (its message will come): it alone looks stranded at a
    # threshold of 0 s, the parent does not.
    assert [task.task_id for task in stranded(store, 0.0)] == [first[-1].task_id]
    runtime.run(first[-1].task_id)  # ... and is lost
    assert stranded(store, 3600.0) == []  # not for long enough
    [found] = stranded(store, 0.0)
    assert (found.task_id, found.status, found.holder) == ("P", "waiting_children", None)
    assert "children ended" in found.describe()
    rescued: list[Message] = []
    [sent_to] = requeue_stranded(store, rescued.append, 0.0, queue="q")
    assert (sent_to.task_id, sent_to.version) == ("P", found.version)
    [message] = rescued
    assert message.after.startswith("sweeper@")
    assert _advancer(store).advance(message, sent).kind == "completed"
    assert _joins(store) == 1
    assert stranded(store, 0.0) == []


def test_a_parent_taken_over_from_a_dead_worker_dispatches_again(
    store: Store, tmp_path: Path
) -> None:
    """Killed after the spawn's commit, before its children's messages: the
    redelivered message takes the task over and sends them."""
    _parent(store, tmp_path)
    result = Runtime(parent, store, children="dispatch").run("P")
    assert result.stopped == "waiting_children"
    store.claim("P", f"m1@{socket.gethostname()}:999999999", 30)  # a dead process's lease
    sent = Sent(store)
    outcome = _advancer(store).advance(Message("P", 1, "m1"), sent)
    assert outcome.kind == "waiting_children"
    assert sorted(m.task_id for m, _ in sent.messages) == sorted(_children(store))
    errors = Runtime(parent, store).load("P").errors
    assert [e.kind for e in errors] == ["worker_lost"]


def test_a_child_kind_is_allowed_through_its_parent() -> None:
    advancer = Advancer(None, WorkerSettings(store_url=""), allowed=frozenset({PARENT}))  # type: ignore[arg-type]
    assert advancer.allows(f"{PARENT}#children.item")
    assert not advancer.allows("elsewhere:agent#children.item")
    assert not advancer.allows(None)


def _pump(advancer: Advancer, sent: Sent, first: Message, limit: int = 100) -> list[str]:
    """Deliver ``first`` and every message it leads to, in order, as one worker would."""
    queue, kinds = [first], []
    while queue:
        assert len(kinds) < limit, kinds
        kinds.append(advancer.advance(queue.pop(0), sent).kind)
        queue += sent.take()
    return kinds


def test_a_failed_child_retried_and_a_skill_kind_through_the_advancer(store: Store) -> None:
    """``tests.fanout_agent``: a failed child is joined as data, the policy spawns its key
    again (a second round of children, dispatched and joined the same way); a skill kind
    (``Child(skill)``, imported as ``parent#children.measure``) runs on the worker too."""
    from tests import fanout_agent

    refs = frozenset({"tests.fanout_agent:parent", "tests.fanout_agent:channel_agent"})
    advancer = Advancer(store, WorkerSettings(store_url=store.url), allowed=refs)
    runtime = Runtime(fanout_agent.parent, store)
    runtime.start("Q", channels=["a", "bb"], bad=["bb"], on_failure="retry")
    runtime.start("T", texts=["x", "yy"])
    kinds = _pump(advancer, Sent(store, "Q"), Message("Q", 1, "q1"))
    assert kinds.count("waiting_children") == 2  # the spawn, then the retry's
    assert kinds[-1] == "completed"
    q = runtime.load("Q")
    assert [(r.key, r.status) for r in q.children] == [
        ("a", "completed"), ("bb", "failed"), ("bb", "completed"),
    ]  # fmt: skip
    assert q.report == "a=1, bb=2"
    assert sum(e.action.get("kind") == "join" for e in store.events("Q")) == 2
    kinds = _pump(advancer, Sent(store, "T"), Message("T", 1, "t1"))
    assert kinds[-1] == "completed"
    t = runtime.load("T")
    assert [r.status for r in t.children] == ["completed", "completed"]
    assert store.load(t.children[0].task_id).state["agent"] == (
        "tests.fanout_agent:parent#children.measure"
    )
    assert "x:1" in t.report


def test_requeue_of_a_waiting_parent_sends_its_children_again(store: Store, tmp_path: Path) -> None:
    """``skillstate requeue P`` (a message at the head's version): the children nobody
    holds get a message again, those held or ended do not."""
    _parent(store, tmp_path)
    assert Runtime(parent, store, children="dispatch").run("P").stopped == "waiting_children"
    ids = _children(store)
    Runtime(parent.children["item"].agent(parent, "item"), store).run(ids[0])  # ended
    store.claim(ids[1], "m9@elsewhere:1", 30)  # a live worker on it
    sent = Sent(store)
    outcome = _advancer(store).advance(Message("P", store.load("P").version), sent)
    assert (outcome.kind, outcome.detail) == ("waiting_children", "1 child message(s) sent")
    assert [m.task_id for m, _ in sent.messages] == [ids[2]]


def test_a_cancelled_parent_sends_its_cancel_on_to_the_children(
    store: Store, tmp_path: Path
) -> None:
    """The cancel's commit posts a cancel to each unfinished child; the worker that took
    it sends those children a message, so they stop now, not whenever they next run."""
    sent = Sent(store)
    _spawned(store, tmp_path, sent)
    ids = _children(store)
    sent.take()  # the children's first messages: lost, say (nobody runs them)
    Runtime(parent, store).cancel("P", reason="not needed")
    advancer = _advancer(store)
    outcome = advancer.advance(Message("P", store.load("P").version, "m2"), sent)
    assert outcome.kind == "cancelled", outcome
    assert "sent the cancel on to 3 child task(s)" in outcome.detail
    messages = sent.take()
    assert sorted(m.task_id for m in messages) == sorted(ids)
    for message in messages:
        assert advancer.advance(message, sent).kind == "cancelled"
    assert {store.load(c).state["status"] for c in ids} == {"cancelled"}
    assert sent.take() == []  # the parent ended: nobody to wake
