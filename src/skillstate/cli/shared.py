"""``skillstate shared``: the shared records, listed and shown.

``skillstate shared`` lists every record (name, key, version, last writer),
``shared NAME`` the records of one kind, ``shared NAME:KEY`` one record's value and
the writes that made it. Each record's full history, with patches:
``skillstate log skillstate:shared:NAME:KEY``. See :mod:`skillstate.shared`.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from skillstate.cli._app import JsonOpt, StoreOpt, app
from skillstate.cli._common import _store


@app.command("shared")
def shared(
    record: Annotated[
        str | None,
        typer.Argument(
            help="NAME (the records of one kind) or NAME:KEY (one record); none: all.",
            show_default=False,
        ),
    ] = None,
    store: StoreOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Show shared records: their version, value and the writes that made them."""
    from skillstate.shared import check_key, check_name, load_record, parse_id, record_ids
    from skillstate.shared.record import WRITE

    name, _, key = (record or "").partition(":")
    if record is not None:  # refused before the store is opened
        check_name(name)
        if key:
            check_key(key)
    db = _store(store, create=False)
    try:
        if key:
            head = load_record(db, name, key)
            if head.version == 0:
                typer.echo(f"no shared record {name}:{key} in {db.url}")
                raise typer.Exit(1)
            writes = db.events(f"skillstate:shared:{name}:{key}")
            if json_:
                rows = [{"version": e.version, **e.action} for e in writes]
                out = {"name": name, "key": key, "version": head.version, "value": head.value}
                typer.echo(json.dumps({**out, "writes": rows}, ensure_ascii=False, indent=2))
                return
            typer.echo(f"{name}:{key}  version {head.version}  last written by {head.writer}")
            typer.echo(json.dumps(head.value, ensure_ascii=False, indent=2))
            for e in writes:
                a = e.action
                what = f"by {a.get('task')} ({a.get('skill')}, tag {a.get('tag')})"
                typer.echo(
                    f"  v{e.version} {a.get('kind')} {what if a.get('kind') == WRITE else ''}"
                )
            return
        heads = [load_record(db, *parse_id(rid)) for rid in record_ids(db)]
    finally:
        db.close()
    heads = [h for h in heads if not name or h.name == name]
    if json_:
        rows = [
            {"name": h.name, "key": h.key, "version": h.version, "writer": h.writer} for h in heads
        ]
        typer.echo(json.dumps(rows, ensure_ascii=False, indent=2))
        return
    if not heads:
        typer.echo(f"no shared records{' ' + name if name else ''} in {db.url}")
        return
    for h in heads:
        typer.echo(f"{h.name}:{h.key}  version {h.version}  last written by {h.writer}")
