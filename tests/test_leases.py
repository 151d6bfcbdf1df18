"""Leases that cannot lapse under a live worker, fencing tokens, and a lease by default.

Reproduced before:
* With the CLI's TTL of 60 s, an effect slower than the TTL ran twice: the ledger
  demo with ``--step-delay 200`` and a second ``resume`` after 75 s both appended
  "entry 1" (nobody renewed the lease while the step ran).
* ``Runtime(agent, store)`` as in the README took no lease: eight processes stepping
  one ledger task through the API ran effects again under the same key (61 to 194
  duplicates per backend) and the task never completed.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from skillstate import Runtime
from skillstate.effects import files
from skillstate.engine.lease import Holder
from skillstate.errors import Conflict, LeaseHeld, LeaseLost
from skillstate.examples import ledger
from skillstate.store import open_store
from skillstate.store.base import Store
from tests.contract.backends import (
    drop_postgres_schemas,
    drop_redis_data,
    postgres_url_for,
    redis_url_for,
)

URLS: dict[str, Callable[[Path], str]] = {
    "sqlite": lambda tmp: f"sqlite:///{tmp / 'state.db'}",
    "file": lambda tmp: f"file://{tmp / 'files'}",
    "postgres": postgres_url_for,
    "redis": redis_url_for,
}


@pytest.fixture(autouse=True)
def _cleanup() -> Iterator[None]:
    yield
    drop_postgres_schemas()
    drop_redis_data()


@pytest.fixture(params=sorted(URLS))
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return URLS[request.param](tmp_path)


def wait_for(condition: Callable[[], bool], what: str, deadline: float = 60.0) -> None:
    """Poll until ``condition`` holds (observed progress, never a fixed sleep)."""
    end = time.monotonic() + deadline
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def ledger_lines(path: Path) -> list[str]:
    return [line for _, line in files.entries(path)]


def test_the_api_holds_a_lease_by_default(tmp_path: Path) -> None:
    """Runtime(agent, store) claims the task while it works; lease=False opts out."""
    store = open_store(f"sqlite:///{tmp_path / 'state.db'}")
    seen: list[object] = []
    runtime = Runtime(ledger.agent, store, observer=lambda r: seen.append(store.lease("L")))
    runtime.start("L", target=2, ledger=str(tmp_path / "ledger.txt"))
    runtime.run("L")
    assert seen
    assert all(lease is not None and lease.worker == runtime.worker for lease in seen)
    after = store.lease("L")
    assert after is None or after.expires_at.timestamp() <= time.time()  # released
    unleased = Runtime(ledger.agent, store, lease=False)
    unleased.start("M", target=1, ledger=str(tmp_path / "ledger.txt"))
    unleased.run("M")
    assert store.lease("M") is None
    store.close()


def test_a_slow_effect_keeps_its_lease_and_runs_once(url: str, tmp_path: Path) -> None:
    """An effect that outlasts the TTL: the heartbeat renews it, a second worker is held off."""
    store = open_store(url)
    path = tmp_path / "ledger.txt"
    gate = threading.Event()
    started = threading.Event()
    original = ledger.append_line

    def slow(path: str, line: str, key: str) -> str:
        started.set()
        gate.wait(60)
        return original(path, line, key)

    ledger.agent.tools = {"append_line": slow}  # type: ignore[misc]
    try:
        first = Runtime(ledger.agent, store, worker="first", lease_ttl=3.0)
        first.start("L", target=1, ledger=str(path))
        done: list[object] = []
        thread = threading.Thread(target=lambda: done.append(first.run("L")), daemon=True)
        thread.start()
        assert started.wait(60), "the effect never started"
        lease = store.lease("L")
        assert lease is not None
        expires = [lease.expires_at]

        def renewed_past_the_first_expiry() -> bool:
            now = store.lease("L")
            if now is not None and now.expires_at != expires[-1]:
                expires.append(now.expires_at)
            # Without the heartbeat the first claim would have expired by now.
            return (expires[-1] - expires[0]).total_seconds() >= 3.0

        wait_for(renewed_past_the_first_expiry, "heartbeats past the TTL")
        second = Runtime(ledger.agent, open_store(url), worker="second", lease_ttl=3.0)
        with pytest.raises(LeaseHeld, match="first"):
            second.run("L")
        gate.set()
        thread.join(timeout=60)
    finally:
        ledger.agent.tools = {"append_line": original}  # type: ignore[misc]
        gate.set()
        store.close()
    assert done
    assert done[0].stopped == "completed"  # type: ignore[attr-defined]
    assert ledger_lines(path) == ["entry 1"]


def test_a_worker_taken_over_cannot_commit_and_its_effect_is_not_repeated(
    url: str, tmp_path: Path
) -> None:
    """Taken over mid-effect: the old worker's settle is fenced off, the new one probes."""
    store = open_store(url)
    path = tmp_path / "ledger.txt"
    original = ledger.append_line

    def then_taken_over(path: str, line: str, key: str) -> str:
        result = original(path, line, key)
        store.force_release("L")  # the lease "expired" while the worker was frozen...
        Holder(store, "L", "second", 60, heartbeat=False).acquire()  # ...and was taken
        return result

    ledger.agent.tools = {"append_line": then_taken_over}  # type: ignore[misc]
    try:
        first = Runtime(ledger.agent, store, worker="first")
        first.start("L", target=1, ledger=str(path))
        with pytest.raises(LeaseLost):
            first.run("L")
        head = store.load("L").state
        assert head["pending_effect"] is not None  # nothing after the takeover was written
    finally:
        ledger.agent.tools = {"append_line": original}  # type: ignore[misc]
    result = Runtime(ledger.agent, store, worker="second").run("L")
    assert result.stopped == "completed"
    assert ledger_lines(path) == ["entry 1"]
    settled = [e for e in store.events("L") if e.action["kind"] == "effect_resumed"]
    assert settled[0].action["found_by_probe"] is True
    store.close()


def _api_worker(url: str, ledger_path: str, attempts: int, results: object) -> None:
    """One of eight processes: run the task through the API until it is done."""
    store = open_store(url)
    runtime = Runtime(ledger.agent, store, lease_ttl=5)
    outcome = "gave up"
    for _ in range(attempts):
        try:
            if runtime.run("L").stopped == "completed":
                outcome = "completed"
                break
        except Conflict:  # another worker holds the task (or committed first): wait
            time.sleep(0.05)
    store.close()
    results.put((os.getpid(), outcome))  # type: ignore[attr-defined]


@pytest.mark.parametrize("backend", ["sqlite", "file", "postgres", "redis"])
def test_eight_api_workers_on_one_task_run_each_entry_once(backend: str, tmp_path: Path) -> None:
    """8 processes x Runtime(agent, store).run on one ledger task: each entry once, completed."""
    url = URLS[backend](tmp_path)
    path = tmp_path / "ledger.txt"
    setup = open_store(url)
    Runtime(ledger.agent, setup).start("L", target=12, ledger=str(path))
    setup.close()
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    workers = [
        context.Process(target=_api_worker, args=(url, str(path), 400, results)) for _ in range(8)
    ]
    for worker in workers:
        worker.start()
    outcomes = [results.get(timeout=300) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
    assert all(outcome == "completed" for _, outcome in outcomes), outcomes
    assert ledger_lines(path) == [f"entry {n}" for n in range(1, 13)]
    store: Store = open_store(url)
    assert store.load("L").state["status"] == "completed"
    store.close()
