"""Human edits go through the same rules as steps; invariants bind everyone.

Reproduced before: ``set ID current_step=nowhere`` and ``set ID status=completed``
were accepted and ``doctor`` then called the task healthy; ``Finish`` ended a task
with steps still pending; a question that moved the task to its final step left
nothing that could apply; a refused ``edit`` lost what the person typed; on a
corrupted head ``show`` printed a raw validation dump.
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import pytest

from skillstate import (
    Action,
    AskUser,
    CallSkill,
    Finish,
    InvariantBroken,
    Runtime,
    TaskStatus,
    View,
)
from skillstate.engine.edits import set_fields
from skillstate.store.memory import MemoryStore
from tests.test_cli import assert_no_traceback, head_state, run_cli, store_url
from tests.test_guard import agent_with


@pytest.fixture
def url(tmp_path: Path) -> str:
    """A ledger task ``L`` stopped after two of five entries (step ``appending``)."""
    store = store_url(tmp_path)
    code, _, err = run_cli(
        tmp_path, "demo", "ledger", "--task-id", "L", "--steps", "5", "--max-steps", "2",
        "--ledger", str(tmp_path / "ledger.txt"), "--store", store, "-q",
    )  # fmt: skip
    assert code == 4, err
    return store


class TestSet:
    @pytest.mark.parametrize(
        ("assignment", "fragment"),
        [
            ("status=completed", "status is owned by the runtime; pass --force"),
            ("completed_steps=[]", "owned by the runtime"),
            ("current_step=nowhere", "current_step 'nowhere' is not a step of agent 'ledger'"),
            ("current_step=init", "moves only along declared transitions: appending -> init"),
            ("version=1", "cannot be changed by hand"),
        ],
    )
    def test_refused_without_force(
        self, tmp_path: Path, url: str, assignment: str, fragment: str
    ) -> None:
        """Runtime-owned fields, undeclared steps and undeclared moves: exit 2, nothing written."""
        before = head_state(url, "L")
        code, out, err = run_cli(tmp_path, "set", "L", assignment, "--store", url)
        assert code == 2, out + err
        assert fragment in err
        assert_no_traceback(out, err)
        assert head_state(url, "L") == before

    def test_force_changes_owned_fields_but_never_makes_the_card_inconsistent(
        self, tmp_path: Path, url: str
    ) -> None:
        """--force may jump steps; completed outside a final step is refused even so."""
        code, _, err = run_cli(tmp_path, "set", "L", "status=completed", "--force", "--store", url)
        assert code == 2
        assert "status completed but current_step 'appending' is not a final step" in err
        code, _, err = run_cli(tmp_path, "set", "L", "current_step=init", "--force", "--store", url)
        assert code == 0, err
        assert head_state(url, "L")["current_step"] == "init"

    def test_doctor_reports_a_card_edited_around_the_rules(self, tmp_path: Path, url: str) -> None:
        """A head whose status and step were written past skillstate: doctor exits 5 and says so."""
        db = tmp_path / "state.db"
        conn = sqlite3.connect(db)
        conn.execute(
            "UPDATE tasks SET head = json_set(head, '$.current_step', 'nowhere'), digest = NULL "
            "WHERE task_id = 'L'"
        )
        conn.commit()
        conn.close()
        code, out, err = run_cli(tmp_path, "doctor", "L", "--store", url)
        assert code == 5, out + err
        assert "current_step 'nowhere' is not a declared step" in out


class TestInvariants:
    def test_a_step_that_breaks_an_invariant_is_refused_like_a_failing_verify(self) -> None:
        """The writes never reach the card; the attempts and the rollback run as for verify."""
        undone: list[int] = []
        agent = agent_with(lambda v: CallSkill(skill="put", params={"n": 5}), rollbacks=undone)

        @agent.invariant
        def at_most_three(state: object) -> str | None:
            return "more than 3 items" if getattr(state, "items", 0) > 3 else None

        runtime = Runtime(agent, MemoryStore())
        runtime.start("t")
        report = runtime.step("t")
        assert report.after.items == 0  # type: ignore[attr-defined]
        assert [e.kind for e in report.after.errors] == ["invariant_failed"] * 3 + ["step_failed"]
        assert "at_most_three: more than 3 items" in report.after.errors[0].message
        assert undone == [1]

    def test_a_hand_edit_that_breaks_an_invariant_is_refused(self) -> None:
        """set_fields raises InvariantBroken with the invariant's message; nothing is written."""
        agent = agent_with(lambda v: Finish())
        agent.invariant(lambda state: state.items <= 3 or "more than 3 items")
        store = MemoryStore()
        Runtime(agent, store).start("t")
        with pytest.raises(InvariantBroken, match="more than 3 items"):
            set_fields(store, agent, "t", {"items": 4})
        assert store.load("t").version == 1

    def test_a_task_cannot_start_broken(self) -> None:
        """Runtime.start refuses initial fields that break an invariant."""
        agent = agent_with(lambda v: Finish())
        agent.invariant(lambda state: state.items <= 3)
        with pytest.raises(InvariantBroken):
            Runtime(agent, MemoryStore()).start("t", items=9)

    def test_a_finish_that_breaks_an_invariant_is_refused(self) -> None:
        """Invariants see the status too: finishing before the work is done can be forbidden."""

        def decide(view: View) -> Action:
            if view.state.current_step == "init":
                return CallSkill(skill="put", params={"n": 0})  # into "filling", nothing added
            return Finish()

        agent = agent_with(decide)
        agent.invariant(
            lambda s: s.status is not TaskStatus.COMPLETED or s.items > 0 or "nothing done"
        )
        runtime = Runtime(agent, MemoryStore(), max_repeats=2)
        result = runtime.run("t", create=True)
        assert result.stopped == "stalled"
        assert result.state.errors[0].kind == "invariant_failed"


