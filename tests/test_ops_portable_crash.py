"""kill -9 in the middle of ``export``, ``import`` and ``copy``: nothing half-written.

Each run is a child process with a hook patched in at the point named below; the
hook writes a marker file and then waits to be killed. The test waits for the marker
(observed, with a generous deadline), kills the child with SIGKILL, and checks what
is left: no export file, or no task at all (never part of one). Running the command
again then completes, and ``doctor`` calls the task healthy.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from skillstate.errors import TaskNotFound
from skillstate.store import open_store
from tests.contract.backends import (
    drop_postgres_schemas,
    drop_redis_data,
    postgres_url_for,
    redis_url_for,
)
from tests.test_ops_portable import TASK, TOKEN, cli

DEADLINE = 120.0

# The child: patch the hook named by HOOK, then run the CLI with the given arguments.
CHILD = r"""
import os, sys, time, zipfile
from pathlib import Path

marker = Path(os.environ["HOOK_MARKER"])

def block():
    marker.write_text("reached")
    while True:  # until the test kills this process
        time.sleep(0.05)

hook = os.environ["HOOK"]
if hook == "export":
    original = zipfile.ZipFile.writestr
    calls = []
    def writestr(self, *args, **kwargs):
        original(self, *args, **kwargs)
        calls.append(1)
        if len(calls) == 2:
            self.fp.flush()
            block()
    zipfile.ZipFile.writestr = writestr
elif hook == "sqlite":
    from skillstate.store import sqlite_restore
    original = sqlite_restore.write_plan
    def write_plan(*args, **kwargs):
        original(*args, **kwargs)
        block()  # every row written, inside the transaction, before COMMIT
    sqlite_restore.write_plan = write_plan
elif hook == "files":
    from skillstate.store import files_restore
    original = files_restore._write_new
    restores = []
    original_restore = files_restore.restore
    def restore(*args, **kwargs):
        restores.append(1)
        return original_restore(*args, **kwargs)
    files_restore.restore = restore
    written = []
    def write_new(path, data):
        original(path, data)
        written.append(path)
        # the staging folder half-written, in the restore numbered HOOK_AT
        if len(restores) == int(os.environ.get("HOOK_AT", "1")) and len(written) >= 2:
            block()
    files_restore._write_new = write_new
elif hook == "postgres":
    from skillstate.store import postgres_restore
    original = postgres_restore.restore
    def restore(*args, **kwargs):
        result = yield from original(*args, **kwargs)
        block()  # every statement run, inside the transaction, before COMMIT
        return result
    postgres_restore.restore = restore
elif hook == "redis":
    from skillstate.store import redis_restore
    original = redis_restore._writes
    def writes(*args, **kwargs):
        calls = original(*args, **kwargs)
        block()  # WATCH held, the transaction built, before EXEC
        return calls
    redis_restore._writes = writes

from skillstate.cli import main
main(sys.argv[1:])
"""

URLS: dict[str, Callable[[Path], str]] = {
    "sqlite": lambda tmp: f"sqlite:///{tmp / 'target.db'}",
    "files": lambda tmp: f"file://{tmp / 'files'}",
    "postgres": postgres_url_for,
    "redis": redis_url_for,
}


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """The orders demo's task in SQLite, and its export file."""
    from skillstate.state.secrets import generate_key

    cwd = tmp_path_factory.mktemp("portable-crash")
    url = f"sqlite:///{cwd / 'source.db'}"
    env = {"SKILLSTATE_KEY": generate_key(), "ORDERS_API_TOKEN": TOKEN}
    done = cli(cwd, env, "demo", "orders", "--task-id", TASK, "--store", url)
    assert done.returncode == 0, done.stderr
    out = cwd / "o1.zip"
    assert cli(cwd, {}, "export", TASK, "-o", str(out), "--store", url).returncode == 0
    yield out, url
    drop_postgres_schemas()
    drop_redis_data()


