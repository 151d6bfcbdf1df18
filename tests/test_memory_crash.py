"""Memory writes across ``kill -9``, and writers racing on one scope, in real processes.

**Crashes.** A child process runs a task of :mod:`tests.memory_agent` and SIGKILLs
itself at a chosen instant (no timing involved: the kill is in the code path):

* ``after_commit``: the step that remembered is committed (its outbox holds the
  write), nothing has reached the memory record;
* ``after_record``: the record has the write, the card's outbox was not emptied.

``skillstate resume`` in a new process then finishes the task, and the scope holds
exactly one fact from it, written by exactly one event.

**Races.** Four processes run tasks at once, each task remembering its own key in
the same scope: every task completes and every fact lands, one record version each.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from skillstate.memory import load_memory, record_id
from skillstate.store import open_store
from tests import memory_agent
from tests.contract.backends import URLS, drop_postgres_schemas, drop_redis_data

ROOT = Path(__file__).resolve().parent.parent
SCOPE = memory_agent.SCOPE
TASK = "crash-1"


@pytest.fixture(autouse=True)
def _cleanup() -> Iterator[None]:
    yield
    drop_postgres_schemas()
    drop_redis_data()


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("SKILLSTATE_STORE", None)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _child(url: str, kill: str) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "tests.memory_agent", url, TASK, kill]
    return _completed(args)


def _resume(url: str) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "skillstate", "resume", TASK]
    args += ["--agent", "tests.memory_agent:agent", "--store", url, "-q"]
    return _completed(args)


def _completed(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=120, check=False
    )


Backend = Callable[[Path], str]


@pytest.mark.parametrize("kill", ["after_commit", "after_record"])
@pytest.mark.parametrize("backend", sorted(URLS))
def test_kill_9_around_the_memory_write_then_resume_gives_exactly_one_fact(
    backend: str, kill: str, tmp_path: Path
) -> None:
    url = URLS[backend](tmp_path)
    killed = _child(url, kill)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    store = open_store(url)
    try:
        head = store.load(TASK).state
        assert [e["key"] for e in head["memory_outbox"]] == ["preferred_carrier"]
        facts = load_memory(store, SCOPE).facts
        assert len(facts) == (0 if kill == "after_commit" else 1)
    finally:
        store.close()

    resumed = _resume(url)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    store = open_store(url)
    try:
        head = store.load(TASK).state
        assert head["status"] == "completed"
        assert head["memory_outbox"] == []
        (fact,) = load_memory(store, SCOPE).facts
        assert (fact.key, fact.value, fact.provenance) == ("preferred_carrier", "DHL", f"{TASK}@2")
        writes = [
            e
            for e in store.events(record_id(SCOPE))
            if e.action["kind"] == "remember" and e.action["task"] == TASK
        ]
        assert len(writes) == 1
        flushes = [e.action for e in store.events(TASK) if e.action["kind"] == "memory_flush"]
        written = {SCOPE: 1} if kill == "after_commit" else {SCOPE: None}
        assert flushes == [{"kind": "memory_flush", "scopes": written, "resumed": True}]
    finally:
        store.close()


WORKERS = 4
TASKS = 5


@pytest.mark.parametrize("backend", sorted(URLS))
def test_processes_racing_on_one_scope_every_task_completes_and_every_fact_lands(
    backend: str, tmp_path: Path
) -> None:
    url = URLS[backend](tmp_path)
    open_store(url).close()  # created once, before the racers open it
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(WORKERS), ctx.Queue()
    procs = [
        ctx.Process(target=memory_agent.race, args=(url, w, TASKS, barrier, results))
        for w in range(WORKERS)
    ]
    try:
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(timeout=300)
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
                proc.join()
    assert [proc.exitcode for proc in procs] == [0] * WORKERS
    completed = sum(results.get(timeout=5) for _ in procs)
    store = open_store(url)
    try:
        memory = load_memory(store, SCOPE)
        events = store.events(record_id(SCOPE))
    finally:
        store.close()
    print(f"{backend}: {completed} tasks completed, {len(memory.facts)} facts written")
    assert completed == WORKERS * TASKS
    assert sorted(f.key for f in memory.facts) == sorted(
        f"carrier-w{w}-{i}" for w in range(WORKERS) for i in range(TASKS)
    )
    assert memory.version == len(events) == WORKERS * TASKS
