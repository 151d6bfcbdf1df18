"""The fix_syntax family: the oracle passes in every variant through the real runner,
the final checks catch the trap and the shortcuts, every skill's verify rejects a
wrong outcome, and the fix is rolled back or settled exactly once.

pytest subprocesses cost ~0.2 s each: tests run as few as they need.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from skillstate.engine.actions import CallSkill, Finish
from skillstate.engine.runtime import Runtime
from skillstate.eval.families import get_family
from skillstate.eval.families.fix_syntax import (
    APP,
    CLEAN_APP,
    ERROR_KINDS,
    TEST_SOURCE,
    TESTS,
    FixSyntaxState,
    broken_app,
    eligible_lines,
    import_lines,
    make_spec,
    repair_line,
    syntax_error,
)
from skillstate.eval.suites import load_suite
from skillstate.eval.tasks import Environment, TaskSpec, group_of
from skillstate.skills.skill import Outcome
from skillstate.store.memory import MemoryStore
from tests.eval_support import VARIANT_NAMES, assert_oracle_passes, run_plan, scripted_agent

SPEC = next(s for s in load_suite("seeds") if s.family == "fix_syntax")
LINE = SPEC.params["line"]
BROKEN = broken_app(SPEC.params["error"], LINE)
FIXED_LINE = CLEAN_APP.splitlines()[LINE - 1]


def _build(tmp_path: Path, spec: TaskSpec = SPEC) -> Environment:
    return get_family(spec.family).build(spec, tmp_path / spec.id)


def _checks(env: Environment) -> dict[str, tuple[bool, str]]:
    return {c.name: (c.ok, c.detail) for c in env.check(FixSyntaxState(task_id="x"))}


def _app(env: Environment) -> str:
    return (env.root / APP).read_text(encoding="utf-8")


# ---------------------------------------------------------------- the oracle


@pytest.mark.parametrize("variant", VARIANT_NAMES)
def test_oracle_passes_in_every_variant(variant: str, tmp_path: Path) -> None:
    """The reference plan succeeds, recovers from every interruption, repeats nothing."""
    result = assert_oracle_passes(SPEC, variant, tmp_path)
    assert set(result.checks) == {
        "app_compiles",
        "imports_unchanged",
        "tests_unchanged",
        "pytest_passes",
        "fix_applied_once",
    }


def test_spec_shape_and_plans(tmp_path: Path) -> None:
    """The seed is short, its budget fits the raw-tools plan, and it is a make_spec task."""
    env = _build(tmp_path)
    # The YAML adds only the lists of tools and skills the task may use.
    assert make_spec(SPEC.id, **SPEC.params) == SPEC.model_copy(update={"tools": (), "skills": ()})
    assert SPEC.group == group_of(len(env.plan_skills)) == "short"
    assert len(env.plan_skills) == len(env.expected_facts) == 4
    assert SPEC.max_steps >= math.ceil(1.5 * len(env.plan_tools)) + 3
    assert "import" in SPEC.constraints[0]
    assert TESTS in SPEC.constraints[1]
    # The trap: the error sits on the line right after the last import.
    assert import_lines(CLEAN_APP)[-1][0] + 1 == LINE
    edits = [
        a for a in env.plan_tools if isinstance(a, CallSkill) and a.skill == "tool_replace_line"
    ]
    assert [e.params for e in edits] == [{"path": APP, "line_no": LINE, "text": FIXED_LINE}]
    assert isinstance(env.plan_tools[-1], Finish)
    assert env.effect_tools == {"write_file", "replace_line"}


def test_every_generated_error_is_located_and_repaired_exactly() -> None:
    """Each (kind, line) variant has its error on that line, and the repair restores it."""
    assert 30 <= len(CLEAN_APP.splitlines()) <= 60
    assert syntax_error(CLEAN_APP) is None
    for kind in ERROR_KINDS:
        lines = eligible_lines(kind)
        assert len(lines) >= 8, kind
        for line in lines:
            source = broken_app(kind, line)
            error = syntax_error(source)
            assert error is not None
            assert error[0] == line
            assert import_lines(source) == import_lines(CLEAN_APP)
            text = repair_line(source.splitlines()[line - 1], error[1])
            assert text == CLEAN_APP.splitlines()[line - 1], (kind, line)
    with pytest.raises(ValueError, match="eligible lines"):
        broken_app("missing_colon", LINE)  # line 9 has no colon to remove
    with pytest.raises(ValueError, match="eligible lines"):
        make_spec("bad", error="unclosed_paren", line=8)  # an import line
    with pytest.raises(ValueError, match="no deterministic repair"):
        repair_line("x = 1 +", "invalid syntax")


def test_run_tests_is_a_real_hermetic_pytest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """run_tests runs the real pytest, unaffected by the caller's environment."""
    monkeypatch.setenv("PYTEST_ADDOPTS", "--no-such-option")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("APP_CURRENCY", "USD")  # would fail the report test if it leaked
    env = _build(tmp_path)
    report = env.tools["run_tests"]()
    assert report.startswith("exit code: 2\n")
    assert f'{APP}", line {LINE}' in report
    assert "was never closed" in report
    env.tools["replace_line"](path=APP, line_no=LINE, text=FIXED_LINE)
    assert env.tools["run_tests"]().startswith("exit code: 0\n")
    assert _app(env) == CLEAN_APP
    assert not any(p.name == "__pycache__" for p in env.root.iterdir())


