"""kill -9 during a delete: the task is whole or gone, and a re-run (or gc) finishes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import cast

import pytest

from skillstate.audit import Identity
from skillstate.errors import ArtifactNotFound, TaskNotFound
from skillstate.ops.delete import delete_tasks, plan_deletion
from skillstate.ops.gc import collect
from skillstate.ops.retention import prune_older_than
from skillstate.store import open_store
from skillstate.store.base import Store
from tests.contract.backends import (
    SERVICE_BACKENDS,
    URLS,
    drop_postgres_schemas,
    drop_redis_data,
)
from tests.test_ops_lifecycle import write

# Runs one delete of "victim" in a child process, with one store call replaced by a
# wait that never ends: the parent sees the flag file, then kills it with SIGKILL.
CHILD = """
import pathlib, sys, time
from skillstate.audit import Identity
from skillstate.ops.delete import delete_tasks, plan_deletion
from skillstate.store import open_store

url, where, flag = sys.argv[1:4]
store = open_store(url)

def block(*args, **kwargs):
    pathlib.Path(flag).write_text(where)
    while True:
        time.sleep(0.05)

if where == "before-delete":
    store.delete_task = block
elif where == "before-artifacts":
    store.delete_artifact = block
elif where == "after-rename":
    import skillstate.store.files_delete as files_delete
    files_delete.shutil.rmtree = block
plans = plan_deletion(store, ["victim"])
delete_tasks(store, plans, identity=Identity(by="ops", reason="crash test"))
"""

WHO = Identity(by="ops", reason="crash test, re-run")


@pytest.fixture(
    params=[
        pytest.param(n, marks=pytest.mark.services) if n in SERVICE_BACKENDS else n
        for n in sorted(URLS)
    ]
)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield URLS[cast("str", request.param)](tmp_path)
    drop_redis_data()
    drop_postgres_schemas()


def _killed_at(url: str, where: str, tmp_path: Path) -> None:
    """Run the child until it reaches ``where``, then kill -9 it."""
    flag = tmp_path / "reached"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, url, where, str(flag)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    try:
        while not flag.exists():
            if child.poll() is not None:
                out = child.stdout.read().decode() if child.stdout else ""
                pytest.fail(f"the child ended before {where} (rc {child.returncode}): {out}")
            if time.monotonic() > deadline:
                pytest.fail(f"the child never reached {where}")
            time.sleep(0.02)
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if child.stdout:
            child.stdout.close()


def _setup(url: str) -> tuple[str, str]:
    store = open_store(url)
    try:
        own = store.put_artifact(b"victim's own transcript")
        shared = store.put_artifact(b"shared")
        write(store, "victim", 3, evidence=[own, shared])
        write(store, "bystander", 1, evidence=[shared])
    finally:
        store.close()
    return own, shared


def _with(url: str, check: Callable[[Store], None]) -> None:
    store = open_store(url, create=False)
    try:
        check(store)
    finally:
        store.close()


def test_killed_before_the_delete_leaves_the_task_whole(url: str, tmp_path: Path) -> None:
    """Audit entry written, then kill -9: the task loads whole; the re-run deletes it."""
    own, shared = _setup(url)
    _killed_at(url, "before-delete", tmp_path)

    def whole(store: Store) -> None:
        assert store.load("victim").version == 3
        assert [
            store.checkpoint("victim", c.version).state["version"]
            for c in store.checkpoints("victim")
        ] == [1, 2, 3]
        assert store.events("skillstate:audit:deletions")[-1].action["task"] == "victim"
        [done] = delete_tasks(store, plan_deletion(store, ["victim"]), identity=WHO)
        assert done.found
        assert done.artifacts == [own]
        with pytest.raises(TaskNotFound):
            store.load("victim")
        assert store.get_artifact(shared) == b"shared"

    _with(url, whole)


def test_killed_after_the_delete_leaves_only_unreferenced_artifacts(
    url: str, tmp_path: Path
) -> None:
    """kill -9 between the task's removal and its artifacts': the task is gone, and gc
    collects the artifact it left."""
    own, shared = _setup(url)
    _killed_at(url, "before-artifacts", tmp_path)

    def gone(store: Store) -> None:
        with pytest.raises(TaskNotFound):
            store.load("victim")
        assert "victim" not in store.tasks()
        assert store.get_artifact(own)
        later = datetime.now(timezone.utc) + timedelta(seconds=1)
        assert collect(store, grace=timedelta(0), now=later).removed == [own]
        with pytest.raises(ArtifactNotFound):
            store.get_artifact(own)
        assert store.get_artifact(shared) == b"shared"

    _with(url, gone)


def test_files_killed_after_the_rename(tmp_path: Path) -> None:
    """Files store: kill -9 after the folder's rename, before its removal: the task is
    gone (the hidden folder is never listed) and the next delete sweeps the folder."""
    url = f"file://{tmp_path / 'files'}"
    _setup(url)
    _killed_at(url, "after-rename", tmp_path)
    leftovers = [p.name for p in (tmp_path / "files").iterdir() if p.name.startswith(".deleted-")]
    assert len(leftovers) == 1

    def swept(store: Store) -> None:
        with pytest.raises(TaskNotFound):
            store.load("victim")
        assert store.tasks() == ["bystander", "skillstate:audit:deletions"]
        delete_tasks(store, plan_deletion(store, ["bystander"]), identity=WHO)

    _with(url, swept)
    assert not [p for p in (tmp_path / "files").iterdir() if p.name.startswith(".deleted-")]


def test_files_commit_waiting_on_the_lock_is_not_lost(tmp_path: Path) -> None:
    """Files store: a commit that waits for the task's lock while the task is deleted
    does not write into the deleted folder: it finds a fresh one and is refused."""
    import fcntl
    import threading

    from skillstate.errors import StaleState
    from skillstate.events import Event
    from skillstate.store.files import FilesStore

    store = FilesStore(tmp_path / "files")
    write(store, "t", 1)
    lock = os.open(tmp_path / "files" / "t" / ".lock", os.O_RDWR)
    fcntl.flock(lock, fcntl.LOCK_EX)  # what the delete holds while it renames
    outcome: list[BaseException | int] = []

    def writer() -> None:
        state = {**store.load("t").state, "version": 2}
        event = Event(task_id="t", version=2, actor="runtime", action={"kind": "step"})
        try:
            outcome.append(store.commit("t", 1, state, event))
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=writer)
    thread.start()
    deadline = time.monotonic() + 60
    inode = f":{os.fstat(lock).st_ino} "
    while not any(  # the writer is blocked on this lock ("->" marks a waiter)
        "->" in line and inode in line for line in Path("/proc/locks").read_text().splitlines()
    ):
        assert time.monotonic() < deadline, "the writer never waited for the lock"
        assert thread.is_alive(), outcome
        time.sleep(0.01)
    os.rename(tmp_path / "files" / "t", tmp_path / "files" / ".deleted-t-test")
    os.close(lock)
    thread.join(timeout=60)
    assert len(outcome) == 1
    assert isinstance(outcome[0], StaleState)
    with pytest.raises(TaskNotFound):
        store.load("t")
    assert not (tmp_path / "files" / ".deleted-t-test" / "state_step_0002.yaml").exists()


# Prunes "a", "b" and "c" by age in a child process; the second task's prune is
# replaced by a wait that never ends, so the kill lands between two tasks' prunes.
PRUNE_CHILD = """
import pathlib, sys, time
from datetime import datetime, timedelta, timezone
from skillstate.ops.retention import prune_older_than
from skillstate.store import open_store

