"""The orders demo's API token, searched for in everything the CLI leaves behind.

``skillstate demo orders`` runs with ``ORDERS_API_TOKEN`` and ``SKILLSTATE_KEY`` set,
so the task keeps the token in a ``Sensitive`` field and ``fetch_orders`` sends it
to the order API. Then every surface is searched for the plaintext: the raw store
files (database and WAL, or the files store's tree, artifacts included), the event
log, ``show``, ``view``, ``checkpoints`` and the demo's own verbose output.

Stores run here: SQLite and the files store (no server needed). PostgreSQL and
Redis get the same search in the store contract tests once those land.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from skillstate.engine.runtime import Runtime
from skillstate.examples import orders
from skillstate.state.secrets import PREFIX, generate_key
from skillstate.store.memory import MemoryStore

TOKEN = "ordtok-7c1e5a9b3f2d4e6a"
ENTRY = "from skillstate.cli import main; main()"
TASK = "o1"
_RICH_ENV = ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "TERM", "COLUMNS")


# What the runtime does not scrub yet: a skill passes the token to a tool, and the
# call's args are recorded in the event as given. Redactor.event in Runtime._commit
# (before the store sees the event) closes it; these marks then fail as XPASS, as a
# reminder to delete them.
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
        timeout=120,
        check=False,
    )
    return proc.returncode, proc.stdout, proc.stderr


@dataclass
class Run:
    """One demo run and the output of every read command on its task."""

    url: str
    root: Path
    """Where the store keeps its files."""
    outputs: dict[str, str] = field(default_factory=dict)

    def raw(self) -> bytes:
        files = sorted(p for p in self.root.rglob("*") if p.is_file())
        assert files, f"no store files under {self.root}"
        return b"".join(p.read_bytes() for p in files)


STORES: dict[str, Callable[[Path], tuple[str, Path]]] = {
    "sqlite": lambda d: (f"sqlite:///{d / 'db' / 'state.db'}", d / "db"),
    "file": lambda d: (f"file://{d / 'fs'}", d / "fs"),
}
READS = {
    "show": ("show", TASK),
    "show --json": ("show", TASK, "--json"),
    "log": ("log", TASK),
    "log --json": ("log", TASK, "--json"),
    "view": ("view", TASK),
    "checkpoints": ("checkpoints", TASK),
}


@pytest.fixture(scope="module", params=sorted(STORES))
def demo(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Run:
    kind: str = request.param
    cwd = tmp_path_factory.mktemp(f"secrets-{kind}")
    url, root = STORES[kind](cwd)
    env = {"SKILLSTATE_KEY": generate_key(), "ORDERS_API_TOKEN": TOKEN}
    code, out, err = cli(cwd, env, "demo", "orders", "--task-id", TASK, "--store", url)
    assert code == 0, err
    run = Run(url, root, {"demo": out + err})
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
    assert TOKEN.encode() not in demo.raw()


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
    result = Runtime(orders.agent, store).run("o")
    assert result.stopped == "completed"
    assert isinstance(result.state, orders.OrdersState)
    assert result.state.api_token is None
    calls = [c for e in store.events("o") for c in e.tool_calls if c.tool == "query_orders"]
    assert [c.args for c in calls] == [{"user_id": "U123456", "month": "2025-07"}]


def test_the_order_api_checks_the_token(monkeypatch: pytest.MonkeyPatch) -> None:
    """The token in the card is what the API sees: a task holding another one fails."""
    monkeypatch.setenv("SKILLSTATE_KEY", generate_key())
    monkeypatch.setenv("ORDERS_API_TOKEN", TOKEN)
    ok = Runtime(orders.agent, MemoryStore()).run("o")
    assert ok.stopped == "completed"
    assert ok.state.api_token == TOKEN  # type: ignore[attr-defined]

    runtime = Runtime(orders.agent, MemoryStore(), max_steps=3)
    runtime.start("o", api_token="a-stale-token")
    stuck = runtime.run("o")
    assert stuck.state.order_count is None  # type: ignore[attr-defined]
    messages = [e.message for e in stuck.state.errors]
    assert any("401 Unauthorized" in m for m in messages)
    assert not any("a-stale-token" in m for m in messages)
