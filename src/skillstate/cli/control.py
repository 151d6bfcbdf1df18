"""Commands that reach a task while it runs: send, cancel.

Neither writes the card: each posts to the task's inbox in the store
(:mod:`skillstate.control.inbox`), which never conflicts with the worker holding the
task; whoever runs the task takes the post at its next step boundary. Then:

* a task someone holds (a worker, another ``run``): nothing more; the holder sees it
  at its next step boundary (``cancel`` stops it there);
* a task nobody holds: without a broker, it is driven here at once (``send`` runs it
  to its next stop, as ``reply`` does; ``cancel`` only takes the cancel, and undoes
  the effects with ``--compensate``); with ``--broker`` (or ``$SKILLSTATE_BROKER``) it
  is enqueued for the workers instead.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

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

if TYPE_CHECKING:
    from skillstate.engine.agent import Agent
    from skillstate.store.base import Store


@app.command()
def send(
    task_id: TaskArg,
    text: Annotated[str, typer.Argument(help="The message for the task's next decision.")],
    actor: ActorOpt = None,
    reason: ReasonOpt = None,
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
) -> None:
    """Send a message to a task while it runs; its next decision sees it (as the agent's
    messages= strategy says: enqueue, interrupt, or reject). A task nobody holds runs
    on here (or on the workers, with a broker)."""
    from skillstate.control.inbox import send as post_message

    identity = resolve(actor, reason)
    db = _store(store)
    agent = _agent_for(db, task_id, agent_ref)
    with acting(identity):  # posted with the message: the commit that takes it records it
        seq = post_message(db, agent, task_id, text, actor=identity.by)
    if _handed_over(db, task_id, seq, "message", broker=broker, queue=queue):
        return
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


@app.command()
def cancel(
    task_id: TaskArg,
    compensate: Annotated[
        bool,
        typer.Option(
            "--compensate",
            help="First undo every effect the task ran, newest first, with each skill's "
            "rollback hook; then cancel.",
        ),
    ] = False,
    reason: Annotated[
        str, typer.Option("--reason", help="Why, for the audit log.", show_default=False)
    ] = "",
    actor: ActorOpt = None,
    store: StoreOpt = None,
    agent_ref: AgentOpt = None,
    broker: HandOffOpt = None,
    queue: HandOffQueueOpt = "skillstate",
    quiet: QuietOpt = False,
) -> None:
    """Cancel a task between two steps (a worker holding it stops at its next step
    boundary); with --compensate, undo its effects first. A finished task is refused."""
    from skillstate.control.inbox import cancel as post_cancel

    identity = resolve(actor, reason)  # posted with the cancel: its commit records it
    db = _store(store)
    # The agent is needed to check compensations and to take the cancel here: found
    # (or refused) before anything is posted.
    brokered = bool(broker or os.environ.get("SKILLSTATE_BROKER"))
    needed = compensate or agent_ref is not None or not brokered
    agent = _agent_for(db, task_id, agent_ref) if needed else None
    seq = post_cancel(
        db, agent, task_id, reason=identity.reason or "", actor=identity.by, compensate=compensate
    )
    if _handed_over(db, task_id, seq, "cancel", broker=broker, queue=queue):
        return
    assert agent is not None  # no broker: it was loaded above
    _take_cancel(agent, db, task_id, verbose=not quiet)


def _handed_over(
    db: Store, task_id: str, seq: int, what: str, *, broker: str | None, queue: str
) -> bool:
    """Whether someone else takes the post from here: the live holder of the task's
    lease, or the workers (a broker is configured: the task is enqueued)."""
    if broker or os.environ.get("SKILLSTATE_BROKER"):
        from skillstate.cli.workers import enqueue_task

        version = db.load(task_id, verify=False).version
        db.close()
        enqueue_task(broker, task_id, version, queue, note=f"{what} {seq} posted")
        return True
    lease = db.lease(task_id)
    if lease is not None and lease.live():
        db.close()
        typer.echo(
            f"{what} {seq} posted; {lease.worker} holds {task_id} and takes it at its next "
            "step boundary"
        )
        return True
    return False


def _take_cancel(agent: Agent[Any], db: Store, task_id: str, *, verbose: bool) -> NoReturn:
    """Run the task here only as far as its cancel: no decision is taken (``stop``)."""
    from skillstate._render import StepPrinter, console
    from skillstate.cli._app import driving
    from skillstate.cli._common import _exit_code, _summary
    from skillstate.engine.lease import default_worker
    from skillstate.engine.runtime import Runtime

    driving(task_id)
    runtime = Runtime(
        agent, db, observer=StepPrinter(verbose=verbose, store=db), worker=default_worker()
    )
    result = runtime.run(task_id, stop=lambda: True)
    console.print(_summary(result, db))
    if result.state.status.is_terminal and result.state.children:
        from rich.markup import escape

        from skillstate.cli.cascade import take_child_cancels  # a parent: its children too

        for line in take_child_cancels(db, task_id, verbose=verbose):
            console.print(escape(line))
    db.close()
    raise typer.Exit(_exit_code(result))
