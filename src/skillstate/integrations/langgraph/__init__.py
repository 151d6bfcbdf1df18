"""skillstate's stores as a LangGraph checkpointer (extra ``langgraph``).

``pip install 'skillstate[langgraph]'`` (``langgraph-checkpoint``)::

    from skillstate.integrations.langgraph import SkillstateSaver

    with SkillstateSaver.from_url("sqlite:///graph.db") as saver:
        graph = builder.compile(checkpointer=saver)
        graph.invoke({"messages": [...]}, {"configurable": {"thread_id": "t1"}})

Each thread namespace is one skillstate task (``langgraph:t1``) and each checkpoint
one committed version of it, stored as a JSON Patch from the one before: a channel
that did not change costs nothing, a list that grew costs its new items. Channels
named in ``sensitive=`` are sealed with ``SKILLSTATE_KEY``. ``skillstate doctor``,
``show``, ``log`` and the inspector work on these tasks like on any other. It passes
LangGraph's conformance suite (``langgraph-checkpoint-conformance``) on every backend.
See docs/integrations/langgraph.md.
"""

from __future__ import annotations

from skillstate.errors import MissingExtra

try:
    import langgraph.checkpoint.base  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise MissingExtra(
        f"the LangGraph checkpointer needs its extra: pip install 'skillstate[langgraph]' ({exc})"
    ) from exc

from skillstate.integrations.langgraph.saver import SkillstateSaver

__all__ = ["SkillstateSaver"]
