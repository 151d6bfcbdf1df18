"""Commands that run tasks on a queue: worker, submit, requeue (``reply`` enqueues too).

They need ``pip install 'skillstate[celery]'``; Celery is imported only when one of
them runs. The broker comes from ``--broker`` or ``$SKILLSTATE_BROKER``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from skillstate.cli._app import AcceptDefinitionOpt, InputOpt, JsonOpt, StoreOpt, TaskIdOpt, app
from skillstate.cli._common import _card_fields, _new_task_id, _queued_inputs, _store

if TYPE_CHECKING:
    from celery import Celery

    from skillstate.workers.settings import Message

BrokerOpt = Annotated[
    str | None,
    typer.Option(
        "--broker",
        help="Celery broker URL (amqp://guest:guest@127.0.0.1:5672//, redis://127.0.0.1:6379/1). "
        "Default: $SKILLSTATE_BROKER.",
        show_default=False,
    ),
]
QueueOpt = Annotated[str, typer.Option("--queue", help="The queue to send the task to.")]


@app.command()
def worker(
    broker: BrokerOpt = None,
    store: StoreOpt = None,
    concurrency: Annotated[
        int, typer.Option("--concurrency", "-c", min=1, help="Tasks this process runs at once.")
    ] = 1,
    queues: Annotated[
        list[str] | None,
        typer.Option(
            "--queues", "-Q", help="Queues to consume (repeatable or a,b; default skillstate)."
        ),
    ] = None,
    agent: Annotated[
        list[str] | None,
        typer.Option(
            "--agent",
            help="An agent (MODULE:ATTR) this worker may import when a task's card names it, "
            "besides the configured allow-list (repeatable). A message never names an agent.",
        ),
    ] = None,
    slice_steps: Annotated[
        int, typer.Option("--slice", min=1, help="Steps per message before the task is requeued.")
    ] = 20,
    lease_ttl: Annotated[
        float, typer.Option("--lease-ttl", min=0.5, help="Seconds a dead worker's lease lasts.")
    ] = 30.0,
    max_crashes: Annotated[
        int,
        typer.Option("--max-crashes", min=1, help="Worker deaths in a row before a dead letter."),
    ] = 5,
    visibility_timeout: Annotated[
        float,
        typer.Option(
            "--visibility-timeout",
            min=1.0,
            help="Redis brokers: seconds before an unacknowledged message is delivered again.",
        ),
    ] = 300.0,
    sweep_every: Annotated[
        float,
        typer.Option(
            "--sweep-every",
            min=0.0,
            help="Seconds between two looks for stranded tasks (running, no live lease, no "
            "commit for --sweep-after); each is requeued and logged as a WARNING. 0: off.",
        ),
    ] = 60.0,
    sweep_after: Annotated[
        float,
        typer.Option(
            "--sweep-after",
            min=1.0,
            help="Seconds without a commit before a running task with no live lease is "
            "stranded (a waiting_children parent: since its last child ended). Keep it above "
            "the longest wait in the queue and the provider backoff.",
        ),
    ] = 600.0,
    loglevel: Annotated[str, typer.Option("--loglevel", help="Celery's log level.")] = "INFO",
    route_definitions: Annotated[
        bool,
        typer.Option(
            "--route-definitions",
            help="Send a task pinned to a definition this worker does not have to that "
            "definition's queue (QUEUE.def-DIGEST12) instead of dead-lettering it, and consume "
            "the queues of the definitions of the --agent agents.",
        ),
    ] = False,
) -> None:
    """Start a Celery worker that advances skillstate tasks (SIGTERM: finish the step, stop)."""
    from skillstate.workers.advance import Advancer
    from skillstate.workers.settings import DEFAULT_QUEUE, WorkerSettings

    celery_app = _app(broker, visibility_timeout=visibility_timeout)
    from skillstate.workers.celery_app import serve

    db = _store(store)
    settings = WorkerSettings(
        store_url=db.url,
        slice_steps=slice_steps,
        lease_ttl=lease_ttl,
        max_crashes=max_crashes,
        sweep_every=sweep_every,
        sweep_after=sweep_after,
        # A waiting task's countdown must come back before Redis hands the message,
        # unacknowledged, to another worker (see WorkerSettings.max_countdown).
        max_countdown=min(WorkerSettings.max_countdown, 0.8 * visibility_timeout),
        agents=frozenset(agent or ()),
        route_definitions=route_definitions,
    )
    names = [q for given in (queues or [DEFAULT_QUEUE]) for q in given.split(",") if q]
    if route_definitions:
        names = _definition_queues(names, agent or [])
    try:
        serve(
            celery_app,
            Advancer(db, settings),
            queues=names,
            concurrency=concurrency,
            loglevel=loglevel,
        )
    finally:
        db.close()


def _definition_queues(queues: list[str], refs: list[str]) -> list[str]:
    """``queues`` and, for each, the queue of every ``--agent``'s definition."""
    from skillstate.engine.agent import load_agent
    from skillstate.errors import UsageError
    from skillstate.workers.routing import worker_queues

    if not refs:
        raise UsageError(
            "--route-definitions needs --agent: the definitions whose queues this worker consumes"
        )
    return worker_queues(queues, [load_agent(ref, search_cwd=True).definition.ref for ref in refs])


