"""Listing a store's tasks: ``skillstate tasks`` (alias ``skillstate list``).

It reads the store and nothing else: the store is opened without being created
(``open_store(url, create=False)``), every head comes from one bulk read
(:meth:`~skillstate.store.base.Store.heads`), no agent is imported and no card is
validated against an agent's state class. The card's ``agent`` field is shown as
the data it is. A head that does not read is listed as ``unreadable`` with the
reason; it never stops the listing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Annotated, Any

import typer

from skillstate.cli._app import JsonOpt, StoreOpt, app
from skillstate.cli._common import _store

if TYPE_CHECKING:
    from skillstate.store.base import HeadInfo, Lease

UNREADABLE = "unreadable"
"""The status a task whose head does not read is listed (and filtered) with."""

StatusOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--status",
        help="Only tasks with this status (repeatable): created, running, waiting_user, "
        "waiting_approval, waiting, waiting_children, "
        f"completed, failed, cancelled, or {UNREADABLE} (a head that does not read).",
        show_default=False,
    ),
]
AgentFilterOpt = Annotated[
    str | None,
    typer.Option(
        "--agent",
        help="Only tasks whose card names this agent (MODULE:ATTR, compared as text: "
        "nothing is imported).",
        show_default=False,
    ),
]


WaitingOpt = Annotated[
    bool,
    typer.Option(
        "--waiting",
        help="Only tasks waiting on a person, the world or their children (waiting_user, "
        "waiting_approval, waiting: a time or a signal, waiting_children), "
        "longest first, with how long each has waited "
        "(since its last commit) and until when.",
    ),
]
LongerThanOpt = Annotated[
    float | None,
    typer.Option(
        "--longer-than",
        min=0.0,
        help="With --waiting (implied): only tasks that have waited at least this many seconds.",
        show_default=False,
    ),
]

TreeOpt = Annotated[
    bool,
    typer.Option(
        "--tree",
        help="Child tasks under their parents (fan-out). A listed parent shows all its "
        "children, filtered or not; a child whose parent is not listed is a root with a "
        "note (an orphan when the parent is gone).",
    ),
]
DepthOpt = Annotated[
    int,
    typer.Option("--depth", min=0, help="With --tree: how many levels of children to show."),
]

WAITING = ("waiting_user", "waiting_approval", "waiting", "waiting_children")
"""The statuses ``tasks --waiting`` lists: a person, the world or child tasks move these on."""


def list_tasks(
    store: StoreOpt = None,
    status: StatusOpt = None,
    agent: AgentFilterOpt = None,
    waiting: WaitingOpt = False,
    longer_than: LongerThanOpt = None,
    tree: TreeOpt = False,
    depth: DepthOpt = 4,
    as_json: JsonOpt = False,
) -> None:
    """Every task in the store: status, step, version, last update, agent and lease
    (alias: list)."""
    from skillstate.store.base import is_reserved  # not at import: the CLI loads light

    wanted = _statuses(status)
    waiting = waiting or longer_than is not None
    if waiting:
        wanted = frozenset(WAITING) & wanted if wanted is not None else frozenset(WAITING)
    db = _store(store, create=False)
    try:
        heads = db.heads()
    finally:
        db.close()
    now = datetime.now(timezone.utc)
    rows = [
        head
        for head in heads
        if not is_reserved(head.task_id)
        and (wanted is None or _status(head) in wanted)
        and (agent is None or head.agent == agent)
        and (longer_than is None or _waited(head, now) >= longer_than)
    ]
    if waiting:
        rows.sort(key=lambda head: -_waited(head, now))
    if tree:
        _print_tree(
            heads,
            rows,
            db.url,
            now,
            depth=depth,
            as_json=as_json,
            filtered=wanted is not None or agent is not None,
        )
        return
    if as_json:
        typer.echo(json.dumps([_as_json(h, now) for h in rows], ensure_ascii=False, indent=2))
        return
    filtered = wanted is not None or agent is not None
    if waiting:
        _print_waiting(rows, db.url, now)
    else:
        _print(rows, db.url, now, filtered=filtered)


app.command("tasks")(list_tasks)
app.command("list", hidden=True)(list_tasks)


def _print_tree(
    heads: list[HeadInfo],
    rows: list[HeadInfo],
    url: str,
    now: datetime,
    *,
    depth: int,
    as_json: bool,
    filtered: bool,
) -> None:
    """``tasks --tree`` (:mod:`skillstate.cli.tree`), from the heads already read."""
    from skillstate.cli.tree import forest, print_tree, tree_json
    from skillstate.store.base import is_reserved

    everyone = [head for head in heads if not is_reserved(head.task_id)]
    roots = forest(everyone, rows, depth)
    if as_json:
        typer.echo(json.dumps(tree_json(roots, now), ensure_ascii=False, indent=2))
    else:
        print_tree(roots, url, now, filtered=filtered, depth=depth)


def _statuses(given: list[str] | None) -> frozenset[str] | None:
    if not given:
        return None
    from skillstate.errors import UsageError
    from skillstate.state.model import TaskStatus

    known = [s.value for s in TaskStatus] + [UNREADABLE]
    unknown = [s for s in given if s not in known]
    if unknown:
        raise UsageError(f"unknown --status {unknown[0]!r}; choose from: {', '.join(known)}")
    return frozenset(given)


def _status(head: HeadInfo) -> str | None:
    return UNREADABLE if head.problem is not None else head.status


def _utc(when: datetime) -> str:
    """``2026-05-01 12:00:00``: a table cell, in UTC (the column says so)."""
    return when.astimezone(timezone.utc).replace(tzinfo=None).isoformat(" ", "seconds")


def _expiry(lease: Lease) -> datetime | None:
    """The lease's expiry, or ``None`` when the stored one does not read."""
    from skillstate.store.chain import UNREADABLE_EXPIRY

    return None if lease.expires_at == UNREADABLE_EXPIRY else lease.expires_at


