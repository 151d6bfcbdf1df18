"""``skillstate tasks`` (alias ``list``): every task of a store, read without its agent.

The stores are filled in-process through the Store protocol (cards are plain JSON:
their ``agent`` names modules that must never be imported); the command runs in a
subprocess, like every CLI test.
"""

from __future__ import annotations

import json
import sqlite3
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from skillstate.events import Event
from skillstate.store import open_store
from skillstate.store.base import Store
from tests.test_cli import assert_no_traceback, run_cli, store_url

# Importing this module would leave a marker file: the listing must never do it.
_TRAP = "import pathlib\npathlib.Path('imported.txt').write_text('the agent was imported')\n"
TRAP_AGENT = "trap_agent:agent"


def card(task_id: str, status: str, step: str, agent: str = TRAP_AGENT) -> dict[str, Any]:
    """A stored card as a runtime writes one (version 1), with just the listed fields."""
    return {
        "task_id": task_id,
        "version": 1,
        "status": status,
        "current_step": step,
        "agent": agent,
        "facts": {"anything": [1, 2]},
    }


def create(store: Store, state: dict[str, Any]) -> None:
    task_id = state["task_id"]
    event = Event(task_id=task_id, version=1, actor="runtime", action={"kind": "create"})
    store.commit(task_id, 0, state, event)


@pytest.fixture
def filled(tmp_path: Path) -> str:
    """A store with four tasks in different statuses, one leased; the trap module in cwd."""
    (tmp_path / "trap_agent.py").write_text(_TRAP)
    url = store_url(tmp_path)
    store = open_store(url)
    try:
        create(store, card("b-wait", "waiting_user", "ask_priority"))
        create(store, card("a-run", "running", "triage"))
        create(store, card("c-done", "completed", "done", agent="other.mod:agent"))
        create(store, card("d-fail", "failed", "triage"))
        store.claim("a-run", "host-1:4242", 600)
    finally:
        store.close()
    return url


def tasks_json(tmp_path: Path, *args: str) -> list[dict[str, Any]]:
    """``skillstate tasks --json ARGS`` parsed, asserting it succeeded."""
    code, out, err = run_cli(tmp_path, "tasks", "--json", *args)
    assert code == 0, err
    rows = json.loads(out)
    assert isinstance(rows, list)
    return rows


def test_tasks_lists_every_task_with_its_fields(tmp_path: Path, filled: str) -> None:
    """The table has one row per task, sorted by id: status, step, version, agent, lease."""
    code, out, err = run_cli(tmp_path, "tasks", "--store", filled)
    assert code == 0, err
    assert_no_traceback(out, err)
    lines = out.splitlines()
    header = ["TASK", "STATUS", "STEP", "VERSION", "UPDATED", "(UTC)", "AGENT", "LEASE"]
    assert lines[0].split() == header
    assert [line.split()[0] for line in lines[1:5]] == ["a-run", "b-wait", "c-done", "d-fail"]
    assert lines[1].split()[1:4] == ["running", "triage", "1"]
    assert "host-1:4242 (live until" in lines[1]
    assert lines[2].split()[1:3] == ["waiting_user", "ask_priority"]
    assert TRAP_AGENT in lines[2]
    assert "other.mod:agent" in lines[3]
    assert lines[-1] == f"4 tasks in {filled}"


def test_tasks_never_imports_an_agent(tmp_path: Path, filled: str) -> None:
    """The cards name an importable module that leaves a marker; listing leaves none."""
    for args in ((), ("--json",), ("--agent", TRAP_AGENT)):
        code, _, err = run_cli(tmp_path, "tasks", *args, "--store", filled)
        assert code == 0, err
    assert not (tmp_path / "imported.txt").exists()


def test_list_is_an_alias_of_tasks(tmp_path: Path, filled: str) -> None:
    """skillstate list prints what skillstate tasks prints."""
    listed = run_cli(tmp_path, "list", "--store", filled)
    tasks = run_cli(tmp_path, "tasks", "--store", filled)
    assert listed[0] == 0, listed[2]
    assert listed[1].splitlines()[:5] == tasks[1].splitlines()[:5]


def test_tasks_json_has_every_field(tmp_path: Path, filled: str) -> None:
    """--json: one object per task, the lease with its worker, expiry and liveness."""
    rows = {row["task_id"]: row for row in tasks_json(tmp_path, "--store", filled)}
    assert list(rows) == ["a-run", "b-wait", "c-done", "d-fail"]
    run = rows["a-run"]
    assert run["status"] == "running"
    assert run["current_step"] == "triage"
    assert run["version"] == 1
    assert run["agent"] == TRAP_AGENT
    assert datetime.fromisoformat(run["updated_at"]).tzinfo is not None
    assert run["lease"]["worker"] == "host-1:4242"
    assert run["lease"]["live"] is True
    assert run["lease"]["generation"] == 1
    assert run["problem"] is None
    assert rows["b-wait"]["lease"] is None


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--status", "running"), ["a-run"]),
        (("--status", "running", "--status", "failed"), ["a-run", "d-fail"]),
        (("--agent", "other.mod:agent"), ["c-done"]),
        (("--agent", TRAP_AGENT, "--status", "completed"), []),
        (("--status", "unreadable"), []),
    ],
)
def test_tasks_filters_by_status_and_agent(
    tmp_path: Path, filled: str, args: tuple[str, ...], expected: list[str]
) -> None:
    """--status (repeatable) and --agent keep only the matching tasks."""
    rows = tasks_json(tmp_path, *args, "--store", filled)
    assert [row["task_id"] for row in rows] == expected