@app.command()
def submit(
    agent: Annotated[str, typer.Argument(help="The agent, as MODULE:ATTR.", show_default=False)],
    task_id: TaskIdOpt = None,
    broker: BrokerOpt = None,
    store: StoreOpt = None,
    queue: QueueOpt = "skillstate",
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set", help="FIELD=VALUE for the new task's card (VALUE is YAML).", show_default=False
        ),
    ] = None,
    input: InputOpt = None,
) -> None:
    """Create a task in the store and enqueue it for the workers.

    ``--input`` replies are kept on the new task's card (``replies_ahead``) and
    handed out one per question, as ``run --input`` does, so the message still names
    only the task and its version."""
    from skillstate.cli._common import _exists
    from skillstate.engine.agent import load_agent
    from skillstate.engine.runtime import Runtime
    from skillstate.errors import UsageError
    from skillstate.workers.settings import Message

    celery_app = _app(broker)
    loaded = load_agent(agent, search_cwd=True)
    db = _store(store)
    try:
        task = _new_task_id(loaded, task_id)
        if _exists(db, task):
            raise UsageError(
                f"task {task!r} already exists; requeue it with: skillstate requeue {task}"
            )
        fields = _card_fields(set_) if set_ else {}
        if input:
            fields.update(_queued_inputs(loaded, input, fields))
        created = Runtime(loaded, db).start(task, **fields)
    finally:
        db.close()
    _send(celery_app, Message(task, created.version, queue=queue))
    typer.echo(f"submitted {task} (version {created.version}) to queue {queue}")


