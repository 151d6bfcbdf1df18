"""The command's entry point: --version, bare invocation, --debug, Ctrl-C, and how it
names the store in errors. Every test runs the CLI in a subprocess."""

from __future__ import annotations

import signal
import socket
from pathlib import Path

import pytest

import skillstate
from skillstate.errors import StoreNotFound
from skillstate.store import open_store
from tests.cli_support import output, run_env, start_cli, wait_for
from tests.test_cli import assert_no_traceback, head_state, run_cli, store_url

# ---------------------------------------------------------------- --version, no arguments


def test_version_prints_the_version(tmp_path: Path) -> None:
    """skillstate --version prints 'skillstate X.Y.Z' and exits 0, creating nothing."""
    code, out, err = run_cli(tmp_path, "--version")
    assert code == 0, err
    assert out.strip() == f"skillstate {skillstate.__version__}"
    assert list(tmp_path.iterdir()) == []


def test_bare_command_prints_help_and_exits_zero(tmp_path: Path) -> None:
    """skillstate without arguments prints the help on stdout and exits 0, not a usage error."""
    code, out, err = run_cli(tmp_path)
    assert code == 0, err
    assert out.startswith("Usage: skillstate")
    assert "Commands:" in out
    assert "tasks" in out
    assert err == ""


def test_bare_group_prints_its_help_and_exits_zero(tmp_path: Path) -> None:
    """skillstate bench (a group without its command) prints the group's help, exit 0."""
    code, out, err = run_cli(tmp_path, "bench")
    assert code == 0, err
    assert out.startswith("Usage: skillstate bench")
    assert err == ""


# ---------------------------------------------------------------- unexpected errors

_BOOM = "raise RuntimeError('boom at import')\n"


@pytest.mark.parametrize(
    ("extra", "args"),
    [
        ({}, ("--debug",)),
        ({"SKILLSTATE_DEBUG": "1"}, ()),
    ],
    ids=["--debug", "SKILLSTATE_DEBUG"],
)
def test_debug_shows_the_traceback_of_an_unexpected_error(
    tmp_path: Path, extra: dict[str, str], args: tuple[str, ...]
) -> None:
    """An agent module that raises on import: --debug or SKILLSTATE_DEBUG=1 show the trace."""
    (tmp_path / "boom.py").write_text(_BOOM)
    code, _, err = run_env(tmp_path, extra, *args, "run", "boom:agent")
    assert code == 1
    assert "Traceback" in err
    assert "RuntimeError: boom at import" in err


def test_unexpected_error_without_debug_is_one_line(tmp_path: Path) -> None:
    """Without --debug the same error is one line naming both ways to see the trace."""
    (tmp_path / "boom.py").write_text(_BOOM)
    code, out, err = run_env(tmp_path, {"SKILLSTATE_DEBUG": None}, "run", "boom:agent")
    assert code == 1
    assert_no_traceback(out, err)
    assert err.count("\n") == 1
    assert "unexpected RuntimeError: boom at import" in err
    assert "--debug" in err
    assert "SKILLSTATE_DEBUG=1" in err


# ---------------------------------------------------------------- the store in errors


@pytest.mark.parametrize(
    "command",
    [
        ("show", "nope"),
        ("log", "nope"),
        ("checkpoints", "nope"),
        ("resume", "nope"),
        ("reply", "nope", "hi"),
        ("rollback", "nope", "--to", "1"),
    ],
    ids=lambda c: c[0],
)
@pytest.mark.parametrize("backend", ["sqlite", "files"])
def test_no_task_error_names_the_store(
    tmp_path: Path, command: tuple[str, ...], backend: str
) -> None:
    """Every "no task" error says which store was searched: exit 2, one line, the URL."""
    url = store_url(tmp_path) if backend == "sqlite" else f"file://{tmp_path / 'fs'}"
    open_store(url).close()  # the store exists, the task does not
    code, out, err = run_cli(tmp_path, *command, "--store", url)
    assert code == 2, out + err
    assert_no_traceback(out, err)
    assert err == f"error: no task 'nope' in {url}\n"


def test_no_task_error_names_the_default_store(tmp_path: Path) -> None:
    """Without --store or $SKILLSTATE_STORE the error names the default SQLite URL."""
    open_store(f"sqlite:///{tmp_path / '.skillstate' / 'state.db'}").close()
    code, out, err = run_env(tmp_path, {"SKILLSTATE_STORE": None}, "resume", "x")
    assert code == 2, out + err
    assert err == "error: no task 'x' in sqlite:///.skillstate/state.db\n"


def _closed_port() -> int:
    """A local port nothing listens on: bound once to get it, then closed."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize("command", ["show", "tasks", "resume"])
def test_unreachable_redis_is_exit_7(tmp_path: Path, command: str) -> None:
    """A Redis URL on a closed port: exit 7 (not 1 or 2), one line naming the masked URL."""
    url = f"redis://someone:hunter2@127.0.0.1:{_closed_port()}/0"
    args = (command,) if command == "tasks" else (command, "x")
    code, out, err = run_cli(tmp_path, *args, "--store", url)
    assert code == 7, out + err
    assert_no_traceback(out, err)
    assert err.count("\n") == 1
    assert "hunter2" not in err
    assert url.replace(":hunter2@", ":***@") in err


# ---------------------------------------------------------------- Ctrl-C


def test_sigint_keeps_the_last_commit_and_prints_the_resume_hint(tmp_path: Path) -> None:
    """SIGINT while a demo runs: exit 130, one line naming the task to resume, state kept."""
    url = store_url(tmp_path)
    process = start_cli(
        tmp_path,
        "demo", "ledger", "--task-id", "L", "--steps", "100", "--step-delay", "0.05",
        "--max-steps", "1000", "--ledger", str(tmp_path / "ledger.txt"), "-q", "--store", url,
    )  # fmt: skip
    try:
        wait_for(lambda: _head_version(url) >= 3, process=process, what="the third commit")
        process.send_signal(signal.SIGINT)
        code = process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    out, err = output(tmp_path)
    assert code == 130, out + err
    assert_no_traceback(out, err)
    assert err == (
        "error: interrupted; the last committed step is kept: continue with: skillstate resume L\n"
    )
    state = head_state(url, "L")
    assert state["status"] == "running"
    store = open_store(url)
    try:
        assert store.lease("L") is None  # released on the way out: resume needs no unlock
    finally:
        store.close()
    code, out, err = run_cli(tmp_path, "resume", "L", "--max-steps", "1", "-q", "--store", url)
    assert code == 4, out + err  # it continues (and stops again at --max-steps)


def _head_version(url: str) -> int:
    """The task L's head version, 0 while the store or the task does not exist yet."""
    try:
        store = open_store(url, create=False)
    except StoreNotFound:
        return 0
    try:
        return next((h.version or 0 for h in store.heads() if h.task_id == "L"), 0)
    finally:
        store.close()
