"""Commands that decide a call waiting for approval: approve, reject.

Each commits the decision (one commit, recorded with who decided and why), then keeps
running the task here, as ``reply`` does, or, with a broker (``--broker`` or
``$SKILLSTATE_BROKER``), enqueues it for the workers.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Annotated, Any

import typer

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
    RepairsOpt,
    StalledOpt,
    StoreOpt,
    TaskArg,
    TokensOpt,
    app,
)
from skillstate.cli._common import _agent_for, _Decisions, _drive, _store

if TYPE_CHECKING:
    from collections.abc import Callable

    from skillstate.engine.runtime import Runtime
    from skillstate.state.model import AgentState
    from skillstate.store.base import Store


@app.command()
def approve(
    task_id: TaskArg,
    edit: Annotated[
        list[str] | None,
        typer.Option(
            "--edit",
            help="PARAM=VALUE: change a param of the call before it runs (VALUE is YAML; "
            "repeatable). Checked against the skill's params (for a tool call waiting: an "
            "argument of the call, checked against the tool's); a bad edit writes nothing.",
            show_default=False,
        ),
    ] = None,
    reason: Annotated[
        str | None, typer.Option("--reason", help="Why, for the audit log.", show_default=False)
    ] = None,
    actor: ActorOpt = None,
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
    """Approve the call a task waits on (optionally edited); it runs once, then the task
    goes on here (or on the workers, with a broker)."""
    from skillstate.cli._common import _parse_assignments

    edits = _parse_assignments(edit) if edit else None

    def decide(runtime: Runtime[Any]) -> AgentState:
        approved: AgentState = runtime.approve(task_id, edits=edits, actor=actor, reason=reason)
        return approved

    _decide(
        task_id,
        store,
        agent_ref,
        decide,
        broker=broker,
        queue=queue,
        verb="approved",
        max_steps=max_steps,
        quiet=quiet,
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
def reject(
    task_id: TaskArg,
    reason: Annotated[
        str,
        typer.Option(
            "--reason",
            help="Why the call must not run: the task's next decision reads it.",
            show_default=False,
        ),
    ],
    actor: ActorOpt = None,
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
    """Reject the call a task waits on; the task goes on without it, its next decision
    seeing the reason (here, or on the workers with a broker)."""

    def decide(runtime: Runtime[Any]) -> AgentState:
        rejected: AgentState = runtime.reject(task_id, reason=reason, actor=actor)
        return rejected

    _decide(
        task_id,
        store,
        agent_ref,
        decide,
        broker=broker,
        queue=queue,
        verb="rejected",
        max_steps=max_steps,
        quiet=quiet,
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


def _decide(
    task_id: str,
    store_url: str | None,
    agent_ref: str | None,
    decide: Callable[[Runtime[Any]], AgentState],
    *,
    broker: str | None,
    queue: str,
    verb: str,
    max_steps: int,
    quiet: bool,
    decisions: _Decisions,
) -> None:
    """Commit ``decide`` and run the task here, or commit it and enqueue the task."""
    db = _store(store_url)
    agent = _agent_for(db, task_id, agent_ref)
    if broker or os.environ.get("SKILLSTATE_BROKER"):
        _commit_and_enqueue(db, agent, task_id, decide, broker=broker, queue=queue, verb=verb)
        return
    _drive(
        agent,
        db,
        task_id,
        inputs=[],
        max_steps=max_steps,
        verbose=not quiet,
        decisions=decisions,
        prelude=decide,
    )


def _commit_and_enqueue(
    db: Store,
    agent: Any,
    task_id: str,
    decide: Callable[[Runtime[Any]], AgentState],
    *,
    broker: str | None,
    queue: str,
    verb: str,
) -> None:
    from skillstate.cli.workers import _app, enqueue_task
    from skillstate.engine.runtime import Runtime

    celery_app = _app(broker)  # no broker configured: refused before anything is written
    try:
        version = decide(Runtime(agent, db)).version
    finally:
        db.close()
    enqueue_task(celery_app, task_id, version, queue, note=verb)
