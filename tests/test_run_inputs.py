"""Rough edges of the run API and CLI that outside users hit (issue 24, point 5).

Each test failed before its fix:

* a second ``run(task, inputs=[...])`` with new replies dropped them without a word
  and the task waited forever; unused inputs were not reported;
* ``run --input`` replies lived only in the process: after ``kill -9``, ``resume``
  had none of them (``submit --input`` kept them on the card);
* ``per_task`` tool factories got the state only, not the skill's context;
* ``VerifyContext`` called the effect key ``key``, ``SkillContext`` ``idempotency_key``;
* after a stall, ``resume`` only said "failed", not what a person can do next.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from skillstate import Runtime, VerifyContext
from skillstate.errors import UsageError
from skillstate.store import open_store
from tests import asking_agent
from tests.asking_agent import agent
from tests.cli_support import output, run_env, start_cli, wait_for

AGENT = "tests.asking_agent:agent"
ROOT = Path(__file__).resolve().parent.parent


class TestInputsNumbering:
    """``inputs[i]`` is reply number ``inputs_from + i``; a clash is refused, not dropped."""

    def test_new_replies_under_used_numbers_are_refused(self) -> None:
        store = open_store("memory://")
        runtime = Runtime(agent, store)
        first = runtime.run("q", inputs=["a"], create=True)
        assert first.stopped == "waiting_user"
        assert first.state.answers == ["a"]
        head = store.load("q").version
        with pytest.raises(UsageError, match=r"already received reply 0.*inputs_from=1"):
            runtime.run("q", inputs=["b"])
        assert store.load("q").version == head  # refused before anything was written
        done = runtime.run("q", inputs=["b"], inputs_from=1)
        assert done.stopped == "completed"
        assert done.state.answers == ["a", "b"]

    def test_the_same_list_again_after_a_crash_is_fine(self) -> None:
        """Re-running with the replies already given (a resume after a crash) gives none
        of them twice and is not an error."""
        store = open_store("memory://")
        runtime = Runtime(agent, store)
        runtime.run("q", inputs=["a"], create=True)
        again = runtime.run("q", inputs=["a"])
        assert again.stopped == "waiting_user"
        assert again.state.answers == ["a"]
        assert again.unused_inputs == ()

    def test_unused_inputs_are_reported(self) -> None:
        result = Runtime(agent, open_store("memory://")).run(
            "q", inputs=["a", "b", "c"], create=True
        )
        assert result.stopped == "completed"
        assert result.unused_inputs == ("c",)

    def test_the_cli_says_which_inputs_were_not_used(self, tmp_path: Path) -> None:
        code, out, err = run_env(
            tmp_path, {"PYTHONPATH": str(ROOT)}, "run", AGENT, "--task-id", "q", "-q",
            "--input", "a", "--input", "b", "--input", "c",
        )  # fmt: skip
        assert code == 0, err
        assert "1 of 3 --input value(s) not used" in out


def test_run_input_replies_survive_kill_9(tmp_path: Path) -> None:
    """The process is killed after the first reply was used: ``resume`` finds the second
    on the card and completes (before: it waited for a reply nobody would give)."""
    gate = tmp_path / "gate"
    gate.mkdir()
    os.environ["PYTHONPATH"] = str(ROOT)
    try:
        proc = start_cli(
            tmp_path, "run", AGENT, "--task-id", "q", "-q", "--set", f"gate={gate}",
            "--input", "first", "--input", "second",
        )  # fmt: skip
        wait_for((gate / "blocked").exists, process=proc, what="the first answer")
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=600) == -signal.SIGKILL
    finally:
        del os.environ["PYTHONPATH"]
    _, err = output(tmp_path)
    assert "Traceback" not in err
    (gate / "open").write_text("")
    code, out, err = run_env(
        tmp_path, {"PYTHONPATH": str(ROOT)}, "resume", "q", "--agent", AGENT, "-q"
    )
    assert code == 0, err
    assert "completed" in out
    store = open_store(f"sqlite:///{tmp_path / 'state.db'}")
    assert store.load("q").state["answers"] == ["first", "second"]
    store.close()


def test_per_task_factories_get_the_skill_context() -> None:
    """A two-parameter factory gets the running skill's context: its artifacts too."""
    asking_agent.SEEN.clear()
    store = open_store("memory://")
    result = Runtime(agent, store).run("q", inputs=["a", "b"], create=True)
    assert result.stopped == "completed"
    assert [task for task, _ in asking_agent.SEEN] == ["q", "q"]
    attached = [  # what each note returned: the ref of the artifact it attached
        call.summary for event in store.events("q") for call in event.tool_calls
    ]
    assert [store.get_artifact(ref) for ref in attached] == [b"a", b"b"]


