"""The ticket task's verified skills, in plan order: read, triage, reply, close.

The triage and reply rules live in each skill's verify (re-read from the database),
and every skill that changes the database can roll its change back.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from skillstate.eval.families.ticket.checks import reply_problems
from skillstate.eval.families.ticket.rules import (
    Category,
    Priority,
    classify,
    hits,
    normalized,
    one_line,
    own_message,
    priority_rule,
    reply_body,
    why_priority,
)
from skillstate.eval.families.ticket.state import TicketState
from skillstate.eval.families.ticket.task import TicketTask
from skillstate.events import Verdict
from skillstate.skills.registry import SkillRegistry
from skillstate.skills.skill import NoParams, Outcome, SkillContext

__all__ = ["TriageParams", "skill_library"]


class TriageParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    category: Category = Field(description="What the requester's own message is about.")
    priority: Priority = Field(description="By the priority rule of the constraints.")


def skill_library(task: TicketTask) -> SkillRegistry:
    """The verified skills, in plan order: the triage and reply rules live in their verify."""
    skills = SkillRegistry()
    _add_read_ticket(skills, task)
    _add_triage_ticket(skills, task)
    _add_reply_with_kb(skills, task)
    _add_close_ticket(skills, task)
    return skills


def _add_read_ticket(skills: SkillRegistry, task: TicketTask) -> None:
    @skills.skill(
        step="reading",
        outputs=["message", "kind", "users_affected", "blocking"],
        reads=["ticket_id"],
        tools=["get_ticket"],
        when=lambda s: s.message is None,
    )
    def read_ticket(state: TicketState, params: NoParams, ctx: SkillContext) -> Outcome:
        """Read the ticket: the requester's own words (no quoted mail or signature), form fields."""
        row = ctx.call("get_ticket", ticket_id=state.ticket_id)
        return Outcome(
            writes={
                "message": one_line(own_message(row["body"])),
                "kind": row["kind"],
                "users_affected": row["users_affected"],
                "blocking": bool(row["blocking"]),
            },
            summary=f"{state.ticket_id}: {row['kind']}, {row['users_affected']} user(s)",
            evidence=[ctx.evidence(f"{state.ticket_id} read ({len(row['body'])} chars of mail)")],
        )

    @read_ticket.verifier
    def _read_right(state: TicketState, outcome: Outcome) -> Verdict:
        row = task.db.row(state.ticket_id)
        if row is None:
            return Verdict.failed(f"no ticket {state.ticket_id!r} in the database")
        want = {
            "message": one_line(own_message(str(row["body"]))),
            "kind": row["kind"],
            "users_affected": row["users_affected"],
            "blocking": bool(row["blocking"]),
        }
        wrong = [k for k, v in want.items() if getattr(state, k) != v]
        if wrong:
            return Verdict.failed(f"differs from the ticket: {', '.join(wrong)}")
        return Verdict.passed()


def _add_triage_ticket(skills: SkillRegistry, task: TicketTask) -> None:
    @skills.skill(
        step="triaging",
        outputs=["category", "priority"],
        reads=["ticket_id", "message", "kind", "users_affected", "blocking"],
        tools=["update_ticket"],
        max_retries=0,  # the same params give the same verdict: retrying cannot help
        when=lambda s: s.message is not None and s.category is None,
    )
    def triage_ticket(state: TicketState, params: TriageParams, ctx: SkillContext) -> Outcome:
        """Set the category (from the requester's own words) and the priority (by the rule)."""
        before = task.db.row(state.ticket_id) or {}
        result = ctx.call(
            "update_ticket",
            ticket_id=state.ticket_id,
            category=params.category,
            priority=params.priority,
        )
        return Outcome(
            writes={"category": params.category, "priority": params.priority},
            summary=f"{params.category}, {params.priority}",
            evidence=[ctx.evidence(str(result))],
            value={"before": {k: before.get(k) for k in ("category", "priority")}},
        )

    @triage_ticket.verifier
    def _triage_right(state: TicketState, outcome: Outcome) -> Verdict:
        row = task.db.row(state.ticket_id)
        if row is None:
            return Verdict.failed(f"no ticket {state.ticket_id!r} in the database")
        problems: list[str] = []
        if (row["category"], row["priority"]) != (state.category, state.priority):
            problems.append(f"the database has {row['category']}, {row['priority']}")
        words = own_message(str(row["body"]))
        want = classify(str(row["body"]))
        if state.category != want:
            found = ", ".join(dict.fromkeys(hits(words).get(str(want), [])))
            problems.append(
                f"the requester's own words are about {want} ({found}), not {state.category}; "
                "the subject, the signature and the quoted thread do not count"
            )
        kind, users, blocking = row["kind"], int(row["users_affected"]), bool(row["blocking"])
        rule = priority_rule(kind, users, blocking)
        if state.priority != rule:
            problems.append(
                f"priority is {rule} for {why_priority(kind, users, blocking)}, "
                f"not {state.priority}"
            )
        return Verdict.failed("; ".join(problems)) if problems else Verdict.passed()

    @triage_ticket.rollbacker
    def _untriage(state: TicketState, outcome: Outcome | None, ctx: SkillContext) -> None:
        value = outcome.value if outcome is not None else None
        if not isinstance(value, dict):
            return  # run failed before update_ticket: nothing changed
        before = value["before"]
        with task.db.connect() as conn:
            conn.execute(
                "UPDATE tickets SET category = ?, priority = ? WHERE id = ?",
                (before["category"], before["priority"], state.ticket_id),
            )


