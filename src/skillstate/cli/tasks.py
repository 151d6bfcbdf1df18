"""Commands that run tasks: run, demo, resume, reply."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from skillstate.audit import acting, resolve
from skillstate.cli._app import (
    DEMOS,
    AcceptDefinitionOpt,
    ActorOpt,
    AgentOpt,
    BaseUrlOpt,
    CallsOpt,
    CostOpt,
    HandOffOpt,
    HandOffQueueOpt,
    InputOpt,
    MaxStepsOpt,
    ModelOpt,
    OnStallOpt,
    PolicyOpt,
    PriceInOpt,
    PriceOutOpt,
    QuietOpt,
    ReasonOpt,
    RepairsOpt,
    StalledOpt,
    StoreOpt,
    TaskArg,
    TaskIdOpt,
    TokensOpt,
    app,
)
from skillstate.cli._common import (
    _agent_for,
    _card_fields,
    _Decisions,
    _drive,
    _start,
    _store,
)


@app.command()
def run(
    agent: Annotated[str, typer.Argument(help="The agent, as MODULE:ATTR.", show_default=False)],
    task_id: TaskIdOpt = None,
    store: StoreOpt = None,
    input: InputOpt = None,
    max_steps: MaxStepsOpt = 50,
    quiet: QuietOpt = False,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    policy: PolicyOpt = "state",
    max_repairs: RepairsOpt = 2,
    max_calls: CallsOpt = None,
    max_tokens: TokensOpt = None,
    max_cost: CostOpt = None,
    price_in: PriceInOpt = None,
    price_out: PriceOutOpt = None,
    max_stalled: StalledOpt = 10,
    on_stall: OnStallOpt = "fail",
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="FIELD=VALUE for the new task's card (VALUE is YAML; repeatable), as "
            "Runtime.start(task_id, **fields) takes them.",
            show_default=False,
        ),
    ] = None,
    template: Annotated[
        str | None,
        typer.Option(
            "--template",
            help="Start from a template (skillstate distill): its goal, constraints and "
            "fields, and its plan as a hint the model sees; --set fields win over its.",
            show_default=False,
        ),
    ] = None,
    param: Annotated[
        list[str] | None,
        typer.Option(
            "--param",
            help="NAME=VALUE of a --template parameter (repeatable; a string parameter "
            "takes VALUE as it is, others read it as YAML).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Start a new task with an agent and run it until it ends or asks the user."""
    fields = _card_fields(set_) if set_ else None
    if template is not None:
        from skillstate.cli.distill import template_fields

        fields = template_fields(agent, template, param or [], fields)
    elif param:
        from skillstate.errors import UsageError

        raise UsageError("--param fills a template's parameters: it needs --template FILE")
    _start(
        agent,
        task_id=task_id,
        store_url=store,
        inputs=input or [],
        max_steps=max_steps,
        verbose=not quiet,
        compare=False,
        fields=fields,
        decisions=_Decisions(
            model,
            base_url,
            policy,
            max_repairs,
            max_calls,
            max_tokens,
            max_cost,
            price_in,
            price_out,
            max_stalled,
            on_stall,
        ),
    )


@app.command()
def demo(
    name: Annotated[str, typer.Argument(help=f"One of: {', '.join(DEMOS)}.", show_default=False)],
    task_id: TaskIdOpt = None,
    store: StoreOpt = None,
    input: InputOpt = None,
    max_steps: MaxStepsOpt = 50,
    quiet: QuietOpt = False,
    sample: Annotated[
        bool, typer.Option(help="Use the demo's canned replies when no --input is given.")
    ] = True,
    steps: Annotated[
        int | None, typer.Option("--steps", min=0, help="ledger: entries to append (10).")
    ] = None,
    step_delay: Annotated[
        float | None,
        typer.Option("--step-delay", min=0.0, help="ledger: seconds each append takes (0)."),
    ] = None,
    ledger: Annotated[
        str | None,
        typer.Option("--ledger", help="ledger: the file to append to (.skillstate/ledger.txt)."),
    ] = None,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    policy: PolicyOpt = "state",
    max_repairs: RepairsOpt = 2,
    max_calls: CallsOpt = None,
    max_tokens: TokensOpt = None,
    max_cost: CostOpt = None,
    price_in: PriceInOpt = None,
    price_out: PriceOutOpt = None,
    max_stalled: StalledOpt = 10,
    on_stall: OnStallOpt = "fail",
) -> None:
    """Run a bundled example offline, printing views, decisions and diffs."""
    from skillstate.errors import UsageError

    if name not in DEMOS:
        raise UsageError(f"unknown demo {name!r}; choose one of: {', '.join(DEMOS)}")
    fields: dict[str, object] | None = None
    if name == "ledger":
        path = os.path.abspath(ledger or os.path.join(".skillstate", "ledger.txt"))
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "a", encoding="utf-8"):
                pass  # writable now, or a one-line error now rather than mid-task
        except (OSError, ValueError) as exc:
            raise UsageError(f"cannot write the --ledger file {path!r}: {exc}") from exc
        fields = {"ledger": path, "target": 10 if steps is None else steps}
        fields["step_delay"] = step_delay or 0.0
    elif steps is not None or step_delay is not None or ledger is not None:
        raise UsageError("--steps, --step-delay and --ledger belong to the ledger demo")
    ref = f"skillstate.examples.{name}:agent"
    inputs = input or []
    if not inputs and sample:
        from skillstate.engine.agent import load_agent

        inputs = list(load_agent(ref).sample_inputs)
    _start(
        ref,
        task_id=task_id,
        store_url=store,
        inputs=inputs,
        max_steps=max_steps,
        verbose=not quiet,
        compare=name != "ledger",
        fields=fields,
        decisions=_Decisions(
            model,
            base_url,
            policy,
            max_repairs,
            max_calls,
            max_tokens,
            max_cost,
            price_in,
            price_out,
            max_stalled,
            on_stall,
        ),
    )


