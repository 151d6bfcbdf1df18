"""Trust boundaries: stored state never decides what code runs or where keys go; inputs
are bounded. Each test reproduces a finding of the security pass.

Reproduced before:
* ``skillstate set T agent=os:abort`` then ``skillstate resume T`` called ``os.abort``
  (and ``agent=this:s`` ran an import side effect); afterwards even ``set`` could
  not undo it, because it imported the stored agent first.
* A ``driver.base_url`` written into the card made ``resume`` send the operator's
  ``OPENAI_API_KEY`` to that URL.
* A model reply with a 1.2-million-character parameter was committed into the card;
  every later view and resume then failed in the tokenizer.
* ``set`` with 20,000-deep JSON, a YAML anchor cycle, ``1e999`` or ``.nan``; and
  ``--model replay:/etc/passwd`` exited 1.
"""

from __future__ import annotations

import json
import socket
import sqlite3
import threading
from pathlib import Path

import pytest

from skillstate import Runtime
from skillstate.engine.policy import StatePolicy
from skillstate.examples import ledger
from skillstate.llm.replay import ScriptedProvider
from skillstate.store.memory import MemoryStore
from tests.test_cli import assert_no_traceback, head_state, run_cli, store_url


@pytest.fixture
def url(tmp_path: Path) -> str:
    """A ledger task ``L`` stopped after one of three entries."""
    store = store_url(tmp_path)
    code, _, err = run_cli(
        tmp_path, "demo", "ledger", "--task-id", "L", "--steps", "3", "--max-steps", "1",
        "--ledger", str(tmp_path / "ledger.txt"), "--store", store, "-q",
    )  # fmt: skip
    assert code == 4, err
    return store


def write_head(tmp_path: Path, **fields: object) -> None:
    """Change the stored head the way ``set --force`` would, bypassing nothing but the CLI."""
    conn = sqlite3.connect(tmp_path / "state.db")
    for name, value in fields.items():
        conn.execute(
            "UPDATE tasks SET head = json_set(head, ?, json(?)), digest = NULL WHERE task_id = 'L'",
            (f"$.{name}", json.dumps(value)),
        )
    conn.commit()
    conn.close()


class TestAgentReferences:
    @pytest.mark.parametrize("ref", ["os:abort", "this:s", "skillstate.examples.ledger:machine"])
    def test_a_stored_reference_that_is_not_allowed_is_refused_before_import(
        self, tmp_path: Path, url: str, ref: str
    ) -> None:
        """resume with a stored agent nobody allowed: exit 2, one line, nothing imported."""
        code, _, err = run_cli(tmp_path, "set", "L", f"agent={ref}", "--store", url)
        assert code == 0, err
        code, out, err = run_cli(tmp_path, "resume", "L", "--store", url, "-q")
        assert code == 2, out + err  # os.abort would have been -6 (SIGABRT)
        assert f"names agent {ref!r}, which is not an allowed agent" in err
        assert "Beautiful is better than ugly" not in out + err  # `import this` never ran
        assert_no_traceback(out, err)

    def test_set_repairs_the_reference_without_importing_it(self, tmp_path: Path, url: str) -> None:
        """The way back: set agent=... never imports the bad reference (or any other)."""
        run_cli(tmp_path, "set", "L", "agent=os:abort", "--store", url)
        code, _, err = run_cli(
            tmp_path, "set", "L", "agent=skillstate.examples.ledger:agent", "--store", url
        )
        assert code == 0, err
        code, _, err = run_cli(tmp_path, "resume", "L", "--store", url, "-q")
        assert code == 0, err
        assert head_state(url, "L")["appended"] == 3

    def test_agent_on_the_command_line_and_in_the_project_file(
        self, tmp_path: Path, url: str
    ) -> None:
        """--agent runs the task with the operator's choice; [tool.skillstate] agents allows one."""
        (tmp_path / "my_agents.py").write_text("from skillstate.examples.ledger import agent\n")
        run_cli(tmp_path, "set", "L", "agent=my_agents:agent", "--store", url)
        code, _, err = run_cli(tmp_path, "resume", "L", "--store", url, "-q", "--max-steps", "1")
        assert code == 2
        assert "not an allowed agent" in err
        code, _, err = run_cli(
            tmp_path, "resume", "L", "--agent", "my_agents:agent", "--store", url, "-q",
            "--max-steps", "1",
        )  # fmt: skip
        assert code == 4, err  # ran one step with the agent found in the current directory
        (tmp_path / "pyproject.toml").write_text(
            '[project]\nname = "x"\n\n[tool.skillstate]\nagents = ["my_agents:agent"]\n'
        )
        code, _, err = run_cli(tmp_path, "resume", "L", "--store", url, "-q")
        assert code == 0, err

    def test_a_bad_project_file_is_one_line(self, tmp_path: Path, url: str) -> None:
        """An unknown setting in [tool.skillstate] is named; exit 2."""
        (tmp_path / ".skillstate.toml").write_text('agentz = ["x:y"]\n')
        code, out, err = run_cli(tmp_path, "resume", "L", "--store", url, "-q")
        assert code == 2
        assert "unknown setting(s) agentz" in err
        assert_no_traceback(out, err)


