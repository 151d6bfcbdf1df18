"""Data lifecycle commands: delete, prune (per task and across tasks, by age), gc."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import TYPE_CHECKING, Annotated, Any

import typer

from skillstate.cli._app import ActorOpt, ReasonOpt, StoreOpt, app
from skillstate.cli._common import _store
from skillstate.errors import UsageError

if TYPE_CHECKING:
    from skillstate.ops.delete import Children, Deletion
    from skillstate.store.base import Store

IdsArg = Annotated[
    list[str] | None, typer.Argument(help="Task ids.", show_default=False, metavar="ID")
]
YesOpt = Annotated[
    bool, typer.Option("--yes", "-y", help="Do it; without --yes the list is only shown.")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the result as JSON.")]


def _age(text: str | None, option: str) -> timedelta | None:
    from skillstate.memory import parse_duration

    if text is None:
        return None
    try:
        return parse_duration(text)
    except UsageError as exc:
        raise UsageError(f"{option}: {exc}") from None


@app.command()
def delete(
    task_ids: IdsArg = None,
    reason: ReasonOpt = None,
    status: Annotated[
        str | None, typer.Option("--status", help="Select tasks in this status.")
    ] = None,
    older_than: Annotated[
        str | None,
        typer.Option("--older-than", help="Select tasks last committed longer ago: 30d, 12h."),
    ] = None,
    agent: Annotated[
        str | None, typer.Option("--agent", help="Select tasks of this agent (MODULE:ATTR).")
    ] = None,
    children: Annotated[
        str | None,
        typer.Option(
            "--children",
            help="A task with child tasks: 'delete' the whole tree or 'detach' the children.",
        ),
    ] = None,
    yes: YesOpt = False,
    as_json: JsonOpt = False,
    store: StoreOpt = None,
    actor: ActorOpt = None,
) -> None:
    """Delete tasks for good: head, checkpoints, events, inbox, lease, sealed values and
    the artifacts only they reference. Audited in skillstate:audit:deletions (who, why,
    how many versions; never the content). Shows the list unless --yes."""
    from skillstate.audit import resolve
    from skillstate.ops.delete import plan_deletion, select_tasks

    identity = resolve(actor, reason)
    if not identity.reason:
        raise UsageError('delete needs --reason "..." (it is recorded in the audit log)')
    mode = _children(children)
    filters = status is not None or older_than is not None or agent is not None
    if bool(task_ids) == filters:
        raise UsageError(
            "name the tasks to delete, or select them by --status/--older-than/--agent"
        )
    db = _store(store, create=False)
    try:
        ids = task_ids or select_tasks(
            db, status=status, older_than=_age(older_than, "--older-than"), agent=agent
        )
        _delete(db, plan_deletion(db, ids, children=mode), identity, yes=yes, as_json=as_json)
    finally:
        db.close()


def _children(value: str | None) -> Children:
    if value is None:
        return "refuse"
    if value not in ("delete", "detach"):
        raise UsageError(f"--children must be 'delete' or 'detach', not {value!r}")
    return "delete" if value == "delete" else "detach"


def _delete(db: Store, plans: list[Deletion], identity: Any, *, yes: bool, as_json: bool) -> None:
    from skillstate.ops.delete import delete_tasks

    if not plans:
        typer.echo("no task matches: nothing to delete")
        return
    if not yes:
        rows = [{"task": p.task_id, "versions": p.versions, "status": p.status} for p in plans]
        if as_json:
            typer.echo(json.dumps({"dry_run": True, "tasks": rows}, indent=2))
        else:
            for p in plans:
                extra = f", detaches {len(p.children)} child(ren)" if p.detach else ""
                typer.echo(f"would delete {p.task_id}  ({p.versions} versions, {p.status}{extra})")
            typer.echo(f"dry run: {len(plans)} task(s), nothing deleted; pass --yes to delete")
        return
    done = delete_tasks(db, plans, identity=identity)
    if as_json:
        typer.echo(json.dumps([d.__dict__ for d in done], indent=2))
        return
    for d in done:
        if not d.found:
            typer.echo(f"{d.task_id}: already gone")
            continue
        typer.echo(
            f"deleted {d.task_id}: {d.versions} versions, {d.events} events, "
            f"{d.messages} messages, {len(d.artifacts)} artifacts"
            + (f"; detached {', '.join(d.detached)}" if d.detached else "")
        )
    typer.echo("recorded in skillstate:audit:deletions (skillstate log skillstate:audit:deletions)")


@app.command()
def prune(
    task_ids: IdsArg = None,
    all_tasks: Annotated[bool, typer.Option("--all", help="Every task in the store.")] = False,
    keep_last: Annotated[
        int | None,
        typer.Option(
            "--keep-last",
            min=1,
            help="Keep the newest N versions (default 10; 1 with --older-than).",
        ),
    ] = None,
    keep_every: Annotated[
        int | None, typer.Option("--keep-every", min=1, help="Also keep every K-th version.")
    ] = None,
    older_than: Annotated[
        str | None,
        typer.Option("--older-than", help="Delete checkpoints committed longer ago: 30d, 12h."),
    ] = None,
    finished_older_than: Annotated[
        str | None,
        typer.Option(
            "--finished-older-than",
            help="Delete whole finished tasks (completed, failed, cancelled) last committed "
            "longer ago, as `delete` does (needs --reason; --yes to do it).",
        ),
    ] = None,
    reason: ReasonOpt = None,
    yes: YesOpt = False,
    store: StoreOpt = None,
    actor: ActorOpt = None,
) -> None:
    """Delete old checkpoints; the head and every chain a kept version needs stay, and so
    do events. With --finished-older-than, delete whole finished tasks by age."""
    if finished_older_than is not None:
        _prune_finished(finished_older_than, task_ids, all_tasks, reason, yes, store, actor)
        return
    if bool(task_ids) == all_tasks:
        raise UsageError("name the tasks to prune, or pass --all")
    age = _age(older_than, "--older-than")
    db = _store(store, create=False)
    try:
        _prune_checkpoints(db, task_ids, age, keep_last, keep_every)
    finally:
        db.close()


def _prune_checkpoints(
    db: Store,
    task_ids: list[str] | None,
    age: timedelta | None,
    keep_last: int | None,
    keep_every: int | None,
) -> None:
    from skillstate._render import console
    from skillstate.ops.retention import prune_older_than
    from skillstate.store.base import is_reserved

    ids = task_ids or [t for t in db.tasks() if not is_reserved(t)]
    if age is None:
        results = [db.prune(t, keep_last=keep_last or 10, keep_every=keep_every) for t in ids]
    else:
        results = prune_older_than(
            db, ids, older_than=age, keep_last=keep_last or 1, keep_every=keep_every
        )
    for result in results:
        console.print(
            f"task {result.task_id}: kept {len(result.kept)} checkpoints, "
            f"deleted {len(result.deleted)} (events are kept)"
        )
    if len(results) > 1:
        total = sum(len(r.deleted) for r in results)
        console.print(f"{len(results)} tasks, {total} checkpoints deleted")


def _prune_finished(
    finished_older_than: str,
    task_ids: list[str] | None,
    all_tasks: bool,
    reason: str | None,
    yes: bool,
    store: str | None,
    actor: str | None,
) -> None:
    from skillstate.audit import resolve
    from skillstate.ops.retention import plan_finished

    identity = resolve(actor, reason)
    if not identity.reason:
        raise UsageError('--finished-older-than deletes tasks: it needs --reason "..."')
    if task_ids:
        raise UsageError("--finished-older-than selects tasks itself: name none (or pass --all)")
    age = _age(finished_older_than, "--finished-older-than")
    db = _store(store, create=False)
    try:
        plans, skipped = plan_finished(db, age or timedelta(0))
        for task_id, why in skipped.items():
            typer.echo(f"skipping {task_id}: {why}")
        _delete(db, plans, identity, yes=yes, as_json=False)
    finally:
        db.close()


@app.command()
def gc(
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="List what would be removed; remove nothing.")
    ] = False,
    grace: Annotated[
        str,
        typer.Option("--grace", help="Keep artifacts put more recently than this (1h, 30m)."),
    ] = "1h",
    as_json: JsonOpt = False,
    store: StoreOpt = None,
) -> None:
    """Remove artifacts no task, version, event, message or record references (and that
    were not put within --grace: a writer may be about to reference them)."""
    from skillstate.ops.gc import collect

    age = _age(grace, "--grace") if grace not in ("0", "0s") else timedelta(0)
    db = _store(store, create=False)
    try:
        result = collect(db, grace=age or timedelta(0), dry_run=dry_run)
    finally:
        db.close()
    if as_json:
        typer.echo(json.dumps(result.__dict__, indent=2))
        return
    verb = "would remove" if dry_run else "removed"
    typer.echo(
        f"{result.stored} artifacts, {result.referenced} referenced; {verb} "
        f"{len(result.removed)}"
        + (f", kept {len(result.recent)} put within --grace" if result.recent else "")
    )
    for ref in result.removed:
        typer.echo(f"  {ref}")