def _as_json(head: HeadInfo, now: datetime) -> dict[str, Any]:
    lease = head.lease
    expiry = _expiry(lease) if lease else None
    return {
        "task_id": head.task_id,
        "status": _status(head),
        "current_step": head.current_step,
        "version": head.version,
        "updated_at": head.updated_at.isoformat() if head.updated_at else None,
        "agent": head.agent,
        "lease": None
        if lease is None
        else {
            "worker": lease.worker,
            "expires_at": expiry.isoformat() if expiry else None,
            "live": lease.live(now) if expiry and head.lease_problem is None else None,
            "generation": lease.generation,
        },
        "problem": head.problem,
        "lease_problem": head.lease_problem,
        "waited_s": round(_waited(head, now), 1) if _status(head) in WAITING else None,
        "wait_until": head.wait_until.isoformat() if head.wait_until else None,
    }


def _waited(head: HeadInfo, now: datetime) -> float:
    """Seconds since the head's last commit: how long a waiting task has waited."""
    return (now - head.updated_at).total_seconds() if head.updated_at else 0.0


def _duration(seconds: float) -> str:
    """``45s``, ``12m 5s``, ``3h 12m``, ``2d 4h``: a table cell."""
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"


def _print_waiting(rows: list[HeadInfo], url: str, now: datetime) -> None:
    """``tasks --waiting``: who waits, for how long and until when, longest first."""
    if not rows:
        typer.echo(_printable(f"no waiting tasks match in {url}"))
        return
    header = ("TASK", "STATUS", "WAITED", "SINCE (UTC)", "UNTIL (UTC)", "STEP", "AGENT")
    table = [header]
    for head in rows:
        table.append(
            (
                _printable(head.task_id),
                _status(head) or "-",
                _duration(_waited(head, now)),
                _utc(head.updated_at) if head.updated_at else "-",
                _utc(head.wait_until) if head.wait_until else "-",
                _printable(head.current_step or "-"),
                _printable(head.agent or "-"),
            )
        )
    lines = _aligned(table)
    lines.append(_printable(f"{len(rows)} waiting task{'s' if len(rows) != 1 else ''} in {url}"))
    typer.echo("\n".join(lines))


def _lease_cell(head: HeadInfo, now: datetime) -> str:
    lease = head.lease
    if lease is None:
        return "damaged" if head.lease_problem else "-"
    expiry = _expiry(lease)
    if head.lease_problem or expiry is None:
        return f"{lease.worker} (damaged)"
    if lease.live(now):
        return f"{lease.worker} (live until {_utc(expiry)})"
    return f"{lease.worker} (expired {_utc(expiry)})"


def _print(rows: list[HeadInfo], url: str, now: datetime, *, filtered: bool) -> None:
    """A plain aligned table (a rich table takes seconds for thousands of rows), the
    reasons of what did not read, and a last line naming the store."""
    if not rows:
        typer.echo(_printable(f"no tasks {'match' if filtered else 'yet'} in {url}"))
        return
    header = ("TASK", "STATUS", "STEP", "VERSION", "UPDATED (UTC)", "AGENT", "LEASE")
    table = [header]
    notes = []
    for head in rows:
        table.append(
            (
                _printable(head.task_id),
                _status(head) or "-",
                _printable(head.current_step or "-"),
                str(head.version) if head.version is not None else "-",
                _utc(head.updated_at) if head.updated_at else "-",
                _printable(head.agent or "-"),
                _printable(_lease_cell(head, now)),
            )
        )
        if head.problem:
            notes.append(f"{head.task_id}: {UNREADABLE}: {head.problem}")
        if head.lease_problem:
            notes.append(f"{head.task_id}: {head.lease_problem}")
    lines = _aligned(table)
    lines += [_printable(note) for note in notes]
    lines.append(_printable(f"{len(rows)} task{'s' if len(rows) != 1 else ''} in {url}"))
    typer.echo("\n".join(lines))


def _aligned(table: Sequence[tuple[str, ...]]) -> list[str]:
    """The rows as lines, columns padded to their widest cell (the last one unpadded)."""
    from rich.cells import cell_len

    widths = [max(cell_len(row[i]) for row in table) for i in range(len(table[0]) - 1)]
    return [
        "  ".join(
            [
                *(
                    cell + " " * (width - cell_len(cell))
                    for cell, width in zip(row[:-1], widths, strict=True)
                ),
                row[-1],
            ]
        )
        for row in table
    ]


def _printable(text: str) -> str:
    """``text`` on one line: control characters (a newline in a task id) escaped."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
