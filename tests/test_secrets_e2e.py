"""The orders demo's API token, searched for in everything the CLI leaves behind.

``skillstate demo orders`` runs with ``ORDERS_API_TOKEN`` and ``SKILLSTATE_KEY`` set,
so the task keeps the token in a ``Sensitive`` field and ``fetch_orders`` sends it
to the order API. Then every surface is searched for the plaintext: the raw store
files (database and WAL, or the files store's tree, artifacts included), the event
log, ``show``, ``view``, ``checkpoints`` and the demo's own verbose output.

Stores: SQLite (database and WAL bytes), the files store (every file), PostgreSQL
(every row of every table of the task's schema, as text) and Redis (every value
under the store's prefix).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from skillstate.engine.runtime import Runtime
from skillstate.examples import orders
from skillstate.state.secrets import PREFIX, generate_key
from skillstate.store.memory import MemoryStore
from tests.contract.backends import (
    POSTGRES_URL,
    REDIS_URL,
    drop_postgres_schemas,
    drop_redis_data,
    postgres_url_for,
    redis_url_for,
)

TOKEN = "ordtok-7c1e5a9b3f2d4e6a"
ENTRY = "from skillstate.cli import main; main()"
TASK = "o1"
_RICH_ENV = ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "TERM", "COLUMNS")


def cli(cwd: Path, env: dict[str, str], *args: str) -> tuple[int, str, str]:
    base = {k: v for k, v in os.environ.items() if k not in _RICH_ENV}
    base.pop("SKILLSTATE_KEY", None)
    base.pop("ORDERS_API_TOKEN", None)
    proc = subprocess.run(
        [sys.executable, "-c", ENTRY, *args],
        cwd=cwd,
        env=base | {"COLUMNS": "200", "PYTHONIOENCODING": "utf-8"} | env,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=600,
        check=False,
    )
    return proc.returncode, proc.stdout, proc.stderr


RawFn = Callable[[], bytes]


@dataclass
class Run:
    """One demo run and the output of every read command on its task."""

    url: str
    raw: RawFn
    """Every byte the store holds for the run."""
    outputs: dict[str, str] = field(default_factory=dict)


def _files(root: Path) -> RawFn:
    def read() -> bytes:
        files = sorted(p for p in root.rglob("*") if p.is_file())
        assert files, f"no store files under {root}"
        return b"".join(p.read_bytes() for p in files)

    return read


def _postgres(url: str) -> RawFn:
    def read() -> bytes:
        import psycopg
        from psycopg import sql

        schema = url.rsplit("schema=", 1)[1]
        chunks: list[str] = []
        with psycopg.connect(POSTGRES_URL) as conn:
            tables = conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                (schema,),
            ).fetchall()
            assert tables, f"no tables in schema {schema}"
            for (table,) in tables:
                query = sql.SQL("SELECT t::text FROM {}.{} t").format(
                    sql.Identifier(schema), sql.Identifier(table)
                )
                chunks += [row[0] for row in conn.execute(query)]
        return "\n".join(chunks).encode()

    return read


def _redis(url: str) -> RawFn:
    def read() -> bytes:
        import redis

        prefix = url.rsplit("prefix=", 1)[1]
        client = redis.Redis.from_url(REDIS_URL)
        out: list[bytes] = []
        try:
            for key in client.scan_iter(match=f"{prefix}:*"):
                kind = client.type(key)
                if kind == b"string":
                    out.append(client.get(key) or b"")
                elif kind == b"hash":
                    for k, v in client.hgetall(key).items():
                        out += [k, v]
                elif kind == b"zset":
                    out += [m for m, _ in client.zrange(key, 0, -1, withscores=True)]
                elif kind == b"list":
                    out += client.lrange(key, 0, -1)
                elif kind == b"set":
                    out += list(client.smembers(key))
                else:
                    out.append(client.dump(key) or b"")
        finally:
            client.close()
        assert out, f"no keys under {prefix}"
        return b"\n".join(out)

    return read


def _pg_store(d: Path) -> tuple[str, RawFn]:
    url = postgres_url_for(d)
    return url, _postgres(url)


def _redis_store(d: Path) -> tuple[str, RawFn]:
    url = redis_url_for(d)
    return url, _redis(url)


STORES: dict[str, Callable[[Path], tuple[str, RawFn]]] = {
    "sqlite": lambda d: (f"sqlite:///{d / 'db' / 'state.db'}", _files(d / "db")),
    "file": lambda d: (f"file://{d / 'fs'}", _files(d / "fs")),
    "postgres": _pg_store,
    "redis": _redis_store,
}
READS = {
    "show": ("show", TASK),
    "show --json": ("show", TASK, "--json"),
    "log": ("log", TASK),
    "log --json": ("log", TASK, "--json"),
    "view": ("view", TASK),
    "checkpoints": ("checkpoints", TASK),
}


@pytest.fixture(scope="module", autouse=True)
def _cleanup() -> Iterator[None]:
    yield
    drop_postgres_schemas()
    drop_redis_data()


@pytest.fixture(scope="module", params=sorted(STORES))
def demo(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Run:
    kind: str = request.param
    cwd = tmp_path_factory.mktemp(f"secrets-{kind}")
    url, raw = STORES[kind](cwd)
    env = {"SKILLSTATE_KEY": generate_key(), "ORDERS_API_TOKEN": TOKEN}
    code, out, err = cli(cwd, env, "demo", "orders", "--task-id", TASK, "--store", url)
    assert code == 0, err
    run = Run(url, raw, {"demo": out + err})
    for name, args in READS.items():
        code, out, err = cli(cwd, env, *args, "--store", url)
        assert code == 0, f"{name}: {err}"
        run.outputs[name] = out + err
    return run


def test_demo_completes_with_the_token_sealed(demo: Run) -> None:
    assert "completed · task o1" in demo.outputs["demo"]
    state = json.loads(demo.outputs["show --json"])
    assert state["max_amount"] == 3299.0
    assert state["api_token"].startswith(PREFIX)
    # The token was sent: the order API call carries an authorization argument.
    calls = [c for e in json.loads(demo.outputs["log --json"]) for c in e["tool_calls"]]
    assert any("authorization" in c["args"] for c in calls if c["tool"] == "query_orders")


@pytest.mark.parametrize(
    "surface",
    [
        "demo",
        "show",
        "show --json",
        "log",
        "log --json",
        "view",
        "checkpoints",
    ],
)
def test_no_plaintext_in_cli_output(demo: Run, surface: str) -> None:
    assert TOKEN not in demo.outputs[surface]


def test_no_plaintext_in_raw_store_files(demo: Run) -> None:
    raw = demo.raw()
    assert PREFIX.encode() in raw  # the search does see the sealed field...
    assert TOKEN.encode() not in raw  # ...and never the token


def test_views_show_the_field_masked(demo: Run) -> None:
    assert "api_token: ***" in demo.outputs["view"]
    assert "api_token: ***" in demo.outputs["demo"]


def test_token_without_a_key_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    code, _, err = cli(
        tmp_path, {"ORDERS_API_TOKEN": TOKEN}, "demo", "orders", "--task-id", TASK, "--store", url
    )
    assert code == 2
    assert err.strip().splitlines() == [
        "error: field 'api_token' is sensitive: set SKILLSTATE_KEY to store it encrypted "
        "(make one with `skillstate keygen` or Fernet.generate_key())"
    ]
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("state.db*"))
    assert TOKEN.encode() not in raw


def test_demo_without_a_token_runs_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ORDERS_API_TOKEN", raising=False)
    monkeypatch.delenv("SKILLSTATE_KEY", raising=False)
    store = MemoryStore()
    result = Runtime(orders.agent, store).run("o", create=True)
    assert result.stopped == "completed"
    assert isinstance(result.state, orders.OrdersState)
    assert result.state.api_token is None
    calls = [c for e in store.events("o") for c in e.tool_calls if c.tool == "query_orders"]
    assert [c.args for c in calls] == [{"user_id": "U123456", "month": "2025-07"}]


def test_the_order_api_checks_the_token(monkeypatch: pytest.MonkeyPatch) -> None:
    """The token in the card is what the API sees: a task holding another one fails."""
    monkeypatch.setenv("SKILLSTATE_KEY", generate_key())
    monkeypatch.setenv("ORDERS_API_TOKEN", TOKEN)
    ok = Runtime(orders.agent, MemoryStore()).run("o", create=True)
    assert ok.stopped == "completed"
    assert ok.state.api_token == TOKEN  # type: ignore[attr-defined]

    runtime = Runtime(orders.agent, MemoryStore(), max_steps=3)
    runtime.start("o", api_token="a-stale-token")
    stuck = runtime.run("o")
    assert stuck.state.order_count is None  # type: ignore[attr-defined]
    messages = [e.message for e in stuck.state.errors]
    assert any("401 Unauthorized" in m for m in messages)
    assert not any("a-stale-token" in m for m in messages)
