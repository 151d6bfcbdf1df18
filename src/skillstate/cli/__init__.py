"""The ``skillstate`` command, one module per command group.

Exit codes: 0 completed (or paused waiting for the user), 1 the task failed,
2 bad input, 3 conflict (another writer committed first, or another worker holds
the task), 4 stopped by --max-steps or a budget (resumable), 5 the stored state is
corrupted or newer than this code (nothing was written), 6 the task stalled: its
decisions stopped making progress (failed, or parked for a person with --on-stall park),
7 the store cannot be reached (a database or server down, refused, bad credentials).

Only typer is imported at start-up; the runtime, stores and rich tables load in
the commands that use them, so ``skillstate --help`` stays fast.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import NoReturn

import typer

from skillstate.cli._app import (
    EXIT_CONFLICT,
    EXIT_CORRUPTED,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    app,
)

__all__ = ["app", "main"]
# The command groups register themselves with @app.command() when imported; this
# order is the order `skillstate --help` lists them in.
for _group in ("tasks", "inspect", "repair", "keys", "evaluate"):
    importlib.import_module(f"skillstate.cli.{_group}")


def main(argv: list[str] | None = None) -> NoReturn:
    """Console entry point: every failure becomes one line on stderr and an exit code."""
    sys.exit(_main(argv))


def _main(argv: list[str] | None) -> int:
    from skillstate.errors import (
        Conflict,
        SchemaTooNew,
        SkillstateError,
        StateCorrupted,
        StoreUnavailable,
        UsageError,
    )

    args = sys.argv[1:] if argv is None else argv
    bad = next((a for a in args if "\x00" in a or _not_utf8(a)), None)
    if bad is not None:
        _error(f"argument {bad!r} holds a NUL byte or text that is not UTF-8; nothing was run")
        return EXIT_USAGE
    try:
        result = app(args=argv, prog_name="skillstate", standalone_mode=False)
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        _error("aborted")
        return 130
    except typer.TyperException as exc:  # bad options and arguments (click's UsageError)
        _error(exc.format_message().replace("\n", " "))
        return EXIT_USAGE
    except Conflict as exc:
        _error(str(exc))
        return EXIT_CONFLICT
    except (StateCorrupted, SchemaTooNew) as exc:
        _error(f"{exc}; nothing was written")
        return EXIT_CORRUPTED
    except StoreUnavailable as exc:
        _error(str(exc))
        return EXIT_UNAVAILABLE
    except UsageError as exc:
        _error(str(exc))
        return EXIT_USAGE
    except SkillstateError as exc:
        _error(str(exc))
        return EXIT_FAILED
    except KeyboardInterrupt:
        _error("interrupted; the last committed step is kept (skillstate resume continues)")
        return 130
    except Exception as exc:
        # A bug (ours or in an agent's code): still one line, unless asked for the trace.
        if os.environ.get("SKILLSTATE_DEBUG"):
            raise
        _error(f"unexpected {type(exc).__name__}: {exc} (SKILLSTATE_DEBUG=1 shows the traceback)")
        return EXIT_FAILED
    return result if isinstance(result, int) else EXIT_OK


def _not_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a non-UTF-8 byte in argv arrives as a lone surrogate
        return True
    return False


def _error(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
