"""Running the ``skillstate`` command in a subprocess with a chosen environment.

:func:`tests.test_cli.run_cli` always sets ``$SKILLSTATE_STORE``; the tests of the
default store, of ``--debug`` and of SIGINT need other environments or a process
they can signal while it runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from tests.test_cli import ENTRY

_RICH_ENV = ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "TERM", "COLUMNS")


def cli_env(cwd: Path, extra: Mapping[str, str | None] | None = None) -> dict[str, str]:
    """run_cli's environment (its store in ``cwd``); ``extra`` sets (or, with None, unsets)."""
    env = {k: v for k, v in os.environ.items() if k not in _RICH_ENV}
    env |= {
        "SKILLSTATE_STORE": f"sqlite:///{cwd / 'state.db'}",
        "COLUMNS": "200",
        "PYTHONIOENCODING": "utf-8",
    }
    for key, value in (extra or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def run_env(cwd: Path, extra: Mapping[str, str | None] | None, *args: str) -> tuple[int, str, str]:
    """Run ``skillstate ARGS`` in ``cwd`` with :func:`cli_env`; (returncode, stdout, stderr)."""
    proc = subprocess.run(
        [sys.executable, "-c", ENTRY, *args],
        cwd=cwd,
        env=cli_env(cwd, extra),
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=600,  # a hang guard, generous for a loaded machine
        check=False,
    )
    return proc.returncode, proc.stdout, proc.stderr


def start_cli(cwd: Path, *args: str) -> subprocess.Popen[bytes]:
    """Start ``skillstate ARGS`` in ``cwd`` without waiting for it.

    Its output goes to ``cwd/cli.out`` and ``cwd/cli.err`` (read them with
    :func:`output` once it has exited): a pipe nobody reads while the test waits
    could fill up and stall the command.
    """
    with (cwd / "cli.out").open("w") as out, (cwd / "cli.err").open("w") as err:
        return subprocess.Popen(
            [sys.executable, "-c", AS_FROM_A_SHELL + ENTRY, *args],
            cwd=cwd,
            env=cli_env(cwd),
            stdout=out,
            stderr=err,
        )


AS_FROM_A_SHELL = (
    "import signal\n"
    "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
    "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})\n"
)
"""SIGINT and SIGTERM as a terminal's shell hands them to a command (Python's default
handler, unblocked). A child inherits an ignored disposition and the signal mask of the
thread that started it, and a test worker that ran other tests may have changed either:
the command would then never see the Ctrl-C a test sends it."""


def output(cwd: Path) -> tuple[str, str]:
    """What a command started by :func:`start_cli` in ``cwd`` wrote: (stdout, stderr)."""
    out, err = ((cwd / name).read_text(encoding="utf-8") for name in ("cli.out", "cli.err"))
    return out, err


def wait_for(
    condition: Callable[[], bool],
    *,
    process: subprocess.Popen[bytes] | None = None,
    timeout: float = 120.0,
    what: str = "the condition",
) -> None:
    """Poll ``condition`` until it holds; fail if ``process`` exits first or time runs out."""
    deadline = time.monotonic() + timeout
    while not condition():
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the command exited ({process.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout} s")
        time.sleep(0.02)
