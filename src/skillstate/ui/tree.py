"""Parents and children in the web inspector (fan-out).

A task page shows the task's parent (the version that spawned it, the child kind and
key, the parent's status now) and the tree of its children: each child's record in
this task's card (``pending`` until the join, then how it ended) and its own head's
status now, its children under it, every node linking to its own task page. The task
list shows the same tree as ``skillstate tasks --tree`` does
(:func:`skillstate.cli.tree.forest`), from the one bulk read the list makes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from skillstate.errors import StateCorrupted, TaskNotFound

if TYPE_CHECKING:
    from skillstate.store.base import HeadInfo, Store
    from skillstate.ui.masking import Masker

__all__ = ["MAX_NODES", "family_view", "tree_page"]

MAX_NODES = 500
"""The most descendants a task page lists (a wide, deep tree is cut, and says so)."""
TREE_DEPTH = 4
"""Levels of children a task page and the task list show."""


def family_view(store: Store, card: Mapping[str, Any], masker: Masker) -> dict[str, Any] | None:
    """The task page's parent link and children tree (``None``: a task with neither)."""
    parent = card.get("parent")
    link = None
    if isinstance(parent, Mapping) and isinstance(parent.get("task_id"), str):
        link = {
            "task_id": parent["task_id"],
            "version": parent.get("version"),
            "name": parent.get("name"),
            "key": parent.get("key"),
            "depth": parent.get("depth"),
            "now": _head(store, parent["task_id"])[0],
        }
    budget = [MAX_NODES]
    seen = {str(card.get("task_id"))}
    children = _children(store, card, masker, depth=TREE_DEPTH, budget=budget, seen=seen)
    if link is None and not children:
        return None
    return {"parent": link, "children": children, "cut": budget[0] <= 0}


def _children(
    store: Store,
    card: Mapping[str, Any],
    masker: Masker,
    *,
    depth: int,
    budget: list[int],
    seen: set[str],
) -> list[dict[str, Any]]:
    nodes = []
    for record in _records(card):
        task_id = record["task_id"]
        if task_id in seen or budget[0] <= 0:
            continue
        budget[0] -= 1
        now, child_card = _head(store, task_id)
        text = str(record.get("error") or record.get("summary") or "")
        below: list[dict[str, Any]] = []
        if child_card is not None and depth > 1:
            below = _children(
                store, child_card, masker, depth=depth - 1, budget=budget, seen=seen | {task_id}
            )
        nodes.append(
            {
                "task_id": task_id,
                "name": record.get("name"),
                "key": record.get("key"),
                "version": record.get("version"),
                "status": record.get("status"),
                "now": now,
                "summary": masker.text(text),
                "children": below,
            }
        )
    return nodes


def _records(card: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    records = card.get("children")
    if not isinstance(records, list):
        return []
    return [r for r in records if isinstance(r, Mapping) and isinstance(r.get("task_id"), str)]


def _head(store: Store, task_id: str) -> tuple[str, Mapping[str, Any] | None]:
    """A linked task's status now and its card as stored (``gone``: it does not exist)."""
    try:
        state = store.load(task_id, verify=False).state
    except TaskNotFound:
        return "gone", None
    except StateCorrupted:
        return "unreadable", None
    status = state.get("status")
    return (status if isinstance(status, str) else "?"), state


def tree_page(
    heads: Sequence[HeadInfo],
    rows: Sequence[HeadInfo],
    page: int,
    size: int,
    row: Callable[[HeadInfo], dict[str, Any]],
) -> tuple[list[dict[str, Any]], int, int]:
    """The task list as a tree: one page of the roots (``size`` roots a page), each
    followed by its descendants; each row with ``depth``, ``note`` and ``hidden``.
    Returns the rows, the page shown and the number of pages."""
    from skillstate.cli.tree import Node, forest

    roots = forest(heads, rows, TREE_DEPTH)
    pages = max(1, -(-len(roots) // size))
    page = min(max(page, 1), pages)
    shown: list[dict[str, Any]] = []

    def add(node: Node, depth: int) -> None:
        shown.append(row(node.head) | {"depth": depth, "note": node.note, "hidden": node.hidden})
        for child in node.children:
            add(child, depth + 1)

    for root in roots[(page - 1) * size : page * size]:
        add(root, 0)
    return shown, page, pages
