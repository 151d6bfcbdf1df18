"""``skillstate send`` and ``skillstate cancel`` without a broker (the task is driven here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skillstate import Runtime
from skillstate.effects import files
from skillstate.examples import ledger
from skillstate.store.sqlite import SQLiteStore
from tests.cli_support import run_env
from tests.control_support import rejecting, ticker
from tests.workers_support import ROOT

AGENTS = {
    "SKILLSTATE_AGENTS": "tests.control_support:ticker,tests.control_support:rejecting",
    "PYTHONPATH": str(ROOT),  # the agents live in the tests package
}


@pytest.fixture
def db(tmp_path: Path) -> SQLiteStore:
    return SQLiteStore(tmp_path / "state.db")


@pytest.mark.parametrize("command", ["send", "cancel"])
def test_help(tmp_path: Path, command: str) -> None:
    """Both commands document themselves."""
    code, out, _ = run_env(tmp_path, None, command, "--help")
    assert code == 0
    assert f"Usage: skillstate {command}" in out


def test_send_runs_an_idle_task_here(tmp_path: Path, db: SQLiteStore) -> None:
    """Nobody holds the task: the message is taken and the task runs on to its end here."""
    views = tmp_path / "views.jsonl"
    runtime = Runtime(ticker, db)
    runtime.start("t", target=3, log=str(views))
    runtime.run("t", max_steps=1)
    code, out, err = run_env(tmp_path, AGENTS, "send", "t", "count carefully", "--actor", "al")
    assert code == 0, err
    assert "completed" in out
    shown = [json.loads(line) for line in views.read_text().splitlines()]
    assert [v["messages"][0]["text"] for v in shown if v["messages"]] == ["count carefully"]
    assert db.inbox("t")[0].body == {"text": "count carefully", "actor": "al"}


def test_send_to_a_held_task_leaves_it_to_the_holder(tmp_path: Path, db: SQLiteStore) -> None:
    """A live lease: posted, not driven here; the holder takes it at its next boundary."""
    Runtime(ticker, db).start("t", target=3)
    db.claim("t", "w1@elsewhere:1", 60)
    code, out, err = run_env(tmp_path, AGENTS, "send", "t", "hi")
    assert code == 0, err
    assert "message 1 posted; w1@elsewhere:1 holds t" in out
    assert db.load("t").version == 1
    assert [m.body["text"] for m in db.inbox("t")] == ["hi"]


def test_send_to_a_rejecting_agent_is_one_line(tmp_path: Path, db: SQLiteStore) -> None:
    """Refused at once, exit 2, one line, nothing posted."""
    Runtime(rejecting, db).start("r")
    code, _, err = run_env(tmp_path, AGENTS, "send", "r", "hello")
    assert code == 2
    assert err.count("\n") == 1
    assert "rejects messages" in err
    assert db.inbox("r") == []


def test_cancel_an_idle_task(tmp_path: Path, db: SQLiteStore) -> None:
    """Cancelled at once, with the reason and actor; a second cancel is refused."""
    runtime = Runtime(ticker, db)
    runtime.start("t", target=5)
    runtime.run("t", max_steps=2)
    code, out, err = run_env(
        tmp_path, AGENTS, "cancel", "t", "--reason", "duplicate", "--actor", "ops", "-q"
    )
    assert code == 0, err
    assert "cancelled by ops: duplicate" in out
    assert runtime.load("t").status.value == "cancelled"
    assert [e.actor for e in db.events("t")].count("policy") == 2
    code, _, err = run_env(tmp_path, AGENTS, "cancel", "t")
    assert code == 2
    assert err.count("\n") == 1
    assert "has ended (cancelled)" in err
    code, out, _ = run_env(tmp_path, None, "tasks", "--status", "cancelled")
    assert code == 0
    assert "t " in out


def test_cancel_compensate_on_the_ledger_demo(tmp_path: Path, db: SQLiteStore) -> None:
    """``demo ledger`` stopped after 3 entries, then ``cancel --compensate``: no live
    entry is left in the ledger file, the effects undone newest first."""
    path = tmp_path / "ledger.txt"
    code, _, err = run_env(
        tmp_path, None, "demo", "ledger", "--task-id", "L", "--steps", "6",
        "--ledger", str(path), "--max-steps", "3", "-q",
    )  # fmt: skip
    assert code == 4, err  # stopped by --max-steps: 3 of 6 entries written
    assert len(files.entries(path)) == 3
    code, out, err = run_env(tmp_path, None, "cancel", "L", "--compensate", "-q")
    assert code == 0, err
    assert "3 effect(s) undone" in out
    assert files.entries(path) == []
    undone = [e.action["key"] for e in db.events("L") if e.action.get("kind") == "compensate"]
    assert [key.split(":")[1][0] for key in undone] == ["3", "2", "1"]
    assert Runtime(ledger.agent, db).load("L").status.value == "cancelled"


def test_cancel_of_an_unknown_task(tmp_path: Path, db: SQLiteStore) -> None:
    """One line, exit 2."""
    code, _, err = run_env(tmp_path, AGENTS, "cancel", "nope")
    assert code == 2
    assert err.count("\n") == 1
