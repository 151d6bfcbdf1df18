"""Audit identity (issue 29): every person's commit records who (``--actor``, else
``$SKILLSTATE_ACTOR``, else the OS user) and why (``--reason``), typed in the event.

Each command runs in process (``skillstate.cli._main``) against a task staged for it;
the event it commits must carry ``by`` and ``reason``.
"""

from __future__ import annotations

import getpass
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from skillstate import Runtime
from skillstate.cli import _main
from skillstate.events import Event
from skillstate.state.secrets import generate_key
from skillstate.store import open_store
from skillstate.store.base import Store
from tests import approval_agent, definition_support, memory_agent, waiting_agent

TICKET = "skillstate.examples.ticket:agent"
WHY = "ticket #4711: customer asked"


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SKILLSTATE_KEY", generate_key())  # approvals seal a secret param
    monkeypatch.delenv("SKILLSTATE_ACTOR", raising=False)
    monkeypatch.delenv("SKILLSTATE_BROKER", raising=False)


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'state.db'}"


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    db = open_store(url)
    yield db
    db.close()


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = _main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------------- staging


@dataclass
class Case:
    """A command staged on a store: the argv (without --actor/--reason/--store), and
    where its audited event lands."""

    argv: list[str]
    task: str
    kind: str
    extra: list[str] | None = None


def _ticket(store: Store, task: str = "t1") -> None:
    """A ticket task waiting for the user's first answer."""
    from skillstate.engine.agent import load_agent

    runtime = Runtime(load_agent(TICKET), store)
    runtime.start(task)
    assert runtime.run(task).stopped == "waiting_user"


def _stage_set(store: Store, tmp: Path) -> Case:
    _ticket(store)
    return Case(["set", "t1", "facts.note=by hand"], "t1", "set")


def _stage_edit(store: Store, tmp: Path) -> Case:
    import yaml

    _ticket(store)
    card = dict(store.load("t1").state)
    card["facts"] = {"note": "edited"}
    (tmp / "card.yaml").write_text(yaml.safe_dump(card), encoding="utf-8")
    return Case(["edit", "t1", "--file", str(tmp / "card.yaml")], "t1", "edit")


def _stage_rollback(store: Store, tmp: Path) -> Case:
    _ticket(store)
    return Case(["rollback", "t1", "--to", "1"], "t1", "rollback")


def _stage_fork(store: Store, tmp: Path) -> Case:
    _ticket(store)
    return Case(["fork", "t1", "--at", "1", "--new-id", "f1"], "f1", "fork")


def _stage_reply(store: Store, tmp: Path) -> Case:
    _ticket(store)
    return Case(["reply", "t1", "My VPN keeps dropping.", "-q"], "t1", "reply")


def _parked(store: Store, tmp: Path) -> None:
    runtime = Runtime(approval_agent.agent, store)
    runtime.start("t1", ledger=str(tmp / "ledger.txt"))
    assert runtime.run("t1").stopped == "waiting_approval"


def _stage_approve(store: Store, tmp: Path) -> Case:
    _parked(store, tmp)
    agent = "tests.approval_agent:agent"
    return Case(["approve", "t1", "--agent", agent, "-q"], "t1", "approve")


def _stage_reject(store: Store, tmp: Path) -> Case:
    _parked(store, tmp)
    agent = "tests.approval_agent:agent"
    return Case(["reject", "t1", "--agent", agent, "-q"], "t1", "reject")


def _stage_cancel(store: Store, tmp: Path) -> Case:
    _ticket(store)
    return Case(["cancel", "t1", "-q"], "t1", "cancel")


def _stage_send(store: Store, tmp: Path) -> Case:
    _ticket(store)
    return Case(["send", "t1", "also: it is urgent", "-q"], "t1", "inbox")


def _stage_signal(store: Store, tmp: Path) -> Case:
    runtime = Runtime(waiting_agent.agent, store)
    runtime.start("t1", expect_payment=True, ledger=str(tmp / "ledger.txt"))
    assert runtime.run("t1").stopped == "waiting"
    data = json.dumps({"amount": 12.5, "reference": "INV-1"})
    agent = "tests.waiting_agent:agent"
    argv = ["signal", "t1", "payment_received", "--data", data, "--agent", agent, "-q"]
    return Case(argv, "t1", "signal")


def _stage_unlock(store: Store, tmp: Path) -> Case:
    _ticket(store)
    store.claim("t1", "some-worker@elsewhere", ttl=600)
    return Case(["unlock", "t1", "--force"], "t1", "unlock")