def test_tools_stay_inside_the_project(tmp_path: Path) -> None:
    env = _build(tmp_path)
    assert env.tools["read_file"](path=APP).splitlines()[LINE - 1].startswith(f"  {LINE}| CURR")
    with pytest.raises(ValueError, match="not a file of the project"):
        env.tools["read_file"](path="../outside.txt")
    with pytest.raises(ValueError, match="single line"):
        env.tools["replace_line"](path=APP, line_no=LINE, text="a\nb")
    with pytest.raises(IndexError):
        env.tools["replace_line"](path=APP, line_no=999, text="x")
    assert _app(env) == BROKEN


# ---------------------------------------------------------------- the final checks


def test_checks_fail_while_the_error_is_there(tmp_path: Path) -> None:
    checks = _checks(_build(tmp_path))
    assert checks["app_compiles"] == (False, f"line {LINE}: '(' was never closed")
    assert checks["pytest_passes"][0] is False
    assert checks["imports_unchanged"][0] is True
    assert checks["tests_unchanged"][0] is True


def test_checks_catch_the_off_by_one_edit_on_the_import(tmp_path: Path) -> None:
    """The trap: the fix written one line up replaces the last import."""
    env = _build(tmp_path)
    env.tools["replace_line"](path=APP, line_no=LINE - 1, text=FIXED_LINE)
    checks = _checks(env)
    assert checks["imports_unchanged"][0] is False
    assert "'from pathlib import Path' was changed or removed" in checks["imports_unchanged"][1]
    assert checks["app_compiles"][0] is False


def test_checks_catch_a_touched_import_even_when_the_tests_pass(tmp_path: Path) -> None:
    env = _build(tmp_path)
    env.tools["replace_line"](path=APP, line_no=LINE, text=FIXED_LINE)
    env.tools["replace_line"](path=APP, line_no=3, text="import json  # noqa: F401")
    checks = _checks(env)
    assert checks["pytest_passes"][0] is True
    assert checks["imports_unchanged"] == (
        False,
        "import line 3 'import json' was changed or removed; "
        "import line 'import json  # noqa: F401' was added",
    )


def test_checks_catch_edited_tests_and_a_doubled_fix(tmp_path: Path) -> None:
    env = _build(tmp_path)
    # Silencing pytest by editing the tests (no pytest run: app.py does not compile).
    env.tools["write_file"](path=TESTS, content="def test_nothing():\n    pass\n")
    checks = _checks(env)
    assert checks["tests_unchanged"] == (False, f"{TESTS} was edited")
    env.tools["write_file"](path=TESTS, content=TEST_SOURCE)
    assert _checks(env)["tests_unchanged"] == (True, "")
    env.tools["write_file"](path="conftest.py", content="collect_ignore = ['test_app.py']\n")
    assert _checks(env)["tests_unchanged"] == (False, "conftest.py was added")
    # The fix applied twice, as a resumed run that repeated its effect would.
    env.tools["replace_line"](path=APP, line_no=LINE, text=FIXED_LINE + ")")
    checks = _checks(env)
    assert checks["fix_applied_once"][0] is False
    assert f"line {LINE}" in checks["fix_applied_once"][1]
    assert checks["app_compiles"][0] is False


def test_checks_catch_a_deleted_file(tmp_path: Path) -> None:
    env = _build(tmp_path)
    (env.root / APP).unlink()
    checks = _checks(env)
    assert checks["app_compiles"] == (False, f"line 0: {APP} is missing or unreadable")
    assert checks["imports_unchanged"][0] is False


# ---------------------------------------------------------------- the skills


def test_one_skill_applies_at_each_stage(tmp_path: Path) -> None:
    env = _build(tmp_path)

    def names(**fields: object) -> list[str]:
        return [s.name for s in env.skills.applicable(FixSyntaxState(task_id="x", **fields))]

    assert names() == ["locate_error"]
    assert names(error_line=LINE) == ["fix_syntax"]
    assert names(error_line=LINE, fixed=True) == ["run_tests"]
    assert names(error_line=LINE, fixed=True, tests_passed=True) == []


