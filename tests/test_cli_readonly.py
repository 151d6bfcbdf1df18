"""Commands that only read never create a store: no database, directory, schema or key.

On a store URL where nothing exists yet they exit 2 with one line naming the URL
and leave nothing behind; writing commands still create the store.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli_support import run_env
from tests.contract.backends import (
    drop_postgres_schemas,
    drop_redis_data,
    postgres_url_for,
    redis_url_for,
)
from tests.test_cli import assert_no_traceback, run_cli, store_url

READ_ONLY = [
    ("show", "x"),
    ("log", "x"),
    ("view", "x"),
    ("replay", "x"),
    ("checkpoints", "x"),
    ("tokens", "x"),
    ("doctor", "x"),
    ("tasks",),
    ("list",),
]
_IDS = [command[0] for command in READ_ONLY]


@pytest.fixture(autouse=True)
def _drop_server_data() -> Iterator[None]:
    """Should a test fail by creating a schema or keys, they go with it."""
    yield
    drop_redis_data()
    drop_postgres_schemas()


def _assert_no_store(code: int, out: str, err: str, url: str) -> None:
    assert code == 2, out + err
    assert_no_traceback(out, err)
    assert err == f"error: no store at {url}; it is created by the first run\n" or (
        err.startswith(f"error: no store at {url} (") and err.count("\n") == 1
    ), err


@pytest.mark.parametrize("command", READ_ONLY, ids=_IDS)
def test_default_store_is_not_created(tmp_path: Path, command: tuple[str, ...]) -> None:
    """In an empty directory, without --store: exit 2, the default URL named, nothing made."""
    code, out, err = run_env(tmp_path, {"SKILLSTATE_STORE": None}, *command)
    _assert_no_store(code, out, err, "sqlite:///.skillstate/state.db")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", READ_ONLY, ids=_IDS)
@pytest.mark.parametrize("backend", ["sqlite", "files"])
def test_missing_store_is_not_created(
    tmp_path: Path, command: tuple[str, ...], backend: str
) -> None:
    """--store naming a file or directory that does not exist: exit 2, nothing created."""
    url = (
        store_url(tmp_path / "sub", "state.db")
        if backend == "sqlite"
        else f"file://{tmp_path / 'sub'}"
    )
    code, out, err = run_cli(tmp_path, *command, "--store", url)
    _assert_no_store(code, out, err, url)
    assert list(tmp_path.iterdir()) == []


def test_empty_sqlite_file_stays_empty(tmp_path: Path) -> None:
    """An empty file is no store: reading commands say so and do not turn it into one."""
    (tmp_path / "empty.db").touch()
    url = store_url(tmp_path, "empty.db")
    for command in READ_ONLY:
        code, out, err = run_cli(tmp_path, *command, "--store", url)
        _assert_no_store(code, out, err, url)
    assert os.path.getsize(tmp_path / "empty.db") == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.db"]


def test_writing_command_still_creates_the_store(tmp_path: Path) -> None:
    """run creates the default store; show then finds the task in it."""
    env = {"SKILLSTATE_STORE": None}
    code, _, err = run_env(
        tmp_path, env, "run", "skillstate.examples.ticket:agent", "--task-id", "t", "-q"
    )
    assert code == 0, err
    assert (tmp_path / ".skillstate" / "state.db").is_file()
    code, out, err = run_env(tmp_path, env, "show", "t", "--json")
    assert code == 0, err
    assert '"task_id": "t"' in out


@pytest.mark.services
@pytest.mark.parametrize("command", [("show", "x"), ("tasks",)], ids=["show", "tasks"])
def test_postgres_schema_is_not_created(tmp_path: Path, command: tuple[str, ...]) -> None:
    """A PostgreSQL schema that does not exist: exit 2 naming the URL; still no schema."""
    import psycopg

    url = postgres_url_for(tmp_path)
    schema = url.rpartition("schema=")[2]
    code, out, err = run_cli(tmp_path, *command, "--store", url)
    _assert_no_store(code, out, err, url)
    conninfo = url.rpartition("?")[0]
    with psycopg.connect(conninfo, autocommit=True) as conn:
        found = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,))
        assert found.fetchone() is None


@pytest.mark.services
@pytest.mark.parametrize("command", [("show", "x"), ("tasks",)], ids=["show", "tasks"])
def test_redis_prefix_is_left_empty(tmp_path: Path, command: tuple[str, ...]) -> None:
    """A Redis prefix without skillstate data: exit 2 naming the URL; no key written."""
    import redis

    url = redis_url_for(tmp_path)
    prefix = url.rpartition("prefix=")[2]
    code, out, err = run_cli(tmp_path, *command, "--store", url)
    _assert_no_store(code, out, err, url)
    client = redis.Redis.from_url(url.rpartition("?")[0])
    try:
        assert list(client.scan_iter(match=f"{prefix}:*")) == []
    finally:
        client.close()
