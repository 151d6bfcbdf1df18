"""``skillstate memory``: list a scope with provenance, forget a fact, prune old ones.

Bad input is one line on stderr and exit 2, and writes nothing.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from skillstate import Runtime
from skillstate.cli import _main
from skillstate.memory import Remembered, load_memory, record_id, remember
from skillstate.memory import record as memory_record
from skillstate.store.sqlite import SQLiteStore
from tests import memory_agent

SCOPE = memory_agent.SCOPE
T0 = datetime(2026, 12, 3, 5, 0, tzinfo=timezone.utc)


@pytest.fixture
def url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A store where task A remembered ``preferred_carrier``, and Z (later) a brief fact."""
    now = [T0]
    monkeypatch.setattr(memory_record, "now", lambda: now[0])
    monkeypatch.setenv("SKILLSTATE_ACTOR", "ana")
    store = SQLiteStore(tmp_path / "state.db")
    runtime = Runtime(memory_agent.agent, store)
    runtime.start("A")
    runtime.run("A")
    now[0] = T0 + timedelta(days=3)
    brief = Remembered(
        scope=SCOPE, key="window", value="9-10", version=4, skill="slot", step="0004-slot", ttl=60
    )
    remember(store, SCOPE, [brief], task="Z")
    store.close()
    now[0] = T0 + timedelta(days=3, seconds=30)
    return f"sqlite:///{tmp_path / 'state.db'}"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = _main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_memory_lists_a_scope_with_provenance(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "memory", SCOPE, "--store", url)
    assert code == 0
    assert out.splitlines() == [
        'window = "9-10"  from Z@4 by slot  written 2026-12-06 05:00:00 UTC  '
        "expires 2026-12-06 05:01:00 UTC",
        'preferred_carrier = "DHL"  from A@2 by learn  written 2026-12-03 05:00:00 UTC',
        f"2 facts in {SCOPE} (record version 2) of {url}",
    ]
    code, out, _ = run(capsys, "memory", "show", SCOPE, "--store", url, "--json")
    rows = json.loads(out)
    assert [(r["key"], r["task"], r["version"], r["skill"], r["step"]) for r in rows] == [
        ("window", "Z", 4, "slot", "0004-slot"),
        ("preferred_carrier", "A", 2, "learn", "0002-learn"),
    ]
    code, out, _ = run(capsys, "memory", "--store", url)
    assert (code, out) == (0, f"{SCOPE}  2 facts  version 2\n")


def test_forget_is_audited_with_the_person_and_the_reason(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(
        capsys, "memory", "forget", SCOPE, "preferred_carrier", "--reason", "moved", "--store", url
    )
    assert (code, out) == (0, f"forgot preferred_carrier in {SCOPE} (it came from A@2 by learn)\n")
    store = SQLiteStore(Path(url.removeprefix("sqlite:///")))
    last = store.events(record_id(SCOPE))[-1]
    assert (last.actor, last.action) == (
        "human",
        {"kind": "forget", "key": "preferred_carrier", "reason": "moved", "by": "ana"},
    )
    assert [f.key for f in load_memory(store, SCOPE).facts] == ["window"]
    store.close()


def test_prune_drops_expired_and_old_facts(
    url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, _ = run(capsys, "memory", "prune", "--older-than", "2d", "--store", url)
    assert (code, out) == (0, f"pruned 1 from {SCOPE}: preferred_carrier\n")
    monkeypatch.setattr(memory_record, "now", lambda: T0 + timedelta(days=4))
    code, out, _ = run(capsys, "memory", "prune", SCOPE, "--store", url)
    assert (code, out) == (0, f"pruned 1 from {SCOPE}: window\n")
    code, out, _ = run(capsys, "memory", "prune", "--store", url)
    assert (code, out) == (0, "nothing to prune\n")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["memory", "orders"], "error: invalid memory scope 'orders': expected agent:NAME"),
        (["memory", "forget", SCOPE, "nope", "--reason", "x"], "no fact 'nope' in memory scope"),
        (["memory", "forget", SCOPE, "window"], "Missing option '--reason'"),
        (["memory", "forget", SCOPE, "window", "--reason", " "], "needs a reason"),
        (["memory", "prune", "--older-than", "soon"], "error: invalid duration 'soon'"),
        (["memory", "prune", "--older-than", "0d"], "it must be longer than zero"),
        (["memory", "prune", "team:a b"], "invalid memory scope 'team:a b'"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    url: str, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    store = SQLiteStore(Path(url.removeprefix("sqlite:///")))
    before = load_memory(store, SCOPE).version
    code, _, err = run(capsys, *args, "--store", url)
    assert code == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert load_memory(store, SCOPE).version == before
    store.close()


def test_a_store_that_does_not_exist_is_not_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "none.db"
    code, _, err = run(capsys, "memory", SCOPE, "--store", f"sqlite:///{missing}")
    assert code == 2
    assert "no store at" in err
    assert not missing.exists()
