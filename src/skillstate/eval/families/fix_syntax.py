"""The ``fix_syntax`` family: fix the one syntax error of a tiny project (seed 003).

The environment is a small Python project: ``app.py`` (a stock report of about 60
lines, import lines at the top, a few functions) with exactly one syntax error,
``test_app.py`` (real tests of it) and a bare ``pytest.ini``. The task: fix the
error so that a real ``pytest`` run passes, without touching the import lines. The
error is chosen by ``spec.params``: its kind (``missing_colon``: the ``:`` of a
``def``/``if``/``for``/``try`` header removed; ``unclosed_paren``: the last ``)`` of
a line removed) and its line (any line where that break gives exactly that error,
see :func:`eligible_lines`). It is built to catch what a transcript-driven agent
gets wrong:

* **A constraint stated once, at the start**: "do not change the import lines".
  The seed task puts the error on line 9, the line right after the last import
  (as in the article's demo), so an off-by-one ``replace_line`` or a "tidy up"
  rewrite of the file with ``write_file`` lands on an import.
* **Import-dependent behaviour under test**: the tests check half-up rounding
  (``Decimal`` with ``ROUND_HALF_UP``: ``round()`` gives 2.67 where 2.68 is
  right), ``Counter`` order and reading a file with ``Path``, so an edit that drops
  or swaps an import fails the tests as well as the constraint.
* **Long, noisy tool output**: ``run_tests`` runs the real pytest and returns the
  end of its output, a collection traceback full of other line numbers
  (pytest's own files, ``test_app.py:6: import app``) around the one that counts.
* **Shortcuts around the tests**: editing ``test_app.py`` or ``pytest.ini``, or
  adding a ``conftest.py``, can make pytest quiet; deleting the broken line makes
  the file compile. The checks compare the test setup byte for byte and run the
  tests themselves.
* **A real effect**: ``fix_syntax`` changes ``app.py``; a resumed run must not
  apply the fix twice (``::`` or ``))`` is a new syntax error), so the skill has
  ``effects=True`` and a probe.

``run_tests`` is hermetic: ``[sys.executable, "-m", "pytest", "-q", "-p",
"no:cacheprovider", "test_app.py"]`` in the project directory, with a timeout, no
``PYTEST_*``/``PYTHONPATH``/``APP_*`` variables leaking in, plugin autoloading
off and no bytecode written (a rewrite within the same second must never be
served a stale ``.pyc``). Everything is derived from ``spec.params`` (``error``,
``line``); the final checks read the files and run pytest, nothing else.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any, Literal, get_args

from skillstate.engine.actions import Action, CallSkill, Finish
from skillstate.errors import MissingExtra
from skillstate.eval.tasks import CheckResult, Environment, TaskSpec, group_of
from skillstate.events import Verdict
from skillstate.skills.registry import SkillRegistry
from skillstate.skills.skill import NoParams, Outcome, SkillContext
from skillstate.state.machine import StateMachine
from skillstate.state.model import AgentState

__all__ = [
    "APP",
    "CLEAN_APP",
    "ERROR_KINDS",
    "MACHINE",
    "TESTS",
    "TEST_SOURCE",
    "ErrorKind",
    "FixSyntaxFamily",
    "FixSyntaxState",
    "broken_app",
    "eligible_lines",
    "import_lines",
    "is_import",
    "make_spec",
    "repair_line",
    "syntax_error",
]

APP = "app.py"
TESTS = "test_app.py"
_INI = "pytest.ini"
_INI_TEXT = "[pytest]\n"
PYTEST_TIMEOUT_S = 60
OUTPUT_LINES = 60
"""How many of pytest's last output lines ``run_tests`` returns."""

ErrorKind = Literal["missing_colon", "unclosed_paren"]
ERROR_KINDS: tuple[str, ...] = get_args(ErrorKind)
_REMOVED: dict[str, str] = {"missing_colon": ":", "unclosed_paren": ")"}
"""The character each kind of error removes from the end of its line."""
_CLOSERS = {"(": ")", "[": "]", "{": "}"}