@app.command()
def requeue(
    task_id: Annotated[
        str | None, typer.Argument(help="Task id (or --stranded).", show_default=False)
    ] = None,
    broker: BrokerOpt = None,
    store: StoreOpt = None,
    queue: QueueOpt = "skillstate",
    stranded: Annotated[
        bool,
        typer.Option(
            "--stranded",
            help="Requeue every task left running (or created) with no live lease and no "
            "commit for --older-than seconds (and every waiting_children parent whose children "
            "all ended as long ago), and print them.",
        ),
    ] = False,
    older_than: Annotated[
        float,
        typer.Option("--older-than", min=0.0, help="With --stranded: seconds without a commit."),
    ] = 600.0,
    json_: JsonOpt = False,
    accept_definition: AcceptDefinitionOpt = False,
) -> None:
    """Send a task to the workers again: a dead-lettered one is reopened first.

    ``--stranded`` sends every stranded task instead (what each worker's sweeper does
    every ``--sweep-every`` seconds). A task that turns out not to be stranded gets a
    duplicate message, which the workers drop."""
    from skillstate.errors import UsageError

    if stranded == (task_id is not None):
        raise UsageError("name a task to requeue, or pass --stranded (not both)")
    if accept_definition and task_id is None:
        raise UsageError("--accept-definition goes with a task id, not --stranded")
    if task_id is None:
        _requeue_stranded(broker, store, queue, older_than, json_)
        return
    if json_:
        raise UsageError("--json goes with --stranded")
    from skillstate.cli._common import _agent_for
    from skillstate.engine.runtime import Runtime
    from skillstate.workers.crashes import reopen
    from skillstate.workers.settings import Message

    celery_app = _app(broker)
    db = _store(store)
    try:
        runtime = Runtime(_agent_for(db, task_id), db)
        if accept_definition:  # a dead letter for its definition: re-pinned before it goes
            runtime.accept_definition(task_id)
        state = reopen(runtime, task_id)
    finally:
        db.close()
    _send(celery_app, Message(task_id, state.version, queue=queue))
    typer.echo(f"requeued {task_id} (version {state.version}, {state.status.value}) to {queue}")


def _requeue_stranded(
    broker: str | None, store: str | None, queue: str, older_than: float, as_json: bool
) -> None:
    """``requeue --stranded``: one sweep, every agent's tasks, each one printed."""
    import json

    from skillstate.errors import SkillstateError, StoreUnavailable
    from skillstate.workers.celery_app import enqueue
    from skillstate.workers.sweep import requeue_stranded

    celery_app = _app(broker)
    db = _store(store)
    try:
        found = requeue_stranded(
            db, lambda message: enqueue(celery_app, message), older_than, queue=queue
        )
    except SkillstateError:  # the store's own errors say what they are
        raise
    except Exception as exc:  # kombu's connection errors vary by transport
        raise StoreUnavailable(
            f"the broker did not take every message: {exc}; run it again"
        ) from exc
    finally:
        db.close()
        celery_app.close()
    if as_json:
        typer.echo(json.dumps({"queue": queue, "requeued": [t.as_json() for t in found]}))
        return
    for task in found:
        typer.echo(f"requeued {task.task_id} ({task.describe()}) to {queue}")
    typer.echo(f"{len(found)} stranded task(s) requeued (no commit for {older_than:g}s or more)")


def enqueue_task(
    broker: str | Celery | None, task_id: str, version: int, queue: str, *, note: str
) -> None:
    """Enqueue a task after a write made here (a reply, an approval, a post to its
    inbox): one message for the version it is at, then ``note`` and where it went.
    ``broker`` may be an app built beforehand, to refuse a missing broker before the
    write."""
    from skillstate.workers.settings import Message

    celery_app = _app(broker) if broker is None or isinstance(broker, str) else broker
    _send(celery_app, Message(task_id, version, queue=queue))
    typer.echo(f"{note}; {task_id} (version {version}) enqueued to {queue}")


def _app(broker: str | None, **options: Any) -> Celery:
    from skillstate.errors import UsageError
    from skillstate.workers.settings import broker_url

    url = broker_url(broker)
    if url is None:
        raise UsageError("no broker: pass --broker URL or set SKILLSTATE_BROKER")
    from skillstate.workers.celery_app import make_app

    return make_app(url, **options)


def _send(celery_app: Celery, message: Message) -> None:
    from skillstate.errors import StoreUnavailable
    from skillstate.workers.celery_app import enqueue

    try:
        enqueue(celery_app, message)
    except Exception as exc:  # kombu's connection errors vary by transport
        raise StoreUnavailable(
            f"the broker did not take the message for {message.task_id!r}: {exc}; the task "
            f"is in the store: skillstate requeue {message.task_id}"
        ) from exc
    finally:
        celery_app.close()
