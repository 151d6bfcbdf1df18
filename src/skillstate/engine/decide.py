"""What a decision cost, and whether a task may afford the next one.

The decide phase's bookkeeping: a policy's :class:`~skillstate.engine.policy.Decided`
becomes the event's :class:`~skillstate.events.TokenUsage` (a scripted decision
calls no model and records none), a decision that never became valid still records
what its calls spent, and the per-task budgets (``--max-calls``, ``--max-tokens``,
``--max-cost``) are checked against the card's usage totals, which survive resumes.
"""

from __future__ import annotations

from skillstate.engine.actions import Action
from skillstate.engine.policy import Decided
from skillstate.errors import DecisionFailed
from skillstate.events import TokenUsage
from skillstate.llm.base import Prices, Usage
from skillstate.state.model import UsageTotals

__all__ = ["accounted", "failed_usage", "over_budget"]


def accounted(decided: Action | Decided, prices: Prices | None) -> tuple[Action, TokenUsage | None]:
    """The action, and what deciding it cost (``None``: no model was called)."""
    if isinstance(decided, Decided):
        u = decided.usage
        return decided.action, TokenUsage(
            prompt=u.prompt,
            completion=u.completion,
            cached=u.cached,
            calls=decided.calls,
            repairs=decided.repairs,
            estimated=u.estimated,
            model=decided.model or None,
            cost=prices.cost(u.prompt, u.completion, u.cached) if prices else None,
            duration_ms=round(decided.duration_ms, 1),
        )
    # No model was called: nothing was spent, and nothing is counted (a report that
    # wants a scripted run's prompt sizes renders them from the stored versions:
    # `skillstate run --compare`).
    return decided, None


def failed_usage(exc: DecisionFailed, prices: Prices | None) -> TokenUsage:
    """What the calls of a decision that never became a valid action spent."""
    u = exc.usage if isinstance(exc.usage, Usage) else Usage()
    return TokenUsage(
        prompt=u.prompt,
        completion=u.completion,
        cached=u.cached,
        calls=exc.calls,
        repairs=exc.repairs,
        estimated=u.estimated,
        cost=prices.cost(u.prompt, u.completion, u.cached) if prices else None,
    )


def over_budget(
    used: UsageTotals, max_calls: int | None, max_tokens: int | None, max_cost: float | None
) -> str | None:
    """Why the task may not decide again (a budget it has reached), or ``None``."""
    if max_calls is not None and used.calls >= max_calls:
        return f"model call budget reached ({used.calls} of --max-calls {max_calls})"
    if max_tokens is not None and used.prompt >= max_tokens:
        return f"prompt token budget reached ({used.prompt:,} of --max-tokens {max_tokens:,})"
    if max_cost is not None and used.cost >= max_cost:
        return f"cost budget reached ({used.cost:.4f} of --max-cost {max_cost:g})"
    return None