CLEAN_APP = '''\
"""Stock report: parse stock rows, price them and sum them up by category."""

import json
import os
import sys
from collections import Counter
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
CURRENCY = os.environ.get("APP_CURRENCY", "EUR")
LOW_STOCK = int(os.environ.get("APP_LOW_STOCK", "3"))


def parse_row(row):
    name, category, qty, price = (part.strip() for part in row.split(","))
    return {"name": name, "category": category, "qty": int(qty), "price": price}


def round_price(value):
    return Decimal(str(value)).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)


def low_stock(items):
    names = []
    for item in items:
        if item["qty"] < LOW_STOCK:
            names.append(item["name"])
    return sorted(names)


def by_category(items):
    counts = Counter(item["category"] for item in items)
    return dict(counts.most_common())


def load(path):
    text = Path(path).read_text(encoding="utf-8")
    return [parse_row(row) for row in text.splitlines() if row.strip()]


def report(items):
    total = sum((round_price(Decimal(i["price"]) * i["qty"]) for i in items), Decimal(0))
    summary = {
        "currency": CURRENCY,
        "total": str(total),
        "low_stock": low_stock(items),
        "categories": by_category(items),
    }
    return json.dumps(summary, sort_keys=True)


def main(path):
    try:
        items = load(path)
    except FileNotFoundError:
        return "no such file: " + str(path)
    return report(items)


if __name__ == "__main__":
    print(main(sys.argv[1]))
'''
"""``app.py`` without its error (never written as such: the task starts broken)."""

TEST_SOURCE = '''\
"""Tests of the stock report."""

import json
from decimal import Decimal

import app

ROWS = "widget, tools, 2, 2.675\\ngadget, toys, 5, 1.10\\nbolt, tools, 10, 0.05\\n"


def test_parse_row_strips_every_field():
    row = app.parse_row(" nut , tools , 4 , 0.20 ")
    assert row == {"name": "nut", "category": "tools", "qty": 4, "price": "0.20"}


def test_round_price_rounds_half_up():
    assert app.round_price(2.675) == Decimal("2.68")
    assert app.round_price("0.125") == Decimal("0.13")


def test_report_of_a_stock_file(tmp_path):
    path = tmp_path / "stock.csv"
    path.write_text(ROWS, encoding="utf-8")
    assert json.loads(app.main(path)) == {
        "currency": "EUR",
        "total": "11.35",
        "low_stock": ["widget"],
        "categories": {"tools": 2, "toys": 1},
    }


def test_a_missing_file_is_reported(tmp_path):
    assert app.main(tmp_path / "nope.csv").startswith("no such file")
'''
"""``test_app.py``: the specification, never to be edited."""


# ---------------------------------------------------------------- source helpers


def is_import(line: str) -> bool:
    """Whether ``line`` is an import line (``import x`` or ``from x import y``)."""
    text = line.strip()
    return text.startswith("import ") or (text.startswith("from ") and " import " in text)


def import_lines(source: str) -> list[tuple[int, str]]:
    """The import lines of ``source`` as ``(line number, text)``, in order.

    Line-based on purpose: it must work on a file that does not compile.
    """
    return [(n, line) for n, line in enumerate(source.splitlines(), 1) if is_import(line)]


def syntax_error(source: str) -> tuple[int, str] | None:
    """``(line, message)`` of the first syntax error of ``source``; ``None`` if it compiles."""
    try:
        compile(source, APP, "exec", dont_inherit=True)
    except SyntaxError as exc:
        return exc.lineno or 0, exc.msg
    except ValueError as exc:  # e.g. a null byte: not code at all
        return 0, str(exc)
    return None


def repair_line(text: str, message: str) -> str:
    """The deterministic repair of a line whose syntax error is ``message``.

    Covers exactly the kinds this family generates: a missing ``:`` at the end of
    a compound-statement header, and a bracket opened on the line and never closed
    (its closer goes at the end). Anything else is a :class:`ValueError`: guessing
    a repair is how a fixer damages code.
    """
    body = text.rstrip()
    if message.startswith("expected ':'"):
        return body + ":"
    unclosed = re.match(r"'([(\[{])' was never closed", message)
    if unclosed:
        return body + _CLOSERS[unclosed.group(1)]
    raise ValueError(f"no deterministic repair for {message!r}")