def test_tasks_without_matches_says_so(tmp_path: Path, filled: str) -> None:
    """A filter nothing matches prints one line naming the store, exit 0."""
    code, out, err = run_cli(tmp_path, "tasks", "--status", "created", "--store", filled)
    assert code == 0, err
    assert out == f"no tasks match in {filled}\n"


def test_tasks_unknown_status_is_usage_error(tmp_path: Path, filled: str) -> None:
    """An unknown --status is exit 2, one line listing the statuses there are."""
    code, out, err = run_cli(tmp_path, "tasks", "--status", "done", "--store", filled)
    assert code == 2
    assert_no_traceback(out, err)
    assert err.count("\n") == 1
    assert "'done'" in err
    assert "waiting_user" in err


def test_tasks_of_an_empty_store(tmp_path: Path) -> None:
    """A store without tasks: one line naming it, exit 0."""
    url = store_url(tmp_path)
    open_store(url).close()
    code, out, err = run_cli(tmp_path, "tasks", "--store", url)
    assert code == 0, err
    assert out == f"no tasks yet in {url}\n"


def test_unreadable_head_is_listed_with_its_reason(tmp_path: Path, filled: str) -> None:
    """A head that is not JSON shows as unreadable with the reason; the others still list."""
    path = filled.removeprefix("sqlite:///")
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE tasks SET head = '{not json' WHERE task_id = 'c-done'")
    code, out, err = run_cli(tmp_path, "tasks", "--store", filled)
    assert code == 0, err
    assert_no_traceback(out, err)
    row = next(line for line in out.splitlines() if line.startswith("c-done"))
    assert row.split()[1] == "unreadable"
    assert "c-done: unreadable: stored state is not valid JSON" in out
    assert out.splitlines()[-1] == f"4 tasks in {filled}"
    rows = tasks_json(tmp_path, "--status", "unreadable", "--store", filled)
    assert [r["task_id"] for r in rows] == ["c-done"]
    assert rows[0]["status"] == "unreadable"
    assert rows[0]["problem"].startswith("stored state is not valid JSON")
    assert rows[0]["version"] == 1


def test_tampered_head_is_listed_as_stored(tmp_path: Path, filled: str) -> None:
    """A head edited outside skillstate lists as stored: listing does not verify checksums."""
    path = filled.removeprefix("sqlite:///")
    tampered = json.dumps(card("d-fail", "completed", "edited"))
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE tasks SET head = ? WHERE task_id = 'd-fail'", (tampered,))
    rows = tasks_json(tmp_path, "--store", filled, "--status", "completed")
    assert [(r["task_id"], r["current_step"]) for r in rows] == [
        ("c-done", "done"),
        ("d-fail", "edited"),
    ]


def test_expired_lease_is_shown_as_expired(tmp_path: Path, filled: str) -> None:
    """A lease whose holder stopped renewing still shows, marked expired."""
    store = open_store(filled)
    try:
        lease = store.claim("d-fail", "gone-worker", 0.05)
    finally:
        store.close()
    while datetime.now(timezone.utc) <= lease.expires_at:  # until the clock passes it
        time.sleep(0.01)
    code, out, err = run_cli(tmp_path, "tasks", "--store", filled)
    assert code == 0, err
    row = next(line for line in out.splitlines() if line.startswith("d-fail"))
    assert "gone-worker (expired" in row
    rows = {r["task_id"]: r for r in tasks_json(tmp_path, "--store", filled)}
    assert rows["d-fail"]["lease"]["live"] is False


def test_tasks_escapes_control_characters(tmp_path: Path) -> None:
    """A task id with a newline stays on its row (escaped), never breaking the table."""
    url = store_url(tmp_path)
    store = open_store(url)
    try:
        create(store, card("two\nlines", "running", "x"))
    finally:
        store.close()
    code, out, err = run_cli(tmp_path, "tasks", "--store", url)
    assert code == 0, err
    assert out.splitlines()[1].startswith("two\\nlines ")
    assert len(out.splitlines()) == 3


def test_tasks_on_a_files_store(tmp_path: Path) -> None:
    """The files backend lists the same way (any store URL works)."""
    url = f"file://{tmp_path / 'fs'}"
    store = open_store(url)
    try:
        create(store, card("f1", "running", "triage"))
    finally:
        store.close()
    rows = tasks_json(tmp_path, "--store", url)
    assert [(r["task_id"], r["status"], r["current_step"]) for r in rows] == [
        ("f1", "running", "triage")
    ]


def test_ten_thousand_tasks_list_quickly(tmp_path: Path) -> None:
    """Store.heads() lists 10,000 SQLite tasks in about 0.1 s (bounded at 2 s for busy hosts)."""
    url = store_url(tmp_path)
    store = open_store(url)
    try:
        big = card("x", "running", "triage") | {"facts": {"notes": ["n" * 80] * 20}}
        for i in range(10_000):
            create(store, big | {"task_id": f"t{i:05d}"})
        started = time.perf_counter()
        heads = store.heads()
        elapsed = time.perf_counter() - started
    finally:
        store.close()
    assert len(heads) == 10_000
    assert all(h.status == "running" and h.problem is None for h in heads)
    assert elapsed < 2.0, f"heads() of 10,000 tasks took {elapsed:.2f} s"
