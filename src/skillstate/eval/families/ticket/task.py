"""One ticket task as a spec asks for it: its checked params, its database, and
what a correct run must leave there."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from skillstate.errors import UsageError
from skillstate.eval.families.ticket.db import DB, Helpdesk, noise_tickets, target_row
from skillstate.eval.families.ticket.rules import Priority, priority_rule
from skillstate.eval.families.ticket.scenarios import KB, SCENARIOS
from skillstate.eval.tasks import TaskSpec

__all__ = ["TicketTask", "checked_params"]


def checked_params(spec: TaskSpec) -> dict[str, Any]:
    """The spec's params, or a :class:`UsageError` naming what is missing or malformed."""
    params = dict(spec.params)
    missing = [k for k in ("seed", "ticket_id", "scenario") if k not in params]
    if missing:
        raise UsageError(f"ticket task {spec.id!r}: params need {', '.join(missing)}")
    if params["scenario"] not in SCENARIOS:
        raise UsageError(
            f"ticket task {spec.id!r}: unknown scenario {params['scenario']!r}; "
            f"one of {', '.join(SCENARIOS)}"
        )
    if not re.fullmatch(r"T-\d+", str(params["ticket_id"])):
        raise UsageError(f"ticket task {spec.id!r}: ticket_id must look like T-2047")
    return params


class TicketTask:
    """One built ticket task: its database, its rows as built, and the expected outcome."""

    def __init__(self, params: dict[str, Any], root: Path) -> None:
        self.params = params
        self.scenario = SCENARIOS[str(params["scenario"])]
        self.ticket_id = str(params["ticket_id"])
        self.root = root
        self.db = Helpdesk(root / DB)
        self.noise = noise_tickets(params)
        self.target = target_row(params)
        self.expected_category: str = self.scenario.category
        self.expected_priority: Priority = priority_rule(
            self.scenario.kind, self.scenario.users_affected, self.scenario.blocking
        )
        article = next(
            a for a in KB if a.category == self.expected_category and a.superseded_by is None
        )
        self.expected_article, self.expected_solution = article.article_id, article.solution

    def write_files(self) -> None:
        """Create the task's directory and a fresh database in it."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.db.create([*self.noise, self.target], closed=self.closed_noise)

    @property
    def closed_noise(self) -> list[dict[str, Any]]:
        """The other tickets built closed (each has one service-desk reply)."""
        return [r for r in self.noise if r["status"] == "closed"]

    @property
    def seeded_replies(self) -> int:
        """How many replies the database holds before any run."""
        return len(self.closed_noise)