def _stage_rekey(store: Store, tmp: Path) -> Case:
    _ticket(store)
    return Case(["rekey", "t1"], "skillstate:audit:rekey", "rekey")


def _stage_accept_definition(store: Store, tmp: Path) -> Case:
    runtime = Runtime(definition_support.v1, store)
    runtime.start("t1")
    runtime.run("t1", max_steps=1)
    agent = "tests.definition_support:v1_fetch2"
    argv = ["resume", "t1", "--agent", agent, "--accept-definition", "-q"]
    return Case(argv, "t1", "definition")


def _stage_extract_accept(store: Store, tmp: Path) -> Case:
    from tests.test_extract_cli import MESSAGES

    (tmp / "chat.json").write_text(json.dumps(MESSAGES), encoding="utf-8")
    out = str(tmp / "p.yaml")
    assert _main(["extract", str(tmp / "chat.json"), "--agent", TICKET, "-o", out]) == 0
    argv = ["extract", "--accept", out, "--agent", TICKET, "--task-id", "x1", "--yes"]
    return Case(argv, "x1", "create")


def _stage_forget(store: Store, tmp: Path) -> Case:
    from skillstate.memory import record_id

    runtime = Runtime(memory_agent.agent, store)
    runtime.start("A")
    runtime.run("A")
    scope = memory_agent.SCOPE
    return Case(["memory", "forget", scope, "preferred_carrier"], record_id(scope), "forget")


STAGES: dict[str, Callable[[Store, Path], Case]] = {
    "set": _stage_set,
    "edit": _stage_edit,
    "rollback": _stage_rollback,
    "fork": _stage_fork,
    "reply": _stage_reply,
    "approve": _stage_approve,
    "reject": _stage_reject,
    "cancel": _stage_cancel,
    "send": _stage_send,
    "signal": _stage_signal,
    "unlock": _stage_unlock,
    "rekey": _stage_rekey,
    "accept-definition": _stage_accept_definition,
    "extract --accept": _stage_extract_accept,
    "memory forget": _stage_forget,
}


def _audited(store: Store, case: Case) -> Event:
    """The newest event of the case's kind (an approval's request is the policy's)."""
    found = [e for e in store.events(case.task) if e.action.get("kind") == case.kind]
    assert found, [e.action.get("kind") for e in store.events(case.task)]
    return found[-1]


# ---------------------------------------------------------------------- by and why


