"""Commands that run agents on a clock: ``schedule`` (add, list, remove) and ``beat``.

A schedule is kept in the store (:mod:`skillstate.control.schedule_registry`);
``skillstate beat`` (Celery beat, ``pip install 'skillstate[celery]'``) ticks them
and each tick creates one task and sends it to the workers
(:mod:`skillstate.workers.beat`).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Annotated, Any

import typer

from skillstate.cli._app import JsonOpt, StoreOpt, app
from skillstate.cli._common import _card_fields, _store
from skillstate.cli.workers import BrokerOpt, QueueOpt

if TYPE_CHECKING:
    from skillstate.control.schedules import Schedule


@app.command()
def schedule(
    agent: Annotated[
        str | None,
        typer.Argument(
            help="The agent (MODULE:ATTR) each tick starts a task of.", show_default=False
        ),
    ] = None,
    cron: Annotated[
        str | None,
        typer.Option(
            "--cron",
            help='When it ticks: minute hour day-of-month month day-of-week, in UTC ("*/5 * * '
            '* *": every 5 minutes; "0 2 * * 1-5": 02:00 on weekdays). Day of month and day '
            "of week must both match.",
            show_default=False,
        ),
    ] = None,
    every: Annotated[
        int | None,
        typer.Option(
            "--every",
            min=1,
            help="Instead of --cron: tick every N seconds, aligned to the clock "
            "(--every 60: each minute at :00).",
            show_default=False,
        ),
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="FIELD=VALUE for each new task's card (VALUE is YAML), checked against the "
            "agent's card now (repeatable).",
            show_default=False,
        ),
    ] = None,
    name: Annotated[
        str | None,
        typer.Option(
            "--name",
            help="The schedule's name (default: the agent's); task ids are NAME-<tick time>.",
            show_default=False,
        ),
    ] = None,
    queue: QueueOpt = "skillstate",
    list_: Annotated[bool, typer.Option("--list", help="List the schedules in the store.")] = False,
    remove: Annotated[
        str | None,
        typer.Option(
            "--remove",
            help="Remove the schedule NAME (the tasks it made stay).",
            show_default=False,
        ),
    ] = None,
    store: StoreOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Run an agent on a clock: each tick creates one task and sends it to the workers.

    ``skillstate schedule AGENT --cron EXPR [--set F=V]`` registers a schedule in the
    store; ``skillstate beat`` ticks every schedule of the store (and ``skillstate
    worker`` runs the tasks). A tick makes its task at most once, whatever restarts.
    ``--list`` shows the schedules, ``--remove NAME`` removes one."""
    from skillstate.errors import UsageError

    modes = [agent is not None, list_, remove is not None]
    if sum(modes) != 1:
        raise UsageError("give an AGENT to schedule, or --list, or --remove NAME (one of them)")
    adding = (cron, every, set_, name)
    if agent is None and any(v is not None for v in adding):
        raise UsageError("--cron, --every, --set and --name go with an AGENT to schedule")
    if json_ and not list_:
        raise UsageError("--json goes with --list")
    if list_:
        _list(store, json_)
    elif remove is not None:
        _remove(store, remove)
    else:
        assert agent is not None
        _add(agent, store, cron=cron, every=every, items=set_ or [], name=name, queue=queue)


@app.command()
def beat(
    broker: BrokerOpt = None,
    store: StoreOpt = None,
    agent: Annotated[
        list[str] | None,
        typer.Option(
            "--agent",
            help="An agent (MODULE:ATTR) this beat may import when a schedule names it, "
            "besides the configured allow-list (repeatable).",
        ),
    ] = None,
    refresh: Annotated[
        float,
        typer.Option(
            "--refresh",
            min=0.5,
            help="Seconds between two reads of the store's schedules (an added or removed "
            "schedule is picked up within this).",
        ),
    ] = 10.0,
    loglevel: Annotated[str, typer.Option("--loglevel", help="Celery's log level.")] = "INFO",
) -> None:
    """Run Celery beat over the store's schedules (SIGTERM stops it).

    Each tick creates its task in the store and enqueues it for ``skillstate worker``.
    Run one beat per store; a second one, or a restart, never makes a tick's task
    twice. A beat started after ticks it missed runs the latest of them once."""
    from skillstate.cli.workers import _app
    from skillstate.workers.beat import run_beat

    celery_app = _app(broker)
    db = _store(store)
    try:
        run_beat(celery_app, db, agents=frozenset(agent or ()), refresh=refresh, loglevel=loglevel)
    finally:
        db.close()


