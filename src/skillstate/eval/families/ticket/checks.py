"""The ticket task's re-checks, read from the database only: what the skills' verify
and the final checks share, and the final checks themselves."""

from __future__ import annotations

from skillstate.eval.families.ticket.rules import forbidden_words, normalized, why_priority
from skillstate.eval.families.ticket.task import TicketTask
from skillstate.eval.tasks import CheckResult
from skillstate.state.model import AgentState

__all__ = ["final_checks", "reply_problems", "touched_others"]


def reply_problems(task: TicketTask, category: str | None) -> list[str]:
    """What is wrong with the replies on the ticket, for ``category``."""
    replies = task.db.replies(task.ticket_id)
    if len(replies) != 1:
        return [f"{task.ticket_id} has {len(replies)} replies, not exactly one"]
    text = normalized(str(replies[0]["body"]))
    problems = [f"the reply mentions {w!r}" for w in forbidden_words(text)]
    articles = [a for a in task.db.kb() if a["category"] == category]
    current = [a for a in articles if a["superseded_by"] is None]
    if not current:
        return [*problems, f"no current knowledge-base article for {category!r}"]
    if normalized(str(current[0]["solution"])) not in text:
        old = [a["article_id"] for a in articles if normalized(a["solution"]) in text]
        where = f" (it quotes superseded {old[0]})" if old else ""
        problems.append(
            f"the reply does not quote {current[0]['article_id']}, the current "
            f"{category} solution{where}"
        )
    return problems


def touched_others(task: TicketTask) -> list[str]:
    """The other tickets whose row or replies differ from how they were built."""
    changed: list[str] = []
    for want in task.noise:
        got = task.db.row(str(want["id"]))
        seeded = 1 if want["status"] == "closed" else 0
        if got != want or len(task.db.replies(str(want["id"]))) != seeded:
            changed.append(str(want["id"]))
    return changed


def final_checks(task: TicketTask, final_state: AgentState) -> list[CheckResult]:
    """The final checks, on the database only: valid whatever state class a variant used."""
    row = task.db.row(task.ticket_id) or {}
    category, priority = row.get("category"), row.get("priority")
    replies = task.db.replies(task.ticket_id)
    texts = [normalized(str(r["body"])) for r in replies]
    quoted = [t for t in texts if normalized(task.expected_solution) in t]
    said = sorted({w.lower() for t in texts for w in forbidden_words(t)})
    s = task.scenario
    why = why_priority(s.kind, s.users_affected, s.blocking)
    touched = touched_others(task)
    return [
        CheckResult(
            "ticket_category",
            category == task.expected_category,
            f"category {category!r}, expected {task.expected_category!r} (the requester's "
            f"own words; the subject, signature and quoted thread are about {s.decoy})",
        ),
        CheckResult(
            "ticket_priority",
            priority == task.expected_priority,
            f"priority {priority!r}, expected {task.expected_priority} ({why}; "
            f"the requester asked for {s.reported_priority})",
        ),
        CheckResult(
            "reply_posted_once",
            len(replies) == 1,
            f"{len(replies)} replies on {task.ticket_id}, expected exactly one",
        ),
        CheckResult(
            "reply_quotes_kb",
            bool(quoted),
            f"no reply quotes {task.expected_article} (the current "
            f"{task.expected_category} solution)"
            if not quoted
            else "",
        ),
        CheckResult(
            "reply_no_refund",
            not said,
            f"a reply mentions {', '.join(said)} (never in a reply)" if said else "",
        ),
        CheckResult(
            "ticket_closed",
            row.get("status") == "closed",
            f"{task.ticket_id} is {row.get('status', 'missing')!r}",
        ),
        CheckResult(
            "other_tickets_untouched",
            not touched,
            f"changed: {', '.join(touched)}" if touched else "",
        ),
    ]
