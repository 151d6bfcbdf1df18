"""``skillstate signal``: deliver a typed signal to a task (see :mod:`skillstate.control.waits`).

The payload is checked against the schema the task's agent declares before anything
is written, then posted to the task's inbox (the card is not touched, so a worker
holding the task is never disturbed). Without a broker, a task that is idle here and
waits for this very signal is then driven on in this process, as ``reply`` does;
with one (``--broker`` or ``$SKILLSTATE_BROKER``), the task is enqueued for the
workers instead.
"""

from __future__ import annotations

import os
from typing import Annotated, Any

import typer

from skillstate.audit import acting, resolve
from skillstate.cli._app import (
    ActorOpt,
    AgentOpt,
    BaseUrlOpt,
    CallsOpt,
    CostOpt,
    HandOffOpt,
    HandOffQueueOpt,
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
    TokensOpt,
    app,
)
from skillstate.cli._common import _agent_for, _Decisions, _drive, _store

NameArg = Annotated[
    str, typer.Argument(help="The signal's name, as the agent declares it.", show_default=False)
]
DataOpt = Annotated[
    str,
    typer.Option(
        "--data",
        help="The payload: a JSON object, checked against the signal's declared schema "
        "(a bad one is refused and nothing is written).",
    ),
]


@app.command()
def signal(
    task_id: TaskArg,
    name: NameArg,
    data: DataOpt = "{}",
    store: StoreOpt = None,
    agent_ref: AgentOpt = None,
    broker: HandOffOpt = None,
    queue: HandOffQueueOpt = "skillstate",
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
    actor: ActorOpt = None,
    reason: ReasonOpt = None,
) -> None:
    """Deliver a signal to a task; a task waiting for it goes on here (or on the workers,
    with a broker)."""
    from skillstate.engine.runtime import Runtime

    payload = _payload(data)
    identity = resolve(actor, reason)
    db = _store(store)
    agent = _agent_for(db, task_id, agent_ref)
    runtime = Runtime(agent, db)
    with acting(identity):  # posted with the signal: the commit consuming it records it
        seq = runtime.signal(task_id, name, payload)
    state = runtime.load(task_id)
    delivered = f"delivered signal {name} to {task_id} (inbox #{seq})"
    if broker or os.environ.get("SKILLSTATE_BROKER"):
        from skillstate.cli.workers import enqueue_task

        db.close()
        enqueue_task(broker, task_id, state.version, queue, note=delivered)
        return
    wait = state.wait
    waits_for_it = state.status.value == "waiting" and wait is not None and wait.signal == name
    lease = db.lease(task_id)
    held = lease is not None and lease.live()
    if not waits_for_it or held:
        why = (
            f"a worker ({lease.worker}) holds it and consumes it"
            if held and lease is not None
            else f"it is {state.status.value}: its next wait for {name!r} consumes it"
        )
        typer.echo(f"{delivered}; {why}")
        db.close()
        return
    typer.echo(delivered)
    _drive(
        agent,
        db,
        task_id,
        inputs=[],
        max_steps=max_steps,
        verbose=not quiet,
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


def _payload(text: str) -> dict[str, Any]:
    """``--data`` as a JSON object (bounded like any input), or a one-line UsageError."""
    from skillstate._yaml import load_yaml
    from skillstate.errors import UsageError

    value = load_yaml(text, what="--data")
    if not isinstance(value, dict):
        raise UsageError(f"--data must be a JSON object, not {type(value).__name__}")
    return value
