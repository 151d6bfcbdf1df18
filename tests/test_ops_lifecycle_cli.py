"""`skillstate delete`, `prune --older-than` / `--finished-older-than` and `gc` from the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skillstate.cli import _main
from skillstate.errors import TaskNotFound
from skillstate.events import Event
from skillstate.store.sqlite import SQLiteStore
from tests.test_ops_lifecycle import write


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = _main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def url(tmp_path: Path) -> str:
    store = SQLiteStore(tmp_path / "state.db")
    ref = store.put_artifact(b"only t1 has this")
    write(store, "t1", 3, evidence=[ref])
    write(store, "t2", 2)
    state = {**store.load("t2").state, "version": 3, "status": "completed"}
    store.commit(
        "t2", 2, state, Event(task_id="t2", version=3, actor="runtime", action={"kind": "end"})
    )
    store.put_artifact(b"nobody references this")
    store.close()
    return f"sqlite:///{tmp_path / 'state.db'}"


def _open(url: str) -> SQLiteStore:
    return SQLiteStore(url.removeprefix("sqlite:///"))


def test_delete_dry_run_then_yes(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Without --yes the list is shown and nothing goes; with it, the task goes and the
    audit log shows who and why."""
    code, out, _ = run(capsys, "delete", "t1", "--reason", "GDPR erasure", "--store", url)
    assert code == 0
    assert "would delete t1  (3 versions, running)" in out
    assert "nothing deleted" in out
    assert _open(url).load("t1").version == 3

    code, out, _ = run(
        capsys, "delete", "t1", "--reason", "GDPR erasure", "--actor", "dpo", "--yes",
        "--store", url,
    )  # fmt: skip
    assert code == 0, out
    assert "deleted t1: 3 versions, 3 events, 0 messages, 1 artifacts" in out
    with pytest.raises(TaskNotFound):
        _open(url).load("t1")
    code, out, _ = run(capsys, "log", "skillstate:audit:deletions", "--store", url)
    assert code == 0
    assert "dpo" in out
    assert "GDPR erasure" in out


def test_delete_needs_a_reason(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """No --reason: exit 2, one line, nothing deleted."""
    code, _out, err = run(capsys, "delete", "t1", "--yes", "--store", url)
    assert code == 2
    assert "--reason" in err
    assert len(err.strip().splitlines()) == 1
    assert _open(url).load("t1").version == 3


def test_delete_by_filter(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """--status selects; naming ids and filtering at once is refused."""
    code, out, _ = run(
        capsys, "delete", "--status", "completed", "--reason", "retention", "--yes",
        "--store", url,
    )  # fmt: skip
    assert code == 0
    assert "deleted t2" in out
    assert _open(url).tasks() == ["skillstate:audit:deletions", "t1"]
    code, _, err = run(capsys, "delete", "t1", "--status", "x", "--reason", "r", "--store", url)
    assert code == 2
    assert "name the tasks" in err


def test_prune_older_than_and_keep_last(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The per-task form still works; --older-than across --all keeps recent versions."""
    code, out, _ = run(capsys, "prune", "t1", "--keep-last", "1", "--store", url)
    kept = len(_open(url).checkpoints("t1"))
    assert code == 0
    assert f"task t1: kept {kept} checkpoints, deleted {3 - kept}" in out
    code, out, _ = run(capsys, "prune", "--all", "--older-than", "30d", "--store", url)
    assert code == 0
    assert "0 checkpoints deleted" in out
    code, _, err = run(capsys, "prune", "--older-than", "30d", "--store", url)
    assert code == 2
    assert "--all" in err


def test_prune_finished_older_than(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """--finished-older-than goes through delete: a reason, a dry run, then --yes."""
    code, out, _ = run(capsys, "prune", "--finished-older-than", "0s", "--store", url)
    assert code == 2
    code, out, _ = run(
        capsys, "prune", "--finished-older-than", "1s", "--reason", "90-day retention",
        "--store", url,
    )  # fmt: skip
    assert code == 0
    # t2 was committed less than a second ago at most: either listed or not yet old.
    assert "nothing deleted" in out or "nothing to delete" in out
    assert _open(url).load("t2").version == 3


def test_gc(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """--dry-run lists, gc removes the unreferenced artifact only (grace 0)."""
    code, out, _ = run(capsys, "gc", "--dry-run", "--grace", "0s", "--store", url)
    assert code == 0
    assert "would remove 1" in out
    code, out, _ = run(capsys, "gc", "--grace", "0s", "--json", "--store", url)
    assert code == 0
    result = json.loads(out)
    assert (result["stored"], result["referenced"], len(result["removed"])) == (2, 1, 1)
    assert len(_open(url).artifact_refs()) == 1
