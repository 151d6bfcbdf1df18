"""Shared writes across ``kill -9``, in real processes, on every backend.

A child process runs a task of :mod:`tests.shared_agent` that stops dead at a chosen
instant (it writes a marker file and waits forever; the test ``kill -9``\\ s it once
the marker is there, so the kill lands exactly at that instant, no timing involved):

* ``in_skill``: the skill asked for its write; nothing is committed;
* ``before_record``: the step is committed with the write pending on the card, the
  record does not have it;
* ``after_record``: the record has the write, the card still has it pending.

``skillstate resume`` in a new process then finishes the task: the note is in the
record exactly once, written by exactly one event. And when another task wrote the
record while the writer lay dead, the resumed writer finds it moved, undoes its step
and writes again on the new version: both notes, once each.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from skillstate import Runtime, open_store
from skillstate.shared import load_record, record_id
from tests import shared_agent
from tests.contract.backends import URLS, drop_postgres_schemas, drop_redis_data

ROOT = Path(__file__).resolve().parent.parent
TASK = "writer"
RID = record_id("case", "C-1")


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


def _killed_at(url: str, block: str, where: Path) -> None:
    """Run the writer until it stops dead at ``block``, then ``kill -9`` it."""
    args = [sys.executable, "-m", "tests.shared_agent", url, TASK, "mine", block, str(where)]
    proc = subprocess.Popen(
        args, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    marker = where / block
    deadline = time.monotonic() + 120
    try:
        while not marker.exists():  # observed progress: the process is at the instant
            if proc.poll() is not None or time.monotonic() > deadline:
                __, err = proc.communicate(timeout=10)
                pytest.fail(
                    f"the writer never reached {block} (rc {proc.returncode}): {err[-2000:]}"
                )
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None
        assert proc.stderr is not None
        proc.stdout.close()
        proc.stderr.close()


def _resume(url: str) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "skillstate", "resume", TASK]
    args += ["--agent", "tests.shared_agent:agent", "--store", url, "-q"]
    return subprocess.run(
        args, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.parametrize("block", ["in_skill", "before_record", "after_record"])
@pytest.mark.parametrize("backend", sorted(URLS))
def test_kill_9_around_the_shared_write_then_resume_applies_it_exactly_once(
    backend: str, block: str, tmp_path: Path
) -> None:
    url = URLS[backend](tmp_path)
    _killed_at(url, block, tmp_path)
    store = open_store(url)
    try:  # the kill landed where claimed
        pending = store.load(TASK).state["shared_pending"]
        assert len(pending) == (0 if block == "in_skill" else 1)
        assert load_record(store, "case", "C-1").version == (1 if block == "after_record" else 0)
    finally:
        store.close()

    resumed = _resume(url)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    store = open_store(url)
    try:
        head = store.load(TASK).state
        assert head["status"] == "completed"
        assert head["shared_pending"] == []
        record = load_record(store, "case", "C-1")
        assert (record.version, record.value["notes"]) == (1, ["mine"])
        (write,) = store.events(RID)
        assert write.action["task"] == TASK
        flushes = [e.action for e in store.events(TASK) if e.action["kind"] == "shared_flush"]
        assert len(flushes) == 1
        assert flushes[0].get("resumed", False) == (block != "in_skill")
        assert not [e for e in store.events(TASK) if e.action["kind"] == "shared_conflict"]
    finally:
        store.close()


@pytest.mark.parametrize("backend", sorted(URLS))
def test_a_record_moved_while_the_writer_lay_dead_is_a_conflict_on_resume(
    backend: str, tmp_path: Path
) -> None:
    url = URLS[backend](tmp_path)
    _killed_at(url, "before_record", tmp_path)
    store = open_store(url)
    try:  # another task appends its note while the writer's is pending on its card
        other = Runtime(shared_agent.agent, store)
        other.start("other", note="theirs")
        assert other.run("other").stopped == "completed"
        # A note committed on the writer's head meanwhile carries the pending write on:
        # the undo still restores the card from before the step, not this head.
        other.mark(TASK, {"kind": "note", "by": "test"})
        assert len(store.load(TASK).state["shared_pending"]) == 1
    finally:
        store.close()

    resumed = _resume(url)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    store = open_store(url)
    try:
        head = store.load(TASK).state
        assert head["status"] == "completed"
        record = load_record(store, "case", "C-1")
        assert (record.version, record.value["notes"]) == (2, ["theirs", "mine"])
        assert [e.action["task"] for e in store.events(RID)] == ["other", TASK]
        events = store.events(TASK)
        (conflict,) = [e for e in events if e.action["kind"] == "shared_conflict"]
        assert (conflict.action["seen"], conflict.action["found"]) == (0, 1)
        (step,) = [
            e for e in events if e.action["kind"] == "call_skill" and e.version < conflict.version
        ]
        assert conflict.action["undone"] == step.version
        restored = store.checkpoint(TASK, conflict.version).state
        assert restored["added"] is False  # the step's card write went with it
        assert restored["shared_snapshots"][0]["version"] == 1
        (entry,) = [e for e in head["errors"] if e["kind"] == "shared_conflict"]
        assert "moved from v0 to v1 (written by other@" in entry["message"]
    finally:
        store.close()
