"""The ``skillstate`` command, one module per command group.

Exit codes: 0 completed (or paused waiting for the user, or cancelled), 1 the task failed,
2 bad input, 3 conflict (another writer committed first, or another worker holds
the task), 4 stopped by --max-steps or a budget (resumable), 5 the stored state is
corrupted or newer than this code (nothing was written), 6 the task stalled: its
decisions stopped making progress (failed, or parked for a person with --on-stall park),
7 the store cannot be reached (a database or server down, refused, bad credentials),
8 the task is pinned to another definition of its agent and nothing declared carries the
change (the message names it; nothing was written), 9 an evaluation gate failed (``eval
--compare`` saw a metric move past its ``--fail-under`` delta, or ``eval --replay`` saw a
run differ from its recording; the report is written), 130 interrupted (Ctrl-C: the last
committed step is kept; the hint names the task).

Only typer is imported at start-up; the runtime, stores and rich tables load in
the commands that use them, so ``skillstate --help`` stays fast.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import NoReturn

import typer

from skillstate.cli._app import (
    EXIT_CONFLICT,
    EXIT_CORRUPTED,
    EXIT_DEFINITION,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_REGRESSION,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    SESSION,
    app,
)

__all__ = ["app", "main"]
# The command groups register themselves with @app.command() when imported; this
# order is the order `skillstate --help` lists them in.
for _group in (
    "tasks",
    "approvals",
    "control",
    "signals",
    "workers",
    "schedules",
    "listing",
    "inspect",
    "repair",
    "keys",
    "evaluate",
    "extract",
    "distill",
    "memory",
    "shared",
    "alerts",
    "spotchecks",
    "portable",
    "lifecycle",
    "ui",
):
    importlib.import_module(f"skillstate.cli.{_group}")


def main(argv: list[str] | None = None) -> NoReturn:
    """Console entry point: every failure becomes one line on stderr and an exit code."""
    sys.exit(_main(argv))


def _main(argv: list[str] | None) -> int:
    from skillstate.errors import SkillstateError

    args = sys.argv[1:] if argv is None else argv
    bad = next((a for a in args if "\x00" in a or _not_utf8(a)), None)
    if bad is not None:
        _error(f"argument {bad!r} holds a NUL byte or text that is not UTF-8; nothing was run")
        return EXIT_USAGE
    SESSION.reset()
    try:
        with _noting_sigint():
            result = app(args=argv, prog_name="skillstate", standalone_mode=False)
    except typer.Exit as exc:
        return _interrupted() if SESSION.interrupted else exc.exit_code
    except typer.Abort:
        _error("aborted")
        return EXIT_INTERRUPTED
    except typer.TyperException as exc:  # bad options and arguments (click's UsageError)
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare `skillstate` (or a group)
            typer.echo(exc.format_message())
            return EXIT_OK
        _error(exc.format_message().replace("\n", " "))
        return EXIT_USAGE
    except SkillstateError as exc:
        return _failed(exc)
    except KeyboardInterrupt:  # outside typer's own handling (it makes it an exit 130)
        return _interrupted()
    except Exception as exc:
        # A bug (ours or in an agent's code): still one line, unless asked for the trace.
        if SESSION.debug or os.environ.get("SKILLSTATE_DEBUG"):
            raise
        _error(
            f"unexpected {type(exc).__name__}: {exc} "
            "(skillstate --debug or SKILLSTATE_DEBUG=1 shows the traceback)"
        )
        return EXIT_FAILED
    if SESSION.interrupted:
        return _interrupted()
    return result if isinstance(result, int) else EXIT_OK


def _failed(exc: Exception) -> int:
    """One line on stderr for an error skillstate raised on purpose; its exit code."""
    from skillstate.errors import (
        Conflict,
        DefinitionChanged,
        RegressionDetected,
        SchemaTooNew,
        StateCorrupted,
        StoreUnavailable,
        TaskNotFound,
        UsageError,
    )

    if isinstance(exc, Conflict):
        _error(str(exc))
        return EXIT_CONFLICT
    if isinstance(exc, StateCorrupted | SchemaTooNew):
        _error(f"{exc}; nothing was written")
        return EXIT_CORRUPTED
    if isinstance(exc, StoreUnavailable):
        _error(str(exc))
        return EXIT_UNAVAILABLE
    if isinstance(exc, DefinitionChanged):
        _error(str(exc))
        return EXIT_DEFINITION
    if isinstance(exc, RegressionDetected):
        _error(str(exc))
        return EXIT_REGRESSION
    if isinstance(exc, TaskNotFound) and exc.store is None and SESSION.store_url:
        exc = TaskNotFound(exc.task_id, SESSION.store_url)  # name the store the command opened
    _error(str(exc))
    return EXIT_USAGE if isinstance(exc, UsageError) else EXIT_FAILED


@contextmanager
def _noting_sigint() -> Iterator[None]:
    """While the command runs, SIGINT is noted in the session, then raised as usual.

    typer turns a KeyboardInterrupt into a silent exit 130; the note is how
    :func:`_main` still knows to print the resume hint. A SIGINT disposition someone
    else chose (ignored, as for ``skillstate ... &`` in a script, or a handler of
    their own), or a thread other than the main one, is left alone.
    """
    installed = _install_sigint()
    # The yield is outside any ``except``: an exception the command raises (a
    # UsageError is a ValueError) must pass through, not be caught by the clause
    # meant for signal.signal, which made the generator yield twice ("generator
    # didn't stop after throw()", exit 1) whenever SIGINT was not the default.
    try:
        yield
    finally:
        if installed:
            signal.signal(signal.SIGINT, signal.default_int_handler)


def _install_sigint() -> bool:
    """Put :func:`_on_sigint` in place of Python's default handler, if that is the one."""
    try:
        if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
            return False
        signal.signal(signal.SIGINT, _on_sigint)
    except ValueError:  # not the main thread: signals cannot be handled here
        return False
    return True


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    SESSION.interrupted = True
    raise KeyboardInterrupt


def _interrupted() -> int:
    task = SESSION.task_id
    if task is None:
        _error("interrupted; the last committed step is kept (skillstate resume continues)")
    else:
        _error(
            f"interrupted; the last committed step is kept: continue with: skillstate resume {task}"
        )
    return EXIT_INTERRUPTED


def _not_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a non-UTF-8 byte in argv arrives as a lone surrogate
        return True
    return False


def _error(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
