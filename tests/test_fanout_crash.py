"""A parent killed with SIGKILL mid-fan-out, then resumed: nothing spawned twice.

The parent runs in a subprocess that registers a fan-out hook
(:mod:`skillstate.fanout.hooks`) which writes a marker file and blocks: the test
waits for the marker (observed, not slept), checks the store is at the instant it
aims at, kills the process, and resumes the task in its own process. Two instants:

* between the spawn's commit and the children's creation (the hook blocks before
  the second child is created: one child exists, the others do not yet);
* during the join (every child has ended; the join's commit is not written).

Either way the resumed parent completes with every child created once, one spawn
and one join, and each child's skill run once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from skillstate import Runtime
from skillstate.store import open_store
from skillstate.store.base import Store
from tests.fanout_agent import PROBE, parent

ROOT = Path(__file__).resolve().parents[1]
DEADLINE = 120.0
"""How long the subprocess may take to reach the hook (interpreter start-up under load)."""
CHANNELS = ["email", "web", "chat", "phone"]

SCRIPT = """
import pathlib, sys, time
sys.path.insert(0, {root!r})
from skillstate import Runtime
from skillstate.fanout import hooks
from skillstate.store import open_store
from tests.fanout_agent import parent

point, nth, marker, url = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
seen = []

def block(task_id):
    seen.append(task_id)
    if len(seen) == nth:
        pathlib.Path(marker).write_text(task_id)
        while True:  # the test kills the process here
            time.sleep(1)

hooks.HOOKS[point].append(block)
Runtime(parent, open_store(url)).run("p")
raise SystemExit("the hook never blocked")
"""


def _kill_at(tmp_path: Path, url: str, point: str, nth: int) -> str:
    """Run the parent in a subprocess until hook ``point`` fires the ``nth`` time, then
    SIGKILL it there; returns the task id the hook was given."""
    script = tmp_path / "victim.py"
    script.write_text(SCRIPT.format(root=str(ROOT)))
    marker = tmp_path / f"{point}.marker"
    log = tmp_path / f"{point}.log"
    with log.open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, str(script), point, str(nth), str(marker), url],
            cwd=ROOT,
            stderr=stderr,
        )
    try:
        deadline = time.monotonic() + DEADLINE
        while not marker.exists():
            if process.poll() is not None:
                pytest.fail(f"victim exited early: {log.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"the {point} hook did not fire within {DEADLINE} s")
            time.sleep(0.01)
        os.kill(process.pid, signal.SIGKILL)
        assert process.wait(timeout=30) == -signal.SIGKILL
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return marker.read_text()


def _kinds(store: Store, task_id: str) -> list[str]:
    return [str(e.action.get("kind")) for e in store.events(task_id)]


def _children(store: Store) -> list[str]:
    return sorted(t for t in store.tasks() if t.startswith("p."))


@pytest.fixture
def url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    store = open_store(url)
    Runtime(parent, store).start("p", channels=CHANNELS)
    store.close()
    return url


def _resume_and_check(url: str) -> None:
    PROBE.reset()
    store = open_store(url)
    try:
        result = Runtime(parent, store).run("p")
        assert result.stopped == "completed", result.state.errors
        expected = sorted(f"p.2.{c}" for c in CHANNELS)
        assert _children(store) == expected  # every child exists, once
        for task in expected:
            assert _kinds(store, task).count("create") == 1
            assert store.load(task).state["status"] == "completed"
        kinds = _kinds(store, "p")
        assert kinds.count("map") == 1
        assert kinds.count("join") == 1
        assert [r.status for r in result.state.children] == ["completed"] * len(CHANNELS)
    finally:
        store.close()


def test_kill_between_the_spawn_commit_and_the_children(tmp_path: Path, url: str) -> None:
    blocked = _kill_at(tmp_path, url, "create", 2)
    assert blocked == "p.2.web"  # the second child, about to be created
    store = open_store(url)
    try:
        head = store.load("p").state
        assert head["status"] == "waiting_children"  # the spawn's commit is in
        assert _kinds(store, "p") == ["create", "map"]
        assert _children(store) == ["p.2.email"]  # one created, the rest not yet
    finally:
        store.close()
    _resume_and_check(url)
    # The resumed process ran the children: the victim never got to run one.
    assert sorted(PROBE.calls) == sorted(CHANNELS)


def test_kill_during_the_join(tmp_path: Path, url: str) -> None:
    blocked = _kill_at(tmp_path, url, "join", 1)
    assert blocked == "p"
    store = open_store(url)
    try:
        assert store.load("p").state["status"] == "waiting_children"  # not joined yet
        assert "join" not in _kinds(store, "p")
        assert all(store.load(t).state["status"] == "completed" for t in _children(store))
    finally:
        store.close()
    _resume_and_check(url)
    assert PROBE.calls == []  # every child had ended: the resumed run only joined