@pytest.mark.parametrize("name", list(STAGES))
def test_each_command_records_who_and_why(
    name: str, store: Store, url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--actor`` and ``--reason`` land in the event, typed (``by``, ``reason``)."""
    case = STAGES[name](store, tmp_path)
    capsys.readouterr()
    code, out, err = run(
        capsys, *case.argv, "--actor", "ops-alice", "--reason", WHY, "--store", url
    )
    assert code == 0, (out, err)
    event = _audited(store, case)
    assert (event.by, event.reason) == ("ops-alice", WHY)


@pytest.mark.parametrize("name", ["set", "rollback", "unlock", "rekey", "signal", "send"])
def test_the_environment_then_the_os_user(
    name: str,
    *,
    store: Store,
    url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without ``--actor``: ``$SKILLSTATE_ACTOR``; without either: the OS user."""
    case = STAGES[name](store, tmp_path)
    monkeypatch.setenv("SKILLSTATE_ACTOR", "env-bob")
    code, out, err = run(capsys, *case.argv, "--store", url)
    assert code == 0, (out, err)
    first = _audited(store, case)
    assert (first.by, first.reason) == ("env-bob", None)
    # The flag wins over the environment.
    if name in ("set", "rekey"):
        code, out, err = run(capsys, *case.argv, "--actor", "flag-carol", "--store", url)
        assert code == 0, (out, err)
        assert _audited(store, case).by == "flag-carol"
        monkeypatch.delenv("SKILLSTATE_ACTOR")
        code, out, err = run(capsys, *case.argv, "--store", url)
        assert code == 0, (out, err)
        assert _audited(store, case).by == getpass.getuser()


BAD = [
    (["--actor", "alice\nmallory"], "--actor refused: it must be one line of printable characters"),
    (["--actor", "x" * 101], "--actor refused: it is 101 characters (at most 100)"),
    (["--actor", "  "], "--actor refused: it is empty"),
    (["--reason", "one\ntwo"], "--reason refused: it must be one line of printable characters"),
    (["--reason", "r" * 1001], "--reason refused: it is 1,001 characters (at most 1,000)"),
    (["--actor", "bidi\u202eevil"], "--actor refused: it must be one line of printable characters"),
]


@pytest.mark.parametrize("name", ["set", "rollback", "fork", "unlock", "rekey", "signal"])
@pytest.mark.parametrize(("given", "message"), BAD)
def test_a_bad_identity_is_one_line_exit_2_and_writes_nothing(
    name: str,
    given: list[str],
    message: str,
    *,
    store: Store,
    url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    case = STAGES[name](store, tmp_path)
    before = {t: len(store.events(t)) for t in store.tasks()}
    lease = store.lease("t1")
    code, out, err = run(capsys, *case.argv, *given, "--store", url)
    assert code == 2, (out, err)
    assert err.strip().splitlines() == [f"error: {message}; nothing was written"]
    assert {t: len(store.events(t)) for t in store.tasks()} == before
    assert store.lease("t1") == lease  # unlock cleared nothing
    assert not store.inbox("t1")  # nothing was posted either


def test_a_bad_environment_identity_names_the_variable(
    store: Store, url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    case = _stage_set(store, tmp_path)
    monkeypatch.setenv("SKILLSTATE_ACTOR", "tab\there")
    code, _, err = run(capsys, *case.argv, "--store", url)
    assert code == 2
    assert err.strip() == (
        "error: $SKILLSTATE_ACTOR refused: it must be one line of printable characters; "
        "nothing was written"
    )


# ---------------------------------------------------------------------- log shows it


def test_log_shows_who_and_why(
    store: Store, url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    case = _stage_set(store, tmp_path)
    code, _, err = run(capsys, *case.argv, "--actor", "ops-alice", "--reason", WHY, "--store", url)
    assert code == 0, err
    code, out, _ = run(capsys, "log", "t1", "--store", url, "--json")
    assert code == 0
    rows = json.loads(out)
    assert (rows[-1]["by"], rows[-1]["reason"]) == ("ops-alice", WHY)
    # The runtime's own commits record nobody; the task's creation (a library call
    # here) records the OS user.
    assert all(row["by"] is None for row in rows if row["actor"] in ("policy", "runtime"))
    code, out, _ = run(capsys, "log", "t1", "--store", url)
    assert code == 0
    assert "by / why" in out
    assert "ops-alice" in out
    assert all(word in out for word in WHY.split())  # a narrow table wraps the cell


def test_rekey_is_in_the_stores_audit_record(
    store: Store, url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """rekey rewrites bodies without a version: its record is ``skillstate:audit:rekey``,
    one version per run, readable with ``log`` and healthy under ``doctor``."""
    _ticket(store)
    _ticket(store, "t2")
    for who in ("ops-alice", "ops-bob"):
        code, _, err = run(capsys, "rekey", "--all", "--actor", who, "--store", url)
        assert code == 0, err
    events = store.events("skillstate:audit:rekey")
    # --all leaves the audit records (they hold no sealed value) alone.
    assert [(e.version, e.by, e.action["tasks"]) for e in events] == [
        (1, "ops-alice", 2),
        (2, "ops-bob", 2),
    ]
    assert events[0].action["names"] == ["t1", "t2"]
    code, out, _ = run(capsys, "log", "skillstate:audit:rekey", "--store", url, "--json")
    assert code == 0
    assert [row["by"] for row in json.loads(out)] == ["ops-alice", "ops-bob"]


# ---------------------------------------------------------------------- old events


def test_old_events_load_and_verify(
    store: Store, url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An event written without ``by``/``reason`` (every event before issue 29) loads
    with ``None``, its stored text is unchanged by the new fields, and ``doctor`` finds
    the task healthy before and after a new, audited commit."""
    _ticket(store)
    old = store.events("t1")
    assert all(e.by is None and e.reason is None for e in old)
    text = old[0].model_dump_json(exclude={"patch"}, exclude_none=True)
    assert '"by"' not in text  # the same bytes as before
    assert '"reason"' not in text
    assert Event.model_validate_json(text) == old[0].model_copy(update={"patch": []})
    code, out, err = run(capsys, "doctor", "t1", "--store", url)
    assert code == 0, (out, err)
    code, _, err = run(capsys, "set", "t1", "facts.n=1", "--actor", "a", "--store", url)
    assert code == 0, err
    code, out, err = run(capsys, "doctor", "t1", "--store", url)
    assert code == 0, (out, err)
    assert "healthy" in out
