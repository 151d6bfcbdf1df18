"""Rollback and fork know about effects that reached the world (issue: rollback re-ran effects).

Reproduced before the fix: ``demo ledger --task-id L; rollback L --to 10; resume L``
appended "entry 6" again and again, because rollback ignored effects already in the
world and the idempotency key held the version (every re-done step got a new one).
Each test runs the CLI on SQLite and on PostgreSQL.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from skillstate.effects import files
from skillstate.engine.rewind import rollback_task
from skillstate.engine.runtime import Runtime
from skillstate.errors import CompensationFailed, UsageError
from skillstate.examples import ledger
from skillstate.store import open_store
from tests.contract.backends import drop_postgres_schemas, postgres_url_for
from tests.test_cli import assert_no_traceback, head_state, log_json, run_cli, store_url

STORES: dict[str, Callable[[Path], str]] = {
    "sqlite": store_url,
    "postgres": postgres_url_for,
}


@pytest.fixture(autouse=True)
def _drop_schemas() -> Iterator[None]:
    yield
    drop_postgres_schemas()


@pytest.fixture(params=sorted(STORES))
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store URL on each backend, with a completed 10-entry ledger task ``L``."""
    store: str = STORES[request.param](tmp_path)
    code, _, err = run_cli(
        tmp_path, "demo", "ledger", "--task-id", "L", "--ledger", str(tmp_path / "ledger.txt"),
        "--store", store, "-q",
    )  # fmt: skip
    assert code == 0, err
    return store


def entries(tmp_path: Path) -> list[str]:
    """The ledger's live entries (``entry N``), in file order, keys left out."""
    return [line for _, line in files.entries(tmp_path / "ledger.txt")]


def keys(tmp_path: Path) -> list[str]:
    return [key for key, _ in files.entries(tmp_path / "ledger.txt")]


def kinds(events: list[dict[str, Any]], since: int) -> list[tuple[str, str]]:
    return [
        (str(e["action"]["kind"]), str(e["action"].get("key", "")))
        for e in events
        if e["version"] > since
    ]


def test_rollback_over_effects_is_refused_and_names_them(tmp_path: Path, url: str) -> None:
    """Rolling back past appended entries is exit 2, names their keys, and writes nothing."""
    head = head_state(url, "L")
    before = (tmp_path / "ledger.txt").read_text()
    code, out, err = run_cli(tmp_path, "rollback", "L", "--to", "10", "--store", url)
    assert code == 2, out + err
    assert_no_traceback(out, err)
    assert err.count("\n") == 1
    assert "would cross 6 effect(s)" in err
    assert "L:10-append_entry-" in err  # the newest first
    assert "--compensate" in err
    assert "--keep-effects" in err
    assert head_state(url, "L") == head
    assert (tmp_path / "ledger.txt").read_text() == before


def test_the_reported_repro_keep_effects_repeats_nothing(tmp_path: Path, url: str) -> None:
    """rollback --to 10 --keep-effects, resume: every entry once; re-done steps found by key."""
    code, _, err = run_cli(
        tmp_path, "rollback", "L", "--to", "10", "--keep-effects", "--store", url
    )
    assert code == 0, err
    rolled = head_state(url, "L")["version"]
    code, _, err = run_cli(tmp_path, "resume", "L", "--store", url, "-q")
    assert code == 0, err
    assert entries(tmp_path) == [f"entry {n}" for n in range(1, 11)]
    assert head_state(url, "L")["status"] == "completed"
    redone = [
        e for e in log_json(tmp_path, "L", url) if e["version"] > rolled and "key" in e["action"]
    ]
    assert len(redone) == 6  # entries 5..10 (5 was in flight at version 10)
    assert all(e["action"].get("found_by_probe") for e in redone)


