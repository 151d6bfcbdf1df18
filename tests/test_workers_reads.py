"""What one message reads and writes in the store (issue 30), and the judgements that the
fewer reads must keep (``skillstate.workers.advance``).

A message for a task another message's worker holds is judged on the lease alone; the
head a slice reads under the lease before its run is read as stored (the run's own
read checks and parses it); a task the slice ended with no parent is not read again
for a wake. The races those reads cover are played here: a task that ends or moves on
between the judging read and the claim.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from skillstate import Runtime
from skillstate.examples import ledger
from skillstate.store.base import Lease, Store
from skillstate.store.sqlite import SQLiteStore
from skillstate.workers import Advancer, Message, WorkerSettings


class Counting:
    """A store that counts the calls a message makes; ``before_claim`` runs once, just
    before the first claim (what another process did between judging and claiming)."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()
        self.before_claim: Callable[[], None] | None = None

    def __getattr__(self, name: str) -> Any:
        found = getattr(self.inner, name)
        if not callable(found):
            return found

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return found(*args, **kwargs)

        return call

    def claim(self, task_id: str, worker: str, ttl: float) -> Lease:
        self.calls["claim"] += 1
        hook, self.before_claim = self.before_claim, None
        if hook is not None:
            hook()
        return self.inner.claim(task_id, worker, ttl)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    db = SQLiteStore(tmp_path / "state.db")
    yield db
    db.close()


def _task(store: Store, tmp_path: Path, task_id: str = "t1") -> None:
    Runtime(ledger.agent, store).start(task_id, ledger=str(tmp_path / "l.txt"), target=2)


def _advancer(store: Any) -> Advancer:
    settings = WorkerSettings(store_url="sqlite://", lease_ttl=5.0, sweep_every=0)
    return Advancer(store, settings, allowed=frozenset({"skillstate.examples.ledger:agent"}))


def _sent() -> tuple[list[Message], Callable[[Message, float], None]]:
    sent: list[Message] = []
    return sent, lambda message, countdown: sent.append(message)


def test_a_held_task_is_judged_on_its_lease_alone(store: SQLiteStore, tmp_path: Path) -> None:
    """A duplicate for a task another message's worker holds: one read, nothing sent."""
    _task(store, tmp_path)
    store.claim("t1", "other-message@elsewhere:1", 30)
    counting = Counting(store)
    sent, enqueue = _sent()
    outcome = _advancer(counting).advance(Message("t1", 1, "mine"), enqueue)
    assert outcome.kind == "held"
    assert dict(counting.calls) == {"lease": 1}
    assert sent == []


def test_a_finished_slice_reads_no_head_after_it(store: SQLiteStore, tmp_path: Path) -> None:
    """A task with no parent, ended by the slice: no wake is due, its head is not read
    again; the lease is released and the task completed once."""
    _task(store, tmp_path)
    counting = Counting(store)
    sent, enqueue = _sent()
    outcome = _advancer(counting).advance(Message("t1", 1, "m1"), enqueue)
    assert (outcome.kind, outcome.steps) == ("completed", 3)
    assert (outcome.ended_here, outcome.parent) == (True, None)
    assert store.lease("t1") is None
    assert store.load("t1").state["status"] == "completed"
    assert sent == []
    assert counting.calls["claim"] == 1
    assert counting.calls["release"] == 1
    assert counting.calls["lease"] == 1
    # The judging read and the one under the lease, then the run's own: none after it.
    plain = Counting(store)
    _task(store, tmp_path, "t2")
    Runtime(ledger.agent, plain).run("t2")
    assert counting.calls["load"] == plain.calls["load"] + 2


def test_a_task_that_ended_before_the_claim_is_stale(store: SQLiteStore, tmp_path: Path) -> None:
    """Judged running, completed by someone else before this worker's claim: found
    ended under the lease, nothing written, the message is stale."""
    _task(store, tmp_path)
    counting = Counting(store)
    counting.before_claim = lambda: Runtime(ledger.agent, store, worker="cli:1").run("t1")
    sent, enqueue = _sent()
    outcome = _advancer(counting).advance(Message("t1", 1, "m1"), enqueue)
    version = store.load("t1").version
    assert (outcome.kind, outcome.version, outcome.steps) == ("stale", version, 0)
    assert store.load("t1").state["status"] == "completed"
    assert store.lease("t1") is None
    assert sent == []


def test_a_task_that_advanced_before_the_claim_runs_on(store: SQLiteStore, tmp_path: Path) -> None:
    """Judged at version 1, moved on (still running) before the claim: the slice runs
    it to its end from where it is, each entry once."""
    _task(store, tmp_path)
    counting = Counting(store)
    counting.before_claim = lambda: Runtime(ledger.agent, store, worker="cli:1").step("t1")
    sent, enqueue = _sent()
    outcome = _advancer(counting).advance(Message("t1", 1, "m1"), enqueue)
    assert outcome.kind == "completed"
    lines = (tmp_path / "l.txt").read_text().splitlines()
    assert len(lines) == 2
    assert len(set(lines)) == 2
    assert sent == []


def test_warm_imports_the_agents_before_any_message(
    store: SQLiteStore, caplog: pytest.LogCaptureFixture
) -> None:
    """``serve`` warms its advancer: the ``--agent`` agents are imported before the first
    message; one that does not import is logged, and the others are still there."""
    good, bad = "skillstate.examples.ledger:agent", "no_such_module_here:agent"
    settings = WorkerSettings(store_url="sqlite://", agents=frozenset({good, bad}), sweep_every=0)
    advancer = Advancer(store, settings)
    with caplog.at_level("WARNING", logger="skillstate.workers"):
        advancer.warm()
    assert advancer._agents[good] is ledger.agent
    assert bad not in advancer._agents
    assert any(bad in record.getMessage() for record in caplog.records)
    assert advancer.allows(good)
    assert not advancer.allows(None)