def _add_reply_with_kb(skills: SkillRegistry, task: TicketTask) -> None:
    @skills.skill(
        step="replying",
        outputs=["reply_id", "kb_article"],
        reads=["ticket_id", "category", "priority"],
        tools=["search_kb", "post_reply"],
        effects=True,
        max_retries=1,
        when=lambda s: s.category is not None and s.reply_id is None,
    )
    def reply_with_kb(state: TicketState, params: NoParams, ctx: SkillContext) -> Outcome:
        """Post one reply quoting the current knowledge-base solution for the category."""
        articles = ctx.call("search_kb", category=state.category)
        current = next(a for a in articles if a["superseded_by"] is None)
        body = reply_body(
            state.ticket_id,
            str(state.category),
            str(state.priority),
            current["article_id"],
            current["solution"],
        )
        posted = ctx.call("post_reply", ticket_id=state.ticket_id, body=body)
        return _reply_outcome(int(posted["reply_id"]), str(current["article_id"]), ctx)

    @reply_with_kb.prober
    def _reply_already_there(
        state: TicketState, params: NoParams, ctx: SkillContext
    ) -> Outcome | None:
        articles = ctx.call("search_kb", category=state.category)
        current = next(a for a in articles if a["superseded_by"] is None)
        solution = normalized(current["solution"])
        # Newest first: a crashed run's reply is the latest one that quotes the article.
        for reply in reversed(task.db.replies(state.ticket_id)):
            if solution in normalized(str(reply["body"])):
                return _reply_outcome(int(reply["id"]), str(current["article_id"]), ctx)
        return None

    @reply_with_kb.verifier
    def _reply_right(state: TicketState, outcome: Outcome) -> Verdict:
        problems = reply_problems(task, state.category)
        replies = task.db.replies(state.ticket_id)
        if replies and replies[-1]["id"] != state.reply_id:
            problems.append(f"reply {state.reply_id} is not the ticket's reply")
        return Verdict.failed("; ".join(problems)) if problems else Verdict.passed()

    @reply_with_kb.rollbacker
    def _unpost(state: TicketState, outcome: Outcome | None, ctx: SkillContext) -> None:
        # Only the reply this step posted: anyone else's stays, for the checks to report.
        value = outcome.value if outcome is not None else None
        if isinstance(value, dict) and isinstance(value.get("reply_id"), int):
            with task.db.connect() as conn:
                conn.execute("DELETE FROM replies WHERE id = ?", (value["reply_id"],))


def _add_close_ticket(skills: SkillRegistry, task: TicketTask) -> None:
    @skills.skill(
        step="closing",
        outputs=["closed"],
        reads=["ticket_id", "reply_id"],
        tools=["close_ticket"],
        when=lambda s: s.reply_id is not None and not s.closed,
    )
    def close_ticket(state: TicketState, params: NoParams, ctx: SkillContext) -> Outcome:
        """Close the ticket (once it is triaged and answered)."""
        result = ctx.call("close_ticket", ticket_id=state.ticket_id)
        return Outcome(
            writes={"closed": True},
            summary=str(result),
            evidence=[ctx.evidence(str(result))],
        )

    @close_ticket.verifier
    def _closed_right(state: TicketState, outcome: Outcome) -> Verdict:
        row = task.db.row(state.ticket_id) or {}
        problems = [] if row.get("status") == "closed" else ["the ticket is not closed"]
        if (row.get("category"), row.get("priority")) != (state.category, state.priority):
            problems.append("closed without the triage in the database")
        problems += reply_problems(task, state.category)
        return Verdict.failed("; ".join(problems)) if problems else Verdict.passed()

    @close_ticket.rollbacker
    def _reopen(state: TicketState, outcome: Outcome | None, ctx: SkillContext) -> None:
        if not state.closed:  # the committed card: it was open before this step
            with task.db.connect() as conn:
                conn.execute(
                    "UPDATE tickets SET status = 'open', closed_at = NULL WHERE id = ?",
                    (state.ticket_id,),
                )


def _reply_outcome(reply_id: int, article_id: str, ctx: SkillContext) -> Outcome:
    """What posting the reply commits; run and probe both build it here."""
    return Outcome(
        writes={"reply_id": reply_id, "kb_article": article_id},
        summary=f"reply {reply_id} quotes {article_id}",
        evidence=[ctx.evidence(f"reply {reply_id} quotes {article_id}")],
        value={"reply_id": reply_id},
    )