class TestEndpoints:
    def test_a_base_url_in_the_card_receives_nothing(self, tmp_path: Path, url: str) -> None:
        """The card's driver is for display: resume neither calls its base_url nor sends a key."""
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.settimeout(0.2)
        seen: list[bytes] = []
        stop = threading.Event()

        def accept() -> None:
            while not stop.is_set():
                try:
                    conn, _ = listener.accept()
                except OSError:
                    continue
                with conn:
                    conn.settimeout(1)
                    try:
                        seen.append(conn.recv(65536))
                    except OSError:
                        seen.append(b"<connected>")

        thread = threading.Thread(target=accept, daemon=True)
        thread.start()
        port = listener.getsockname()[1]
        write_head(
            tmp_path,
            driver={
                "model": "openai:gpt-4o-mini",
                "policy": "state",
                "max_repairs": 0,
                "base_url": f"http://127.0.0.1:{port}/v1",
            },
        )
        try:
            code, _, err = run_cli(tmp_path, "resume", "L", "--store", url, "-q")
            assert code == 2, err
            assert "recorded for display only" in err
            assert "pass --model openai:gpt-4o-mini" in err
        finally:
            stop.set()
            thread.join(timeout=5)
            listener.close()
        assert seen == []


class TestBoundedInputs:
    def test_a_huge_parameter_is_an_invalid_decision_and_the_task_stays_usable(self) -> None:
        """1.2M characters in params: refused (not committed); the task still views and runs."""
        replies = iter(
            [json.dumps({"kind": "call_skill", "skill": "append_entry", "params": {"n": "9" * n}})
             for n in (1_200_000, 1_200_000, 1_200_000)]
            + ['{"kind": "call_skill", "skill": "append_entry", "params": {"n": 1}}'] * 5
        )  # fmt: skip
        agent = ledger.agent
        model = StatePolicy(ScriptedProvider(lambda m, s: next(replies)), max_repairs=0)
        store = MemoryStore()
        runtime = Runtime(agent, store, max_steps=1)
        runtime.start("t", target=1, ledger="/dev/null")
        runtime.agent.policy, saved = model, agent.policy
        try:
            report = runtime.step("t")
            assert report.event.action == {"kind": "invalid"}
            assert "reply is 1,2" in report.after.errors[-1].message
            view = agent.view(runtime.load("t"))
            assert view.tokens < 5_000
            assert len(store.load("t").state["errors"][-1]["message"]) < 1_000
        finally:
            runtime.agent.policy = saved

    def test_a_reply_that_is_too_long_is_refused_before_anything_is_written(
        self, tmp_path: Path
    ) -> None:
        """skillstate demo ticket --input <100k chars>: exit 2, one line, no task created."""
        url = store_url(tmp_path)
        code, out, err = run_cli(
            tmp_path, "demo", "ticket", "--task-id", "T", "--input", "x" * 100_000, "--store", url
        )
        assert code == 2, out + err
        assert "--input refused: it is 100,002 characters long" in err
        assert_no_traceback(out, err)
        code, _, err = run_cli(tmp_path, "show", "T", "--store", url)
        assert code != 0
        assert "no task 'T'" in err

    @pytest.mark.parametrize(
        ("value", "fragment"),
        [
            ("[" * 20_000 + "]" * 20_000, "nested more than 32 levels deep"),
            ("&a [*a]", "YAML aliases (*a) are not accepted"),
            (".nan", "infinity or NaN"),
            (".inf", "infinity or NaN"),
        ],
    )
    def test_set_refuses_edge_values_with_one_line(
        self, tmp_path: Path, url: str, value: str, fragment: str
    ) -> None:
        """Deep nesting, YAML aliases, NaN and infinity: exit 2, one line, nothing written."""
        before = head_state(url, "L")
        code, out, err = run_cli(tmp_path, "set", "L", f"facts.x={value}", "--store", url)
        assert code == 2, out + err
        assert fragment in err
        assert err.count("\n") == 1
        assert head_state(url, "L") == before

    def test_1e999_for_a_number_field_is_refused(self, tmp_path: Path, url: str) -> None:
        """YAML reads 1e999 as text; a float field would turn it into infinity: refused."""
        code, out, err = run_cli(tmp_path, "set", "L", "step_delay=1e999", "--store", url)
        assert code == 2, out + err
        assert "step_delay" in err
        assert_no_traceback(out, err)


