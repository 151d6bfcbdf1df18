"""Evaluating the alert rules over a store: one ``heads()`` pass, then the cards that
the rules need.

The head rules (``stale``, ``waiting``) read only :meth:`Store.heads`; the card rules
(``retries``, ``compensation``, ``dead_letter``, ``budget``) read the head card of
each task that may fire one (every task but completed ones, and only when such a
rule is enabled), as stored (``verify=False``: sealed values stay sealed and are
never read). An alert carries ids, the rule and a one-line detail, never a card
value, so it can go to a webhook or a metrics backend as it is.

``since`` is when the condition was last seen to hold in the store: the head's
commit time (a task that does not move does not commit).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any

from skillstate.errors import StateCorrupted, TaskNotFound
from skillstate.ops.rules import RULES, AlertRules, RuleName
from skillstate.store.base import HeadInfo, Store, is_reserved

__all__ = ["Alert", "count_by_rule", "evaluate"]

_WAITING_ON_A_PERSON = ("waiting_user", "waiting_approval")
_CARD_RULES: tuple[RuleName, ...] = ("retries", "compensation", "dead_letter", "budget")
_NOT_RETRIES = ("budget", "stalled", "worker_lost", "dead_letter", "compensation_failed")
"""Error kinds that are the runtime's notes, not a step's failed attempt."""


@dataclass(frozen=True)
class Alert:
    """One firing alert."""

    rule: RuleName
    task_id: str
    since: datetime | None
    """When the condition was last seen to hold (the head's commit time, UTC)."""
    detail: str
    """One line: what fired, with counts and limits, never a card value."""

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["since"] = self.since.isoformat() if self.since else None
        return out


def evaluate(
    store: Store,
    rules: AlertRules,
    *,
    now: datetime | None = None,
    heads: list[HeadInfo] | None = None,
) -> list[Alert]:
    """Every alert firing in ``store`` now, by rule, then task (``heads``: a listing the
    caller read already, so a metrics page reads the heads once)."""
    moment = now or datetime.now(timezone.utc)
    found: list[Alert] = []
    cards = any(rules.enabled(rule) for rule in _CARD_RULES)
    for head in store.heads() if heads is None else heads:
        if is_reserved(head.task_id) or head.problem is not None:
            continue  # a damaged head is doctor's to report, not an alert's
        found += _head_alerts(head, rules, moment)
        if cards and head.status not in ("completed", None):
            document = _card(store, head.task_id)
            if document is not None:
                found += _card_alerts(head, document, rules)
    order = {rule: i for i, rule in enumerate(RULES)}
    return sorted(found, key=lambda a: (order[a.rule], a.task_id))


def count_by_rule(alerts: list[Alert]) -> dict[str, int]:
    """Firing alerts per rule, every rule listed (0 when none fires): gauge values."""
    counts = Counter(a.rule for a in alerts)
    return {rule: counts.get(rule, 0) for rule in RULES}


def _card(store: Store, task_id: str) -> Mapping[str, Any] | None:
    try:
        return store.load(task_id, verify=False).state
    except (TaskNotFound, StateCorrupted):
        return None  # deleted since heads(), or unreadable: nothing to alert on


def _age(head: HeadInfo, now: datetime) -> float | None:
    return (now - head.updated_at).total_seconds() if head.updated_at else None


def _head_alerts(head: HeadInfo, rules: AlertRules, now: datetime) -> list[Alert]:
    age = _age(head, now)
    if age is None:
        return []
    if rules.enabled("stale") and head.status == "running" and age > rules.stale_after:
        detail = f"running at step {head.current_step}, no commit for {_span(age)}"
        return [Alert("stale", head.task_id, head.updated_at, detail)]
    if (
        rules.enabled("waiting")
        and head.status in _WAITING_ON_A_PERSON
        and age > rules.waiting_after
    ):
        detail = f"{head.status} for {_span(age)} (limit {_span(rules.waiting_after)})"
        return [Alert("waiting", head.task_id, head.updated_at, detail)]
    return []


def _card_alerts(head: HeadInfo, card: Mapping[str, Any], rules: AlertRules) -> list[Alert]:
    errors = _records(card, "errors")
    status = head.status
    found: list[tuple[RuleName, str]] = []
    if rules.enabled("retries") and status not in ("failed", "cancelled"):
        done = {s.get("id") for s in _records(card, "completed_steps")}
        per_step = Counter(
            str(e["step_id"])
            for e in errors
            if e.get("step_id") and e.get("kind") not in _NOT_RETRIES
        )
        for step, count in sorted(per_step.items()):
            if step not in done and count > rules.max_retries:
                found.append(
                    ("retries", f"step {step}: {count} failed attempts (max {rules.max_retries})")
                )
    if rules.enabled("compensation"):
        failed_kind = "compensation_failed"
        failed = [e for e in errors if e.get("kind") == failed_kind]
        queued = len(_records(card, "compensations"))
        # Queued: it waits for a fix and a resume. Ended with it last: a cancel that
        # could not undo an effect; nothing will retry it, a person must look.
        last = errors[-1].get("kind") if errors else None
        ended = status in ("failed", "cancelled") and last == failed_kind
        if failed and (queued or ended):
            skill = failed[-1].get("skill") or "an effect"
            found.append(("compensation", f"undoing {skill} failed; {queued} still queued"))
    if (
        rules.enabled("dead_letter")
        and status == "failed"
        and errors
        and errors[-1].get("kind") == "dead_letter"
    ):
        found.append(("dead_letter", "workers gave up on it (skillstate requeue to reopen)"))
    if rules.enabled("budget") and status not in ("failed", "cancelled"):
        budget = _budget(card, rules)
        if budget:
            found.append(("budget", budget))
    return [Alert(rule, head.task_id, head.updated_at, detail) for rule, detail in found]


def _budget(card: Mapping[str, Any], rules: AlertRules) -> str | None:
    """What budget ``card`` is near: a warning the runtime recorded, or one of the
    alert settings' limits reached at ``budget_warn_at``."""
    from skillstate.ops.budgets import describe
    from skillstate.state.records import BudgetWarning, UsageTotals

    parts: list[str] = []
    for raw in _records(card, "budget_warnings"):
        try:
            parts.append(describe(BudgetWarning.model_validate(raw)))
        except ValueError:
            continue
    try:
        usage = UsageTotals.model_validate(card.get("usage") or {})
    except ValueError:
        return "; ".join(parts) or None
    seen = {p.split(" ", 1)[0] for p in parts}
    configured = (
        ("tokens", rules.budget_tokens, usage.prompt),
        ("calls", rules.budget_calls, usage.calls),
        ("cost", rules.budget_cost, usage.cost),
    )
    for dimension, limit, spent in configured:
        if limit is not None and dimension not in seen and spent >= rules.budget_warn_at * limit:
            warning = BudgetWarning(
                dimension=dimension,
                used=spent,
                limit=limit,
                warn_at=rules.budget_warn_at,
            )
            parts.append(describe(warning))
    return "; ".join(parts) or None


def _records(card: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    """The card's list ``key``, its objects only: a damaged card alerts on what reads."""
    value = card.get(key)
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


def _span(seconds: float) -> str:
    """``3h12m``, ``45m``, ``20s``: an age for a person."""
    whole = int(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m"
    return f"{secs}s"
