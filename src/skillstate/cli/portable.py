"""``skillstate export`` / ``import`` / ``copy``: whole tasks between stores and files.

``export ID... -o FILE`` writes a checksummed, versioned file (:mod:`skillstate.ops.archive`);
``import FILE`` checks it whole and restores each task atomically; ``copy --from URL
--to URL`` moves tasks store to store on the same path (:mod:`skillstate.ops.portable`).
Exit codes: 0 done, 2 a file refused or bad input (nothing written), 3 a task id
already taken (nothing written), 1 ``copy`` with some task failed (the others copied).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from skillstate.cli._app import EXIT_FAILED, JsonOpt, StoreOpt, app
from skillstate.cli._common import _store

IdsArg = Annotated[list[str], typer.Argument(help="Task ids.", show_default=False)]
OverwriteOpt = Annotated[
    bool, typer.Option("--overwrite", help="Replace a task that already has the id.")
]


@app.command("export")
def export(
    task_ids: IdsArg,
    output: Annotated[
        Path, typer.Option("--output", "-o", help="The file to write.", show_default=False)
    ],
    store: StoreOpt = None,
) -> None:
    """Write tasks (checkpoints, events, inbox, artifacts; sealed values stay sealed) to a file."""
    from skillstate.ops.archive import write_archive
    from skillstate.ops.portable import read_task

    db = _store(store, create=False)
    tasks = [read_task(db, task_id) for task_id in task_ids]
    manifest = write_archive(output, tasks)
    for entry in manifest.tasks:
        missing = f", {len(entry.missing_artifacts)} missing" if entry.missing_artifacts else ""
        typer.echo(
            f"exported {entry.task_id} · version {entry.version} · {entry.checkpoints} "
            f"checkpoints · {entry.events} events · {len(entry.artifacts)} artifacts{missing}"
        )
    typer.echo(f"wrote {output} (format {manifest.format_version})")


@app.command("import")
def import_(
    file: Annotated[Path, typer.Argument(help="A file `skillstate export` wrote.")],
    store: StoreOpt = None,
    as_id: Annotated[
        str | None,
        typer.Option("--as", help="Import the (one) task under this id.", show_default=False),
    ] = None,
    overwrite: OverwriteOpt = False,
) -> None:
    """Check a file whole, then restore each of its tasks atomically into the store."""
    from skillstate.errors import UsageError
    from skillstate.ops.archive import read_archive
    from skillstate.ops.portable import renamed, write_task

    _, tasks = read_archive(file)
    if as_id is not None:
        if len(tasks) != 1:
            raise UsageError(f"--as needs a file with one task; {file} holds {len(tasks)}")
        tasks = [renamed(tasks[0], as_id)]
    db = _store(store)
    if not overwrite:
        from skillstate.errors import TaskExists

        taken = sorted({t.task_id for t in tasks} & set(db.tasks()))
        if taken:
            raise TaskExists(
                f"task {taken[0]!r} already exists in {db.url}; nothing was written "
                "(--as NEW_ID, or --overwrite)"
            )
    for records in tasks:
        version = write_task(db, records, overwrite=overwrite)
        typer.echo(f"imported {records.task_id} · version {version} into {db.url}")


@app.command("copy")
def copy(
    source: Annotated[str, typer.Option("--from", help="Store URL to copy from.")],
    target: Annotated[str, typer.Option("--to", help="Store URL to copy to.")],
    task_ids: Annotated[
        list[str] | None, typer.Argument(help="Task ids (or --all, --status).")
    ] = None,
    all_: Annotated[bool, typer.Option("--all", help="Every task of the source.")] = False,
    status: Annotated[
        str | None, typer.Option("--status", help="Tasks whose status is this.")
    ] = None,
    overwrite: OverwriteOpt = False,
    json_: JsonOpt = False,
) -> None:
    """Copy tasks store to store; a re-run skips what is already there (idempotent)."""
    import json

    from rich.console import Console
    from rich.progress import Progress

    from skillstate.errors import UsageError
    from skillstate.ops.portable import copy_tasks, select_tasks
    from skillstate.store import open_store

    chosen = sum([bool(task_ids), all_, status is not None])
    if chosen != 1:
        raise UsageError("name the tasks to copy: IDS, --all or --status S (one of them)")
    src = open_store(source, create=False)
    dst = open_store(target)
    ids = list(task_ids or select_tasks(src, status=status))
    with Progress(console=Console(stderr=True), transient=True, disable=json_) as bar:
        job = bar.add_task("copying", total=len(ids))
        result = copy_tasks(
            src, dst, ids, overwrite=overwrite, progress=lambda _id, _o: bar.advance(job)
        )
    if json_:
        typer.echo(
            json.dumps(
                {"copied": result.copied, "skipped": result.skipped, "failed": result.failed}
            )
        )
    else:
        for task_id, why in result.failed.items():
            typer.echo(f"failed {task_id}: {why}", err=True)
        typer.echo(
            f"copied {len(result.copied)} · skipped {len(result.skipped)} (already there) · "
            f"failed {len(result.failed)}"
        )
    if result.failed:
        raise typer.Exit(EXIT_FAILED)
