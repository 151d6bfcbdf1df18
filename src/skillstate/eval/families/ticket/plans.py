"""The oracle's two plans for a ticket task (skills and raw tools), and the facts the
card must hold after each step of the skills plan."""

from __future__ import annotations

from typing import Any

from skillstate.engine.actions import Action, CallSkill, Finish
from skillstate.eval.families.ticket.rules import reply_body, why_priority
from skillstate.eval.families.ticket.task import TicketTask

__all__ = ["plans"]


def plans(task: TicketTask) -> tuple[list[Action], list[Action], list[dict[str, Any]]]:
    """The oracle's skills plan, its tools plan, and the facts after each skills step."""
    s, tid = task.scenario, task.ticket_id
    category, priority = task.expected_category, task.expected_priority
    why = why_priority(s.kind, s.users_affected, s.blocking)
    done = f"{tid} triaged {category} {priority}, answered with {task.expected_article}, closed"
    skills_plan: list[Action] = [
        CallSkill(skill="read_ticket", reason="nothing is known yet"),
        CallSkill(
            skill="triage_ticket",
            params={"category": category, "priority": priority},
            reason=f"the requester's own words are about {category}; {why}",
        ),
        CallSkill(skill="reply_with_kb", reason="triaged: answer with the KB solution"),
        CallSkill(skill="close_ticket", reason="answered"),
        Finish(summary=done),
    ]
    read = {
        "ticket_id": tid,
        "kind": s.kind,
        "users_affected": s.users_affected,
        "blocking": s.blocking,
    }
    triaged = {**read, "category": category, "priority": priority}
    replied = {**triaged, "reply_id": task.seeded_replies + 1, "kb_article": task.expected_article}
    closed = {**replied, "closed": True}
    facts: list[dict[str, Any]] = [read, triaged, replied, closed, closed]
    body = reply_body(tid, category, priority, task.expected_article, task.expected_solution)
    tools_plan: list[Action] = [
        CallSkill(skill="tool_get_ticket", params={"ticket_id": tid}, reason="read the ticket"),
        CallSkill(
            skill="remember",
            params={"key": "triage", "value": {"category": category, "priority": priority}},
            reason="the requester's own words and the priority rule, not the quoted mail",
        ),
        CallSkill(
            skill="tool_update_ticket",
            params={"ticket_id": tid, "category": category, "priority": priority},
            reason="triage",
        ),
        CallSkill(skill="tool_search_kb", params={"category": category}, reason="KB solution"),
        CallSkill(
            skill="tool_post_reply",
            params={"ticket_id": tid, "body": body},
            reason="quote the current article, no refund",
        ),
        CallSkill(skill="tool_close_ticket", params={"ticket_id": tid}, reason="answered"),
        Finish(summary=done),
    ]
    return skills_plan, tools_plan, facts