# ---------------------------------------------------------------- the modes


def _add(
    ref: str,
    store: str | None,
    *,
    cron: str | None,
    every: int | None,
    items: list[str],
    name: str | None,
    queue: str,
) -> None:
    """Check everything, then write the schedule (nothing is written on any error)."""
    from skillstate.control.schedule_registry import add_schedule
    from skillstate.control.schedules import Schedule, card_fields_for, check_name, parse_cron
    from skillstate.engine.agent import load_agent
    from skillstate.errors import UsageError

    if (cron is None) == (every is None):
        raise UsageError("say when it ticks: --cron EXPR or --every SECONDS (one of them)")
    if cron is not None:
        parse_cron(cron)
    if name is not None:
        check_name(name)
    if not queue.strip():
        raise UsageError("--queue must name a queue")
    loaded = load_agent(ref, search_cwd=True)
    label = name or loaded.name
    if name is None and not _fits(label):
        raise UsageError(f"agent name {label!r} cannot name a schedule: give --name")
    check_name(label)
    fields = card_fields_for(loaded, _card_fields(items) if items else {})
    item = Schedule(
        name=label,
        agent=ref,
        cron=cron,
        every=every,
        fields=fields,
        queue=queue,
        created_at=datetime.now(timezone.utc),
        created_by=_actor(),
    )
    db = _store(store)
    try:
        version = add_schedule(db, item)
    finally:
        db.close()
    form = "YYYYMMDDTHHMMZ" if cron is not None else "YYYYMMDDTHHMMSSZ"
    typer.echo(
        f"scheduled {label}: {item.spec} (UTC), agent {ref}, queue {queue}; each tick creates "
        f"task {label}-{form} (schedules version {version}). Run `skillstate beat` and "
        "`skillstate worker` to tick and run them."
    )


def _list(store: str | None, as_json: bool) -> None:
    from skillstate.control.schedule_registry import load_registry

    db = _store(store, create=False)
    try:
        registry = load_registry(db)
    finally:
        db.close()
    rows = [registry.schedules[n] for n in sorted(registry.schedules)]
    if as_json:
        typer.echo(json.dumps([_as_json(s) for s in rows], ensure_ascii=False, indent=2))
        return
    if not rows:
        typer.echo(f"no schedules in {db.url}")
        return
    for item in rows:
        fields = json.dumps(_shown(item.fields), ensure_ascii=False)
        typer.echo(
            f"{item.name}  {item.spec}  agent {item.agent}  queue {item.queue}  "
            f"fields {fields}  since {item.created_at:%Y-%m-%d %H:%M:%S} UTC"
            + (f" by {item.created_by}" if item.created_by else "")
        )
    typer.echo(f"{len(rows)} schedule{'s' if len(rows) != 1 else ''} in {db.url}")


def _remove(store: str | None, name: str) -> None:
    from skillstate.control.schedule_registry import remove_schedule

    db = _store(store, create=False)
    try:
        removed = remove_schedule(db, name, by=_actor())
    finally:
        db.close()
    typer.echo(f"removed schedule {removed.name} ({removed.spec}); the tasks it made stay")


# ---------------------------------------------------------------- helpers


def _fits(name: str) -> bool:
    from skillstate.control.schedules import NAME_PATTERN

    return NAME_PATTERN.fullmatch(name) is not None


def _actor() -> str:
    from skillstate.control.approvals import default_actor

    return default_actor()


def _shown(fields: dict[str, Any]) -> dict[str, Any]:
    """Fields as people see them: sealed values as ``***``."""
    from skillstate.state.secrets import MASK, is_sealed

    return {k: MASK if is_sealed(v) else v for k, v in fields.items()}


def _as_json(item: Schedule) -> dict[str, Any]:
    body = item.model_dump(mode="json")
    body["fields"] = _shown(item.fields)
    return body