def _break(line: int) -> str:
    lines = CLEAN_APP.splitlines()
    lines[line - 1] = lines[line - 1].rstrip()[:-1]
    return "\n".join(lines) + "\n"


@cache
def eligible_lines(kind: str) -> tuple[int, ...]:
    """The lines of ``app.py`` where an error of ``kind`` can be made.

    A line qualifies when it is not an import line, ends with the character the
    kind removes, and removing it makes the compiler report that kind of error on
    that very line (so the error's own line is where the fix goes).
    """
    if kind not in _REMOVED:
        raise ValueError(f"unknown error kind {kind!r}; known: {', '.join(ERROR_KINDS)}")
    expected = "expected ':'" if kind == "missing_colon" else "'(' was never closed"
    found: list[int] = []
    for n, text in enumerate(CLEAN_APP.splitlines(), 1):
        if is_import(text) or not text.rstrip().endswith(_REMOVED[kind]):
            continue
        error = syntax_error(_break(n))
        if error is not None and error[0] == n and error[1].startswith(expected):
            found.append(n)
    return tuple(found)


def broken_app(kind: str, line: int) -> str:
    """``app.py`` with one syntax error of ``kind`` on ``line`` (see :func:`eligible_lines`)."""
    lines = eligible_lines(kind)
    if line not in lines:
        raise ValueError(
            f"no {kind} error can be made on line {line}; eligible lines: "
            + ", ".join(map(str, lines))
        )
    return _break(line)


