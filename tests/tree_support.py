"""Parents and children written straight into a store, for the tree and lifecycle tests.

A spawn is recorded as the fan-out engine records one (one parent commit: the child
records ``pending``, status ``waiting_children``), then each child is created as an
ordinary task of the waiting agent (``tests.waiting_agent``), linked to its parent and
run until it waits for a signal: an unfinished child that a cancel can reach.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from skillstate import Runtime
from skillstate.events import Event
from skillstate.state.model import ChildRecord, ParentLink
from skillstate.store.base import Store
from tests.waiting_agent import agent

ROOT = Path(__file__).resolve().parent.parent
AGENT = "tests.waiting_agent:agent"
CLI_ENV = {"PYTHONPATH": str(ROOT), "SKILLSTATE_AGENTS": AGENT}


def commit_changes(store: Store, task_id: str, kind: str, **changes: Any) -> int:
    """Commit ``changes`` to a task's head as a new version (actor runtime); its version."""
    head = store.load(task_id)
    document = dict(head.state) | changes | {"version": head.version + 1}
    event = Event(
        task_id=task_id, version=head.version + 1, actor="runtime", action=changes | {"kind": kind}
    )
    return store.commit(task_id, head.version, document, event)


def start_waiting(store: Store, task_id: str) -> int:
    """A task of the waiting agent, run until it waits for its payment signal."""
    runtime = Runtime(agent, store)
    runtime.start(task_id, expect_payment=True)
    result = runtime.run(task_id)
    assert result.stopped == "waiting", result.stopped
    return result.state.version


def spawn(store: Store, parent_id: str, keys: list[str], *, name: str = "part") -> list[str]:
    """Record a spawn of ``keys`` in the parent (one commit), then create the children."""
    head = store.load(parent_id)
    version = head.version + 1
    ids = [f"{parent_id}.{version}.{key}" for key in keys]
    records = [
        ChildRecord(task_id=child, name=name, key=key, version=version).model_dump(mode="json")
        for child, key in zip(ids, keys, strict=True)
    ]
    document = dict(head.state) | {
        "version": version,
        "status": "waiting_children",
        "children": [*head.state.get("children", []), *records],
    }
    event = Event(
        task_id=parent_id,
        version=version,
        actor="runtime",
        action={"kind": "spawn", "children": ids},
    )
    store.commit(parent_id, head.version, document, event)
    depth = (head.state.get("parent") or {}).get("depth", 0) + 1
    for child, key in zip(ids, keys, strict=True):
        start_waiting(store, child)
        link = ParentLink(task_id=parent_id, version=version, name=name, key=key, depth=depth)
        commit_changes(store, child, "link", parent=link.model_dump(mode="json"))
    return ids


def end(store: Store, task_id: str, status: str = "completed") -> None:
    """End a task by a plain commit (as its last step would)."""
    commit_changes(store, task_id, "finish", status=status, wait=None)
