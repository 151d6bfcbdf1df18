"""docs/tutorial.md, built from its own code blocks: type-checked, run, resumed, rolled back.

Every ```python block of the tutorial starts with the file it belongs to
(``# refund_desk.py`` or ``# run_it.py``); this test puts them together in a fresh
directory, runs ``mypy --strict`` on them, runs the script and checks the printed
output against the page's ```text block, then follows the command-line section
(rollback refused over the refund, compensated, resumed). The README's example is
type-checked the same way.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TUTORIAL = ROOT / "docs" / "tutorial.md"
CLI = [sys.executable, "-c", "from skillstate.cli import main; main()"]


def files_of(page: Path) -> dict[str, str]:
    """The page's python blocks, put together by the file name on their first line."""
    out: dict[str, str] = {}
    for block in re.findall(r"```python\n(.*?)```", page.read_text(), re.S):
        first, _, body = block.partition("\n")
        match = re.fullmatch(r"# (\w+\.py)", first.strip())
        assert match, f"a tutorial block does not name its file: {first!r}"
        out[match.group(1)] = out.get(match.group(1), "") + body + "\n"
    return out


def mypy_strict(directory: Path, *names: str) -> str:
    from mypy import api

    (directory / "mypy.ini").write_text("[mypy]\nplugins = pydantic.mypy\n")
    out, err, status = api.run(
        ["--strict", "--config-file", str(directory / "mypy.ini")]
        + [str(directory / n) for n in names]
    )
    assert status == 0, out + err
    return out


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tutorial")
    for name, text in files_of(TUTORIAL).items():
        (directory / name).write_text(text)
    return directory


def run(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(directory), "COLUMNS": "200"}
    env.pop("SKILLSTATE_STORE", None)
    return subprocess.run(
        list(args),
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_tutorial_blocks_make_two_files(workdir: Path) -> None:
    """The page holds the agent module and the script, nothing else."""
    assert sorted(p.name for p in workdir.glob("*.py")) == ["refund_desk.py", "run_it.py"]


def test_the_tutorial_passes_mypy_strict(workdir: Path) -> None:
    """The agent and the script type-check under mypy --strict, as written on the page."""
    assert "Success" in mypy_strict(workdir, "refund_desk.py", "run_it.py")


def test_the_readme_example_passes_mypy_strict(tmp_path: Path) -> None:
    """The README's 'Concepts in one example' type-checks under mypy --strict."""
    block = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)[0]
    (tmp_path / "example.py").write_text(block)
    assert "Success" in mypy_strict(tmp_path, "example.py")


def test_the_tutorial_runs_as_the_page_says(workdir: Path) -> None:
    """run_it.py prints what the page's text block shows; then the CLI section works."""
    done = run(workdir, sys.executable, "run_it.py")
    assert done.returncode == 0, done.stderr
    expected = re.search(r"```text\n(.*?)```", TUTORIAL.read_text(), re.S)
    assert expected is not None
    assert done.stdout == expected.group(1)

    store = ["--store", "sqlite:///refunds.db"]
    refused = run(workdir, *CLI, "rollback", "r1", "--to", "7", *store)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "would cross 1 effect(s)" in refused.stderr
    undone = run(
        workdir, *CLI, "rollback", "r1", "--to", "7", "--compensate",
        "--agent", "refund_desk:agent", *store,
    )  # fmt: skip
    assert undone.returncode == 0, undone.stderr
    assert "1 effect(s) undone" in undone.stdout
    resumed = run(workdir, *CLI, "resume", "r1", "--agent", "refund_desk:agent", *store, "-q")
    assert resumed.returncode == 0, resumed.stderr
    check = run(
        workdir,
        sys.executable,
        "-c",
        "import sqlite3; print(sqlite3.connect('shop.db').execute("
        "'SELECT order_id, amount, key FROM refunds').fetchall())",
    )
    rows = ast.literal_eval(check.stdout)
    assert len(rows) == 1  # refunded, taken back, refunded again: one refund in the world
    assert rows[0][2].endswith("~1")  # under a new key: an undone key is never reused
