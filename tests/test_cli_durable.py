"""The durable-state commands end to end: prune, doctor, set, edit, fork, keygen, exit codes."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import pytest

from skillstate.store import open_store
from skillstate.store.sqlite import _unpack
from tests.test_cli import assert_no_traceback, head_state, log_json, run_cli, store_url


@pytest.fixture
def ledger_task(tmp_path: Path) -> str:
    """A completed ledger task ``L`` (5 entries) in a SQLite store under tmp_path."""
    store = store_url(tmp_path)
    code, _, err = run_cli(
        tmp_path,
        "demo",
        "ledger",
        "--task-id",
        "L",
        "--steps",
        "5",
        "--ledger",
        str(tmp_path / "ledger.txt"),
        "--store",
        store,
        "-q",
    )
    assert code == 0, err
    return store


def test_ledger_demo_writes_each_entry_once(tmp_path: Path, ledger_task: str) -> None:
    """The ledger demo completes with one line per entry, keyed by task and step."""
    lines = (tmp_path / "ledger.txt").read_text().splitlines()
    assert [line.split("\t", 1)[1] for line in lines] == [f"entry {n}" for n in range(1, 6)]
    assert all(line.startswith("L:") for line in lines)
    assert head_state(ledger_task, "L")["appended"] == 5


def test_doctor_prune_and_doctor_again(tmp_path: Path, ledger_task: str) -> None:
    """doctor passes, prune frees checkpoints, doctor still passes, the head is unchanged."""
    head = head_state(ledger_task, "L")
    code, out, err = run_cli(tmp_path, "doctor", "L", "--store", ledger_task)
    assert code == 0, err
    assert "healthy" in out
    code, out, err = run_cli(tmp_path, "prune", "L", "--keep-last", "2", "--store", ledger_task)
    assert code == 0, err
    assert "deleted" in out
    db = open_store(ledger_task)
    kept = [c.version for c in db.checkpoints("L")]
    db.close()
    assert head["version"] in kept
    assert len(kept) < head["version"]
    code, out, _ = run_cli(tmp_path, "doctor", "L", "--store", ledger_task)
    assert code == 0
    assert "healthy" in out
    assert head_state(ledger_task, "L") == head
    assert len(log_json(tmp_path, "L", ledger_task)) == head["version"]  # events are kept


@pytest.mark.parametrize(
    ("digest", "fragment"),
    [
        ("digest", "checksum does not match"),  # an edit past skillstate: the checksum
        ("NULL", "appended"),  # a record from before checksums: the schema check
    ],
)
def test_doctor_reports_corruption_with_exit_5(
    tmp_path: Path, ledger_task: str, digest: str, fragment: str
) -> None:
    """A hand-broken snapshot makes doctor exit 5 and name the version and the problem."""
    conn = sqlite3.connect(tmp_path / "state.db")
    # The snapshot may be stored compressed (a BLOB): edit its JSON and store it back as
    # TEXT, which the store also reads (the column's type says which form it is).
    [(stored,)] = conn.execute("SELECT snapshot FROM versions WHERE task_id = 'L' AND version = 1")
    snapshot = json.loads(_unpack("L", 1, stored) or "")
    snapshot["appended"] = "many"
    conn.execute(
        f"UPDATE versions SET snapshot = ?, digest = {digest} WHERE task_id = 'L' AND version = 1",
        (json.dumps(snapshot),),
    )
    conn.commit()
    conn.close()
    code, out, err = run_cli(tmp_path, "doctor", "L", "--store", ledger_task)
    assert code == 5, out + err
    assert "corrupted" in out
    assert fragment in out
    assert_no_traceback(out, err)


def test_broken_head_stops_resume_with_exit_5(tmp_path: Path, ledger_task: str) -> None:
    """A corrupted head refuses to run: one line, exit 5, nothing written."""
    conn = sqlite3.connect(tmp_path / "state.db")
    conn.execute("UPDATE tasks SET head = json_set(head, '$.status', 'sleeping'), digest = NULL")
    conn.commit()
    before = conn.execute("SELECT head, version FROM tasks").fetchone()
    conn.close()
    code, out, err = run_cli(tmp_path, "resume", "L", "--store", ledger_task)
    assert code == 5, out + err
    assert err.count("\n") == 1
    assert "status" in err
    assert "nothing was written" in err
    conn = sqlite3.connect(tmp_path / "state.db")
    assert conn.execute("SELECT head, version FROM tasks").fetchone() == before
    conn.close()


def test_set_commits_as_human_and_refuses_bad_values(tmp_path: Path, ledger_task: str) -> None:
    """set validates; a good value is one human commit, a bad one exits 2 and writes nothing."""
    code, out, err = run_cli(
        tmp_path, "set", "L", "target=7", "facts.note=checked by hand", "--store", ledger_task
    )
    assert code == 0, err
    state = head_state(ledger_task, "L")
    assert state["target"] == 7
    assert state["facts"] == {"note": "checked by hand"}
    last = log_json(tmp_path, "L", ledger_task)[-1]
    assert last["actor"] == "human"
    assert last["action"]["kind"] == "set"
    for bad in ("target=lots", "version=1", "nosuch=1", "novalue", "target=[unclosed"):
        code, out, err = run_cli(tmp_path, "set", "L", bad, "--store", ledger_task)
        assert code == 2, (bad, out, err)
        assert err.startswith("error: "), err
        assert err.count("\n") == 1, err
    assert head_state(ledger_task, "L") == state


def _editor(tmp_path: Path, body: str) -> str:
    script = tmp_path / "editor.py"
    script.write_text(
        "import sys, pathlib\np = pathlib.Path(sys.argv[1])\ntext = p.read_text()\n" + body
    )
    return f"{sys.executable} {script}"


def test_edit_in_editor(tmp_path: Path, ledger_task: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """edit commits a validated change, reports no change, and refuses invalid YAML."""
    version = head_state(ledger_task, "L")["version"]
    monkeypatch.setenv(
        "EDITOR", _editor(tmp_path, "p.write_text(text.replace('target: 5', 'target: 9'))")
    )
    code, out, err = run_cli(tmp_path, "edit", "L", "--store", ledger_task)
    assert code == 0, err
    assert head_state(ledger_task, "L")["target"] == 9
    assert head_state(ledger_task, "L")["version"] == version + 1

    monkeypatch.setenv("EDITOR", _editor(tmp_path, "pass"))
    code, out, _ = run_cli(tmp_path, "edit", "L", "--store", ledger_task)
    assert code == 0
    assert "no changes" in out

    monkeypatch.setenv("EDITOR", _editor(tmp_path, "p.write_text('target: [oops')"))
    code, out, err = run_cli(tmp_path, "edit", "L", "--store", ledger_task)
    assert code == 2
    assert "not valid YAML" in err
    monkeypatch.setenv("EDITOR", _editor(tmp_path, "p.write_text(text + 'appended: many\\n')"))
    code, out, err = run_cli(tmp_path, "edit", "L", "--store", ledger_task)
    assert code == 2
    assert "appended" in err
    assert head_state(ledger_task, "L")["version"] == version + 1


def test_fork_and_resume_the_fork(tmp_path: Path, ledger_task: str) -> None:
    """fork --at starts a new task from that version; resuming it completes on its own."""
    code, _out, err = run_cli(
        tmp_path, "fork", "L", "--at", "3", "--new-id", "F", "--store", ledger_task
    )
    assert code == 2  # L appended entries 2..5 after version 3: named, nothing written
    assert "L:2-append_entry" in err
    assert "--keep-effects" in err
    assert_no_traceback("", err)
    code, _out, err = run_cli(
        tmp_path,
        "fork",
        "L",
        "--at",
        "3",
        "--new-id",
        "F",
        "--keep-effects",
        "--store",
        ledger_task,
    )
    assert code == 0, err
    forked = head_state(ledger_task, "F")
    assert forked["version"] == 1
    assert forked["appended"] == 1
    code, _, err = run_cli(tmp_path, "resume", "F", "--store", ledger_task, "-q")
    assert code == 0, err
    assert head_state(ledger_task, "F")["appended"] == 5
    lines = (tmp_path / "ledger.txt").read_text().splitlines()
    assert sum(1 for line in lines if line.startswith("F:")) == 4  # entries 2..5


def test_a_task_held_by_a_live_worker_exits_3(tmp_path: Path, ledger_task: str) -> None:
    """resume while another live worker holds the lease: exit 3, one line, nothing written."""
    run_cli(tmp_path, "set", "L", "target=6", "--store", ledger_task)
    db = open_store(ledger_task)
    db.claim("L", "another-host:4242", 300)
    db.close()
    version = head_state(ledger_task, "L")["version"]
    code, out, err = run_cli(tmp_path, "resume", "L", "--store", ledger_task)
    assert code == 3, out + err
    assert "another-host:4242" in err
    assert err.count("\n") == 1
    assert head_state(ledger_task, "L")["version"] == version


def test_keygen_prints_a_usable_key(tmp_path: Path) -> None:
    """keygen prints one Fernet key."""
    from cryptography.fernet import Fernet

    code, out, err = run_cli(tmp_path, "keygen")
    assert code == 0, err
    Fernet(out.strip().encode())  # raises if it is not a key


@pytest.mark.parametrize(
    "command",
    [
        "prune nope --store {store}",
        "prune L --keep-last 0 --store {store}",
        "doctor nope --store {store}",
        "set nope a=1 --store {store}",
        "edit nope --store {store}",
        "fork nope --at 1 --new-id x --store {store}",
        "fork L --at 99 --new-id x --store {store}",
        "fork L --at 2 --new-id L --store {store}",
        "fork L --at 1 --new-id 'has space' --store {store}",
        "demo ticket --steps 3 --store {store}",
        "demo ledger --steps -1 --store {store}",
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, ledger_task: str, command: str) -> None:
    """Bad arguments to the durable-state commands: exit 2, one error line, no traceback."""
    import shlex

    before = head_state(ledger_task, "L")
    code, out, err = run_cli(tmp_path, *shlex.split(command.format(store=ledger_task)))
    assert code == 2, (command, out, err)
    assert err.startswith("error: "), err
    assert err.count("\n") == 1, err
    assert_no_traceback(out, err)
    assert head_state(ledger_task, "L") == before
    assert json.dumps(before)  # unchanged and still loadable


def test_two_workers_resuming_one_task(tmp_path: Path, ledger_task: str) -> None:
    """Two resumes at once: one runs the task, the other exits 3 and writes nothing."""
    import subprocess

    from tests.test_cli import ENTRY

    ledger = tmp_path / "ledger2.txt"
    start = ["demo", "ledger", "--task-id", "L2", "--steps", "8", "--step-delay", "0.3"]
    code, _, err = run_cli(
        tmp_path, *start, "--ledger", str(ledger), "--max-steps", "1", "--store", ledger_task
    )
    assert code == 4, err  # stopped by the step budget, resumable
    args = [sys.executable, "-c", ENTRY, "resume", "L2", "--store", ledger_task, "-q"]
    procs = [
        subprocess.Popen(
            args, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    errs = [p.communicate(timeout=600)[1] for p in procs]
    results = [(p.returncode, err) for p, err in zip(procs, errs, strict=True)]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 3], results
    loser = next(err for code, err in results if code == 3)
    assert loser.startswith("error: ")
    assert "held by worker" in loser
    lines = ledger.read_text().splitlines()
    assert [line.split("\t", 1)[1] for line in lines] == [f"entry {n}" for n in range(1, 9)]
    assert head_state(ledger_task, "L2")["appended"] == 8


def test_edit_refuses_to_overwrite_a_concurrent_commit(
    tmp_path: Path, ledger_task: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Someone commits while the editor is open: the edit exits 3 and is not written."""
    from tests.test_cli import ENTRY

    other = f"{sys.executable} -c {ENTRY!r} set L target=6 --store {ledger_task}"
    body = (
        "import subprocess, shlex\n"
        f"subprocess.run(shlex.split({other!r}), check=True)\n"
        "p.write_text(text.replace('target: 5', 'target: 9'))\n"
    )
    monkeypatch.setenv("EDITOR", _editor(tmp_path, body))
    code, out, err = run_cli(tmp_path, "edit", "L", "--store", ledger_task)
    assert code == 3, out + err
    assert "another writer committed first" in err
    assert head_state(ledger_task, "L")["target"] == 6


