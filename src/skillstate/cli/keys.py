"""Commands about the keys that seal secrets: rekey."""

from __future__ import annotations

from typing import Annotated

import typer

from skillstate.cli._app import ActorOpt, ReasonOpt, StoreOpt, app
from skillstate.cli._common import _store


@app.command()
def rekey(
    task_ids: Annotated[
        list[str] | None,
        typer.Argument(help="Tasks to re-seal (or --all).", metavar="TASK", show_default=False),
    ] = None,
    all_tasks: Annotated[
        bool, typer.Option("--all", help="Re-seal every task in the store.")
    ] = False,
    artifacts: Annotated[
        bool, typer.Option("--artifacts", help="Also re-seal every artifact sealed at rest.")
    ] = False,
    store: StoreOpt = None,
    actor: ActorOpt = None,
    reason: ReasonOpt = None,
) -> None:
    """Re-seal stored secrets under the first key of SKILLSTATE_KEY, after a rotation.

    Rotate with SKILLSTATE_KEY=NEW,OLD, run `skillstate rekey --all --artifacts`, then
    drop OLD. Every kept checkpoint, delta and event of a task is rewritten at once
    (all or nothing); values already under NEW are left alone, so running it again,
    after an interruption, finishes what is left. Each run is recorded, with who and
    why, in the store's audit record (skillstate log skillstate:audit:rekey).
    """
    from skillstate.audit import AUDIT_PREFIX, record, resolve
    from skillstate.engine.rekey import rekey_artifacts, rekey_task, require_key
    from skillstate.errors import UsageError

    identity = resolve(actor, reason)
    names = list(task_ids or [])
    if names and all_tasks:
        raise UsageError("name tasks or pass --all, not both")
    if not names and not all_tasks and not artifacts:
        raise UsageError("name the tasks to re-seal, or pass --all (and --artifacts)")
    require_key()  # before the store is even opened: nothing to do without one
    db = _store(store)
    done: dict[str, int] = {}
    count: int | None = None
    try:
        # The audit records hold no sealed value: --all leaves them (and their log) alone.
        chosen = [t for t in db.tasks() if not t.startswith(AUDIT_PREFIX)] if all_tasks else names
        for task_id in chosen:
            result = rekey_task(db, task_id)
            done[task_id] = result.values
            typer.echo(
                f"task {task_id}: {result.values} value(s) re-sealed "
                f"({result.bodies} stored bodies rewritten)"
            )
        if artifacts:
            count = rekey_artifacts(db)
            typer.echo(f"artifacts: {count} re-sealed")
    finally:
        # What was re-sealed, even when a later task failed: each task's rewrite stands.
        if done or count is not None:
            action: dict[str, object] = {
                "kind": "rekey",
                "tasks": len(done),
                "values": sum(done.values()),
                "names": list(done)[:50],  # a bounded event, however many tasks
            }
            if count is not None:
                action["artifacts"] = count
            record(db, "rekey", action, identity)
