"""The audit trail is complete or the damage is reported; edits past skillstate are caught.

Reproduced before:
* A garbage line in the files store's ``events.jsonl`` silently dropped that event
  from ``log``; a deleted PostgreSQL ``events`` row silently vanished; ``doctor``
  called both healthy.
* A head edited outside skillstate, stored as a full snapshot, was called healthy.
* ``doctor`` without the key called a task with sealed values "corrupted".
* A plaintext value that happened to start with ``enc:v1:`` was stored in the clear
  and then failed to load with "does not match the key".
* A lease held "forever" by another host blocked the task with no way out.
"""

from __future__ import annotations

import json
import socket
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from skillstate import AgentState, Sensitive
from skillstate.state.secrets import PREFIX, generate_key
from skillstate.store import open_store
from tests.contract.backends import POSTGRES_URL, drop_postgres_schemas, postgres_url_for
from tests.test_cli import assert_no_traceback, head_state, run_cli, store_url


@pytest.fixture(autouse=True)
def _drop() -> Iterator[None]:
    yield
    drop_postgres_schemas()


def ledger(tmp_path: Path, url: str, steps: int = 3) -> None:
    code, _, err = run_cli(
        tmp_path, "demo", "ledger", "--task-id", "L", "--steps", str(steps),
        "--ledger", str(tmp_path / "ledger.txt"), "--store", url, "-q",
    )  # fmt: skip
    assert code == 0, err


class TestGaps:
    def test_a_garbage_line_in_the_files_store_is_reported(self, tmp_path: Path) -> None:
        """events.jsonl with a line that is not an event: log and doctor exit 5, naming it."""
        url = f"file://{tmp_path / 'fs'}"
        ledger(tmp_path, url)
        events = next((tmp_path / "fs").rglob("events.jsonl"))
        lines = events.read_text().splitlines()
        lines[3] = "{this is not an event"
        events.write_text("\n".join(lines) + "\n")
        for command in ("log", "doctor"):
            code, out, err = run_cli(tmp_path, command, "L", "--store", url)
            assert code == 5, out + err
            assert_no_traceback(out, err)

    @pytest.mark.services
    def test_a_deleted_postgres_event_is_a_reported_gap(self, tmp_path: Path) -> None:
        """An events row deleted by hand: log prints the rest and exits 5; doctor names it."""
        import psycopg

        url = postgres_url_for(tmp_path)
        ledger(tmp_path, url)
        schema = url.rsplit("schema=", 1)[1]
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(
                f'DELETE FROM "{schema}".events WHERE task_id = %s AND version = 4', ("L",)
            )
        code, out, err = run_cli(tmp_path, "log", "L", "--store", url, "--json")
        assert code == 5, err
        assert [e["version"] for e in json.loads(out)] == [1, 2, 3, 5, 6, 7, 8]
        assert "the audit log has no event for version(s) 4" in err
        code, out, err = run_cli(tmp_path, "doctor", "L", "--store", url)
        assert code == 5, out + err
        assert "no event for version(s) 4" in out


class TestTampering:
    def test_an_edited_head_is_caught_and_repaired_only_on_purpose(self, tmp_path: Path) -> None:
        """A head edited in SQL (its checksum kept): doctor and resume exit 5; set needs --force."""
        url = store_url(tmp_path)
        ledger(tmp_path, url)
        conn = sqlite3.connect(tmp_path / "state.db")
        conn.execute("UPDATE tasks SET head = json_set(head, '$.target', 2) WHERE task_id = 'L'")
        conn.commit()
        conn.close()
        code, out, err = run_cli(tmp_path, "doctor", "L", "--store", url)
        assert code == 5, out + err
        assert "checksum does not match" in out
        code, out, err = run_cli(tmp_path, "resume", "L", "--store", url)
        assert code == 5
        assert "changed outside skillstate" in err
        code, out, err = run_cli(tmp_path, "set", "L", "target=3", "--store", url)
        assert code == 5
        assert "pass --force" in err
        code, out, err = run_cli(tmp_path, "set", "L", "target=3", "--force", "--store", url)
        assert code == 0, out + err
        code, out, _ = run_cli(tmp_path, "doctor", "L", "--store", url)
        assert code == 0, out


