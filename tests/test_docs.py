"""Code in the README runs as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), re.DOTALL)


def run_example(path: Path, directory: Path, name: str) -> list[str]:
    """Run ``path``'s first python block as the script ``name`` in ``directory`` (a fresh
    interpreter, as a reader would; ``$SKILLSTATE_STORE`` unset) and return its lines."""
    script = directory / name
    if not script.exists():
        script.write_text(python_blocks(path)[0], encoding="utf-8")
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={k: v for k, v in os.environ.items() if k != "SKILLSTATE_STORE"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.splitlines()


def test_readme_quickstart_has_exactly_two_commands() -> None:
    """The Quickstart section is one bash block of exactly two commands."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL)
    assert block is not None
    commands = [line for line in block.group(1).splitlines() if line.strip()]
    assert [c.split()[0] for c in commands] == ["scripts/demo.sh", "scripts/test.sh"]


def test_readme_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """The concepts example completes and prints what its comments say."""
    blocks = python_blocks(README)
    assert blocks, "README has no python example"
    namespace: dict[str, object] = {"__name__": "readme_example"}
    exec(compile(blocks[0], str(README), "exec"), namespace)
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "completed Lisbon 640"
    assert "Never spend more than 2000 EUR" in out