def test_replay_shows_the_timeline(tmp_path: Path, ledger_task: str) -> None:
    """replay lists every step with its state changes; a clean task has no bad step."""
    code, out, err = run_cli(tmp_path, "replay", "L", "--store", ledger_task, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["first_bad_step"] is None
    assert len(data["steps"]) == head_state(ledger_task, "L")["version"]
    changed = [s for s in data["steps"][1:] if "appended" in s["changes"]]
    assert [s["changes"]["appended"]["after"] for s in changed] == [1, 2, 3, 4, 5]


def test_replay_names_the_first_bad_step(tmp_path: Path) -> None:
    """A vague priority ("asap!!") fails the ticket's verify: replay names that step."""
    store = store_url(tmp_path)
    replies = ["-i", "The VPN keeps dropping", "-i", "asap!!", "-i", "P1"]
    code, _, err = run_cli(
        tmp_path, "demo", "ticket", "--task-id", "T", *replies, "-q", "--store", store
    )
    assert code == 0, err
    code, out, err = run_cli(tmp_path, "replay", "T", "--store", store, "--json")
    data = json.loads(out)
    bad = next(s for s in data["steps"] if s["version"] == data["first_bad_step"])
    assert bad["verdict"].startswith("failed")
    code, out, _ = run_cli(tmp_path, "replay", "T", "--store", store)
    assert code == 0
    assert f"first bad step: v{data['first_bad_step']}" in out