def test_locate_error_verify_recompiles(tmp_path: Path) -> None:
    env = _build(tmp_path)
    verify = env.skills["locate_error"].verify
    message = "'(' was never closed"
    right = FixSyntaxState(task_id="x", error_line=LINE, error_message=message)
    assert verify(right, Outcome()).ok
    wrong = right.model_copy(update={"error_line": LINE - 1})
    verdict = verify(wrong, Outcome())
    assert not verdict.ok
    assert f"reports line {LINE}" in verdict.reason
    (env.root / APP).write_text(CLEAN_APP, encoding="utf-8")
    assert "no syntax error" in verify(right, Outcome()).reason


def test_fix_that_touches_an_import_is_refused_and_rolled_back(tmp_path: Path) -> None:
    """A fix whose effect also changes an import line fails verify; the file is restored."""
    env = _build(tmp_path)
    replace = env.tools["replace_line"]

    def sloppy(path: str, line_no: int, text: str) -> str:
        result = replace(path=path, line_no=line_no, text=text)
        replace(path=path, line_no=LINE - 1, text="from pathlib import Path, PurePath")
        return result

    plan = [CallSkill(skill="locate_error"), CallSkill(skill="fix_syntax")]
    state = run_plan(SPEC, env, plan, tools={"replace_line": sloppy})[0].state
    assert isinstance(state, FixSyntaxState)
    assert state.error_line == LINE
    assert not state.fixed
    failed = next(e for e in state.errors if e.kind == "verify_failed")
    assert "'from pathlib import Path' was changed or removed" in failed.message
    assert "rolled back" in next(e for e in state.errors if e.kind == "step_failed").message
    assert _app(env) == BROKEN


def test_fix_on_the_wrong_line_is_refused_and_rolled_back(tmp_path: Path) -> None:
    env = _build(tmp_path)
    replace = env.tools["replace_line"]

    def off_by_one(path: str, line_no: int, text: str) -> str:
        return str(replace(path=path, line_no=line_no + 1, text=text))

    plan = [CallSkill(skill="locate_error"), CallSkill(skill="fix_syntax")]
    state = run_plan(SPEC, env, plan, tools={"replace_line": off_by_one})[0].state
    assert isinstance(state, FixSyntaxState)
    assert not state.fixed
    failed = next(e for e in state.errors if e.kind == "verify_failed")
    assert "still does not compile" in failed.message
    assert f"line(s) {LINE + 1} changed too" in failed.message
    assert _app(env) == BROKEN


def test_run_tests_verify_trusts_a_fresh_run_only(tmp_path: Path) -> None:
    """A test report that lies, or tests that were edited, never pass verify."""
    env = _build(tmp_path)
    verify = env.skills["run_tests"].verify
    claimed = FixSyntaxState(task_id="x", error_line=LINE, fixed=True, tests_passed=True)
    # app.py still broken: run claimed success, the fresh pytest run says otherwise.
    verdict = verify(claimed, Outcome(value={"exit_code": 0}))
    assert not verdict.ok
    assert "a fresh pytest run exits 2" in verdict.reason
    # Failing tests reported by run are a failure without another run.
    failing = claimed.model_copy(update={"tests_passed": False})
    assert "exit code 2" in verify(failing, Outcome(value={"exit_code": 2})).reason
    # Edited tests: refused before running anything.
    (env.root / TESTS).write_text(TEST_SOURCE + "\n# edited\n", encoding="utf-8")
    assert "was edited" in verify(claimed, Outcome(value={"exit_code": 0})).reason


class _Killed(BaseException):
    """Stands for kill -9 right after the effect: nothing after it runs."""


def test_resume_after_a_crash_mid_fix_never_applies_it_twice(tmp_path: Path) -> None:
    env = _build(tmp_path)
    replace = env.tools["replace_line"]
    calls: list[int] = []

    def replace_then_die(path: str, line_no: int, text: str) -> str:
        replace(path=path, line_no=line_no, text=text)
        calls.append(line_no)
        raise _Killed

    store = MemoryStore()
    crashing = scripted_agent(SPEC, env, env.plan_skills, tools={"replace_line": replace_then_die})
    runtime = Runtime(crashing, store, max_steps=len(env.plan_skills) + 2)
    runtime.start(SPEC.id)
    with pytest.raises(_Killed):
        runtime.run(SPEC.id)
    assert store.load(SPEC.id).state["pending_effect"] is not None
    assert _app(env) == CLEAN_APP
    # A new process resumes: the probe finds the fix done, so replace_line never runs again.
    rest = env.plan_skills[2:]
    result = Runtime(scripted_agent(SPEC, env, rest), store, max_steps=len(rest) + 2).run(SPEC.id)
    assert result.stopped == "completed", result.state.errors
    assert not result.state.errors
    assert calls == [LINE]
    assert _app(env) == CLEAN_APP
    assert all(c.ok for c in env.check(result.state))
