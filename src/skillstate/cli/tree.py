"""Parents and their child tasks on the command line: ``tasks --tree``, and the links
``show`` and ``log`` print (fan-out).

The tree is built from the one bulk read ``tasks`` already makes
(:meth:`~skillstate.store.base.Store.heads`: each head's ``parent``), so it costs no
more than the flat listing. A filter (``--status``, ``--agent``) chooses the tasks
listed; a listed parent still shows all its children, whatever their status, since
a parent's line means little without them. A child whose parent is not listed is a
root of its own, with a note: ``child of P`` when P exists, ``orphan`` when P is gone
(deleted, or never written) -- never dropped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from skillstate.state.model import AgentState
    from skillstate.store.base import HeadInfo, Store

__all__ = ["Node", "family_lines", "forest", "print_family", "print_tree", "tree_json"]

DEFAULT_DEPTH = 4
"""How many levels of children ``tasks --tree`` shows by default (fan-out's default
``max_depth``)."""


@dataclass
class Node:
    """One task in the tree, its children (all of them, filtered or not) and why it is
    a root when it is a child."""

    head: HeadInfo
    children: list[Node] = field(default_factory=list)
    note: str | None = None
    """Why a child is listed as a root: ``orphan: parent P is gone``, ``child of P``."""
    hidden: int = 0
    """Descendants below the depth limit, not shown."""


def forest(heads: Sequence[HeadInfo], listed: Sequence[HeadInfo], depth: int) -> list[Node]:
    """The listed tasks as trees: ``heads`` are all the store's (children are found among
    them), ``listed`` the ones the filter kept, in order; ``depth`` levels of children."""
    by_id = {h.task_id: h for h in heads}
    kids: dict[str, list[HeadInfo]] = {}
    for head in heads:
        if head.parent is not None and head.parent in by_id and head.parent != head.task_id:
            kids.setdefault(head.parent, []).append(head)
    shown = {h.task_id for h in listed}
    roots = []
    for head in listed:
        note = _root_note(head, by_id, shown)
        if note != "under":
            roots.append(_grow(head, kids, depth, {head.task_id}, note))
    return roots


def _root_note(head: HeadInfo, by_id: Mapping[str, HeadInfo], shown: set[str]) -> str | None:
    """``under`` when a listed ancestor shows ``head``; else the note of a root (``None``
    for a task without a parent)."""
    if head.parent is None:
        return None
    if head.parent not in by_id:
        return f"orphan: parent {head.parent} is gone"
    ancestors: list[str] = []
    parent: str | None = head.parent
    while parent is not None and parent in by_id and parent not in ancestors:
        if parent == head.task_id:  # damaged links: no ancestor can show it
            return f"child of {head.parent} (parent links loop)"
        ancestors.append(parent)
        parent = by_id[parent].parent
    if any(a in shown for a in ancestors):
        return "under"
    return f"child of {head.parent}"


def _grow(
    head: HeadInfo,
    kids: Mapping[str, list[HeadInfo]],
    depth: int,
    path: set[str],
    note: str | None = None,
) -> Node:
    node = Node(head, note=note)
    below = [k for k in kids.get(head.task_id, []) if k.task_id not in path]
    if depth <= 0:
        node.hidden = _count(below, kids, set(path))
        return node
    node.children = [_grow(k, kids, depth - 1, path | {k.task_id}) for k in below]
    return node


def _count(heads: list[HeadInfo], kids: Mapping[str, list[HeadInfo]], seen: set[str]) -> int:
    total = 0
    todo = list(heads)
    while todo:
        head = todo.pop()
        if head.task_id in seen:
            continue
        seen.add(head.task_id)
        total += 1
        todo.extend(kids.get(head.task_id, []))
    return total


def _walk(nodes: Sequence[Node], prefix: str = "", top: bool = True) -> list[tuple[str, Node]]:
    """Each node with the tree drawing before its id, depth first."""
    out: list[tuple[str, Node]] = []
    for i, node in enumerate(nodes):
        last = i == len(nodes) - 1
        branch = "" if top else ("└─ " if last else "├─ ")
        out.append((prefix + branch, node))
        inner = "" if top else prefix + ("   " if last else "│  ")
        out.extend(_walk(node.children, inner, top=False))
    return out


def print_tree(roots: list[Node], url: str, now: datetime, *, filtered: bool, depth: int) -> None:
    """``tasks --tree``: the flat listing's columns, each child under its parent."""
    from skillstate.cli.listing import (
        UNREADABLE,
        _aligned,
        _lease_cell,
        _printable,
        _status,
        _utc,
    )

    if not roots:
        typer.echo(_printable(f"no tasks {'match' if filtered else 'yet'} in {url}"))
        return
    table = [("TASK", "STATUS", "STEP", "VERSION", "UPDATED (UTC)", "AGENT", "LEASE")]
    notes, hidden = [], 0
    walked = _walk(roots)
    for drawing, node in walked:
        head = node.head
        label = drawing + head.task_id + (f"  ({node.note})" if node.note else "")
        if node.hidden:
            label += f"  (+{node.hidden} below --depth {depth})"
            hidden += node.hidden
        table.append(
            (
                _printable(label),
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
    lines = _aligned(table)
    lines += [_printable(note) for note in notes]
    more = f", {hidden} more below --depth {depth}" if hidden else ""
    count = len(walked)
    lines.append(_printable(f"{count} task{'s' if count != 1 else ''}{more} in {url}"))
    typer.echo("\n".join(lines))


def tree_json(roots: list[Node], now: datetime) -> list[dict[str, Any]]:
    """``tasks --tree --json``: each task's flat-listing object with ``parent``,
    ``children`` (nested), ``note`` and ``hidden``."""
    from skillstate.cli.listing import _as_json

    return [
        _as_json(node.head, now)
        | {
            "parent": node.head.parent,
            "note": node.note,
            "hidden": node.hidden,
            "children": tree_json(node.children, now),
        }
        for node in roots
    ]


# ---------------------------------------------------------------------- show and log


def family_lines(action: Mapping[str, Any]) -> list[str]:
    """What an event did to child tasks, one line each (empty: nothing)."""
    children = action.get("children")
    if not children:
        return []
    kind = action.get("kind")
    if kind == "join" and isinstance(children, Mapping):
        return [f"joined {len(children)} child task(s):"] + [
            f"  {task_id} {status}" for task_id, status in children.items()
        ]
    if kind == "cancel" and isinstance(children, Mapping):
        return [f"cancel cascaded to {len(children)} unfinished child task(s): {_ids(children)}"]
    if kind in ("rollback", "fork") and isinstance(children, Mapping):
        lines = []
        detached = children.get("detached") or []
        if kind == "fork":
            lines.append(f"the fork starts with no live children: {_ids(detached)} detached")
        else:
            lines.append(f"{len(detached)} child task(s) detached: {_ids(detached)}")
        cancelled = children.get("cancelled") or {}
        if cancelled:
            lines.append(f"cancel posted to the unfinished ones first: {_ids(cancelled)}")
        return lines
    if isinstance(children, Mapping):
        return [f"children: {_ids(children)}"]
    if isinstance(children, list):
        return [f"children: {_ids([str(c) for c in children])}"]
    return []


def _ids(items: Any, shown: int = 8) -> str:
    ids = [str(i) for i in items]
    more = f" and {len(ids) - shown} more" if len(ids) > shown else ""
    return ", ".join(ids[:shown]) + more


def print_family(state: AgentState, store: Store) -> None:
    """``show``: the task's parent (with the version that spawned it) and its children,
    each with its status as the parent recorded it and as its own head says now."""
    from rich.table import Table
    from rich.text import Text

    from skillstate._render import console, print_table

    if state.parent is not None:
        link = state.parent
        console.print(
            Text(
                f"parent: {link.task_id} (spawned this at its version {link.version}; "
                f"kind {link.name}, key {link.key}, depth {link.depth}; "
                f"now {_now(store, link.task_id)})"
            )
        )
    if not state.children:
        return
    table = Table(title=f"children of {state.task_id}")
    for col in ("child", "kind", "key", "spawned at", "recorded", "now", "summary"):
        table.add_column(col)
    for child in state.children:
        summary = child.error or child.summary or "-"
        cells = (
            child.task_id,
            child.name,
            child.key,
            f"v{child.version}",
            child.status,
            _now(store, child.task_id),
            summary,
        )
        table.add_row(*(Text(c) for c in cells))
    print_table(table)


def _now(store: Store, task_id: str) -> str:
    """A linked task's status as its head says now (``gone`` when it does not exist)."""
    from skillstate.errors import StateCorrupted, TaskNotFound

    try:
        status = store.load(task_id, verify=False).state.get("status")
    except TaskNotFound:
        return "gone"
    except StateCorrupted:
        return "unreadable"
    return status if isinstance(status, str) else "?"