def test_compensate_undoes_newest_first_then_each_entry_is_redone_once(
    tmp_path: Path, url: str
) -> None:
    """rollback --compensate: each crossed effect is undone (an event each), then redone once."""
    code, out, err = run_cli(
        tmp_path, "rollback", "L", "--to", "10", "--compensate", "--store", url
    )
    assert code == 0, err
    assert "6 effect(s) undone" in out
    assert entries(tmp_path) == [f"entry {n}" for n in range(1, 5)]
    events = log_json(tmp_path, "L", url)
    rolled = next(e for e in events if e["action"]["kind"] == "rollback")
    undone = kinds(events, rolled["version"])
    assert [k for k, _ in undone] == ["compensate"] * 6
    assert [key.split(":")[1].split("-")[0] for _, key in undone] == ["10", "9", "8", "7", "6", "5"]
    code, _, err = run_cli(tmp_path, "resume", "L", "--store", url, "-q")
    assert code == 0, err
    assert entries(tmp_path) == [f"entry {n}" for n in range(1, 11)]
    live = keys(tmp_path)
    # An undone key is never reused: a server that remembers keys would answer it with
    # the undone effect's result.
    assert all(key.endswith("~1") for key in live[4:])
    assert len(set(live)) == 10
    # A ledger is never rewritten: the undone lines are still there, retracted.
    raw = (tmp_path / "ledger.txt").read_text().splitlines()
    assert len(raw) == 10 + 6 + 6


def test_fork_over_effects_needs_keep_effects(tmp_path: Path, url: str) -> None:
    """fork refuses (naming the source's later effects) unless --keep-effects; no compensate."""
    code, _, err = run_cli(tmp_path, "fork", "L", "--at", "5", "--new-id", "F", "--store", url)
    assert code == 2
    assert "made 8 effect(s) after version 5" in err
    assert "L:10-append_entry-" in err
    code, _, err = run_cli(
        tmp_path, "fork", "L", "--at", "5", "--new-id", "F", "--compensate", "--store", url
    )
    assert code == 2
    assert "rollback L --to 5 --compensate" in err
    code, _, err = run_cli(
        tmp_path, "fork", "L", "--at", "5", "--new-id", "F", "--keep-effects", "--store", url
    )
    assert code == 0, err
    assert head_state(url, "F")["appended"] == 2


def test_an_effect_in_flight_blocks_rollback(tmp_path: Path, url: str) -> None:
    """With an intent not yet settled at the head, rollback says to resume first."""
    code, _, err = run_cli(
        tmp_path, "rollback", "L", "--to", "10", "--keep-effects", "--store", url
    )  # the restored head (version 10) has entry 5 in flight
    assert code == 0, err
    code, _, err = run_cli(tmp_path, "rollback", "L", "--to", "4", "--keep-effects", "--store", url)
    assert code == 2
    assert "effect in flight" in err


def test_compensation_resumes_where_a_failure_stopped_it(
    tmp_path: Path, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compensation that fails stays queued; the next run finishes the queue, then the task."""
    calls = Counter[str]()
    original = files.retract

    def flaky(path: str, key: str, reason: str = "") -> bool:
        calls["undo"] += 1
        if calls["undo"] == 3:
            raise OSError("disk went away")
        return original(path, key, reason)

    monkeypatch.setattr(files, "retract", flaky)  # what the rollback hook calls
    store = open_store(url)
    try:
        rollback_task(store, "L", 10, effects="compensate", agent=ledger.agent)
        with pytest.raises(CompensationFailed, match="disk went away"):
            Runtime(ledger.agent, store).compensate("L")
        head = store.load("L").state
        assert len(head["compensations"]) == 4  # two undone; the failed one stays queued
        assert head["errors"][-1]["kind"] == "compensation_failed"
        with pytest.raises(UsageError, match="resume it"):
            rollback_task(store, "L", 4, effects="keep")
        result = Runtime(ledger.agent, store).run("L")  # settles the queue first
    finally:
        store.close()
    assert result.stopped == "completed"
    assert calls["undo"] == 7  # six compensations, one of them twice
    assert entries(tmp_path) == [f"entry {n}" for n in range(1, 11)]
