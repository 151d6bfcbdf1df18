"""``skillstate distill``: a reusable template from a finished task; and what ``run
--template`` uses to start a task from one."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from skillstate.cli._app import AgentOpt, StoreOpt, TaskArg, app
from skillstate.cli._common import _agent_for, _store

if TYPE_CHECKING:
    from skillstate.templates.model import Template


@app.command()
def distill(
    task_id: TaskArg,
    agent_ref: AgentOpt = None,
    store: StoreOpt = None,
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            "-o",
            help="Write the template (YAML) to this file; without it, print the YAML.",
            show_default=False,
        ),
    ] = None,
    name: Annotated[
        str | None,
        typer.Option("--name", help="The template's name (AGENT-from-TASK).", show_default=False),
    ] = None,
) -> None:
    """Distill a completed task into a template: its verified skill calls, with the values
    it was given turned into parameters and its secrets left out. Start a task from it
    with: skillstate run AGENT --template FILE --param NAME=VALUE."""
    from skillstate.templates.distiller import distill as distill_task
    from skillstate.templates.model import dump_template, save_template

    db = _store(store, create=False)
    try:
        agent = _agent_for(db, task_id, agent_ref)
        template = distill_task(db, task_id, agent, name=name)
    finally:
        db.close()
    if output is None:
        typer.echo(dump_template(template), nl=False)
        return
    save_template(template, output)
    _print_summary(template)
    typer.echo(
        f"template {template.name!r} written to {output}: {len(template.plan)} step(s), "
        f"{len(template.parameters)} parameter(s)"
    )


def _print_summary(template: Template) -> None:
    from rich.markup import escape
    from rich.table import Table

    from skillstate._render import print_table

    params = Table(title=f"parameters of {escape(template.name)}")
    for column in ("name", "type", "required", "secret", "card field", "from"):
        params.add_column(column)
    for pname, spec in template.parameters.items():
        params.add_row(
            escape(pname),
            spec.type,
            "yes" if spec.required else "no",
            "yes" if spec.secret else "",
            escape(spec.field or ""),
            escape(spec.origin),
        )
    print_table(params)
    plan = Table(title=f"plan (from task {escape(template.source.task)})")
    for column in ("#", "skill", "params", "step"):
        plan.add_column(column)
    for number, step in enumerate(template.plan, 1):
        shown = json.dumps(step.params, ensure_ascii=False)
        plan.add_row(str(number), escape(step.skill), escape(_cut(shown)), escape(step.step or ""))
    print_table(plan)


def _cut(text: str, width: int = 100) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def template_fields(
    agent_ref: str,
    path: str,
    items: list[str],
    fields: dict[str, object] | None,
) -> dict[str, object]:
    """The card fields of a new task started from the template at ``path`` (``run
    --template``), ``--set`` fields over them. Prints what differs from the agent's
    definition; refuses (one line, nothing written) a template whose skills are gone or
    a parameter that is missing."""
    from skillstate._render import errors
    from skillstate.engine.agent import load_agent
    from skillstate.templates.model import load_template
    from skillstate.templates.start import check_template, instantiate, parse_params

    template = load_template(path)
    agent = load_agent(agent_ref, search_cwd=True)
    for warning in check_template(template, agent):
        errors.print(f"[yellow]warning:[/] {_escape(warning)}")
    built: dict[str, Any] = instantiate(template, parse_params(template, items))
    return {**built, **(fields or {})}


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)
