"""The runnable example of ``docs/shared.md`` runs as written, and the commands shown
there print what the page says."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

PAGE = Path(__file__).resolve().parents[1] / "docs" / "shared.md"


def _run(args: list[str], cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k != "SKILLSTATE_STORE"}
    done = subprocess.run(
        args, cwd=cwd, capture_output=True, text=True, timeout=300, check=False, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_example_runs_and_the_commands_print_what_the_page_shows(tmp_path: Path) -> None:
    text = PAGE.read_text(encoding="utf-8")
    example = text.split("Save as `cases.py`", 1)[1]
    (code,) = re.findall(r"```python\n(.*?)```", example, re.DOTALL)
    (tmp_path / "cases.py").write_text(code, encoding="utf-8")
    assert _run([sys.executable, "cases.py"], tmp_path).splitlines() == [
        "t-1 completed",
        "t-2 completed",
    ]
    cli = [sys.executable, "-m", "skillstate"]
    session = re.search(r"```console\n(.*?)```", text, re.DOTALL)
    assert session is not None
    shown = session.group(1)
    listed = _run([*cli, "shared"], tmp_path)
    assert listed.strip() in shown
    record = _run([*cli, "shared", "case:C-17"], tmp_path)
    assert record.strip() in shown
    assert "v2 shared_write by t-2 (add_note, tag t-2@3)" in record
    _run([*cli, "log", "skillstate:shared:case:C-17"], tmp_path)
