"""Approval gates across processes: ``kill -9`` between the approval and the effect,
two approver processes racing, the commands, a Redis-broker worker, the inspector,
and the how-to's example.

Each subprocess test parks a task in-process (``tests.approval_agent``: a payment over
100 waits for approval), then drives it with real ``skillstate`` processes and counts
what reached the world: lines in the ledger file.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skillstate import Runtime
from skillstate.effects import files
from skillstate.state.secrets import generate_key
from skillstate.store import open_store
from skillstate.store.base import Store
from tests import approval_agent
from tests.cli_support import wait_for
from tests.contract.backends import (
    REDIS_URL,
    URLS,
    drop_postgres_schemas,
    drop_redis_data,
    postgres_url_for,
    redis_reachable,
    require_service,
)

ROOT = Path(__file__).resolve().parent.parent
REF = "tests.approval_agent:agent"
AGENT = approval_agent.agent
STORES = ["sqlite", pytest.param("postgres", marks=pytest.mark.services)]
STORES.append(pytest.param("redis", marks=pytest.mark.services))


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A key for the sealed password (subprocesses inherit it); services dropped after."""
    monkeypatch.setenv("SKILLSTATE_KEY", generate_key())
    for name in ("SKILLSTATE_STORE", "SKILLSTATE_BROKER", "SKILLSTATE_ACTOR"):
        monkeypatch.delenv(name, raising=False)
    yield
    drop_postgres_schemas()
    drop_redis_data()


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``skillstate ARGS`` from the repository root (so ``tests.`` imports)."""
    return subprocess.run(
        [sys.executable, "-m", "skillstate", *args],
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "200", **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _park(url: str, tmp_path: Path, task_id: str = "t1", **fields: Any) -> int:
    """A task waiting for approval of a 250 payment; returns its version."""
    store = open_store(url)
    try:
        runtime = Runtime(AGENT, store)
        runtime.start(task_id, ledger=str(tmp_path / "ledger.txt"), **fields)
        result = runtime.run(task_id)
        assert result.stopped == "waiting_approval"
        return result.state.version
    finally:
        store.close()


def _head(url: str, task_id: str = "t1") -> dict[str, Any]:
    store = open_store(url)
    try:
        return store.load(task_id).state
    finally:
        store.close()


def _kinds(url: str, task_id: str = "t1") -> list[str]:
    store = open_store(url)
    try:
        return [str(e.action.get("kind")) for e in store.events(task_id)]
    finally:
        store.close()


def _payments(tmp_path: Path, task_id: str = "t1") -> list[str]:
    path = str(tmp_path / "ledger.txt")
    return [line for key, line in files.entries(path) if key.startswith(f"{task_id}:")]


class TestKill9:
    @pytest.mark.parametrize("when", ["before", "after"])
    @pytest.mark.parametrize("name", STORES)
    def test_one_payment_after_a_kill(self, tmp_path: Path, name: str, when: str) -> None:
        """``approve`` commits, then its process is SIGKILLed before the effect touched
        the ledger (``before``) or right after it did (``after``): ``resume`` makes the
        payment exist exactly once (the probe finds the one already made)."""
        url = URLS[name](tmp_path)
        _park(url, tmp_path)
        killed = _cli("approve", "t1", "--store", url, "--agent", REF, "--actor", "alice",
                      "--reason", "ok", "-q", APPROVAL_KILL=when)  # fmt: skip
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        head = _head(url)
        assert head["status"] == "running"
        assert head["pending_approval"] is None
        assert head["pending_effect"] is not None  # the approval is in, its effect is not
        assert _kinds(url)[-1] == "approve"
        assert _payments(tmp_path) == ([] if when == "before" else ["pay 250 to bob"])
        resumed = _cli("resume", "t1", "--store", url, "--agent", REF, "-q")
        assert resumed.returncode == 0, resumed.stderr
        assert _head(url)["status"] == "completed"
        assert _payments(tmp_path) == ["pay 250 to bob"]
        assert _kinds(url).count("effect_resumed") == 1
        assert "effect" not in _kinds(url)


class TestRacingProcesses:
    @pytest.mark.parametrize("name", STORES[:2])
    def test_two_approvers_one_payment(self, tmp_path: Path, name: str) -> None:
        """Two ``skillstate approve`` processes at once: one approves (and runs the
        task), the other exits 3 naming who approved; one payment, one completed task."""
        url = URLS[name](tmp_path)
        _park(url, tmp_path)
        procs = {
            who: subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "skillstate",
                    "approve",
                    "t1",
                    "--store",
                    url,
                    "--agent",
                    REF,
                    "--actor",
                    who,
                    "-q",
                ],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for who in ("alice", "bob")
        }
        done = {who: (p.wait(timeout=300), p.communicate()) for who, p in procs.items()}
        codes = sorted(code for code, _ in done.values())
        assert codes == [0, 3], done
        winner = next(who for who, (code, _) in done.items() if code == 0)
        loser_err = next(out[1] for code, out in done.values() if code == 3)
        pattern = (
            rf"^error: task 't1' has no pending approval \(approved by {winner} at version \d+\)$"
        )
        assert re.match(pattern, loser_err.strip()), loser_err
        assert _kinds(url).count("approve") == 1
        assert _head(url)["status"] == "completed"
        assert _payments(tmp_path) == ["pay 250 to bob"]


class TestCommands:
    def test_help(self) -> None:
        for command, options in (("approve", ("--edit", "--reason", "--actor", "--broker")),
                                 ("reject", ("--reason", "--actor", "--broker"))):  # fmt: skip
            shown = _cli(command, "--help")
            assert shown.returncode == 0, shown.stderr
            assert all(option in shown.stdout for option in options)

    def test_approve_reject_show_log_tasks(self, tmp_path: Path) -> None:
        """The card shows the call; ``tasks --status`` finds it; a bad edit is one line and
        exit 2; ``approve --edit`` runs the edited call here; ``log`` says who and why."""
        url = f"sqlite:///{tmp_path / 'state.db'}"
        version = _park(url, tmp_path)
        _park(url, tmp_path, "t2")
        listed = _cli("tasks", "--store", url, "--status", "waiting_approval")
        assert listed.returncode == 0
        assert "t1" in listed.stdout
        assert "t2" in listed.stdout
        shown = _cli("show", "t1", "--store", url)
        assert "pending approval" in shown.stdout
        assert '"password": "***"' in shown.stdout
        assert approval_agent.PASSWORD not in shown.stdout
        bad = _cli("approve", "t1", "--store", url, "--agent", REF, "--edit", "amount=5000")
        assert bad.returncode == 2
        assert bad.stderr.count("\n") == 1
        assert "Traceback" not in bad.stderr
        assert bad.stderr.startswith("error: edit refused: invalid params for 'pay': amount")
        assert _head(url)["version"] == version
        no_reason = _cli("reject", "t1", "--store", url, "--agent", REF)
        assert no_reason.returncode == 2
        assert "--reason" in no_reason.stderr
        approved = _cli("approve", "t1", "--store", url, "--agent", REF, "--edit", "amount=120",
                        "--actor", "alice", "--reason", "looks right", "-q")  # fmt: skip
        assert approved.returncode == 0, approved.stderr
        assert "completed" in approved.stdout
        assert _payments(tmp_path) == ["pay 120 to bob"]
        rejected = _cli("reject", "t2", "--store", url, "--agent", REF, "--reason", "too much",
                        "-q", SKILLSTATE_ACTOR="carol")  # fmt: skip
        assert rejected.returncode == 0, rejected.stderr
        assert _payments(tmp_path, "t2") == ["pay 50 to bob"]
        log = _cli("log", "t1", "--store", url)
        assert "approve:pay by alice: looks right" in log.stdout
        assert "reject:pay by carol: too much" in _cli("log", "t2", "--store", url).stdout

    def test_run_stops_waiting_for_approval(self, tmp_path: Path) -> None:
        url = f"sqlite:///{tmp_path / 'state.db'}"
        ran = _cli("run", REF, "--task-id", "r1", "--store", url, "--set",
                   f"ledger={tmp_path / 'ledger.txt'}", "-q")  # fmt: skip
        assert ran.returncode == 0, ran.stderr
        assert "waiting for approval" in ran.stdout
        assert "skillstate approve r1" in ran.stdout
        assert approval_agent.PASSWORD not in ran.stdout + ran.stderr
        assert _payments(tmp_path, "r1") == []


REDIS_BROKER = REDIS_URL.rsplit("/", 1)[0] + "/7"
RABBIT = os.environ.get("SKILLSTATE_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")


def _broker(name: str) -> str:
    """The broker URL for ``name``, once the service answers (else skip, or fail under
    SKILLSTATE_REQUIRE_SERVICES=1)."""
    if name == "rabbitmq":
        require_service("RabbitMQ", *_rabbit_reachable())
        return RABBIT
    require_service("Redis", *redis_reachable())
    return REDIS_BROKER


def _rabbit_reachable() -> tuple[bool, str]:
    from kombu import Connection

    try:
        with Connection(RABBIT, connect_timeout=2) as conn:
            conn.ensure_connection(max_retries=1)
    except Exception as exc:
        return False, f"{RABBIT}: {exc}"
    return True, ""


@pytest.mark.services
@pytest.mark.parametrize("broker_name", ["redis", "rabbitmq"])
@pytest.mark.parametrize("ref", [REF, "tests.tool_approval_agent:agent"], ids=["skill", "tool"])
def test_workers_wait_then_run_what_people_decide(
    tmp_path: Path, broker_name: str, ref: str
) -> None:
    """Three tasks submitted to a worker (PostgreSQL store; Redis or RabbitMQ broker) all
    stop in ``waiting_approval`` with nothing paid; ``approve --broker`` (one with an
    edit) and ``reject --broker`` enqueue them; the worker completes all three, one
    payment each. The approval is of the ``pay`` skill, or (``tool``) of the gated
    payment tool the skill calls (the edit then changes the tool's argument)."""
    pytest.importorskip("celery", reason="pip install 'skillstate[celery]'")
    broker = _broker(broker_name)
    from tests.workers_support import start_worker

    url = postgres_url_for(tmp_path)
    queue = f"skillstate-approvals-{uuid.uuid4().hex[:8]}"
    ledger = tmp_path / "ledger.txt"
    worker = start_worker(broker, url, queue, tmp_path / "worker.log", "--agent", ref)
    store = open_store(url)
    try:
        tasks = ["w0", "w1", "w2"]
        for task in tasks:
            sent = _cli("submit", ref, "--task-id", task, "--queue", queue, "--store", url,
                        "--broker", broker, "--set", f"ledger={ledger}")  # fmt: skip
            assert sent.returncode == 0, sent.stderr
        _wait_for_statuses(store, tasks, "waiting_approval", worker, tmp_path)
        assert [_payments(tmp_path, t) for t in tasks] == [[], [], []]
        asked = [store.load(t).state["pending_approval"]["tool"] for t in tasks]
        assert [a and a["tool"] for a in asked] == [None if ref == REF else "send_payment"] * 3
        common = ("--store", url, "--agent", ref, "--broker", broker, "--queue", queue)
        for args in (("approve", "w0", "--reason", "fine"),
                     ("approve", "w1", "--edit", "amount=120"),
                     ("reject", "w2", "--reason", "too much")):  # fmt: skip
            decided = _cli(*args, *common, "--actor", "ops")
            assert decided.returncode == 0, decided.stderr
            assert f"enqueued to {queue}" in decided.stdout
        _wait_for_statuses(store, tasks, "completed", worker, tmp_path)
        completed = [h.task_id for h in store.heads() if h.status == "completed"]
        assert sorted(completed) == tasks
        assert [_payments(tmp_path, t) for t in tasks] == [
            ["pay 250 to bob"],
            ["pay 120 to bob"],
            ["pay 50 to bob"],
        ]
    finally:
        store.close()
        worker.kill()
        worker.wait()
        from kombu import Connection

        with Connection(broker) as conn:
            conn.default_channel.queue_delete(queue)


def _wait_for_statuses(
    store: Store, tasks: list[str], status: str, worker: subprocess.Popen[bytes], logs: Path
) -> None:
    def reached() -> bool:
        found = {h.task_id: h.status for h in store.heads()}
        return all(found.get(t) == status for t in tasks)

    try:
        wait_for(reached, process=worker, timeout=180, what=f"every task {status}")
    except AssertionError:
        log = (logs / "worker.log").read_text(errors="replace")[-3000:]
        raise AssertionError(f"not every task reached {status}; worker log:\n{log}") from None


class TestInspector:
    TOKEN = "approvals-token-31c9"

    @pytest.fixture
    def client(self, tmp_path: Path) -> Iterator[Any]:
        pytest.importorskip("starlette", reason="pip install '.[ui]'")
        from tests.ui_support import ui_client

        url = f"sqlite:///{tmp_path / 'state.db'}"
        _park(url, tmp_path, "t1")
        _park(url, tmp_path, "t2")
        store = open_store(url)
        Runtime(AGENT, store).start("t3", ledger=str(tmp_path / "ledger.txt"), amount=80)
        store.close()
        with ui_client(url, allow_edit=True, token=self.TOKEN, agents=(REF,)) as opened:
            yield opened

    def _done(self, client: Any, task: str) -> None:
        wait_for(lambda: client.get(f"/api/head/{task}").json()["status"] == "completed",
                 timeout=60, what=f"{task} completed")  # fmt: skip

    def test_page_forms_and_api(self, client: Any, tmp_path: Path) -> None:
        page = client.get("/tasks/t1").text
        assert "Waiting for approval" in page
        for form in ("approve-form", "edit-approve-form", "reject-form"):
            assert f'id="{form}"' in page
        assert approval_agent.PASSWORD not in page
        shown = client.get("/api/tasks/t1").json()["approval"]
        assert shown["skill"] == "pay"
        assert shown["params"]["password"] == "***"
        listed = client.get("/api/tasks?status=waiting_approval").json()["rows"]
        assert sorted(r["task_id"] for r in listed) == ["t1", "t2"]
        refused = client.post("/api/actions/approve/t1", json={"edits": {"amount": 130}})
        assert refused.status_code == 401
        bad = client.post("/api/actions/approve/t1", json={"edits": {"amount": 9999}},
                          headers={"X-Skillstate-Token": self.TOKEN})  # fmt: skip
        assert bad.status_code == 400
        assert "amount" in bad.json()["error"]
        assert client.get("/api/head/t1").json()["status"] == "waiting_approval"
        approved = client.post(
            "/api/actions/approve/t1",
            json={"edits": {"amount": 130}, "reason": "ok", "actor": "dana"},
            headers={"X-Skillstate-Token": self.TOKEN},
        )
        assert approved.status_code == 200, approved.text
        self._done(client, "t1")
        assert _payments(tmp_path, "t1") == ["pay 130 to bob"]
        rows = client.get("/api/tasks/t1").json()["timeline"]["rows"]
        row = next(r for r in rows if r["kind"] == "approve")
        assert row["detail"] == 'approved by dana; edited {"amount": 130}'
        assert row["reason"] == "ok"
        again = client.post("/api/actions/approve/t1", json={},
                            headers={"X-Skillstate-Token": self.TOKEN})  # fmt: skip
        assert again.status_code == 409
        assert "approved by dana" in again.json()["error"]

    def test_reject_form(self, client: Any, tmp_path: Path) -> None:
        sent = client.post("/actions/reject/t2", data={"reason": "no", "token": self.TOKEN},
                           follow_redirects=False)  # fmt: skip
        assert sent.status_code == 303, sent.text
        self._done(client, "t2")
        assert _payments(tmp_path, "t2") == ["pay 50 to bob"]
        rows = client.get("/api/tasks/t2").json()["timeline"]["rows"]
        assert any(r["detail"] == "rejected by inspector" for r in rows)


def test_the_how_to_runs(tmp_path: Path) -> None:
    """docs/control.md, section Approvals: its example prints what its comments say."""
    text = (ROOT / "docs" / "control.md").read_text(encoding="utf-8")
    section = text.split("## Approvals", 1)[1].split("\n## ", 1)[0]
    [example, *_] = python_blocks_of(section)
    script = tmp_path / "refunds.py"
    script.write_text(example, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "SKILLSTATE_KEY"}
    ran = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.splitlines() == [
        "waiting_approval",
        "{'amount': 300}",
        "250",
        "rejected by bob: over the limit",
        "80",
        "2",
        "human alice half of it {'amount': 250}",
    ]


def python_blocks_of(text: str) -> list[str]:
    """The python blocks of a piece of markdown (``tests.test_docs`` reads whole files)."""
    return re.findall(r"```python\n(.*?)```", text, re.DOTALL)
