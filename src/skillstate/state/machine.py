"""Steps and the transitions allowed between them, declared once.

The machine is the single place that knows which step may follow which. A self-loop
(``gathering_info -> gathering_info``) is legal only where it is declared: staying
in a step is a transition like any other, so a model that keeps "re-gathering"
where the designer did not expect it is refused instead of looping silently.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from skillstate.errors import IllegalTransition, UsageError

__all__ = ["StateMachine"]


@dataclass(frozen=True)
class StateMachine:
    """Named steps, the legal edges between them, and where a task starts and ends.

    >>> m = StateMachine({"init": ["work"], "work": ["work", "done"], "done": []})
    >>> m.check("init", "work")
    >>> m.allowed("work")
    frozenset({'done', 'work'})
    """

    transitions: Mapping[str, frozenset[str]]
    initial: str
    final: frozenset[str] = field(default_factory=frozenset)

    def __init__(
        self,
        transitions: Mapping[str, Iterable[str]],
        *,
        initial: str | None = None,
        final: Iterable[str] | None = None,
    ) -> None:
        edges = {source: frozenset(targets) for source, targets in transitions.items()}
        unknown = {t for targets in edges.values() for t in targets} - edges.keys()
        if unknown:
            raise UsageError(
                f"transitions lead to undeclared steps: {', '.join(sorted(unknown))} "
                "(declare every step as a key, with [] for terminal steps)"
            )
        if not edges:
            raise UsageError("a state machine needs at least one step")
        start = initial if initial is not None else next(iter(edges))
        if start not in edges:
            raise UsageError(f"initial step {start!r} is not declared")
        # Terminal steps default to those with no way out.
        ends = (
            frozenset(final)
            if final is not None
            else frozenset(s for s, targets in edges.items() if not targets)
        )
        if ends - edges.keys():
            raise UsageError(f"final steps not declared: {', '.join(sorted(ends - edges.keys()))}")
        object.__setattr__(self, "transitions", edges)
        object.__setattr__(self, "initial", start)
        object.__setattr__(self, "final", ends)

    @property
    def steps(self) -> tuple[str, ...]:
        return tuple(self.transitions)

    def allowed(self, source: str) -> frozenset[str]:
        """The steps that may follow ``source``."""
        return self.transitions.get(source, frozenset())

    def can(self, source: str, target: str) -> bool:
        return target in self.allowed(source)

    def check(self, source: str, target: str) -> None:
        """Raise :class:`IllegalTransition` unless ``source -> target`` is declared."""
        if source not in self.transitions:
            raise IllegalTransition(source, target, ())
        if not self.can(source, target):
            raise IllegalTransition(source, target, self.allowed(source))

    def finish_step(self, source: str) -> str | None:
        """The final step a task in ``source`` would enter when it finishes.

        ``source`` itself if it is final; else the single final step reachable in one
        edge; ``None`` when no final step is adjacent (finishing would be illegal).
        """
        if source in self.final:
            return source
        reachable = sorted(self.allowed(source) & self.final)
        return reachable[0] if reachable else None
