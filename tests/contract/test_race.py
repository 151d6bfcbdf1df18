"""The race, on every backend processes can share: 4 processes × 200 commits on one task.

Each process loads the head, appends its own ``(worker, i)`` to the state, and
commits; on ``StaleState`` it reloads and tries again. Whatever the interleaving,
every step must land exactly once, no version may be missing, and every version
must rebuild from its delta chain to what its own event says it wrote.
"""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any

import pytest

from skillstate.errors import StaleState
from skillstate.events import Event
from skillstate.state.diff import make_patch
from skillstate.store import open_store
from tests.contract.backends import URLS

WORKERS = 4
STEPS = 200
TASK = "race"


def _worker(url: str, worker: int, barrier: Any, results: Any) -> None:
    store = open_store(url)
    retries = 0
    try:
        barrier.wait(timeout=60)
        for i in range(STEPS):
            while True:
                head = store.load(TASK)
                version = head.version + 1
                state = {**head.state, "version": version, "last": [worker, i]}
                state["log"] = [*head.state["log"], f"{worker}:{i}"]
                event = Event(
                    task_id=TASK,
                    version=version,
                    actor="runtime",
                    action={"kind": "race", "worker": worker, "i": i},
                    patch=make_patch(head.state, state),
                )
                try:
                    store.commit(TASK, head.version, state, event)
                    break
                except StaleState:
                    retries += 1
    finally:
        store.close()
    results.put(retries)


@pytest.mark.parametrize("backend", sorted(URLS))
def test_processes_racing_on_one_task(backend: str, tmp_path: Path) -> None:
    """4 processes x 200 commits: every step applied exactly once, no version lost."""
    url = URLS[backend](tmp_path)
    store = open_store(url)
    first = {"task_id": TASK, "version": 1, "log": [], "last": None}
    store.commit(TASK, 0, first, Event(task_id=TASK, version=1, actor="runtime", action={}))
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(WORKERS), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(url, w, barrier, results)) for w in range(WORKERS)]
    try:
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(timeout=240)
    finally:
        for proc in procs:
            if proc.is_alive():  # a hung worker must not outlive the test
                proc.terminate()
                proc.join()
    assert [proc.exitcode for proc in procs] == [0] * WORKERS
    retries = sum(results.get(timeout=5) for _ in procs)
    print(f"{backend}: {retries} stale commits retried")

    head = store.load(TASK)
    assert head.version == 1 + WORKERS * STEPS
    events = store.events(TASK)
    assert [e.version for e in events] == list(range(1, head.version + 1))
    steps = [(e.action["worker"], e.action["i"]) for e in events[1:]]
    assert sorted(steps) == [(w, i) for w in range(WORKERS) for i in range(STEPS)]
    assert head.state["log"] == [f"{w}:{i}" for w, i in steps]  # state order = commit order
    assert [c.version for c in store.checkpoints(TASK)] == list(range(1, head.version + 1))
    for e in events[1::23]:
        assert store.checkpoint(TASK, e.version).state["last"] == [
            e.action["worker"],
            e.action["i"],
        ]
    store.close()