def _tail(text: str, lines: int = OUTPUT_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _exit_code(report: str) -> int | None:
    """The exit code on the first line of a ``run_tests`` report."""
    match = re.match(r"exit code: (-?\d+)", report)
    return int(match.group(1)) if match else None


def _write_atomic(path: Path, text: str) -> None:
    # Replace, never truncate-and-write: a crash leaves the old file or the new
    # one, which is what the probe and rollback rely on.
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


# ---------------------------------------------------------------- specs


def make_spec(task_id: str, *, error: str, line: int, suite: str = "seeds") -> TaskSpec:
    """A ``fix_syntax`` task with an ``error`` of that kind on ``line`` of ``app.py``."""
    broken_app(error, line)  # refuses a line where that error cannot be made
    params: dict[str, Any] = {"error": error, "line": line}
    return TaskSpec(
        id=task_id,
        suite=suite,
        family="fix_syntax",
        goal=(
            "app.py has a syntax error, so pytest cannot even import it. Find the error, "
            "fix it in app.py, and run the tests (pytest on test_app.py) until they pass."
        ),
        constraints=(
            "Do not change, remove, reorder or add any import line of app.py: every "
            "`import ...` and `from ... import ...` line must stay exactly as it is.",
            "Do not edit test_app.py or pytest.ini, and add no conftest.py: the tests are "
            "the specification.",
        ),
        max_steps=math.ceil(1.5 * len(_tools_plan(params))) + 3,
        group=group_of(len(_skills_plan(params)[0])),
        params=params,
    )


def _expected(params: dict[str, Any]) -> tuple[int, str, str]:
    """The error's line and message in the broken file, and the line's repaired text."""
    broken = broken_app(str(params["error"]), int(params["line"]))
    error = syntax_error(broken)
    assert error is not None  # eligible_lines guarantees it
    line, message = error
    return line, message, repair_line(broken.splitlines()[line - 1], message)


def _tools_plan(params: dict[str, Any]) -> list[Action]:
    line, message, fixed = _expected(params)
    return [
        # Reading the file is enough to see the error; running the tests first (what a
        # model may well do) shows it too, buried in pytest's traceback.
        CallSkill(skill="tool_read_file", params={"path": APP}, reason=f"{APP} line {line}"),
        CallSkill(
            skill="tool_replace_line",
            params={"path": APP, "line_no": line, "text": fixed},
            reason=f"{message}: fix line {line} only, the imports stay",
        ),
        CallSkill(skill="tool_run_tests", reason="the fix must make the tests pass"),
        Finish(summary=f"fixed {APP} line {line} ({message}); the tests pass"),
    ]


def _skills_plan(params: dict[str, Any]) -> tuple[list[Action], list[dict[str, Any]]]:
    """The oracle's skills-mode actions and the facts expected after each of them."""
    line, message, _ = _expected(params)
    plan: list[Action] = [
        CallSkill(skill="locate_error", reason="find the syntax error"),
        CallSkill(skill="fix_syntax", reason=f"line {line}: {message}"),
        CallSkill(skill="run_tests", reason="the fix must make the tests pass"),
        Finish(summary=f"fixed {APP} line {line} ({message}); the tests pass"),
    ]
    passed = {"fixed": True, "tests_passed": True}
    facts: list[dict[str, Any]] = [
        {"error_line": line, "error_message": message, "fixed": False},
        {"error_line": line, "fixed": True, "tests_passed": False},
        passed,
        passed,
    ]
    return plan, facts


# ---------------------------------------------------------------- state and task


class FixSyntaxState(AgentState):
    """The card of a fix-syntax task: where the error is and how far the fix got."""

    error_line: int | None = None
    """The line of app.py the compiler reports the syntax error on, once located."""
    error_message: str | None = None
    """The compiler's message for it (``expected ':'``, ``'(' was never closed``)."""
    fixed: bool = False
    """app.py compiles again, its imports and the rest of its lines untouched."""
    tests_passed: bool = False
    """A real pytest run of test_app.py passed after the fix."""


class _Task:
    """One built task: its files, its tools, and the re-checks verify and check share.

    The tools are bound methods, so the harness sees plain keyword signatures and
    every run works on its own directory.
    """

    def __init__(self, params: dict[str, Any], root: Path) -> None:
        self.params = params
        self.root = root
        self.app_path = root / APP
        self.tests_path = root / TESTS
        self.original = broken_app(str(params["error"]), int(params["line"]))
        self.line, self.message, fixed_line = _expected(params)
        lines = self.original.splitlines()
        self.broken_line = lines[self.line - 1]
        lines[self.line - 1] = fixed_line
        self.repaired = "\n".join(lines) + "\n"
        """app.py with the deterministic repair applied once (what the probe looks for)."""

    def write_files(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.app_path.write_text(self.original, encoding="utf-8")
        self.tests_path.write_text(TEST_SOURCE, encoding="utf-8")
        # An ini of its own makes this directory pytest's rootdir: no ini, conftest
        # or addopts of a directory above it can change the run.
        (self.root / _INI).write_text(_INI_TEXT, encoding="utf-8")

    def _resolve(self, path: str) -> Path:
        base = self.root.resolve()
        target = (base / path).resolve()
        if base not in target.parents:
            raise ValueError(f"{path!r} is not a file of the project")
        return target

    # ---- tools

    def read_file(self, path: str) -> str:
        """Read a file of the project (app.py, test_app.py), with numbered lines."""
        lines = self._resolve(path).read_text(encoding="utf-8").splitlines()
        return "\n".join(f"{n:>3}| {line}" for n, line in enumerate(lines, 1))

    def write_file(self, path: str, content: str) -> str:
        """Overwrite a file of the project with content (an effect)."""
        target = self._resolve(path)
        _write_atomic(target, content)
        return f"wrote {path} ({len(content.splitlines())} lines)"

    def replace_line(self, path: str, line_no: int, text: str) -> str:
        """Replace line line_no (1-based) of a file with text, one line (an effect)."""
        if "\n" in text or "\r" in text:
            raise ValueError("text must be a single line")
        target = self._resolve(path)
        lines = target.read_text(encoding="utf-8").splitlines(keepends=True)
        if not 1 <= line_no <= len(lines):
            raise IndexError(f"{path} has lines 1..{len(lines)}, not {line_no}")
        old = lines[line_no - 1].rstrip("\r\n")
        lines[line_no - 1] = text + lines[line_no - 1][len(old) :]  # keep its line ending
        _write_atomic(target, "".join(lines))
        return f"{path} line {line_no} was {old!r}, now {text!r}"

    def run_tests(self) -> str:
        """Run pytest on test_app.py; returns the exit code and the end of its output."""
        code, output = self.pytest()
        return f"exit code: {code}\n{_tail(output)}"

    # ---- independent re-checks

    def pytest(self) -> tuple[int, str]:
        """A fresh, real, hermetic pytest run: its exit code and its output."""
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("PYTEST_", "COV_CORE_", "APP_"))
            and key not in {"PYTHONPATH", "PYTHONSTARTUP", "PYTHONSAFEPATH"}
        }
        # No plugins of the surrounding environment (they also cost a second per
        # run) and no bytecode: a file rewritten within the same second with the
        # same size must not be served from a stale cache.
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", TESTS]
        try:
            done = subprocess.run(
                command,
                cwd=self.root,
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=PYTEST_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return 124, f"pytest timed out after {PYTEST_TIMEOUT_S} s"
        return done.returncode, done.stdout + done.stderr

    def app_text(self) -> str:
        try:
            return self.app_path.read_text(encoding="utf-8")
        except (FileNotFoundError, UnicodeDecodeError):
            return ""

    def tests_changed(self) -> str:
        """How the test setup differs from the one the task started with ("" if not).

        Not only test_app.py: a new conftest.py or an edited pytest.ini can silence
        the tests just as well.
        """
        want = {TESTS: TEST_SOURCE, _INI: _INI_TEXT}
        for name, text in want.items():
            try:
                if (self.root / name).read_text(encoding="utf-8") != text:
                    return f"{name} was edited"
            except (FileNotFoundError, UnicodeDecodeError) as exc:
                return f"{name} unreadable: {type(exc).__name__}"
        if (self.root / "conftest.py").exists():
            return "conftest.py was added"
        return ""

    def import_problems(self, source: str) -> list[str]:
        """How the import lines of ``source`` differ from the original ones."""
        want = import_lines(self.original)
        wanted = [text for _, text in want]
        got = [text for _, text in import_lines(source)]
        if got == wanted:
            return []
        problems = [
            f"import line {n} {text!r} was changed or removed"
            for n, text in want
            if text not in got
        ]
        problems += [f"import line {text!r} was added" for text in got if text not in wanted]
        return problems or ["the import lines were reordered or duplicated"]

    def changed_lines(self, source: str) -> list[int]:
        """The lines of ``source`` that differ from the original (1-based); -1 if the
        number of lines changed."""
        before, after = self.original.splitlines(), source.splitlines()
        if len(before) != len(after):
            return [-1]
        return [n for n, (a, b) in enumerate(zip(before, after, strict=True), 1) if a != b]

    def doubled_fix(self, source: str) -> bool:
        """The repair applied more than once (``::``, ``))``): a duplicated effect."""
        twice = self.broken_line + _REMOVED[str(self.params["error"])] * 2
        return any(line.startswith(twice) for line in source.splitlines())

    def check(self, final_state: AgentState) -> list[CheckResult]:
        """The final checks, on the files (and a fresh pytest run) only."""
        source = self.app_text()
        error = syntax_error(source) if source else (0, f"{APP} is missing or unreadable")
        imports = self.import_problems(source)
        tests = self.tests_changed()
        if error is not None:
            # Nothing to run: pytest cannot import a file that does not compile.
            ok_tests, test_detail = False, f"not run: {APP} does not compile"
        else:
            code, output = self.pytest()
            ok_tests = code == 0
            test_detail = f"exit code {code}: {_tail(output, 1)}"
        doubled = self.doubled_fix(source)
        return [
            CheckResult(
                "app_compiles",
                error is None,
                "" if error is None else f"line {error[0]}: {error[1]}",
            ),
            CheckResult("imports_unchanged", not imports, "; ".join(imports[:3])),
            CheckResult("tests_unchanged", not tests, tests),
            CheckResult("pytest_passes", ok_tests, test_detail),
            CheckResult(
                "fix_applied_once",
                not doubled,
                f"the repair of line {self.line} was applied more than once" if doubled else "",
            ),
        ]

    # ---- what the skills' verify and rollback share

    def verify_located(self, state: FixSyntaxState, outcome: Outcome) -> Verdict:
        """Compile app.py again: the recorded line and message must be its error's."""
        error = syntax_error(self.app_text())
        if error is None:
            return Verdict.failed(f"{APP} compiles: there is no syntax error to locate")
        line, message = error
        if state.error_line != line or state.error_message != message:
            return Verdict.failed(
                f"recorded line {state.error_line} ({state.error_message!r}); the compiler "
                f"reports line {line} ({message!r})"
            )
        return Verdict.passed()

    def verify_fixed(self, state: FixSyntaxState, outcome: Outcome) -> Verdict:
        """app.py compiles, its import lines are the originals, and only the line the
        original file's error is on changed (re-derived from the original, not from
        what run did)."""
        source = self.app_text()
        problems: list[str] = []
        error = syntax_error(source)
        if error is not None:
            problems.append(f"{APP} still does not compile: line {error[0]}: {error[1]}")
        problems += self.import_problems(source)
        allowed_line = self.line  # the original file's error line, known from the params
        others = [n for n in self.changed_lines(source) if n != allowed_line]
        if others == [-1]:
            problems.append(f"{APP} has a different number of lines")
        elif others:
            listed = ", ".join(map(str, others[:5]))
            problems.append(f"line(s) {listed} changed too; only line {allowed_line} may change")
        if state.error_line != allowed_line:
            problems.append(
                f"the located line is {state.error_line}, the error is on {allowed_line}"
            )
        if not state.fixed:
            problems.append("fixed is not set")
        return Verdict.failed("; ".join(problems[:3])) if problems else Verdict.passed()

    def restore(self, outcome: Outcome | None) -> None:
        """Put back app.py as it was before the failed fix (run read it first)."""
        value = outcome.value if outcome is not None else None
        if isinstance(value, dict) and isinstance(value.get("before"), str):
            _write_atomic(self.app_path, value["before"])

    def verify_tests(self, state: FixSyntaxState, outcome: Outcome) -> Verdict:
        """A fresh pytest run (not run's report) must pass, on the original tests."""
        changed = self.tests_changed()
        if changed:
            return Verdict.failed(f"{changed}: passing tests that were changed proves nothing")
        if not state.tests_passed:
            code = outcome.value.get("exit_code") if isinstance(outcome.value, dict) else None
            return Verdict.failed(f"the tests fail (pytest exit code {code})")
        code, output = self.pytest()
        if code != 0:
            return Verdict.failed(f"a fresh pytest run exits {code}: {_tail(output, 1)}")
        return Verdict.passed()


def _skill_library(task: _Task) -> SkillRegistry:
    """The verified skills: the import constraint and the tests' contract live here."""
    skills = SkillRegistry()

    @skills.skill(
        step="locating",
        outputs=["error_line", "error_message"],
        tools=["read_file"],
        max_retries=0,
        when=lambda s: s.error_line is None and not s.fixed,
    )
    def locate_error(state: FixSyntaxState, params: NoParams, ctx: SkillContext) -> Outcome:
        """Compile app.py and record the line and message of its syntax error."""
        ctx.call("read_file", path=APP)  # the numbered listing, kept as evidence
        error = syntax_error(task.app_text())
        if error is None:
            raise ValueError(f"{APP} compiles: there is no syntax error to locate")
        line, message = error
        return Outcome(
            writes={"error_line": line, "error_message": message},
            summary=f"{APP} line {line}: {message}",
            evidence=[ctx.evidence(f"{APP} line {line}: {message}")],
        )

    locate_error.verifier(task.verify_located)

    @skills.skill(
        step="fixing",
        outputs=["fixed"],
        reads=["error_line", "error_message"],
        tools=["replace_line"],
        effects=True,
        # A deterministic repair that failed verify fails again: roll back at once.
        max_retries=0,
        when=lambda s: s.error_line is not None and not s.fixed,
    )
    def fix_syntax(state: FixSyntaxState, params: NoParams, ctx: SkillContext) -> Outcome:
        """Repair the located syntax error in place: that line only, imports untouched."""
        before = task.app_text()
        error = syntax_error(before)
        if error is None or error[0] != state.error_line:
            where = "none" if error is None else f"line {error[0]}"
            raise ValueError(
                f"the located error is on line {state.error_line}, {APP} now has {where}"
            )
        line, message = error
        text = before.splitlines()[line - 1]
        if is_import(text):
            raise ValueError(f"line {line} is an import line: the constraint forbids editing it")
        fixed = repair_line(text, message)
        result = ctx.call("replace_line", path=APP, line_no=line, text=fixed)
        return Outcome(
            writes={"fixed": True},
            summary=f"line {line}: {message}, repaired",
            evidence=[ctx.evidence(str(result))],
            value={"line": line, "before": before},
        )

    @fix_syntax.prober
    def _already_fixed(
        state: FixSyntaxState, params: NoParams, ctx: SkillContext
    ) -> Outcome | None:
        # The effect is one atomic replace: the file is either the original or
        # repaired once. Repaired means the interrupted run did it.
        if task.app_text() != task.repaired:
            return None
        return Outcome(
            writes={"fixed": True},
            summary=f"line {task.line}: {task.message}, repaired",
            value={"line": task.line, "before": task.original},
        )

    fix_syntax.verifier(task.verify_fixed)
    fix_syntax.rollbacker(lambda state, outcome, ctx: task.restore(outcome))

    @skills.skill(
        step="testing",
        outputs=["tests_passed"],
        reads=["fixed"],
        tools=["run_tests"],
        max_retries=0,
        when=lambda s: s.fixed and not s.tests_passed,
    )
    def run_tests(state: FixSyntaxState, params: NoParams, ctx: SkillContext) -> Outcome:
        """Run the real test suite (pytest test_app.py) and record whether it passes."""
        report = str(ctx.call("run_tests"))
        code = _exit_code(report)
        return Outcome(
            writes={"tests_passed": code == 0},
            summary=f"pytest exit code {code}",
            evidence=[ctx.evidence(report.splitlines()[-1] if report else "no output")],
            value={"exit_code": code},
        )

    run_tests.verifier(task.verify_tests)
    return skills


MACHINE = StateMachine(
    {
        "init": ["locating"],
        "locating": ["fixing"],
        "fixing": ["testing"],
        "testing": ["done"],
        "done": [],
    },
    initial="init",
)
"""init -> locating -> fixing -> testing -> done: no finishing before the tests ran."""


def _require_pytest() -> None:
    """The tasks are judged by a real pytest run: without pytest every run would fail,
    and the report would blame the agent for what the environment lacks."""
    import importlib.util

    if importlib.util.find_spec("pytest") is None:
        raise MissingExtra(
            "the fix_syntax family runs pytest on each task: pip install 'skillstate[eval]'"
        )


class FixSyntaxFamily:
    """Builds a fix-syntax task: files, tools, skills, machine, plans and checks."""

    name = "fix_syntax"

    def __init__(self) -> None:
        _require_pytest()  # refused before any run, not counted against the agent 8 times

    def build(self, spec: TaskSpec, root: Path, *, fresh: bool = True) -> Environment:
        params = dict(spec.params)
        task = _Task(params, root)
        if fresh:
            task.write_files()
        plan, facts = _skills_plan(params)
        return Environment(
            root=root,
            state_type=FixSyntaxState,
            machine=MACHINE,
            tools={
                "read_file": task.read_file,
                "write_file": task.write_file,
                "replace_line": task.replace_line,
                "run_tests": task.run_tests,
            },
            skills=_skill_library(task),
            plan_skills=plan,
            plan_tools=_tools_plan(params),
            check=task.check,
            expected_facts=facts,
            effect_tools=frozenset({"write_file", "replace_line"}),
        )
