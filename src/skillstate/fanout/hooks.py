"""Points where a test (or a chaos drill) may stop a process mid-fan-out.

``HOOKS["create"]`` callables are called with a child's id just before it is
created; ``HOOKS["join"]`` ones with the parent's id just before the join's commit.
A test's subprocess registers one that writes a marker and blocks, so a ``SIGKILL``
lands exactly there (observed, not slept). Empty in normal use.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["HOOKS", "fire"]

HOOKS: dict[str, list[Callable[[str], None]]] = {"create": [], "join": []}


def fire(point: str, task_id: str) -> None:
    """Call the hooks registered at ``point`` with ``task_id``."""
    for hook in HOOKS.get(point, ()):
        hook(task_id)
