"""A person's change killed at any instant leaves the task before it or after it.

A child process runs ``set``, ``rollback`` and ``fork`` in a loop on one task,
writing ``start N OP`` before each operation and ``done N`` after it. The test
kills it with SIGKILL at random instants once it has seen progress, and counts the
kills that landed *inside* an operation (after its ``start``, before its ``done``).
After each kill: ``doctor`` finds every task healthy, and the interrupted operation
either happened whole or not at all (a ``set``'s value is the old one or the new
one; a fork exists complete or not at all). On every backend.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from skillstate import Runtime
from skillstate.engine.doctor import diagnose
from skillstate.errors import TaskNotFound
from skillstate.examples import ledger
from skillstate.store import open_store
from tests.contract.backends import (
    drop_postgres_schemas,
    drop_redis_data,
    postgres_url_for,
    redis_url_for,
)

KILLS = 8
MIN_INSIDE = 3
URLS: dict[str, Callable[[Path], str]] = {
    "sqlite": lambda tmp: f"sqlite:///{tmp / 'state.db'}",
    "file": lambda tmp: f"file://{tmp / 'files'}",
    "postgres": postgres_url_for,
    "redis": redis_url_for,
}

CHILD = """
import sys
from skillstate.engine.edits import set_fields
from skillstate.engine.rewind import fork_task, rollback_task
from skillstate.examples import ledger
from skillstate.store import open_store

url, first = sys.argv[1], int(sys.argv[2])
store = open_store(url)
agent = ledger.agent
for n in range(first, first + 100_000):
    op = ("set", "rollback", "fork")[n % 3]
    before = store.load("L").state["facts"].get("n")
    print(f"start {n} {op} {before}", flush=True)
    if op == "set":
        set_fields(store, agent, "L", {"facts.n": n})
    elif op == "rollback":
        head = store.load("L").version
        rollback_task(store, "L", head - 1, effects="keep")
    else:
        fork_task(store, agent, "L", store.load("L").version, f"F{n}", effects="keep")
    print(f"done {n}", flush=True)
"""


@pytest.fixture(autouse=True)
def _cleanup() -> Iterator[None]:
    yield
    drop_postgres_schemas()
    drop_redis_data()


@pytest.mark.parametrize("backend", sorted(URLS))
def test_kills_inside_set_rollback_and_fork_leave_before_or_after(
    backend: str, tmp_path: Path
) -> None:
    """SIGKILL at random instants inside human operations: every task stays consistent."""
    url = URLS[backend](tmp_path)
    seed = int(os.environ.get("SKILLSTATE_CRASH_SEED", time.time_ns() % 1_000_000))
    print(f"human-crash seed {seed} ({backend})")
    rng = random.Random(seed)
    store = open_store(url)
    Runtime(ledger.agent, store).run("L", create=True)  # a completed 10-entry ledger task to edit
    inside = 0
    first = 0
    for kill in range(KILLS):
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, url, str(first)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        lines: list[str] = []
        wanted = rng.randint(2, 12)  # operations to see completed before aiming the kill
        deadline = time.monotonic() + 120
        while sum(1 for line in lines if line.startswith("done")) < wanted:
            line = child.stdout.readline()
            if not line:
                error = child.stderr.read()[-500:] if child.stderr else ""
                pytest.fail(f"the child stopped early: {error}")
            lines.append(line.strip())
            assert time.monotonic() < deadline, "no progress from the child"
        # The child now runs operations back to back: a short random delay lands most
        # kills inside one (how many is counted below, not assumed).
        time.sleep(rng.uniform(0, 0.02))
        child.send_signal(signal.SIGKILL)
        rest, _ = child.communicate(timeout=60)
        lines += [line.strip() for line in rest.splitlines() if line.strip()]
        started = [line.split() for line in lines if line.startswith("start")]
        _, number, last_op, before = started[-1]
        last_n = int(number)
        interrupted = f"done {last_n}" not in lines
        inside += interrupted
        _check(store, last_n, last_op, interrupted, before)
        first = last_n + 1
        print(f"kill {kill}: {'inside' if interrupted else 'between'} {last_op} {last_n}")
    store.close()
    assert inside >= MIN_INSIDE, f"only {inside} of {KILLS} kills landed inside an operation"


def _check(store: object, n: int, op: str, interrupted: bool, before: str) -> None:
    """Every task is healthy; the last operation happened whole or not at all."""
    from skillstate.store.base import Store

    assert isinstance(store, Store)
    for task_id in store.tasks():
        report = diagnose(store, task_id, ledger.agent)
        assert report.healthy, (task_id, report.damage)
    head = store.load("L").state
    if op == "set" and interrupted:
        assert str(head["facts"].get("n")) in (before, str(n))  # the old value or the new one
    if op == "fork":
        try:
            forked = store.load(f"F{n}")
        except TaskNotFound:
            assert interrupted  # a completed fork always exists
        else:
            assert forked.version == 1
            assert forked.state["task_id"] == f"F{n}"