class OrdersLike(AgentState):
    token: Sensitive[str] | None = None


class TestSealed:
    def test_doctor_without_the_key_says_sealed_not_corrupted(self, tmp_path: Path) -> None:
        """The orders demo with a token; doctor without SKILLSTATE_KEY: exit 0, 'key needed'."""
        url = store_url(tmp_path)
        key = generate_key()
        code, _, err = run_cli_env(
            tmp_path,
            {"SKILLSTATE_KEY": key, "ORDERS_API_TOKEN": "tok-1234567890"},
            "demo", "orders", "--task-id", "O", "--store", url, "-q",
        )  # fmt: skip
        assert code == 0, err
        code, out, err = run_cli(tmp_path, "doctor", "O", "--store", url)
        assert code == 0, out + err
        assert "sealed, key needed" in out
        assert "corrupted" not in out

    def test_a_plaintext_that_looks_sealed_is_sealed(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """'enc:v1:hello' as a secret's value is encrypted like any other and reads back."""
        monkeypatch.setenv("SKILLSTATE_KEY", generate_key())
        card = OrdersLike(task_id="t", token="enc:v1:hello")
        stored = card.to_json()["token"]
        assert stored.startswith(PREFIX)
        assert "hello" not in stored
        assert OrdersLike.model_validate(card.to_json()).token == "enc:v1:hello"


class TestUnlock:
    def test_a_lease_held_forever_by_another_host(self, tmp_path: Path) -> None:
        """unlock refuses a live remote holder, clears it with --force, and logs it as human."""
        url = store_url(tmp_path)
        code, _, err = run_cli(
            tmp_path, "demo", "ledger", "--task-id", "L", "--steps", "4", "--max-steps", "2",
            "--ledger", str(tmp_path / "ledger.txt"), "--store", url, "-q",
        )  # fmt: skip
        assert code == 4, err
        store = open_store(url)
        store.claim("L", "far-away-host:4242", 10_000_000)
        store.close()
        code, _, err = run_cli(tmp_path, "resume", "L", "--store", url)
        assert code == 3
        code, _, err = run_cli(tmp_path, "unlock", "L", "--store", url)
        assert code == 3
        assert "--force" in err
        code, out, err = run_cli(tmp_path, "unlock", "L", "--force", "--store", url)
        assert code == 0, err
        assert "far-away-host:4242" in out
        events = json.loads(run_cli(tmp_path, "log", "L", "--json", "--store", url)[1])
        assert events[-1]["actor"] == "human"
        assert events[-1]["action"]["kind"] == "unlock"
        code, _, err = run_cli(tmp_path, "resume", "L", "--store", url, "-q")
        assert code == 0, err
        assert head_state(url, "L")["appended"] == 4

    def test_a_lease_of_a_dead_local_process_needs_no_force(self, tmp_path: Path) -> None:
        """A holder that is a process of this host that has exited is cleared without --force."""
        url = store_url(tmp_path)
        ledger(tmp_path, url)
        store = open_store(url)
        store.claim("L", f"{socket.gethostname()}:999999", 10_000)
        store.close()
        code, out, err = run_cli(tmp_path, "unlock", "L", "--store", url)
        assert code == 0, out + err


def test_an_unreachable_store_is_exit_7(tmp_path: Path) -> None:
    """A PostgreSQL URL pointing at a closed port: exit 7 with one line, not 1."""
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    url = f"postgresql://postgres@127.0.0.1:{port}/test?schema=x&connect_timeout=2"
    code, out, err = run_cli(tmp_path, "show", "L", "--store", url)
    assert code == 7, out + err
    assert err.count("\n") == 1
    assert_no_traceback(out, err)


def run_cli_env(cwd: Path, env: dict[str, str], *args: str) -> tuple[int, str, str]:
    from tests.test_human_rules import run_cli_env as run

    return run(cwd, env, *args)
