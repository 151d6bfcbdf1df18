"""``skillstate extract``: a state card from a conversation, reviewed before the task starts.

Two steps, with a person in between::

    skillstate extract chat.json --agent my_pkg.agents:trip -o proposal.yaml
    # edit proposal.yaml: every item cites the turns it came from
    skillstate extract --accept proposal.yaml --agent my_pkg.agents:trip --task-id trip-1

The first writes the proposal and prints what it holds (field, value, cited turns)
and what it rejected; the second shows the difference from the agent's blank card
and, once accepted, starts the task with it (one ``human`` commit). See
:mod:`skillstate.extract`.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from skillstate.cli._app import ActorOpt, BaseUrlOpt, ReasonOpt, StoreOpt, TaskIdOpt, app

if TYPE_CHECKING:
    from skillstate.engine.agent import Agent
    from skillstate.extract.proposal import Proposal

RepairsOpt = Annotated[
    int,
    typer.Option(
        "--max-repairs",
        min=0,
        help="A model's replies sent back with what was wrong (not an extraction, or items "
        "whose citations do not hold up).",
    ),
]
ExtractAgentOpt = Annotated[
    str | None,
    typer.Option(
        "--agent",
        help="The agent (MODULE:ATTR) whose card to fill. With --accept and without it, the "
        "proposal's agent is used only if the operator allowed it.",
        show_default=False,
    ),
]


@app.command()
def extract(
    transcript: Annotated[
        str | None,
        typer.Argument(
            help='The conversation: OpenAI chat JSON (a list of messages, or {"messages": '
            "[...]}), JSONL (one message a line) or plain text ('user: ...' turns).",
            show_default=False,
        ),
    ] = None,
    agent: ExtractAgentOpt = None,
    out: Annotated[
        str | None,
        typer.Option(
            "--out",
            "-o",
            help="Write the proposal (YAML) here; without it, print it.",
            show_default=False,
        ),
    ] = None,
    model: Annotated[
        str,
        typer.Option(
            "--model",
            help="Who extracts: heuristic (rules, offline), openai:NAME, local, local:PATH.gguf "
            "or replay:CASSETTE.json.",
        ),
    ] = "heuristic",
    base_url: BaseUrlOpt = None,
    max_repairs: RepairsOpt = 2,
    propose_schema: Annotated[
        str | None,
        typer.Option(
            "--propose-schema",
            help="Also write a state class for a new agent (a .py file), its fields inferred "
            "from the extracted facts. Without --agent, the base card is filled.",
            show_default=False,
        ),
    ] = None,
    class_name: Annotated[
        str, typer.Option("--class-name", help="The proposed state class's name.")
    ] = "ExtractedState",
    accept: Annotated[
        str | None,
        typer.Option(
            "--accept",
            help="Start a task from this reviewed proposal (shows the diff against the "
            "agent's blank card first).",
            show_default=False,
        ),
    ] = None,
    task_id: TaskIdOpt = None,
    store: StoreOpt = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Accept without asking.")] = False,
    actor: ActorOpt = None,
    reason: ReasonOpt = None,
) -> None:
    """Extract a state card from a conversation for review, or start a task from a reviewed one."""
    from skillstate.errors import UsageError

    if accept is not None:
        if transcript is not None or propose_schema is not None or out is not None:
            raise UsageError(
                "--accept takes a reviewed proposal only: no TRANSCRIPT, -o or --propose-schema"
            )
        from skillstate.audit import acting, resolve

        with acting(resolve(actor, reason)) as identity:
            _accept(accept, agent, task_id=task_id, store_url=store, yes=yes, actor=identity.by)
        return
    if transcript is None:
        raise UsageError("give a TRANSCRIPT to extract from, or --accept PROPOSAL.yaml")
    if task_id is not None or store is not None:
        raise UsageError("--task-id and --store belong to --accept (extracting writes no store)")
    if agent is None and propose_schema is None:
        raise UsageError("give --agent MODULE:ATTR (or --propose-schema FILE.py for a new agent)")
    _extract(
        transcript,
        agent,
        out=out,
        model=model,
        base_url=base_url,
        max_repairs=max_repairs,
        schema_file=propose_schema,
        class_name=class_name,
    )


def _extract(
    path: str,
    agent_ref: str | None,
    *,
    out: str | None,
    model: str,
    base_url: str | None,
    max_repairs: int,
    schema_file: str | None,
    class_name: str,
) -> None:
    from skillstate.engine.agent import load_agent
    from skillstate.extract import dump_proposal, extract, propose_schema, read_transcript
    from skillstate.extract.schema import write_text_atomic

    agent = load_agent(agent_ref, search_cwd=True) if agent_ref is not None else None
    provider = _provider(model, base_url)
    found = read_transcript(path)
    proposal = extract(found, agent, provider=provider, max_repairs=max_repairs)
    source = propose_schema(proposal, class_name=class_name) if schema_file else None
    text = dump_proposal(proposal)
    if out is None:
        typer.echo(text, nl=False)
    else:
        write_text_atomic(out, text)
    if source is not None and schema_file is not None:
        write_text_atomic(schema_file, source)
    if out is not None:
        _print_review(proposal, out, schema_file)


def _provider(model: str, base_url: str | None) -> Any:
    from skillstate.errors import UsageError
    from skillstate.extract import HEURISTIC

    if model == HEURISTIC:
        if base_url is not None:
            raise UsageError("--base-url needs --model openai:NAME")
        return None
    from skillstate.llm import open_provider

    kind, _, where = model.partition(":")
    if kind in {"replay", "local"} and where and not os.path.isfile(where):
        raise UsageError(f"--model {model}: no such file {where!r}")
    return open_provider(model, base_url=base_url)


def _print_review(proposal: Proposal, out: str, schema_file: str | None) -> None:
    from rich.markup import escape
    from rich.table import Table

    from skillstate._render import console, print_table
    from skillstate.extract import review_rows

    table = Table(title=f"proposal for {proposal.agent or 'a new agent'} ({proposal.state_class})")
    for column in ("field", "value", "cited turns"):
        table.add_column(column, overflow="fold")
    for field, value, turns in review_rows(proposal):
        table.add_row(escape(field), escape(_brief(value)), escape(turns))
    print_table(table)
    for note in proposal.notes:
        console.print(f"[yellow]rejected[/] {escape(note)}")
    if schema_file is not None:
        console.print(f"proposed state class written to {escape(schema_file)}")
    agent = proposal.agent or "MODULE:ATTR"
    console.print(
        f"proposal written to {escape(out)}: review and edit it, then "
        f"skillstate extract --accept {escape(out)} --agent {escape(agent)}"
    )


def _accept(
    path: str,
    agent_ref: str | None,
    *,
    task_id: str | None,
    store_url: str | None,
    yes: bool,
    actor: str | None,
) -> None:
    from pathlib import Path

    from rich.markup import escape

    from skillstate._render import console
    from skillstate.cli._common import _new_task_id, _store
    from skillstate.control.approvals import default_actor
    from skillstate.errors import UsageError
    from skillstate.extract import accept_proposal, preview, read_proposal

    proposal = read_proposal(path)
    what = f"proposal {Path(path).name}"
    agent = _proposal_agent(proposal, agent_ref)
    task = _new_task_id(agent, task_id)
    shown = preview(agent, proposal, task, what=what)  # every check, nothing written
    _print_changes(shown.changes)
    if not yes:
        if not sys.stdin.isatty():
            raise UsageError("not a terminal to ask in: pass --yes to accept; nothing was written")
        if not typer.confirm(f"start task {task} with this card?", default=False):
            console.print("not accepted; nothing was written")
            raise typer.Exit(0)
    db = _store(store_url)
    state = accept_proposal(
        db, agent, proposal, task_id=task, actor=actor or default_actor(), what=what
    )
    console.print(
        f"[green]task {escape(task)} started[/] from {escape(Path(path).name)} (version "
        f"{state.version}, by a person); run it with: skillstate resume {escape(task)}"
    )


def _proposal_agent(proposal: Proposal, explicit: str | None) -> Agent[Any]:
    """``--agent``, else the proposal's agent if the operator allows it (it is data)."""
    from skillstate.config import allowed_agents, load_config
    from skillstate.engine.agent import load_agent
    from skillstate.errors import AgentNotAllowed, UsageError

    if explicit is not None:
        return load_agent(explicit, search_cwd=True)
    if proposal.agent is None:
        raise UsageError("the proposal is for a new agent: pass --agent MODULE:ATTR")
    if proposal.agent not in allowed_agents(load_config()):
        raise AgentNotAllowed(
            f"the proposal names agent {proposal.agent!r}, which is not an allowed agent; "
            "pass --agent MODULE:ATTR"
        )
    return load_agent(proposal.agent, search_cwd=True)


def _print_changes(changes: list[dict[str, Any]]) -> None:
    import json

    from rich.markup import escape
    from rich.table import Table

    from skillstate._render import print_table
    from skillstate.extract.accept import PLACEHOLDER

    table = Table(title="the proposed card against the agent's blank card")
    for column in ("op", "path", "value"):
        table.add_column(column, overflow="fold")
    for op in changes:
        value = json.dumps(op.get("value"), ensure_ascii=False) if "value" in op else ""
        value = value.replace(PLACEHOLDER, "(the turn, stored on accept)")
        table.add_row(escape(op["op"]), escape(op["path"]), escape(_brief(value)))
    print_table(table)


def _brief(text: str, width: int = 160) -> str:
    one = " ".join(text.split())
    return one if len(one) <= width else one[: width - 1] + "…"
