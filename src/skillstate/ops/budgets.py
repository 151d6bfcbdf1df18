"""Budgets per task and per agent: a warning at a threshold, a stop at the limit.

A task's budgets are the runtime's (``Runtime(max_calls=..., max_tokens=...,
max_cost=..., prices=...)``, the CLI's ``--max-*``) and its agent's
(``Agent(budget=Budget(...))``); the tighter of the two counts. Both are checked
against the card's usage totals (``usage``, which survive resumes) before every
decision:

- at ``warn_at`` of a limit (0.8 by default) the runtime commits a
  ``budget_warning`` event and records a :class:`~skillstate.state.records.BudgetWarning`
  on the card, once per dimension: ``show``, the inspector and the ``budget`` alert
  (:mod:`skillstate.ops.alerts`) see it;
- at the limit the task stops as it always did (``budget``: it stays running and
  resumable with a higher limit).

``tokens`` are prompt tokens, as ``--max-tokens`` counts them (what a context costs);
``cost`` is money by the provider's price table (:class:`~skillstate.llm.base.Prices`,
``Runtime(prices=...)``): without prices a task's cost stays 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from skillstate.errors import UsageError
from skillstate.state.records import BudgetWarning, UsageTotals

if TYPE_CHECKING:
    from skillstate.engine.runtime import Runtime
    from skillstate.state.model import AgentState

__all__ = ["DEFAULT_WARN_AT", "Budget", "Limit", "budget_stop", "limits", "warn_budget"]

DEFAULT_WARN_AT = 0.8
"""The share of a budget at which a task is warned (and the budget alert fires)."""


@dataclass(frozen=True)
class Budget:
    """An agent's budget per task: ``Agent(budget=Budget(tokens=200_000, cost=2.0))``.

    ``tokens`` are prompt tokens, ``calls`` model calls, ``cost`` money by the runtime's
    ``prices``; ``None`` leaves that dimension to the runtime's own limit, if any.
    """

    tokens: int | None = None
    calls: int | None = None
    cost: float | None = None
    warn_at: float = DEFAULT_WARN_AT

    def __post_init__(self) -> None:
        for name in ("tokens", "calls", "cost"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or value <= 0):
                raise UsageError(f"Budget({name}=...) must be a positive number, not {value!r}")
        if isinstance(self.warn_at, bool) or not 0 < self.warn_at <= 1:
            raise UsageError(f"Budget(warn_at=...) must be in (0, 1], not {self.warn_at!r}")


@dataclass(frozen=True)
class Limit:
    """One dimension of a task's effective budget."""

    dimension: str
    """``tokens``, ``calls`` or ``cost``."""
    limit: float
    warn_at: float
    source: str
    """``--max-*`` (the runtime's) or ``the agent's budget``."""


def used(usage: UsageTotals, dimension: str) -> float:
    """What ``usage`` counts against ``dimension``."""
    return {"tokens": usage.prompt, "calls": usage.calls, "cost": usage.cost}[dimension]


def limits(runtime: Runtime[Any]) -> list[Limit]:
    """The tighter of the runtime's and the agent's limit, per dimension."""
    agent: Budget | None = getattr(runtime.agent, "budget", None)
    warn_at = agent.warn_at if agent is not None else DEFAULT_WARN_AT
    found: list[Limit] = []
    for dimension, flag in (("calls", "max_calls"), ("tokens", "max_tokens"), ("cost", "max_cost")):
        own = getattr(runtime, flag)
        declared = getattr(agent, dimension) if agent is not None else None
        if own is not None and (declared is None or own <= declared):
            found.append(Limit(dimension, float(own), warn_at, f"--{flag.replace('_', '-')}"))
        elif declared is not None:
            found.append(Limit(dimension, float(declared), warn_at, "the agent's budget"))
    return found


def warn_budget(runtime: Runtime[Any], state: AgentState) -> AgentState:
    """``state`` with the budgets it came near recorded, once each: the head after that
    commit, or ``state`` itself when there is nothing new to record."""
    warned = {w.dimension for w in state.budget_warnings}
    new = [
        BudgetWarning(
            dimension=limit.dimension,
            used=used(state.usage, limit.dimension),
            limit=limit.limit,
            warn_at=limit.warn_at,
        )
        for limit in limits(runtime)
        if limit.dimension not in warned
        and used(state.usage, limit.dimension) >= limit.warn_at * limit.limit
    ]
    if not new:
        return state
    from skillstate.engine.draft import Draft

    after = state.replace(budget_warnings=(*state.budget_warnings, *new))
    action = {
        "kind": "budget_warning",
        "budgets": [w.model_dump(mode="json") for w in new],
        "reason": "; ".join(describe(w) for w in new),
    }
    return runtime._committer.commit(state, Draft(after=after), action, "runtime")[0]


def describe(warning: BudgetWarning) -> str:
    """``cost budget at 84% (1.6800 of 2)``: one line for a log, an alert, a page."""
    share = warning.used / warning.limit if warning.limit else 0.0
    amount = f"{warning.used:.4f}" if warning.dimension == "cost" else f"{warning.used:,.0f}"
    return f"{warning.dimension} budget at {share:.0%} ({amount} of {warning.limit:g})"


def budget_stop(runtime: Runtime[Any], state: AgentState) -> str | None:
    """Why the task may not decide again (a limit it has reached), or ``None``."""
    from skillstate.engine.decide import over_budget

    reason = over_budget(state.usage, runtime.max_calls, runtime.max_tokens, runtime.max_cost)
    if reason is not None:
        return reason
    for limit in limits(runtime):
        spent = used(state.usage, limit.dimension)
        if limit.source == "the agent's budget" and spent >= limit.limit:
            return f"{limit.dimension} budget reached ({spent:g} of the agent's {limit.limit:g})"
    return None
