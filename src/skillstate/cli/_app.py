"""The typer app, the exit codes and the options commands share."""

from __future__ import annotations

from typing import Annotated

import typer

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_CONFLICT, EXIT_BUDGET, EXIT_CORRUPTED = 0, 1, 2, 3, 4, 5
EXIT_STALLED, EXIT_UNAVAILABLE = 6, 7
DEMOS = ("ticket", "orders", "ledger")

app = typer.Typer(
    name="skillstate",
    help="Run and inspect agents driven by an explicit, persisted state.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

StoreOpt = Annotated[
    str | None,
    typer.Option(
        "--store",
        help="Store URL (sqlite:///path.db, file://DIR, postgresql://..., redis://..., "
        "memory://). "
        "Default: $SKILLSTATE_STORE or sqlite:///.skillstate/state.db",
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
    typer.Option("--policy", help="What the model sees: state, history or window:N."),
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
