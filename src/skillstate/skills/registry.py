"""A named collection of skills, and the decorator that declares them."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from typing_extensions import Unpack

from skillstate.errors import UsageError
from skillstate.skills.skill import RunFn, Skill, SkillOptions
from skillstate.state.model import AgentState

__all__ = ["SkillRegistry"]


class SkillRegistry:
    """Skills by name.

    ``registry.skill(...)`` declares one with a decorator::

        skills = SkillRegistry()

        @skills.skill(outputs=["priority"], step="gathering_info")
        def record_priority(state: TicketState, params: PriorityParams, ctx) -> Outcome:
            ...

        @record_priority.verifier
        def _(state: TicketState, outcome: Outcome) -> Verdict:
            ...
    """

    def __init__(self, skills: Sequence[Skill[Any, Any]] = ()) -> None:
        self._skills: dict[str, Skill[Any, Any]] = {}
        for item in skills:
            self.register(item)

    def register(self, item: Skill[Any, Any]) -> Skill[Any, Any]:
        if item.name in self._skills:
            raise UsageError(f"a skill named {item.name!r} is already registered")
        self._skills[item.name] = item
        return item

    def skill(
        self, **options: Unpack[SkillOptions]
    ) -> Callable[[RunFn[Any, Any]], Skill[Any, Any]]:
        """Declare the decorated function as a skill's ``run`` and register it.

        Takes the keyword options of :class:`Skill` (``outputs``, ``tools``, ``step``…).
        """

        def decorate(run: RunFn[Any, Any]) -> Skill[Any, Any]:
            return self.register(Skill(run, **options))

        return decorate

    def get(self, name: str) -> Skill[Any, Any] | None:
        return self._skills.get(name)

    def __getitem__(self, name: str) -> Skill[Any, Any]:
        return self._skills[name]

    def __contains__(self, name: object) -> bool:
        return name in self._skills

    def __iter__(self) -> Iterator[Skill[Any, Any]]:
        return iter(self._skills.values())

    def __len__(self) -> int:
        return len(self._skills)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._skills)

    def applicable(self, state: AgentState) -> list[Skill[Any, Any]]:
        """Skills whose ``when`` holds for ``state``, in declaration order."""
        return [s for s in self._skills.values() if s.when(state)]
