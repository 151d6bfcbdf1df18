"""``skillstate export`` / ``import`` / ``copy`` end to end, on a task with a sealed secret.

The source is the orders demo run with ``ORDERS_API_TOKEN`` and ``SKILLSTATE_KEY``: its
card keeps the token in a ``Sensitive`` field and its events reference artifacts. The
file and every target store are searched for the token's plaintext; ``doctor`` must
call each imported task healthy, and with the key its schema check must pass.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from skillstate.errors import ArchiveRefused
from skillstate.ops.archive import read_archive
from skillstate.ops.portable import read_task
from skillstate.state.secrets import PREFIX, generate_key, open_text
from skillstate.store import open_store
from tests.contract.backends import (
    drop_postgres_schemas,
    drop_redis_data,
    postgres_url_for,
    redis_url_for,
)

TOKEN = "ordtok-5e1d9c3b7a2f4e60"
TASK = "o1"
ENTRY = "from skillstate.cli import main; main()"
_RICH_ENV = ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "TERM", "COLUMNS")

TARGETS: dict[str, Callable[[Path], str]] = {
    "sqlite": lambda tmp: f"sqlite:///{tmp / 'target.db'}",
    "files": lambda tmp: f"file://{tmp / 'files'}",
    "postgres": postgres_url_for,
    "redis": redis_url_for,
}


def cli(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in _RICH_ENV}
    base.pop("SKILLSTATE_KEY", None)
    base.pop("ORDERS_API_TOKEN", None)
    return subprocess.run(
        [sys.executable, "-c", ENTRY, *args],
        cwd=cwd,
        env=base | {"COLUMNS": "200", "PYTHONIOENCODING": "utf-8"} | env,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=300,
        check=False,
    )


class Source:
    def __init__(self, cwd: Path, key: str) -> None:
        self.cwd = cwd
        self.key = key
        self.url = f"sqlite:///{cwd / 'source.db'}"


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Source]:
    cwd = tmp_path_factory.mktemp("portable-source")
    src = Source(cwd, generate_key())
    env = {"SKILLSTATE_KEY": src.key, "ORDERS_API_TOKEN": TOKEN}
    done = cli(cwd, env, "demo", "orders", "--task-id", TASK, "--store", src.url)
    assert done.returncode == 0, done.stderr
    yield src
    drop_postgres_schemas()
    drop_redis_data()


@pytest.fixture
def exported(source: Source, tmp_path: Path) -> Path:
    out = tmp_path / "o1.skillstate.zip"
    done = cli(tmp_path, {}, "export", TASK, "-o", str(out), "--store", source.url)
    assert done.returncode == 0, done.stderr
    return out


def _members(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


class TestExport:
    def test_the_file_holds_the_task_with_its_secret_sealed(
        self, source: Source, exported: Path
    ) -> None:
        """Checkpoints, events and artifacts are in it; the token only as a sealed token."""
        members = _members(exported)
        assert all(TOKEN.encode() not in data for data in members.values())
        assert PREFIX.encode() in members["tasks/1/checkpoints.jsonl"]
        manifest, tasks = read_archive(exported)
        (records,) = tasks
        original = read_task(open_store(source.url, create=False), TASK)
        assert manifest.format_version == 1
        assert [c.state for c in records.checkpoints] == [c.state for c in original.checkpoints]
        assert [e.model_dump() for e in records.events] == [e.model_dump() for e in original.events]
        assert records.artifacts
        assert records.artifacts == original.artifacts
        assert any(e.patch for e in records.events)


class TestImport:
    @pytest.mark.parametrize("target", sorted(TARGETS))
    def test_imported_task_is_healthy_and_still_sealed(
        self, source: Source, exported: Path, tmp_path: Path, target: str
    ) -> None:
        """sqlite -> every store: doctor healthy, the token sealed, readable with the key."""
        url = TARGETS[target](tmp_path)
        done = cli(tmp_path, {}, "import", str(exported), "--store", url)
        assert done.returncode == 0, done.stderr
        doctor = cli(tmp_path, {}, "doctor", TASK, "--store", url)
        assert doctor.returncode == 0, doctor.stdout + doctor.stderr
        assert "healthy" in doctor.stdout
        keyed = cli(tmp_path, {"SKILLSTATE_KEY": source.key}, "doctor", TASK, "--store", url)
        assert keyed.returncode == 0
        assert "validated against the agent's schema" in keyed.stdout
        assert "key needed" not in keyed.stdout
        store = open_store(url, create=False)
        try:
            state = store.load(TASK).state
            assert state["api_token"].startswith(PREFIX)
            os.environ["SKILLSTATE_KEY"] = source.key
            try:
                assert json.loads(open_text("api_token", state["api_token"]) or "null") == TOKEN
            finally:
                del os.environ["SKILLSTATE_KEY"]
            original = read_task(open_store(source.url, create=False), TASK)
            copied = read_task(store, TASK)
            assert copied.artifacts == original.artifacts
            assert [e.model_dump() for e in copied.events] == [
                e.model_dump() for e in original.events
            ]
        finally:
            store.close()
        if target == "files":
            raw = b"".join(p.read_bytes() for p in (tmp_path / "files").rglob("*") if p.is_file())
            assert TOKEN.encode() not in raw
            assert PREFIX.encode() in raw

    def test_files_to_sqlite_and_as_another_id(self, exported: Path, tmp_path: Path) -> None:
        """files -> sqlite through a second export, under a new id; doctor healthy."""
        files = f"file://{tmp_path / 'files'}"
        assert cli(tmp_path, {}, "import", str(exported), "--store", files).returncode == 0
        again = tmp_path / "again.zip"
        assert cli(tmp_path, {}, "export", TASK, "-o", str(again), "--store", files).returncode == 0
        db = f"sqlite:///{tmp_path / 'b.db'}"
        done = cli(tmp_path, {}, "import", str(again), "--store", db, "--as", "o2")
        assert done.returncode == 0, done.stderr
        doctor = cli(tmp_path, {}, "doctor", "o2", "--store", db)
        assert doctor.returncode == 0
        assert "healthy" in doctor.stdout
        assert open_store(db).load("o2").state["task_id"] == "o2"

    def test_an_existing_id_is_refused(self, exported: Path, tmp_path: Path) -> None:
        """The second import of the same task: one line, exit 3, the task untouched."""
        db = f"sqlite:///{tmp_path / 'b.db'}"
        assert cli(tmp_path, {}, "import", str(exported), "--store", db).returncode == 0
        done = cli(tmp_path, {}, "import", str(exported), "--store", db)
        assert done.returncode == 3
        assert len(done.stderr.strip().splitlines()) == 1
        assert "already exists" in done.stderr
        again = cli(tmp_path, {}, "import", str(exported), "--store", db, "--overwrite")
        assert again.returncode == 0, again.stderr


def _corrupt(path: Path) -> None:
    members = _members(path)
    members["tasks/1/events.jsonl"] = members["tasks/1/events.jsonl"].replace(
        b"policy", b"human", 1
    )
    _rezip(path, members)


def _rezip(path: Path, members: dict[str, bytes]) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    path.write_bytes(buffer.getvalue())


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0xFF
    path.write_bytes(bytes(data))


def _other_format(path: Path) -> None:
    path.write_text('{"not": "an export"}\n')


def _foreign_zip(path: Path) -> None:
    _rezip(path, {"manifest.json": b'{"format": "something-else"}', "manifest.sha256": b""})


def _newer_format(path: Path) -> None:
    members = _members(path)
    import hashlib

    text = members["manifest.json"].replace(b'"format_version": 1', b'"format_version": 99')
    members["manifest.json"] = text
    members["manifest.sha256"] = ("sha256:" + hashlib.sha256(text).hexdigest()).encode()
    _rezip(path, members)


BREAKS: dict[str, Callable[[Path], None]] = {
    "member-changed": _corrupt,
    "truncated": _truncate,
    "byte-flipped": _flip,
    "not-a-zip": _other_format,
    "another-zip": _foreign_zip,
    "newer-format": _newer_format,
}


class TestRefused:
    @pytest.mark.parametrize("damage", sorted(BREAKS))
    def test_a_bad_file_is_one_line_exit_2_and_nothing_written(
        self, exported: Path, tmp_path: Path, damage: str
    ) -> None:
        """Corrupted, truncated, foreign or newer files: refused before any write."""
        BREAKS[damage](exported)
        with pytest.raises(ArchiveRefused):
            read_archive(exported)
        store = tmp_path / "files"
        done = cli(tmp_path, {}, "import", str(exported), "--store", f"file://{store}")
        assert done.returncode == 2, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert not store.exists() or not any(store.iterdir())


class TestEveryEventField:
    def test_optional_text_fields_survive_export_import(self, tmp_path: Path) -> None:
        """Every optional text field of Event (``by``, ``reason``...) comes back as set."""
        from skillstate.events import Event
        from skillstate.ops.archive import write_archive
        from skillstate.ops.portable import write_task
        from skillstate.store.sqlite import SQLiteStore

        names = [
            name
            for name, info in Event.model_fields.items()
            if info.annotation == (str | None) and info.default is None
        ]
        assert "step_id" in names
        source = SQLiteStore(tmp_path / "a.db")
        state = {"task_id": "t", "version": 1}
        event = Event(
            task_id="t",
            version=1,
            actor="human",
            action={},
            **{name: f"value of {name}" for name in names},
        )
        source.commit("t", 0, state, event)
        write_archive(tmp_path / "t.zip", [read_task(source, "t")])
        _, (records,) = read_archive(tmp_path / "t.zip")
        target = SQLiteStore(tmp_path / "b.db")
        write_task(target, records)
        (back,) = target.events("t")
        assert back.model_dump() == source.events("t")[0].model_dump()
        assert all(getattr(back, name) == f"value of {name}" for name in names)