class TestFinishAndMoves:
    def test_finish_with_pending_steps_is_refused(self) -> None:
        """A plan step that never ran means the task is not done: Finish is refused."""
        runtime = Runtime(agent_with(_fill_then_finish), MemoryStore())
        runtime.start("p", pending_steps=("review",))
        result = runtime.run("p")
        assert result.state.status is not TaskStatus.COMPLETED
        messages = [e.message for e in result.state.errors]
        assert "cannot finish: steps still pending (review); do them first" in messages

    def test_finish_with_pending_is_allowed_when_the_agent_says_so(self) -> None:
        """Agent(finish_with_pending=True) keeps the old behaviour."""
        agent = agent_with(_fill_then_finish)
        agent.finish_with_pending = True
        runtime = Runtime(agent, MemoryStore())
        runtime.start("p", pending_steps=("review",))
        assert runtime.run("p").stopped == "completed"

    def test_a_question_that_strands_the_task_is_refused(self) -> None:
        """ask_user(next_step=done) with work pending would leave nothing that can apply."""

        def decide(view: View) -> Action:
            if view.state.current_step == "init":
                return CallSkill(skill="put")
            return AskUser(question="Anything else?", next_step="done")

        agent = agent_with(decide)
        runtime = Runtime(agent, MemoryStore())
        runtime.start("t", pending_steps=("review",))
        runtime.step("t")
        report = runtime.step("t")
        assert report.after.status is TaskStatus.RUNNING
        assert report.after.current_step == "filling"
        assert "would leave nothing that can apply" in report.after.errors[-1].message


def _fill_then_finish(view: View) -> Action:
    if view.state.current_step == "init":
        return CallSkill(skill="put")
    return Finish()


class TestEditAndRepair:
    def test_a_refused_edit_keeps_what_was_typed(self, tmp_path: Path, url: str) -> None:
        """The edited YAML is saved to a file the error names; edit --file applies it later."""
        editor = tmp_path / "editor.py"
        editor.write_text(
            "import sys\n"
            "p = sys.argv[1]\n"
            "t = open(p).read().replace('appended: 2', 'appended: many')\n"
            "open(p, 'w').write(t + '# my careful notes\\n')\n"
        )
        env_editor = f"{sys.executable} {editor}"
        code, out, err = run_cli_env(tmp_path, {"EDITOR": env_editor}, "edit", "L", "--store", url)
        assert code == 2, out + err
        assert "Your edit is kept in" in err
        kept = Path(err.split("Your edit is kept in ", 1)[1].split(":", 1)[0])
        text = kept.read_text()
        assert "appended: many" in text
        assert "# my careful notes" in text
        kept.write_text(
            text.replace("appended: many", "appended: 2").replace("target: 5", "target: 7")
        )
        code, out, err = run_cli(tmp_path, "edit", "L", "--file", str(kept), "--store", url)
        assert code == 0, out + err
        assert head_state(url, "L")["target"] == 7

    def test_a_corrupted_head_is_shown_as_one_line_and_repaired_with_set(
        self, tmp_path: Path, url: str
    ) -> None:
        """show exits 5 with one line naming the field; set writes the fix over the raw head."""
        conn = sqlite3.connect(tmp_path / "state.db")
        conn.execute(
            "UPDATE tasks SET head = json_set(head, '$.appended', 'many'), digest = NULL "
            "WHERE task_id = 'L'"
        )
        conn.commit()
        conn.close()
        code, out, err = run_cli(tmp_path, "show", "L", "--store", url)
        assert code == 5, out + err
        assert err.count("\n") == 1
        assert "field 'appended'" in err
        assert "repair it with skillstate set or edit" in err
        assert_no_traceback(out, err)
        code, out, err = run_cli(tmp_path, "set", "L", "appended=2", "--store", url)
        assert code == 0, out + err
        code, _, err = run_cli(tmp_path, "resume", "L", "--store", url, "-q")
        assert code == 0, err
        assert head_state(url, "L")["appended"] == 5


def run_cli_env(cwd: Path, env: dict[str, str], *args: str) -> tuple[int, str, str]:
    """run_cli with extra environment variables."""
    import os

    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return run_cli(cwd, *args)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
