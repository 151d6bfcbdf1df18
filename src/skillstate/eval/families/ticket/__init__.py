"""The ``ticket`` family: triage one helpdesk ticket in a SQLite database (seed 000).

The environment is ``helpdesk.db`` with three tables: ``tickets`` (the ticket to
triage among a few others), ``kb`` (the knowledge base: one current and one
superseded article per category) and ``replies``. The task, for one ticket: set
its category and priority, post one reply that quotes the current knowledge-base
solution for the category word for word, then close it. The ticket already holds
everything needed (there is no user to ask in an evaluation). It is built to
catch exactly what a transcript-driven agent gets wrong:

* **A misleading keyword**: the ticket is an e-mail whose requester's own words
  are about one category, but the subject, the signature and a long quoted thread
  (an older, resolved ticket) are full of another category's keywords, so naive
  keyword matching over the whole text picks the wrong one (:func:`naive_category`
  versus :func:`classify`).
* **A rule stated once, at the start**: the priority follows the form fields
  (``kind``, ``users_affected``, ``blocking``) by the rule in the constraints
  (P1 only for an outage affecting several users), not what the requester shouts
  in the subject or their own ``reported_priority``.
* **A constraint a late step can break**: the requester asks for a refund (or a
  credit); the reply, written three steps later, must not mention one.
* **Near-identical knowledge-base articles**: ``search_kb`` returns the
  superseded article first; only the current one (``superseded_by`` empty) counts.
* **Real effects**: ``update_ticket``, ``post_reply`` and ``close_ticket`` change
  the database; a resumed run must never post a reply twice (``reply_with_kb``
  has ``effects=True`` and a probe).

Everything is derived from ``spec.params`` (``seed``, ``ticket_id``, ``scenario``,
``noise_tickets``); the final checks read the database only.

The package, one thing per module: ``scenarios.yaml`` (the e-mails, the knowledge
base, the other tickets) read by ``scenarios``; ``rules`` (categories, priorities,
what a reply may say); ``db`` (the SQLite schema, seed rows and reads); ``task``
(the checked params and the expected outcome); ``tools``; ``state`` (the card and
its machine); ``skills``; ``checks``; ``plans`` (the oracle's). This module builds
the environment from them and re-exports the names tests and docs use.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from skillstate.eval.families.ticket.checks import final_checks
from skillstate.eval.families.ticket.db import DB
from skillstate.eval.families.ticket.plans import plans
from skillstate.eval.families.ticket.rules import (
    CATEGORIES,
    KEYWORDS,
    PRIORITIES,
    classify,
    forbidden_words,
    naive_category,
    own_message,
    priority_rule,
    reply_body,
)
from skillstate.eval.families.ticket.scenarios import SCENARIOS
from skillstate.eval.families.ticket.skills import TriageParams, skill_library
from skillstate.eval.families.ticket.state import MACHINE, TicketState
from skillstate.eval.families.ticket.task import TicketTask, checked_params
from skillstate.eval.families.ticket.tools import EFFECT_TOOLS, HelpdeskTools
from skillstate.eval.tasks import Environment, TaskSpec

__all__ = [
    "CATEGORIES",
    "DB",
    "KEYWORDS",
    "MACHINE",
    "PRIORITIES",
    "SCENARIOS",
    "TicketFamily",
    "TicketState",
    "TriageParams",
    "classify",
    "forbidden_words",
    "naive_category",
    "own_message",
    "priority_rule",
    "reply_body",
]


class TicketFamily:
    """Builds a ticket task: database, tools, skills, machine, plans and checks."""

    name = "ticket"

    def build(self, spec: TaskSpec, root: Path, *, fresh: bool = True) -> Environment:
        task = TicketTask(checked_params(spec), root)
        if fresh:
            task.write_files()
        skills_plan, tools_plan, facts = plans(task)
        return Environment(
            root=root,
            state_type=TicketState,
            machine=MACHINE,
            tools=HelpdeskTools(task.db).as_dict(),
            skills=skill_library(task),
            plan_skills=skills_plan,
            plan_tools=tools_plan,
            check=partial(final_checks, task),
            expected_facts=facts,
            initial={"ticket_id": task.ticket_id},
            effect_tools=EFFECT_TOOLS,
        )
