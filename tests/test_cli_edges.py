"""Rough edges of the command line: each test reproduces one that was found.

Reproduced before:
* started with SIGINT ignored (``skillstate ... &`` in a script), a command that
  failed on bad input printed "unexpected RuntimeError: generator didn't stop after
  throw()" and exited 1 instead of its own one-line error and exit code;
* ``skillstate run os:abort`` called ``os.abort`` (the process died of SIGABRT);
* ``log`` and ``replay`` piped into a file wrapped their tables at 80 columns, the
  diff column about 18 characters wide;
* the demo's panels were numbered by version (decision 2, 4, 5, ...) and its token
  table by decision (1, 2, 3, ...);
* a LangGraph thread whose graph had finished was listed as ``running``;
* ``--store`` help did not say that ``.skillstate.toml`` can name the store.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer

from skillstate.cli import _main, app
from tests.cli_support import cli_env, run_env
from tests.test_cli import ENTRY, assert_no_traceback, store_url


def _run_sigint_ignored(cwd: Path, *args: str) -> tuple[int, str, str]:
    """``skillstate ARGS`` started as a shell starts ``cmd &``: with SIGINT ignored."""
    proc = subprocess.run(
        [sys.executable, "-c", ENTRY, *args],
        cwd=cwd,
        env=cli_env(cwd),
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=120,
        check=False,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture(scope="module")
def ticket(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """A completed ``demo ticket`` task ``T`` (verbose output kept): (cwd, store, stdout)."""
    cwd = tmp_path_factory.mktemp("ticket")
    url = store_url(cwd)
    code, out, err = run_env(cwd, None, "demo", "ticket", "--task-id", "T", "--store", url)
    assert code == 0, err
    return cwd, url, out


# ---------------------------------------------------------------- SIGINT ignored


@pytest.mark.parametrize(
    ("args", "code", "fragment"),
    [
        (["show", "nope"], 2, "error: no "),  # no store there yet, or no such task
        (["rollback", "nope", "--to", "1"], 2, "error: no "),
        (["run", "not_a_module:agent"], 2, "cannot import 'not_a_module'"),
        (["demo", "ticket", "--task-id", "D", "-q"], 0, ""),
    ],
    ids=["show", "rollback", "run", "demo"],
)
def test_exit_codes_are_right_when_sigint_is_ignored(
    tmp_path: Path, args: list[str], code: int, fragment: str
) -> None:
    """`skillstate ... &` in a script: the command's own exit code and error line."""
    got, out, err = _run_sigint_ignored(tmp_path, *args, "--store", store_url(tmp_path))
    assert got == code, out + err
    assert "generator didn't stop" not in err
    assert_no_traceback(out, err)
    if fragment:
        assert fragment in err
        assert err.count("\n") == 1


# ---------------------------------------------------------------- run MODULE:ATTR


@pytest.mark.parametrize(
    "ref", ["os:abort", "skillstate.examples.ledger:decide", "skillstate.examples.ledger:machine"]
)
def test_run_accepts_only_an_agent(tmp_path: Path, ref: str) -> None:
    """run os:abort: exit 2 and one line; nothing is called (SIGABRT would be -6)."""
    code, out, err = run_env(tmp_path, None, "run", ref, "--store", store_url(tmp_path))
    assert code == 2, out + err
    assert "not a skillstate Agent" in err
    assert err.count("\n") == 1
    assert_no_traceback(out, err)


def test_run_set_refuses_control_characters_like_set(tmp_path: Path) -> None:
    """run --set ledger="...\\e[2J": exit 2, one line, no task created."""
    url = store_url(tmp_path)
    code, out, err = run_env(
        tmp_path, None, "run", "skillstate.examples.ledger:agent", "--task-id", "L",
        "--set", 'ledger="/tmp/l\\e[2J.txt"', "--store", url,
    )  # fmt: skip
    assert code == 2, out + err
    assert err == "error: value of 'ledger' refused: it holds a control character (U+001B)\n"
    code, _, err = run_env(tmp_path, None, "show", "L", "--store", url)
    assert code == 2, err