url, flag = sys.argv[1:3]
store = open_store(url)
real = store.prune
calls = []

def prune(task_id, **kwargs):
    calls.append(task_id)
    if len(calls) == 2:
        pathlib.Path(flag).write_text(task_id)
        while True:
            time.sleep(0.05)
    return real(task_id, **kwargs)

store.prune = prune
later = datetime.now(timezone.utc) + timedelta(days=1)
prune_older_than(store, ["a", "b", "c"], older_than=timedelta(hours=1), keep_last=2, now=later)
"""


def test_killed_during_prune_older_than_leaves_every_task_whole(url: str, tmp_path: Path) -> None:
    """kill -9 in the middle of ``prune --older-than`` over three tasks: the task pruned
    before it keeps its newest two versions, the others all six; every kept version
    loads, every head is untouched, and the re-run finishes the job."""
    store = open_store(url)
    try:
        for task_id in ("a", "b", "c"):
            write(store, task_id, 6)
    finally:
        store.close()
    flag = tmp_path / "reached"
    child = subprocess.Popen(
        [sys.executable, "-c", PRUNE_CHILD, url, str(flag)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    try:
        while not flag.exists():
            if child.poll() is not None:
                out = child.stdout.read().decode() if child.stdout else ""
                pytest.fail(f"the child ended before the second prune: {out}")
            if time.monotonic() > deadline:
                pytest.fail("the child never reached the second prune")
            time.sleep(0.02)
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if child.stdout:
            child.stdout.close()
    assert flag.read_text() == "b"

    def kept(store: Store) -> dict[str, list[int]]:
        versions = {}
        for task_id in ("a", "b", "c"):
            assert store.load(task_id).version == 6
            versions[task_id] = [
                store.checkpoint(task_id, c.version).state["version"]
                for c in store.checkpoints(task_id)
            ]
        return versions

    def whole_then_finished(store: Store) -> None:
        assert kept(store) == {"a": [5, 6], "b": [1, 2, 3, 4, 5, 6], "c": [1, 2, 3, 4, 5, 6]}
        later = datetime.now(timezone.utc) + timedelta(days=1)
        prune_older_than(
            store, ["a", "b", "c"], older_than=timedelta(hours=1), keep_last=2, now=later
        )
        assert kept(store) == {"a": [5, 6], "b": [5, 6], "c": [5, 6]}

    _with(url, whole_then_finished)
