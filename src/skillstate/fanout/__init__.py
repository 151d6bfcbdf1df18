"""Fan-out: child tasks, parallel branches, and the parent's join, exactly once.

A parent agent declares the kinds of child task it may spawn
(``Agent(children={"channel": Child(channel_agent, outputs=Report)})``). A decision
``Spawn(child, key=..., set=...)`` or ``Map(child, over=[...])`` (or ``ctx.spawn`` in a
skill) is ONE commit of the parent: its ``children`` gain ``pending`` records and it
waits (``waiting_children``). Then each child is created, an ordinary task with its own
card, checkpoints and audit, under a deterministic id (``PARENT.VERSION.KEY``), so a
re-run after a crash creates nothing twice. The run loop's hook on a waiting parent
(:class:`Children`) creates any child still missing and, once every child has ended,
joins them in one more commit: each record's status, summary and outputs (validated
against the kind's declared model). A failed child is data for the next decision.

Children run in the same ``run`` call (``Runtime(children="inline")``: one after
another; :class:`~skillstate.engine.aruntime.AsyncRuntime`: concurrently, at most
``max_concurrency`` at once) or on workers (``children="dispatch"``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from skillstate.fanout.spec import Child, ChildMode, child_agent, child_ref

if TYPE_CHECKING:
    from skillstate.fanout.join import Children, joined
    from skillstate.fanout.spawn import child_id

__all__ = ["Child", "ChildMode", "Children", "child_agent", "child_id", "child_ref", "joined"]

_LAZY = {
    "Children": "skillstate.fanout.join",
    "joined": "skillstate.fanout.join",
    "child_id": "skillstate.fanout.spawn",
}


def __getattr__(name: str) -> Any:
    # The engine imports skillstate.fanout.spec while it is itself being imported:
    # what needs the engine is loaded on first use.
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'skillstate.fanout' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
