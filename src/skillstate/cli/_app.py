"""The typer app, the exit codes, the options commands share, and the session.

The session is what a running command tells the error handler in
:func:`skillstate.cli._main` (one command per process): the store it opened (so a
"no task" error names it), the task it drives (so Ctrl-C says how to resume it),
whether ``--debug`` was given, and whether SIGINT arrived.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import typer

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_CONFLICT, EXIT_BUDGET, EXIT_CORRUPTED = 0, 1, 2, 3, 4, 5
EXIT_STALLED, EXIT_UNAVAILABLE = 6, 7
EXIT_DEFINITION = 8
EXIT_REGRESSION = 9
EXIT_INTERRUPTED = 130
DEMOS = ("ticket", "orders", "ledger")

app = typer.Typer(
    name="skillstate",
    help="Run and inspect agents driven by an explicit, persisted state.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@dataclass
class Session:
    """What the command being run has told the error handler."""

    store_url: str | None = None
    """The URL (password masked) of the store the command opened."""
    task_id: str | None = None
    """The task the command runs (``run``, ``demo``, ``resume``, ``reply``)."""
    debug: bool = False
    """``--debug``: unexpected errors print their traceback."""
    interrupted: bool = False
    """SIGINT arrived (typer turns the KeyboardInterrupt into a plain exit 130)."""

    def reset(self) -> None:
        """Forget what an earlier command noted (``_main`` may run twice in one process)."""
        for name, value in vars(Session()).items():
            setattr(self, name, value)


SESSION = Session()


def driving(task_id: str) -> None:
    """Record the task this command is about to run: Ctrl-C then names it in its hint."""
    SESSION.task_id = task_id


def _print_version(value: bool) -> None:
    if value:
        from skillstate import __version__

        typer.echo(f"skillstate {__version__}")
        raise typer.Exit(EXIT_OK)


@app.callback()
def _global_options(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            is_eager=True,
            callback=_print_version,
            help="Print the version and exit.",
        ),
    ] = False,
    debug: Annotated[
        bool,
        typer.Option(
            "--debug",
            help="Print the traceback of an unexpected error (as SKILLSTATE_DEBUG=1 does). "
            "Give it before the command: skillstate --debug show ID.",
        ),
    ] = False,
) -> None:
    SESSION.debug = debug


StoreOpt = Annotated[
    str | None,
    typer.Option(
        "--store",
        help="Store URL (sqlite:///path.db, file://DIR, postgresql://..., redis://..., "
        "memory://). Default: $SKILLSTATE_STORE, else `store` in .skillstate.toml or "
        "[tool.skillstate] of pyproject.toml (here or the nearest parent), else "
        "sqlite:///.skillstate/state.db",
        show_default=False,
    ),
]
TaskArg = Annotated[str, typer.Argument(help="Task id.", show_default=False)]
AgentOpt = Annotated[
    str | None,
    typer.Option(
        "--agent",
        help="The agent (MODULE:ATTR) to run the task with. Without it, the task's stored "
        "agent is used only if the operator allowed it ([tool.skillstate] agents, "
        "SKILLSTATE_AGENTS, a skillstate.agents entry point, or a bundled demo).",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
InputOpt = Annotated[
    list[str] | None,
    typer.Option("--input", "-i", help="A user reply, used when the task asks (repeatable)."),
]
MaxStepsOpt = Annotated[
    int, typer.Option("--max-steps", min=1, help="Decisions to take before stopping.")
]
TaskIdOpt = Annotated[str | None, typer.Option("--task-id", help="Task id (default: generated).")]
QuietOpt = Annotated[
    bool, typer.Option("--quiet", "-q", help="One line per step, without views and diffs.")
]
ModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model",
        help="Let a model decide: openai:NAME, local, local:PATH.gguf, replay:CASSETTE.json "
        "(default: the agent's own scripted policy).",
        show_default=False,
    ),
]
BaseUrlOpt = Annotated[
    str | None,
    typer.Option("--base-url", help="OpenAI-compatible server (vLLM, Ollama, llama.cpp, ...)."),
]
PolicyOpt = Annotated[
    str,
    typer.Option("--policy", help="What the model sees: state, hybrid:N, history or window:N."),
]
RepairsOpt = Annotated[
    int, typer.Option("--max-repairs", min=0, help="Invalid replies sent back per decision.")
]
CallsOpt = Annotated[
    int | None, typer.Option("--max-calls", min=1, help="Budget: model calls per task.")
]
TokensOpt = Annotated[
    int | None, typer.Option("--max-tokens", min=1, help="Budget: prompt tokens per task.")
]
CostOpt = Annotated[
    float | None, typer.Option("--max-cost", min=0.0, help="Budget: cost per task.")
]
PriceInOpt = Annotated[
    float | None, typer.Option("--price-in", min=0.0, help="Price per million prompt tokens.")
]
PriceOutOpt = Annotated[
    float | None,
    typer.Option("--price-out", min=0.0, help="Price per million completion tokens."),
]
ActorOpt = Annotated[
    str | None,
    typer.Option(
        "--actor",
        help="Who, for the audit log (default: $SKILLSTATE_ACTOR, else the OS user).",
        show_default=False,
    ),
]
"""``--actor`` of every command that writes to a task (:mod:`skillstate.audit`)."""
ReasonOpt = Annotated[
    str | None,
    typer.Option(
        "--reason",
        help="Why, for the audit log (one line; recorded in the event).",
        show_default=False,
    ),
]
"""``--reason`` of the commands that write to a task and have no reason of their own."""
HandOffOpt = Annotated[
    str | None,
    typer.Option(
        "--broker",
        help="With a broker (or $SKILLSTATE_BROKER), write here and enqueue the task for "
        "the workers instead of running it here.",
        show_default=False,
    ),
]
"""``--broker`` of the commands that write to a task and then run it on (reply,
approve, reject, send, cancel, signal)."""
HandOffQueueOpt = Annotated[str, typer.Option("--queue", help="With a broker: the queue.")]
AcceptDefinitionOpt = Annotated[
    bool,
    typer.Option(
        "--accept-definition",
        help="The task is pinned to another definition of its agent (skills, machine, state "
        "schema): accept this one anyway, recorded with who accepted what ($SKILLSTATE_ACTOR, "
        "else the OS user). Prefer declaring the change: Agent(patches=[patched(...)]).",
    ),
]
StalledOpt = Annotated[
    int,
    typer.Option(
        "--max-stalled",
        min=0,
        help="Stop the task after this many decisions in a row without progress (0: never); "
        "the same failure 3 times stops it too.",
    ),
]
OnStallOpt = Annotated[
    str,
    typer.Option(
        "--on-stall",
        help="What a stalled task does: fail, or park (wait for a person's reply).",
    ),
]
