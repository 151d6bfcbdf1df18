"""The ``skillstate`` command end to end: each test runs the CLI in a subprocess.

Every run gets ``cwd=tmp_path`` and ``$SKILLSTATE_STORE`` pointing at a SQLite file
there; commands still pass ``--store`` explicitly so the tests do not depend on the
default. ``--quiet`` is used wherever the step-by-step detail does not matter.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from skillstate.store import open_store

# cli has no ``if __name__ == "__main__"`` guard, so ``-m skillstate.cli`` would do nothing.
ENTRY = "from skillstate.cli import main; main()"
TICKET = "skillstate.examples.ticket:agent"
ORDERS = "skillstate.examples.orders:agent"
PRIORITY_QUESTION = "How urgent is it? Answer P1 (critical) to P4 (low)."
DEMO_FACTS: dict[str, dict[str, Any]] = {
    "ticket": {"ticket_type": "network", "priority": "P1"},
    "orders": {"max_amount": 3299.0, "order_count": 12},
}
# Bad input, each with exit code 2; ``{empty}`` is the URL of an empty SQLite file.
BAD_INPUT = [
    "show nope --store {empty}",
    "log nope --store {empty}",
    "view nope --store {empty}",
    "checkpoints nope --store {empty}",
    "resume nope --store {empty}",
    "reply nope hi --store {empty}",
    "rollback nope --to 1 --store {empty}",
    "show x --store bogus://x",
    "run not_a_module:agent --store {empty}",
    "run skillstate.examples.ticket:nothing --store {empty}",
    "run justtext --store {empty}",
    "demo nosuchdemo --store {empty}",
    "run skillstate.examples.ticket:agent --max-steps 0 --store {empty}",
    "rollback x --to notanint --store {empty}",
    "show --store {empty}",
    "show x --store sqlite:////dev/null/x.db",
    "show x --store sqlite:///{junk}",
    "run skillstate.examples.ticket:agent --task-id '' --store {empty}",
]
# Environment that would make rich emit colours or change the layout under pytest.
_RICH_ENV = ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "TERM", "COLUMNS")


def store_url(directory: Path, name: str = "state.db") -> str:
    """The SQLite store URL of a database file in ``directory``."""
    return f"sqlite:///{directory / name}"


def run_cli(cwd: Path, *args: str) -> tuple[int, str, str]:
    """Run ``skillstate ARGS`` in a fresh interpreter; return (returncode, stdout, stderr)."""
    env = {k: v for k, v in os.environ.items() if k not in _RICH_ENV}
    env |= {
        "SKILLSTATE_STORE": store_url(cwd),
        "COLUMNS": "200",  # wide enough that rich never wraps a line the tests look at
        "PYTHONIOENCODING": "utf-8",
    }
    proc = subprocess.run(
        [sys.executable, "-c", ENTRY, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=600,  # a hang guard: under load an eval run takes minutes
        check=False,
    )
    return proc.returncode, proc.stdout, proc.stderr


def show_json(cwd: Path, task_id: str, store: str) -> dict[str, Any]:
    """``show TASK --json`` parsed, asserting the command succeeded."""
    code, out, err = run_cli(cwd, "show", task_id, "--json", "--store", store)
    assert code == 0, err
    state = json.loads(out)
    assert isinstance(state, dict)
    return state


def log_json(cwd: Path, task_id: str, store: str) -> list[dict[str, Any]]:
    """``log TASK --json`` parsed, asserting the command succeeded."""
    code, out, err = run_cli(cwd, "log", task_id, "--json", "--store", store)
    assert code == 0, err
    events = json.loads(out)
    assert isinstance(events, list)
    return events


def head_state(store: str, task_id: str) -> dict[str, Any]:
    """The head state of a task, read in-process: a cheap side check besides ``show --json``."""
    db = open_store(store)
    try:
        return db.load(task_id).state
    finally:
        db.close()


def assert_no_traceback(out: str, err: str) -> None:
    """Fail if either stream shows a Python traceback."""
    assert "Traceback" not in out
    assert "Traceback" not in err


def clone_store(base: Path, tmp_path: Path) -> str:
    """Copy a staged store (the SQLite file and its WAL) into ``tmp_path``; return its URL."""
    for path in base.glob("state.db*"):
        shutil.copy2(path, tmp_path / path.name)
    return store_url(tmp_path)


# ---------------------------------------------------------------- staged scenarios
# Each CLI call is a fresh interpreter (about 0.4 s; 1 s when it loads the tokenizer), so
# the slow set-ups run once per module, side by side in a thread pool, and a test that
# changes a staged task works on its own copy of the store (clone_store).


@dataclass(frozen=True)
class DemoRun:
    """One ``skillstate demo NAME`` run, shared by the tests that only read its task."""

    name: str
    task_id: str
    cwd: Path
    store: str
    code: int
    out: str
    err: str


def _stage_demo(name: str, cwd: Path) -> DemoRun:
    """Run a bundled demo verbosely (so the full rendering is exercised)."""
    task_id, store = f"demo-{name}", store_url(cwd)
    code, out, err = run_cli(cwd, "demo", name, "--task-id", task_id, "--store", store)
    return DemoRun(name, task_id, cwd, store, code, out, err)


@dataclass(frozen=True)
class StagedTicket:
    """A ticket task ``t1`` started with ``run``, then given its description by ``reply``."""

    base: Path
    run: tuple[int, str, str]
    after_run: dict[str, Any]
    first_reply: tuple[int, str, str]


def _stage_ticket(base: Path) -> StagedTicket:
    """Start ticket task t1 (it asks for a description), then answer it (it asks the priority)."""
    store = store_url(base)
    run = run_cli(base, "run", TICKET, "--task-id", "t1", "--quiet", "--store", store)
    assert run[0] == 0, run[2]
    after_run = show_json(base, "t1", store)
    first_reply = run_cli(base, "reply", "t1", "VPN keeps dropping", "-q", "--store", store)
    assert first_reply[0] == 0, first_reply[2]
    return StagedTicket(base, run, after_run, first_reply)


@dataclass(frozen=True)
class StagedOrders:
    """An orders task ``o1`` stopped by ``--max-steps 1`` at version 2, then resumed."""

    base: Path
    stopped: tuple[int, str, str]
    state_v2: dict[str, Any]
    resumed: tuple[int, str, str]


def _stage_orders(base: Path) -> StagedOrders:
    """Run orders task o1 for one decision, record its head (version 2), then resume it."""
    store = store_url(base)
    stopped = run_cli(
        base, "run", ORDERS, "--task-id", "o1", "--max-steps", "1", "-q", "--store", store
    )
    state_v2 = show_json(base, "o1", store)
    resumed = run_cli(base, "resume", "o1", "-q", "--store", store)
    return StagedOrders(base, stopped, state_v2, resumed)


def _bad_input(cwd: Path, command: str) -> tuple[int, str, str]:
    """Run one bad-input command; ``{empty}`` becomes an empty SQLite file of its own,
    ``{junk}`` a file that is not a database."""
    (cwd / "empty.db").touch()
    (cwd / "junk.db").write_text("not a database\n" * 100)
    empty = store_url(cwd, "empty.db")
    args = (arg.replace("{empty}", empty) for arg in shlex.split(command))
    return run_cli(cwd, *(arg.replace("{junk}", "junk.db") for arg in args))


@pytest.fixture(scope="module")
def scenarios(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Future[Any]]]:
    """Start every staged scenario at once; the fixtures below wait for the one they need."""
    mktemp = tmp_path_factory.mktemp
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        futures: dict[str, Future[Any]] = {
            f"demo-{name}": pool.submit(_stage_demo, name, mktemp(f"demo-{name}"))
            for name in DEMO_FACTS
        }
        futures["ticket"] = pool.submit(_stage_ticket, mktemp("ticket"))
        futures["orders"] = pool.submit(_stage_orders, mktemp("orders"))
        for command in BAD_INPUT:
            futures[command] = pool.submit(_bad_input, mktemp("bad"), command)
        yield futures


@pytest.fixture(scope="module", params=sorted(DEMO_FACTS))
def demo_run(request: pytest.FixtureRequest, scenarios: dict[str, Future[Any]]) -> DemoRun:
    """Each bundled demo, run once."""
    result: DemoRun = scenarios[f"demo-{request.param}"].result()
    return result


@pytest.fixture(scope="module")
def staged_ticket(scenarios: dict[str, Future[Any]]) -> StagedTicket:
    """A ticket task waiting for its priority; tests clone its store before changing it."""
    result: StagedTicket = scenarios["ticket"].result()
    return result


@pytest.fixture(scope="module")
def staged_orders(scenarios: dict[str, Future[Any]]) -> StagedOrders:
    """An orders task stopped by the step budget, then resumed to completion."""
    result: StagedOrders = scenarios["orders"].result()
    return result


# ---------------------------------------------------------------- demos


def test_demo_exits_zero_and_completes(demo_run: DemoRun) -> None:
    """A bundled demo exits 0 and its last line reports the task completed."""
    assert demo_run.code == 0, demo_run.err
    assert_no_traceback(demo_run.out, demo_run.err)
    last = demo_run.out.strip().splitlines()[-1]
    assert last.startswith("completed")
    assert demo_run.task_id in last


def test_demo_prints_token_comparison(demo_run: DemoRun) -> None:
    """The demo prints a table of state-view tokens against the full history."""
    assert "state view" in demo_run.out
    assert "full history" in demo_run.out


def test_demo_show_json(demo_run: DemoRun) -> None:
    """``show --json`` after a demo prints one completed state object with the expected facts."""
    state = show_json(demo_run.cwd, demo_run.task_id, demo_run.store)
    assert state["task_id"] == demo_run.task_id
    assert state["status"] == "completed"
    expected = DEMO_FACTS[demo_run.name]
    assert {key: state.get(key) for key in expected} == expected
    if demo_run.name == "orders":
        assert state["max_order_id"]
        assert state["max_order_id"] in state["reply"]


def test_demo_log_json(demo_run: DemoRun) -> None:
    """``log --json`` lists one event per version, 1..head, each with a JSON Patch diff."""
    events = log_json(demo_run.cwd, demo_run.task_id, demo_run.store)
    assert events
    head = re.search(r"version (\d+)\s*$", demo_run.out)
    assert head, demo_run.out[-300:]
    assert [e["version"] for e in events] == list(range(1, int(head.group(1)) + 1))
    for event in events:
        assert {"version", "action", "verdict", "diff"} <= event.keys()
        assert isinstance(event["diff"], list)
        assert event["diff"], f"version {event['version']} changed nothing"
        for op in event["diff"]:
            assert {"op", "path"} <= op.keys()


# ---------------------------------------------------------------- waiting for the user


def test_run_waits_for_user_then_replies_complete(
    tmp_path: Path, staged_ticket: StagedTicket
) -> None:
    """A task that asks the user pauses with exit 0 and finishes once ``reply`` answers it."""
    code, out, err = staged_ticket.run
    assert code == 0, err
    assert "What is the problem? Describe it in a sentence." in out
    assert 'skillstate reply t1 "..."' in out
    assert staged_ticket.after_run["status"] == "waiting_user"

    code, out, err = staged_ticket.first_reply
    assert code == 0, err
    assert "waiting for the user" in out
    assert PRIORITY_QUESTION in out
    store = clone_store(staged_ticket.base, tmp_path)
    state = head_state(store, "t1")
    assert state["status"] == "waiting_user"
    assert state["question"] == PRIORITY_QUESTION
    assert state["ticket_type"] == "network"

    code, out, err = run_cli(tmp_path, "reply", "t1", "P2", "-q", "--store", store)
    assert code == 0, err
    state = show_json(tmp_path, "t1", store)
    assert state["status"] == "completed"
    assert state["priority"] == "P2"


def test_vague_priority_is_refused_and_asked_again(
    tmp_path: Path, staged_ticket: StagedTicket
) -> None:
    """A reply with no P1-P4 fails verify, is logged in errors, and the question is asked again."""
    store = clone_store(staged_ticket.base, tmp_path)
    code, _, err = run_cli(tmp_path, "reply", "t1", "asap!!", "-q", "--store", store)
    assert code == 0, err
    state = show_json(tmp_path, "t1", store)
    assert state["status"] == "waiting_user"
    assert state["question"] == PRIORITY_QUESTION
    assert state["priority"] is None
    assert any(
        e["kind"] in {"verify_failed", "step_failed"} and e["skill"] == "record_priority"
        for e in state["errors"]
    ), state["errors"]


def test_reply_text_with_brackets_is_printed_literally(
    tmp_path: Path, staged_ticket: StagedTicket
) -> None:
    """A reply that looks like rich markup is echoed as plain text, not parsed."""
    store = clone_store(staged_ticket.base, tmp_path)
    code, out, err = run_cli(tmp_path, "reply", "t1", "[/] P3", "-q", "--store", store)
    assert_no_traceback(out, err)
    assert code == 0, err
    assert "[/] P3" in out
    assert head_state(store, "t1")["status"] == "completed"


def test_view_prints_text_and_token_count(tmp_path: Path, staged_ticket: StagedTicket) -> None:
    """``view`` prints the prompt view the next decision would see, then its token count."""
    store = clone_store(staged_ticket.base, tmp_path)
    code, out, err = run_cli(tmp_path, "view", "t1", "--store", store)
    assert code == 0, err
    assert "## Task t1" in out
    assert "record_priority" in out
    lines = out.strip().splitlines()
    assert re.fullmatch(r"\d+ tokens \(.+\)", lines[-1]), lines[-1]
    assert int(lines[-1].split()[0]) > 0


# ---------------------------------------------------------------- budget, resume, rollback


def test_resume_continues_task_stopped_by_max_steps(
    tmp_path: Path, staged_orders: StagedOrders
) -> None:
    """``--max-steps 1`` stops with exit 4, and ``resume`` finishes the task with exit 0."""
    code, out, err = staged_orders.stopped
    assert code == 4, err
    assert "skillstate resume o1" in out
    assert staged_orders.state_v2["status"] == "running"
    assert staged_orders.state_v2["version"] == 2

    code, out, err = staged_orders.resumed
    assert code == 0, err
    assert out.strip().splitlines()[-1].startswith("completed")
    store = clone_store(staged_orders.base, tmp_path)
    state = head_state(store, "o1")
    assert state["status"] == "completed"
    assert state["max_amount"] == 3299.0


def test_checkpoints_lists_every_version(tmp_path: Path, staged_orders: StagedOrders) -> None:
    """``checkpoints`` exits 0 and shows one row per committed version."""
    store = clone_store(staged_orders.base, tmp_path)
    head = head_state(store, "o1")["version"]
    code, out, err = run_cli(tmp_path, "checkpoints", "o1", "--store", store)
    assert code == 0, err
    rows = [re.match(r"^[^\w\s]\s*(\d+)\s+[^\w\s]", line) for line in out.splitlines()]
    assert [int(m.group(1)) for m in rows if m] == list(range(1, head + 1))


def test_rollback_commits_old_state_as_new_version(
    tmp_path: Path, staged_orders: StagedOrders
) -> None:
    """``rollback --to 2`` adds version head+1 whose state is version 2's, version aside."""
    store = clone_store(staged_orders.base, tmp_path)
    head = head_state(store, "o1")["version"]
    assert head > 2

    code, out, err = run_cli(tmp_path, "rollback", "o1", "--to", "2", "--store", store)
    assert code == 0, err
    assert f"as version {head + 1}" in out

    after = show_json(tmp_path, "o1", store)
    assert after["version"] == head + 1
    assert {**after, "version": 2} == staged_orders.state_v2
    events = log_json(tmp_path, "o1", store)
    assert len(events) == head + 1
    assert events[-1]["action"] == {"kind": "rollback", "to_version": 2}