class TestCommandLine:
    def test_a_cassette_that_is_not_one_is_bad_input(self, tmp_path: Path) -> None:
        """--model replay:/etc/passwd: exit 2 (the operator's bad input), not 1."""
        code, out, err = run_cli(
            tmp_path, "demo", "ticket", "--model", "replay:/etc/passwd",
            "--store", store_url(tmp_path),
        )  # fmt: skip
        assert code == 2, out + err
        assert "is not JSON" in err

    def test_an_unwritable_ledger_is_one_line(self, tmp_path: Path) -> None:
        """demo ledger --ledger in a place that cannot hold a file: exit 2, nothing written."""
        blocker = tmp_path / "blocker"
        blocker.write_text("a file, not a directory")
        code, out, err = run_cli(
            tmp_path, "demo", "ledger", "--ledger", str(blocker / "ledger.txt"),
            "--store", store_url(tmp_path),
        )  # fmt: skip
        assert code == 2, out + err
        assert "cannot write the --ledger file" in err
        assert_no_traceback(out, err)

    def test_nul_and_non_utf8_arguments_are_refused(self) -> None:
        """main() with a NUL byte or a lone surrogate in argv: exit 2 before anything runs."""
        from skillstate.cli import _main

        assert _main(["show", "a\x00b"]) == 2
        assert _main(["show", "caf\udce9"]) == 2


class TestStoredFiles:
    def test_a_files_store_checkpoint_with_an_alias_is_refused_before_expanding(
        self, tmp_path: Path
    ) -> None:
        """A 'billion laughs' YAML checkpoint in a files store: StateCorrupted, nothing expanded."""
        from skillstate.errors import StateCorrupted
        from skillstate.store import open_store

        url = f"file://{tmp_path / 'fs'}"
        code, _, err = run_cli(
            tmp_path, "demo", "ledger", "--task-id", "L", "--steps", "2",
            "--ledger", str(tmp_path / "ledger.txt"), "--store", url, "-q",
        )  # fmt: skip
        assert code == 0, err
        step = sorted((tmp_path / "fs").rglob("state_step_*.yaml"))[0]
        laughs = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
            f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
            f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
            for i in range(9)
        )
        step.write_text(laughs)
        store = open_store(url)
        with pytest.raises(StateCorrupted, match="YAML alias"):
            store.checkpoint("L", 1)
        store.close()

    def test_deeply_nested_json_in_a_stored_head_is_corrupted_not_a_crash(
        self, tmp_path: Path
    ) -> None:
        """A stored head of 100,000 nested lists: StateCorrupted (exit 5), not RecursionError."""
        url = store_url(tmp_path)
        code, _, err = run_cli(
            tmp_path, "demo", "ledger", "--task-id", "L", "--steps", "1",
            "--ledger", str(tmp_path / "ledger.txt"), "--store", url, "-q",
        )  # fmt: skip
        assert code == 0, err
        conn = sqlite3.connect(tmp_path / "state.db")
        conn.execute("UPDATE tasks SET head = ?, digest = NULL", ("[" * 100_000 + "]" * 100_000,))
        conn.commit()
        conn.close()
        code, out, err = run_cli(tmp_path, "show", "L", "--store", url)
        assert code == 5, out + err
        assert_no_traceback(out, err)