@app.command()
def resume(
    task_id: TaskArg,
    store: StoreOpt = None,
    agent_ref: AgentOpt = None,
    input: InputOpt = None,
    max_steps: MaxStepsOpt = 50,
    quiet: QuietOpt = False,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    policy: PolicyOpt = "state",
    max_repairs: RepairsOpt = 2,
    max_calls: CallsOpt = None,
    max_tokens: TokensOpt = None,
    max_cost: CostOpt = None,
    price_in: PriceInOpt = None,
    price_out: PriceOutOpt = None,
    max_stalled: StalledOpt = 10,
    on_stall: OnStallOpt = "fail",
    accept_definition: AcceptDefinitionOpt = False,
    actor: ActorOpt = None,
    reason: ReasonOpt = None,
) -> None:
    """Continue a task from its stored state (after a stop, a crash or a budget)."""
    identity = resolve(actor, reason)  # who accepts a definition (--accept-definition)
    db = _store(store)
    agent = _agent_for(db, task_id, agent_ref)
    with acting(identity):
        _drive(
            agent,
            db,
            task_id,
            inputs=input or [],
            max_steps=max_steps,
            verbose=not quiet,
            accept_definition=accept_definition,
            decisions=_Decisions(
                model,
                base_url,
                policy,
                max_repairs,
                max_calls,
                max_tokens,
                max_cost,
                price_in,
                price_out,
                max_stalled,
                on_stall,
            ),
        )


@app.command()
def reply(
    task_id: TaskArg,
    text: Annotated[str, typer.Argument(help="The answer to the task's question.")],
    store: StoreOpt = None,
    agent_ref: AgentOpt = None,
    max_steps: MaxStepsOpt = 50,
    quiet: QuietOpt = False,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    policy: PolicyOpt = "state",
    max_repairs: RepairsOpt = 2,
    max_calls: CallsOpt = None,
    max_tokens: TokensOpt = None,
    max_cost: CostOpt = None,
    price_in: PriceInOpt = None,
    price_out: PriceOutOpt = None,
    max_stalled: StalledOpt = 10,
    on_stall: OnStallOpt = "fail",
    broker: HandOffOpt = None,
    queue: HandOffQueueOpt = "skillstate",
    into: Annotated[
        str | None,
        typer.Option(
            "--into",
            help="A secret reply: keep it in this Sensitive field of the card (sealed; "
            'decisions see only its handle, "<sensitive:FIELD>", and skills get the value).',
            show_default=False,
        ),
    ] = None,
    actor: ActorOpt = None,
    reason: ReasonOpt = None,
) -> None:
    """Answer a task waiting for the user, then keep running it (or enqueue it)."""
    with acting(resolve(actor, reason)):
        _reply(
            task_id,
            text,
            store,
            agent_ref,
            max_steps,
            quiet,
            into,
            broker,
            queue,
            _Decisions(
                model,
                base_url,
                policy,
                max_repairs,
                max_calls,
                max_tokens,
                max_cost,
                price_in,
                price_out,
                max_stalled,
                on_stall,
            ),
        )


def _reply(
    task_id: str,
    text: str,
    store: str | None,
    agent_ref: str | None,
    max_steps: int,
    quiet: bool,
    into: str | None,
    broker: str | None,
    queue: str,
    decisions: _Decisions,
) -> None:
    db = _store(store)
    agent = _agent_for(db, task_id, agent_ref)
    if broker or os.environ.get("SKILLSTATE_BROKER"):
        from skillstate.cli.workers import _app, enqueue_task
        from skillstate.engine.runtime import Runtime

        celery_app = _app(broker)  # no broker configured: refused before the reply is written
        try:
            replied = Runtime(agent, db).reply(task_id, text, into=into)
        finally:
            db.close()
        enqueue_task(celery_app, task_id, replied.version, queue, note="replied")
        return
    _drive(
        agent,
        db,
        task_id,
        inputs=[],
        max_steps=max_steps,
        verbose=not quiet,
        reply=text,
        reply_into=into,
        decisions=decisions,
    )