# ---------------------------------------------------------------- piped output


def _longest(text: str) -> int:
    return max(len(line) for line in text.splitlines())


@pytest.mark.parametrize(
    ("command", "whole"),
    [
        ("log", 'add     /goal = "Resolve the user\'s helpdesk ticket."'),
        ("replay", 'goal: null → "Resolve the user\'s helpdesk ticket."'),
    ],
)
def test_log_and_replay_stay_readable_when_piped(
    ticket: tuple[Path, str, str], command: str, whole: str
) -> None:
    """Not a terminal and no COLUMNS: the tables are as wide as their content, not 80."""
    cwd, url, _ = ticket
    code, out, err = run_env(cwd, {"COLUMNS": None}, command, "T", "--store", url)
    assert code == 0, err
    assert any(whole in line for line in out.splitlines())  # one line, not wrapped
    assert _longest(out) > 100


def test_columns_still_sets_the_width_when_piped(ticket: tuple[Path, str, str]) -> None:
    cwd, url, _ = ticket
    code, out, err = run_env(cwd, {"COLUMNS": "90"}, "log", "T", "--store", url)
    assert code == 0, err
    assert _longest(out) <= 90


# ---------------------------------------------------------------- demo numbering


def test_demo_panels_and_token_table_number_decisions_alike(
    ticket: tuple[Path, str, str],
) -> None:
    """Each panel says `decision N · vV`; the token table has the same (N, V) rows."""
    _, _, out = ticket
    panels = [(int(n), int(v)) for n, v in re.findall(r"─ decision (\d+) · v(\d+) ─", out)]
    assert panels
    table = out[out.index("prompt tokens per decision") :]
    rows = []
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip("│ ").split("│")]
        if len(cells) >= 2 and cells[0].isdigit():
            rows.append((int(cells[0]), int(cells[1])))
    assert rows == panels
    assert [n for n, _ in rows] == list(range(1, len(rows) + 1))


# ---------------------------------------------------------------- --store help


def _commands(command: Any) -> list[Any]:
    subs = getattr(command, "commands", {})
    return [command, *(c for sub in subs.values() for c in _commands(sub))]


def test_every_store_option_names_the_project_file(capsys: pytest.CaptureFixture[str]) -> None:
    """--store help says where the default comes from, .skillstate.toml included."""
    with_store = [
        (command.name, param)
        for command in _commands(typer.main.get_command(app))
        for param in getattr(command, "params", [])
        if "--store" in getattr(param, "opts", [])
    ]
    assert len(with_store) > 20
    for name, param in with_store:
        assert ".skillstate.toml" in (param.help or ""), name
        assert "SKILLSTATE_STORE" in (param.help or ""), name
    assert _main(["show", "--help"]) == 0
    assert ".skillstate.toml" in " ".join(capsys.readouterr().out.split())


# ---------------------------------------------------------------- LangGraph threads


def test_a_finished_langgraph_thread_is_not_listed_as_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """skillstate tasks: a graph that reached END is completed; one at an interrupt waits."""
    pytest.importorskip("langgraph.graph", reason="pip install -e '.[dev]'")
    from skillstate.integrations.langgraph import SkillstateSaver
    from tests.test_langgraph_saver import _chat_graph

    url = store_url(tmp_path)
    with SkillstateSaver.from_url(url) as saver:
        graph = _chat_graph().compile(checkpointer=saver)
        done: Any = {"configurable": {"thread_id": "done"}}
        waiting: Any = {"configurable": {"thread_id": "waiting"}}
        graph.invoke({"messages": [], "count": 0}, done)
        graph.invoke({"messages": [], "count": 0}, waiting)
        from langgraph.types import Command

        graph.invoke(Command(resume="yes"), done)
        assert graph.get_state(done).next == ()
        assert graph.get_state(waiting).next == ("ask",)
    assert _main(["tasks", "--json", "--store", url]) == 0
    rows = {row["task_id"]: row["status"] for row in json.loads(capsys.readouterr().out)}
    assert rows == {"langgraph:done": "completed", "langgraph:waiting": "waiting_user"}
