"""Commands that measure: eval and the bench group."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from skillstate.cli._app import BaseUrlOpt, JsonOpt, RepairsOpt, app
from skillstate.eval.gate import metrics_help

bench = typer.Typer(help="Benchmarks that ship with skillstate.", no_args_is_help=True)
app.add_typer(bench, name="bench")


@bench.command("tokens")
def bench_tokens(
    steps: Annotated[int, typer.Option("--steps", min=1, help="Records the task reviews.")] = 50,
    as_json: JsonOpt = False,
) -> None:
    """Prompt tokens per decision: the state policy against the history baseline."""
    from skillstate.bench.tokens import compare

    report = compare(steps)
    if as_json:
        typer.echo(json.dumps(report.as_json()))
        return
    from skillstate._render import print_token_bench

    print_token_bench(report)


@app.command(name="eval")
def eval_(
    suite: Annotated[
        str,
        typer.Option(
            "--suite", help="Task suite: seeds, long, or a path to a suite directory/YAML file."
        ),
    ] = "long",
    variants: Annotated[
        str,
        typer.Option(
            "--variants",
            help="Comma-separated: history,state,skills,skillstate,window,summary,hybrid.",
        ),
    ] = "history,state,skills,skillstate",
    seeds: Annotated[int, typer.Option("--seeds", min=1, help="Runs per task and variant.")] = 3,
    model: Annotated[
        str,
        typer.Option(
            "--model",
            help="oracle (follows each task's reference plan), or a provider spec: "
            "openai:NAME, local, local:PATH.gguf.",
        ),
    ] = "oracle",
    base_url: BaseUrlOpt = None,
    out: Annotated[
        str | None,
        typer.Option(
            "--out",
            help="Directory for report.md/json and plots (default eval-out; with --replay, "
            "RUN_DIR/replay).",
        ),
    ] = None,
    tasks: Annotated[
        int | None, typer.Option("--tasks", min=1, help="Only the first N tasks of the suite.")
    ] = None,
    groups: Annotated[
        str | None,
        typer.Option("--groups", help="Only tasks of these length groups: short,medium,long."),
    ] = None,
    context_window: Annotated[
        int | None,
        typer.Option("--context-window", min=256, help="The model's context, in tokens."),
    ] = None,
    max_repairs: RepairsOpt = 2,
    max_invalid: Annotated[
        int,
        typer.Option(
            "--max-invalid",
            min=1,
            help="Stop a task (a recorded failure) after this many decisions in a row that "
            "stayed invalid after their repairs.",
        ),
    ] = 3,
    recovery: Annotated[
        bool,
        typer.Option(
            help="Also interrupt each task at 25/50/75% and resume it, and run it killed (--kills)."
        ),
    ] = True,
    mode: Annotated[
        str,
        typer.Option(
            "--mode",
            help="end-to-end (each variant runs the task) or forced (teacher-forced decision "
            "accuracy at every step of the reference run).",
        ),
    ] = "end-to-end",
    window: Annotated[
        int,
        typer.Option("--window", help="Raw messages the window and hybrid variants keep."),
    ] = 8,
    summary_every: Annotated[
        int,
        typer.Option("--summary-every", help="Decisions between the summary variant's summaries."),
    ] = 10,
    inject_faults: Annotated[
        float | None,
        typer.Option(
            "--inject-faults",
            min=0.0,
            max=1.0,
            help="Fail this share of model calls with a timeout or rate-limit error (seeded).",
        ),
    ] = None,
    kills: Annotated[
        int,
        typer.Option(
            "--kills",
            min=0,
            help="Recovery: also run each task in a child process SIGKILLed this many times "
            "at random instants, each time resumed by a new process (0: no killed runs).",
        ),
    ] = 3,
    inject_bad_steps: Annotated[
        float | None,
        typer.Option(
            "--inject-bad-steps",
            min=0.0,
            max=1.0,
            help="Make this share of effect calls fail after their effect (seeded): "
            "the step must be rolled back and retried.",
        ),
    ] = None,
    decisions: Annotated[
        str | None,
        typer.Option(
            "--decisions",
            help="Forced mode: ask the model only at these decision indices "
            "(e.g. 1-10,15,20,40-60; N- is open-ended); the rest follow the reference.",
        ),
    ] = None,
    bind: Annotated[
        bool,
        typer.Option(
            help="Fill skill params declared bound to the state (FromState, OneOf); "
            "--no-bind leaves every param to the model, as before binding existed.",
        ),
    ] = True,
    compare: Annotated[
        str | None,
        typer.Option(
            "--compare",
            metavar="BASELINE_REPORT",
            help="After the run (or, with --report, instead of one), compare its report.json "
            "with this baseline report.json (or its directory): a table of what moved, also "
            "written into the report. A baseline of another suite, model, variant set, seeds "
            "or task list is refused (exit 2).",
        ),
    ] = None,
    fail_under: Annotated[
        list[str] | None,
        typer.Option(
            "--fail-under",
            metavar="[VARIANT:]METRIC=DELTA",
            help="With --compare: exit 9 when METRIC got worse than the baseline by more "
            "than DELTA, absolute (success=0.05) or relative to the baseline "
            "(tokens_per_decision=10%). Repeatable. Metrics (↑ higher is better, ↓ lower): "
            + metrics_help()
            + ".",
        ),
    ] = None,
    report: Annotated[
        str | None,
        typer.Option(
            "--report",
            metavar="NEW_REPORT",
            help="With --compare: compare this existing report.json instead of running "
            "(e.g. in CI, two reports already written).",
        ),
    ] = None,
    allow_mismatch: Annotated[
        bool,
        typer.Option(
            "--allow-mismatch",
            help="With --compare: compare a baseline of another suite/model/variants anyway "
            "(the common variants), with a loud warning in the output and the report.",
        ),
    ] = False,
    replay: Annotated[
        str | None,
        typer.Option(
            "--replay",
            metavar="RUN_DIR",
            help="Instead of running: re-run the tasks recorded under RUN_DIR (an eval --out "
            "directory, or one run's) with their recorded model replies and tool outputs "
            "against the current skills, and report each task's first step whose outcome "
            "differs, or same (exit 9 when any differs).",
        ),
    ] = None,
    record: Annotated[
        bool,
        typer.Option(
            help="Keep each task's cassettes (model replies, tool calls and outputs) beside "
            "its run's store, for --replay.",
        ),
    ] = True,
) -> None:
    """Run a task suite under the variants and write a report; or gate it against a
    baseline (--compare), or replay recorded runs against changed skills (--replay).

    Variants: history, state, skills, skillstate, and the baselines window, summary, hybrid.
    """
    from skillstate.eval.cli import evaluate

    raise typer.Exit(
        evaluate(
            compare=compare,
            fail_under=fail_under or [],
            allow_mismatch=allow_mismatch,
            report=report,
            replay=replay,
            out=out,
            record=record,
            suite=suite,
            variants=variants,
            seeds=seeds,
            model=model,
            base_url=base_url,
            tasks=tasks,
            groups=groups,
            context_window=context_window,
            max_repairs=max_repairs,
            max_invalid=max_invalid,
            recovery=recovery,
            command="skillstate " + " ".join(sys.argv[1:]),
            mode=mode,
            window=window,
            summary_every=summary_every,
            inject_faults=inject_faults,
            kills=kills,
            bad_steps=inject_bad_steps,
            bind=bind,
            decisions=decisions,
        )
    )
