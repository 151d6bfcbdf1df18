"""Commands that read a task: show, log, view, replay, checkpoints, tokens, doctor."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from skillstate.cli._app import (
    EXIT_CORRUPTED,
    EXIT_OK,
    AgentOpt,
    JsonOpt,
    PriceInOpt,
    PriceOutOpt,
    StoreOpt,
    TaskArg,
    app,
)
from skillstate.cli._common import _agent_for, _store

if TYPE_CHECKING:
    from skillstate.engine.agent import Agent


@app.command()
def show(
    task_id: TaskArg,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
    agent_ref: AgentOpt = None,
) -> None:
    """Print the state card of a task (--json: the whole state as one JSON object)."""
    db = _store(store, create=False)
    head = db.load(task_id)
    if as_json:
        typer.echo(json.dumps(head.state, ensure_ascii=False, indent=2))
        return
    from skillstate._render import print_state
    from skillstate.errors import AgentImportError, StateCorrupted
    from skillstate.state.migrate import validate_state
    from skillstate.state.model import AgentState

    try:
        agent = _agent_for(db, task_id, agent_ref)
    except AgentImportError:
        # Without its agent the card is still readable as the base class.
        fields = {k: v for k, v in head.state.items() if k in AgentState.model_fields}
        state = validate_state(AgentState, fields, task_id=task_id)
    else:
        try:
            state = agent.parse_state(head.state, task_id=task_id)
        except StateCorrupted as exc:
            raise StateCorrupted(
                task_id,
                exc.version,
                f"{exc.reason} (repair it with skillstate set or edit; --json shows the raw card)",
                field=exc.field,
            ) from exc
    print_state(state)
    if state.parent is not None or state.children:  # fan-out: link parent and children
        from skillstate.cli.tree import print_family

        print_family(state, db)


@app.command()
def log(task_id: TaskArg, store: StoreOpt = None, as_json: JsonOpt = False) -> None:
    """One event per committed step: version, action or skill, verdict, JSON Patch diff.

    A damaged audit log (a version without its event) is reported, not hidden: the
    events are printed, then the gap, and the exit code is 5.
    """
    from skillstate.engine.doctor import audit_gaps
    from skillstate.errors import StateCorrupted

    db = _store(store, create=False)
    events = db.events(task_id)
    try:
        head: int | None = db.load(task_id).version
    except StateCorrupted:
        head = None
    gaps = audit_gaps([e.version for e in events], head)
    if as_json:
        rows = [e.model_dump(mode="json") | {"diff": e.patch} for e in events]
        typer.echo(json.dumps(rows, ensure_ascii=False, indent=2))
    else:
        from skillstate._render import print_events

        print_events(events)
    if gaps:
        raise StateCorrupted(task_id, None, "; ".join(gaps) + " (skillstate doctor checks more)")


@app.command()
def view(task_id: TaskArg, store: StoreOpt = None, agent_ref: AgentOpt = None) -> None:
    """The exact view the next decision would see, with its token count (and budget)."""
    from dataclasses import replace

    from skillstate._render import console
    from skillstate.engine.evidence import reader
    from skillstate.state.budget import DEFAULT_VIEW_BUDGET
    from skillstate.state.secrets import secret_values

    db = _store(store, create=False)
    agent = _agent_for(db, task_id, agent_ref)
    state = agent.parse_state(db.load(task_id).state)
    # Raw evidence a decision asked for is shown, masked, as the next decision sees it.
    masked = agent.redaction.redactor(secret_values(state))
    rendered = replace(agent.view(state), artifact=reader(db, masked))
    if state.driver is not None and agent.view_budget == "auto":
        # A model decides this task (--model): its views have a model policy's budget.
        rendered = replace(rendered, budget=DEFAULT_VIEW_BUDGET)
    console.print(rendered.text, markup=False)
    size = f"{rendered.tokens} tokens ({rendered.tokenizer})"
    if rendered.budget is not None:
        size += f", budget {rendered.budget}"
        size += f", {rendered.overrun} over" if rendered.overrun else ""
    console.print(f"[dim]{size}[/]")


@app.command(name="replay")
def replay_(
    task_id: TaskArg,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
    expect: Annotated[
        Path | None,
        typer.Option(
            "--expect",
            help="Expectations JSON (facts per decision, reference effects) written by "
            "`skillstate eval` beside each run: also name the first step that diverged.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """The timeline of a task: each step with the state before and after it, and the
    first step that went wrong (an error, a failed verify, or with --expect a result
    that diverged from the task's expected facts or effects)."""
    from skillstate.engine.replay import Expectations, timeline

    expected = Expectations.load(expect) if expect is not None else None
    steps, found = timeline(_store(store, create=False), task_id, expected)
    if as_json:
        rows = [step.as_json() for step in steps]
        payload = {
            "steps": rows,
            "first_bad_step": found.version if found else None,
            "first_bad": found.as_json() if found else None,
        }
        typer.echo(json.dumps(payload, indent=2))
        return
    from skillstate._render import print_timeline

    print_timeline(steps, found)


@app.command()
def checkpoints(task_id: TaskArg, store: StoreOpt = None) -> None:
    """Every committed version of a task."""
    from skillstate._render import print_checkpoints

    db = _store(store, create=False)
    labels = {e.version: f"{e.actor}: {e.label}" for e in db.events(task_id)}
    print_checkpoints(db.checkpoints(task_id), labels)


@app.command()
def doctor(task_id: TaskArg, store: StoreOpt = None, agent_ref: AgentOpt = None) -> None:
    """Check a task's chain: every kept checkpoint loads and validates; deltas reach the head."""
    from skillstate._render import print_doctor
    from skillstate.engine.doctor import diagnose
    from skillstate.errors import AgentImportError, StateCorrupted

    db = _store(store, create=False)
    agent: Agent[Any] | None
    try:
        agent = _agent_for(db, task_id, agent_ref)
    except (AgentImportError, StateCorrupted):
        agent = None  # still check the chain; schema checks need the agent
    report = diagnose(db, task_id, agent)
    print_doctor(report)
    raise typer.Exit(EXIT_OK if report.healthy else EXIT_CORRUPTED)


@app.command()
def tokens(
    task_id: TaskArg,
    store: StoreOpt = None,
    price_in: PriceInOpt = None,
    price_out: PriceOutOpt = None,
    as_json: JsonOpt = False,
    agent_ref: AgentOpt = None,
) -> None:
    """Tokens (and cost, given prices) of every decision of a task, and the totals.

    Decisions no model made (a scripted policy) are estimated from their views,
    rendered again with the task's agent (marked ~). Each decision's view is shown
    against its budget; a view over its budget (an overrun) is flagged.
    """
    from skillstate._render import print_tokens
    from skillstate.engine.transcript import decision_usage
    from skillstate.errors import AgentImportError, StateCorrupted
    from skillstate.llm.base import Prices

    db = _store(store, create=False)
    try:
        agent: Agent[Any] | None = _agent_for(db, task_id, agent_ref)
    except (AgentImportError, StateCorrupted):
        agent = None  # recorded usage is still shown
    events = decision_usage(db, task_id, agent)
    prices = None
    if price_in is not None or price_out is not None:
        prices = Prices(input=price_in or 0.0, output=price_out or 0.0)
    if as_json:
        rows = [
            {
                "version": e.version,
                **e.usage.model_dump(mode="json"),
                "view_tokens": e.view_tokens,
                "view_budget": e.view_budget,
                "view_overrun": e.view_overrun,
            }
            for e in events
            if e.usage
        ]
        typer.echo(json.dumps(rows, indent=2))
        return
    print_tokens(events, prices)