def test_verify_context_names_the_effect_key_as_skill_context_does() -> None:
    """``ctx.idempotency_key`` in run, probe and verify alike (``key`` stays as an alias)."""
    fields = VerifyContext.__dataclass_fields__
    assert "idempotency_key" in fields
    ctx: VerifyContext[object, object] = VerifyContext(
        before=object(), params=object(), attempt=1, idempotency_key="t:1-x-abc"
    )
    assert ctx.key == ctx.idempotency_key == "t:1-x-abc"


def test_after_a_stall_resume_says_what_to_do(tmp_path: Path) -> None:
    """The failed task's resume names the rollback target and the commands to go on."""
    (tmp_path / "stuck.py").write_text(
        "from tests.asking_agent import *\n"
        "def rules(view):\n"
        "    return CallSkill(skill='record', params={'answer': 5})\n"
        "agent = Agent(name='stuck', state_type=AskState, machine=agent.machine,\n"
        "              skills=skills, policy=ScriptedPolicy(rules), tools=agent.tools)\n"
    )
    env = {"PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}"}
    code, _, _ = run_env(tmp_path, env, "run", "stuck:agent", "--task-id", "s", "-q")
    assert code != 0
    code, out, err = run_env(tmp_path, env, "resume", "s", "--agent", "stuck:agent", "-q")
    assert code != 0
    text = " ".join((out + err).split())
    assert "skillstate rollback s --to 1 (the last version before the stall)" in text
    assert "skillstate edit s" in text
    assert "skillstate resume s" in text


def test_a_scripted_policy_of_a_list_is_refused_when_built() -> None:
    """``ScriptedPolicy([...])`` failed with a TypeError at the first decision."""
    from skillstate import Finish, ScriptedPolicy

    with pytest.raises(UsageError, match="takes a function view -> Action, not a list"):
        ScriptedPolicy([Finish()])  # type: ignore[arg-type]


def test_run_of_an_unknown_task_is_refused_unless_asked_to_create_it() -> None:
    """A mistyped id used to start a new task from scratch (with its effects) silently."""
    from skillstate.errors import TaskNotFound

    store = open_store("memory://")
    runtime = Runtime(agent, store)
    with pytest.raises(TaskNotFound, match=r"no task 'q' in memory://: start it first"):
        runtime.run("q", inputs=["a"])
    assert store.tasks() == []
    assert runtime.run("q", inputs=["a"], create=True).stopped == "waiting_user"


class _Counted(int):
    """An entry number that counts the equality checks made on it."""

    checks = 0

    def __eq__(self, other: object) -> bool:
        _Counted.checks += 1
        return int(self) == other

    __hash__ = int.__hash__


@pytest.mark.parametrize("n", [100, 400])
def test_the_ledger_verify_does_linear_work(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    """The shipped ledger example's verify compared every entry with every other one
    (``list.count`` per entry): step 2,000 cost 5.6x step 100, all of it there. Counted
    here as equality checks, which do not depend on the machine's speed."""
    from skillstate import Outcome
    from skillstate.examples import ledger

    entries = [(f"L:{i}-append_entry-x", _Counted(i)) for i in range(1, n + 1)]
    monkeypatch.setattr(ledger, "_all_entries", lambda path: entries)
    state = ledger.LedgerState(task_id="L", target=n, appended=n)
    _Counted.checks = 0
    verdict = ledger.append_entry.verify(state, Outcome(writes={"appended": n}))
    assert verdict.ok, verdict.reason
    assert _Counted.checks <= 4 * n, f"{_Counted.checks} checks for {n} entries"
