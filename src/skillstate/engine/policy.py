"""The ``Policy`` protocol: given a view, decide the next action.

A policy sees only the :class:`~skillstate.state.view.View` of the current state,
never the transcript. :class:`ScriptedPolicy` ships in the library for demos and
tests: decision rules written in Python, like the seeds' rule-based ``call_llm``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

from skillstate.engine.actions import Action
from skillstate.state.view import View

__all__ = ["Policy", "ScriptedPolicy"]


@runtime_checkable
class Policy(Protocol):
    """Decides one action from one view."""

    def decide(self, view: View) -> Action:
        """The next action. May raise to signal a bug; the runtime records nothing then."""
        ...


class ScriptedPolicy:
    """A deterministic policy from a plain function ``view -> Action``.

    >>> from skillstate.engine.actions import Finish
    >>> policy = ScriptedPolicy(lambda view: Finish(reason="nothing to do"))
    """

    def __init__(self, rules: Callable[[View], Action], *, name: str | None = None) -> None:
        self._rules = rules
        self.name = name or getattr(rules, "__name__", "scripted")

    def decide(self, view: View) -> Action:
        return self._rules(view)

    def __repr__(self) -> str:
        return f"ScriptedPolicy({self.name!r})"