def test_rollback_to_unknown_version_is_usage_error(
    tmp_path: Path, staged_orders: StagedOrders
) -> None:
    """``rollback --to 999`` exits 2 with one error line and commits nothing."""
    store = clone_store(staged_orders.base, tmp_path)
    before = head_state(store, "o1")
    code, out, err = run_cli(tmp_path, "rollback", "o1", "--to", "999", "--store", store)
    assert code == 2
    assert err.startswith("error:")
    assert_no_traceback(out, err)
    assert head_state(store, "o1") == before


def test_show_card_prints_bracketed_text_literally(
    tmp_path: Path, staged_orders: StagedOrders
) -> None:
    """The text state card prints an evidence source such as ``[get_user_info]`` verbatim."""
    store = clone_store(staged_orders.base, tmp_path)
    code, out, err = run_cli(tmp_path, "show", "o1", "--store", store)
    assert code == 0, err
    assert "user U123456 (gold)" in out
    assert "[get_user_info]" in out


@pytest.mark.parametrize(
    "command",
    [
        f"run {ORDERS} --task-id o1 -q",
        "reply o1 hello -q",
    ],
)
def test_completed_task_refuses_run_and_reply(
    tmp_path: Path, staged_orders: StagedOrders, command: str
) -> None:
    """``run`` with an existing task id, or ``reply`` to a task not waiting, exits 2."""
    store = clone_store(staged_orders.base, tmp_path)
    before = head_state(store, "o1")
    code, out, err = run_cli(tmp_path, *command.split(), "--store", store)
    assert code == 2
    assert err.startswith("error:")
    assert_no_traceback(out, err)
    assert head_state(store, "o1") == before


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize("command", BAD_INPUT)
def test_bad_input_is_one_error_line(scenarios: dict[str, Future[Any]], command: str) -> None:
    """Bad input exits 2 with exactly one ``error:`` line on stderr and no traceback."""
    code, out, err = scenarios[command].result()
    assert code == 2, (out, err)
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error:")
    assert_no_traceback(out, err)


def test_help_exits_zero(tmp_path: Path) -> None:
    """``--help`` prints the usage and exits 0."""
    code, out, err = run_cli(tmp_path, "--help")
    assert code == 0, err
    assert "Usage:" in out