def kill_at_hook(cwd: Path, hook: str, *args: str, at: int = 1) -> None:
    """Run the CLI with ``hook`` patched in, wait until it is reached, SIGKILL it."""
    marker = cwd / f"{hook}.reached"
    env = {k: v for k, v in os.environ.items() if k != "SKILLSTATE_KEY"}
    env |= {"HOOK": hook, "HOOK_MARKER": str(marker), "HOOK_AT": str(at)}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + DEADLINE
        while not marker.exists():
            if child.poll() is not None:
                _out, err = child.communicate()
                pytest.fail(f"the child ended before its hook: {err.decode()[-2000:]}")
            assert time.monotonic() < deadline, f"hook {hook} not reached in {DEADLINE}s"
            time.sleep(0.02)
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=DEADLINE) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        for stream in (child.stdout, child.stderr):
            if stream is not None:
                stream.close()


class TestKillDuringExport:
    def test_no_partial_file(self, exported: tuple[Path, str], tmp_path: Path) -> None:
        """Killed with members written: FILE does not exist; a re-run writes it whole."""
        _, url = exported
        out = tmp_path / "out.zip"
        kill_at_hook(tmp_path, "export", "export", TASK, "-o", str(out), "--store", url)
        assert not out.exists()
        partial = [p for p in tmp_path.iterdir() if p.name.endswith(".partial")]
        assert partial, "the kill did not land mid-write"
        assert partial[0].stat().st_size > 0
        assert cli(tmp_path, {}, "export", TASK, "-o", str(out), "--store", url).returncode == 0
        assert out.exists()


class TestKillDuringImport:
    @pytest.mark.parametrize("backend", sorted(URLS))
    def test_task_whole_or_absent(
        self, exported: tuple[Path, str], tmp_path: Path, backend: str
    ) -> None:
        """Killed inside the restore: the task is absent; a re-run imports it healthy."""
        out, _ = exported
        url = URLS[backend](tmp_path)
        kill_at_hook(tmp_path, backend, "import", str(out), "--store", url)
        store = open_store(url)
        try:
            assert TASK not in store.tasks()
            with pytest.raises(TaskNotFound):
                store.load(TASK)
        finally:
            store.close()
        done = cli(tmp_path, {}, "import", str(out), "--store", url)
        assert done.returncode == 0, done.stderr
        doctor = cli(tmp_path, {}, "doctor", TASK, "--store", url)
        assert doctor.returncode == 0, doctor.stdout
        assert "healthy" in doctor.stdout


class TestKillDuringCopy:
    def test_rerun_completes_without_duplicates(
        self, exported: tuple[Path, str], tmp_path: Path
    ) -> None:
        """Killed during the second task's restore: a re-run copies the rest, skips the first."""
        out, _ = exported
        source = f"sqlite:///{tmp_path / 'many.db'}"
        ids = ["c1", "c2", "c3"]
        for task_id in ids:
            done = cli(tmp_path, {}, "import", str(out), "--store", source, "--as", task_id)
            assert done.returncode == 0, done.stderr
        target = f"file://{tmp_path / 'files'}"
        kill_at_hook(tmp_path, "files", "copy", "--from", source, "--to", target, "--all", at=2)
        assert open_store(target).tasks() == ["c1"]
        done = cli(tmp_path, {}, "copy", "--from", source, "--to", target, "--all", "--json")
        assert done.returncode == 0, done.stderr
        assert '"copied": ["c2", "c3"]' in done.stdout
        assert '"skipped": ["c1"]' in done.stdout
        store = open_store(target)
        assert store.tasks() == ids
        for task_id in ids:
            assert [e.version for e in store.events(task_id)] == list(
                range(1, store.load(task_id).version + 1)
            )
            doctor = cli(tmp_path, {}, "doctor", task_id, "--store", target)
            assert doctor.returncode == 0, doctor.stdout
