"""The fan-out page's core example runs as written and prints what the page says."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

PAGE = Path(__file__).resolve().parents[1] / "docs" / "fanout.md"


def test_the_spawning_example_runs_and_prints_what_the_page_shows(tmp_path: Path) -> None:
    text = PAGE.read_text(encoding="utf-8")
    section = text.split("## Spawning child tasks", 1)[1].split("\n## ", 1)[0]
    example = next(b for b in re.findall(r"```python\n(.*?)```", section, re.DOTALL)
                   if b.startswith("import asyncio"))  # fmt: skip
    shown = re.findall(r"It prints:\n\n```text\n(.*?)```", section, re.DOTALL)[0]
    script = tmp_path / "example.py"
    script.write_text(example, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={k: v for k, v in os.environ.items() if k != "SKILLSTATE_STORE"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout == shown
