"""``skillstate schedule`` and ``skillstate beat`` on the command line (in-process).

Every refusal is one line on stderr, exit code 2, and nothing written: not even the
store is created.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skillstate.cli import _main
from skillstate.control.schedule_registry import REGISTRY, load_registry
from skillstate.store import open_store

LEDGER = "skillstate.examples.ledger:agent"
VAULT = "tests.test_schedules:vault"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = _main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SKILLSTATE_BROKER", raising=False)
    monkeypatch.delenv("SKILLSTATE_KEY", raising=False)
    store = f"sqlite:///{tmp_path / 'state.db'}"
    monkeypatch.setenv("SKILLSTATE_STORE", store)
    return store


@pytest.mark.parametrize("command", ["schedule", "beat"])
def test_help(capsys: pytest.CaptureFixture[str], command: str) -> None:
    """The held-out check runs ``skillstate schedule --help``."""
    code, out, _ = run(capsys, command, "--help")
    assert code == 0
    assert "Usage: skillstate " + command in out


def test_add_list_remove(capsys: pytest.CaptureFixture[str], url: str) -> None:
    code, out, err = run(
        capsys, "schedule", LEDGER, "--cron", "*/5 * * * *", "--set", "target=3", "--queue", "q1"
    )
    assert (code, err) == (0, "")
    assert "scheduled ledger: cron */5 * * * * (UTC)" in out
    assert "task ledger-YYYYMMDDTHHMMZ" in out
    code, out, _ = run(capsys, "schedule", LEDGER, "--every", "30", "--name", "fast")
    assert code == 0
    code, out, _ = run(capsys, "schedule", "--list")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("fast  every 30s  agent skillstate.examples.ledger:agent")
    assert lines[1].startswith("ledger  cron */5 * * * *")
    assert 'fields {"target": 3}' in lines[1]
    assert lines[-1] == f"2 schedules in {url}"
    code, out, _ = run(capsys, "schedule", "--list", "--json")
    listed = json.loads(out)
    assert [(s["name"], s["queue"], s["fields"]) for s in listed] == [
        ("fast", "skillstate", {}),
        ("ledger", "q1", {"target": 3}),
    ]
    code, out, _ = run(capsys, "schedule", "--remove", "ledger")
    assert (code, out.strip()) == (
        0,
        "removed schedule ledger (cron */5 * * * *); the tasks it made stay",
    )
    store = open_store(url)
    try:
        assert sorted(load_registry(store).schedules) == ["fast"]
        assert [e.action["kind"] for e in store.events(REGISTRY)] == [
            "schedule_add",
            "schedule_add",
            "schedule_remove",
        ]
    finally:
        store.close()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([LEDGER, "--cron", "61 * * * *"], "invalid cron expression '61 * * * *'"),
        ([LEDGER, "--cron", "* * *"], "it needs five fields"),
        ([LEDGER, "--cron", "0 0 30 2 *"], "never occurs in month_of_year"),
        ([LEDGER], "say when it ticks: --cron EXPR or --every SECONDS"),
        ([LEDGER, "--cron", "* * * * *", "--every", "5"], "say when it ticks"),
        ([LEDGER, "--every", "0"], "Invalid value for '--every'"),
        ([LEDGER, "--every", "5", "--set", "target=-1"], "target: Input should be greater"),
        ([LEDGER, "--every", "5", "--set", "nope=1"], "nope: Extra inputs are not permitted"),
        ([LEDGER, "--every", "5", "--set", "target"], "expected PATH=VALUE"),
        ([LEDGER, "--every", "5", "--set", "a.b=1"], "top-level fields"),
        ([LEDGER, "--every", "5", "--set", "task_id=x"], "a schedule sets it"),
        ([LEDGER, "--every", "5", "--name", "a b"], "invalid schedule name 'a b'"),
        ([VAULT, "--every", "5", "--set", "token=x"], "field 'token' is sensitive"),
        (
            [VAULT, "--every", "5", "--set", "endpoint=postgresql://admin:S3cretPw@db/x"],
            "the value looks like a secret",
        ),
        (["nope.module:agent", "--every", "5"], "nope.module"),
        ([], "give an AGENT to schedule, or --list, or --remove NAME"),
        (["--list", "--remove", "x"], "one of them"),
        (["--list", "--every", "5"], "go with an AGENT"),
        (["--remove", "x", "--json"], "--json goes with --list"),
    ],
)
def test_bad_input_writes_nothing(
    capsys: pytest.CaptureFixture[str], url: str, tmp_path: Path, args: list[str], says: str
) -> None:
    code, _, err = run(capsys, "schedule", *args)
    assert code == 2
    assert err.startswith("error: ")
    assert says in err
    assert err.count("\n") == 1
    assert not (tmp_path / "state.db").exists()


def test_a_name_twice_and_an_unknown_name(capsys: pytest.CaptureFixture[str], url: str) -> None:
    assert run(capsys, "schedule", LEDGER, "--every", "5")[0] == 0
    code, _, err = run(capsys, "schedule", LEDGER, "--cron", "* * * * *")
    assert (code, err.strip()) == (
        2,
        "error: schedule 'ledger' exists; remove it first (skillstate schedule --remove "
        "ledger) or choose another --name",
    )
    code, _, err = run(capsys, "schedule", "--remove", "nightly")
    assert code == 2
    assert "no schedule 'nightly' in" in err
    store = open_store(url)
    try:
        assert load_registry(store).version == 1
    finally:
        store.close()


def test_listing_an_empty_or_missing_store(
    capsys: pytest.CaptureFixture[str], url: str, tmp_path: Path
) -> None:
    code, _, err = run(capsys, "schedule", "--list")
    assert code == 2
    assert "no store" in err.lower()
    assert not (tmp_path / "state.db").exists()
    open_store(url).close()
    assert run(capsys, "schedule", "--list") == (0, f"no schedules in {url}\n", "")


def test_beat_needs_a_broker(capsys: pytest.CaptureFixture[str], url: str) -> None:
    code, _, err = run(capsys, "beat")
    assert (code, err.strip()) == (
        2,
        "error: no broker: pass --broker URL or set SKILLSTATE_BROKER",
    )


def test_the_registry_is_no_task(capsys: pytest.CaptureFixture[str], url: str) -> None:
    """The schedules record lives beside the tasks under a reserved id: task lists leave
    it out, and no task (a run, a fork) can be created there and clobber it."""
    from skillstate.engine.runtime import Runtime
    from skillstate.errors import UsageError
    from skillstate.examples import ledger

    assert run(capsys, "schedule", LEDGER, "--every", "30", "--name", "fast")[0] == 0
    code, out, _ = run(capsys, "tasks")
    assert REGISTRY not in out
    assert run(capsys, "demo", "ledger", "--quiet", "--task-id", "L1")[0] == 0
    code, out, _ = run(capsys, "tasks", "--json")
    assert [row["task_id"] for row in json.loads(out)] == ["L1"]
    code, _, err = run(capsys, "run", LEDGER, "--task-id", REGISTRY)
    assert code == 2
    assert err.strip() == (
        "error: task ids starting with 'skillstate:' are skillstate's own records"
    )
    code, _, err = run(capsys, "fork", "L1", "--at", "2", "--new-id", "skillstate:x")
    assert code == 2, err
    store = open_store(url)
    try:
        with pytest.raises(UsageError, match="skillstate's own records"):
            Runtime(ledger.agent, store).start("skillstate:other")
        assert sorted(load_registry(store).schedules) == ["fast"]
    finally:
        store.close()
