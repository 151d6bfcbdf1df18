"""The ticket flow of seed 000: init → gathering_info ⟲ → deciding → resolving → done.

The user's answers arrive as replies (``--input`` or ``skillstate reply``); each one
is turned into a typed field by a skill whose ``verify`` checks it, so a vague
answer ("asap!!") is refused and asked again instead of being carried forward.

Run it: ``skillstate demo ticket`` (canned answers) or
``skillstate run skillstate.examples.ticket:agent`` and answer with ``reply``.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, Field

from skillstate import (
    Agent,
    AgentState,
    AskUser,
    CallSkill,
    Finish,
    NoParams,
    Outcome,
    ScriptedPolicy,
    SkillContext,
    SkillRegistry,
    StateMachine,
    Verdict,
    View,
)
from skillstate.engine.actions import Action

Priority = Literal["P1", "P2", "P3", "P4"]
CATEGORIES = ("network", "hardware", "account", "software")
SLA_HOURS = {"P1": 4, "P2": 8, "P3": 24, "P4": 72}


class TicketState(AgentState):
    """The ticket card: what the seed's ``context`` dict held, now typed."""

    description: str | None = None
    ticket_type: Literal["network", "hardware", "account", "software"] | None = None
    priority: Priority | None = None
    solution: str | None = None
    resolution: str | None = None


machine = StateMachine(
    {
        "init": ["gathering_info", "deciding"],
        "gathering_info": ["gathering_info", "deciding"],
        "deciding": ["resolving", "done"],
        "resolving": ["done"],
        "done": [],
    },
    initial="init",
)

# ---------------------------------------------------------------- tools
# Stand-ins for a helpdesk's systems: deterministic, so the demo is reproducible.

_KEYWORDS = {
    "network": ("network", "vpn", "wifi", "wi-fi", "internet", "connection", "网络", "断"),
    "hardware": ("laptop", "printer", "screen", "keyboard", "disk", "hardware"),
    "account": ("password", "login", "account", "locked", "sso", "2fa"),
    "software": ("crash", "install", "update", "app", "error", "software"),
}

_KNOWLEDGE_BASE = {
    "network": "Restart the VPN client, renew the DHCP lease, then check the access point.",
    "hardware": "Run the vendor diagnostics and swap the device from the spare pool.",
    "account": "Verify identity, reset the password and clear the lockout counter.",
    "software": "Reinstall the current release and clear the local cache.",
}


def classify_ticket(text: str) -> dict[str, object]:
    """Keyword classifier: returns the category and the keywords it matched."""
    lowered = text.lower()
    scores = {cat: [k for k in words if k in lowered] for cat, words in _KEYWORDS.items()}
    best = max(scores, key=lambda cat: len(scores[cat]))
    return {"category": best if scores[best] else None, "matched": scores[best]}


def kb_lookup(category: str) -> dict[str, str]:
    return {"category": category, "article": _KNOWLEDGE_BASE[category]}


def close_ticket(ticket_id: str, solution: str) -> dict[str, str]:
    return {"ticket_id": ticket_id, "status": "closed", "applied": solution}


def reopen_ticket(ticket_id: str) -> dict[str, str]:
    return {"ticket_id": ticket_id, "status": "open"}


# ---------------------------------------------------------------- skills

skills = SkillRegistry()


class DescriptionParams(BaseModel):
    text: str = Field(min_length=1, description="the user's description of the problem")


class PriorityParams(BaseModel):
    text: str = Field(min_length=1, description="the user's answer about urgency")


@skills.skill(
    step="gathering_info",
    outputs=["description", "ticket_type"],
    tools=["classify_ticket"],
    when=lambda s: s.ticket_type is None,
)
def record_ticket_type(state: TicketState, params: DescriptionParams, ctx: SkillContext) -> Outcome:
    """Classify the user's description into a ticket type."""
    result = ctx.call("classify_ticket", text=params.text)
    return Outcome(
        writes={"description": params.text, "ticket_type": result["category"]},
        summary=f"ticket type: {result['category']}",
        evidence=[ctx.evidence(f"classified as {result['category']} ({result['matched']})")],
    )


@record_ticket_type.verifier
def _verify_type(state: TicketState, outcome: Outcome) -> Verdict:
    if state.ticket_type not in CATEGORIES:
        return Verdict.failed("the description matches no known ticket type")
    return Verdict.passed()


@skills.skill(
    step="gathering_info",
    outputs=["priority"],
    when=lambda s: s.ticket_type is not None and s.priority is None,
)
def record_priority(state: TicketState, params: PriorityParams, ctx: SkillContext) -> Outcome:
    """Read a priority P1-P4 out of the user's answer."""
    found = re.search(r"\bp\s*([1-4])\b", params.text, re.IGNORECASE)
    priority = f"P{found.group(1)}" if found else None
    return Outcome(writes={"priority": priority}, summary=f"priority: {priority}")


@record_priority.verifier
def _verify_priority(state: TicketState, outcome: Outcome) -> Verdict:
    if state.priority is None:
        return Verdict.failed("no priority P1-P4 in the answer")
    return Verdict.passed()


@skills.skill(
    step="deciding",
    outputs=["solution", "facts.sla_hours"],
    tools=["kb_lookup"],
    reads=["ticket_type", "priority"],
    when=lambda s: s.priority is not None and s.solution is None,
)
def plan_solution(state: TicketState, params: NoParams, ctx: SkillContext) -> Outcome:
    """Look up the fix for the ticket type and the SLA for its priority."""
    assert state.ticket_type is not None
    assert state.priority is not None
    article = ctx.call("kb_lookup", category=state.ticket_type)
    return Outcome(
        writes={"solution": article["article"], "facts.sla_hours": SLA_HOURS[state.priority]},
        summary=f"{state.priority} {state.ticket_type}: fix within {SLA_HOURS[state.priority]}h",
        evidence=[ctx.evidence(f"KB article for {state.ticket_type}")],
    )


@plan_solution.verifier
def _verify_plan(state: TicketState, outcome: Outcome) -> Verdict:
    if not state.solution or state.ticket_type is None or state.priority is None:
        return Verdict.failed("no solution planned")
    if state.solution != _KNOWLEDGE_BASE[state.ticket_type]:
        return Verdict.failed("solution does not match the KB article for this ticket type")
    if state.facts.get("sla_hours") != SLA_HOURS[state.priority]:
        return Verdict.failed(f"SLA does not match priority {state.priority}")
    return Verdict.passed()


@skills.skill(
    step="resolving",
    outputs=["resolution"],
    tools=["close_ticket", "reopen_ticket"],
    when=lambda s: s.solution is not None and s.resolution is None,
)
def apply_solution(state: TicketState, params: NoParams, ctx: SkillContext) -> Outcome:
    """Apply the planned solution and close the ticket in the helpdesk."""
    assert state.solution is not None
    receipt = ctx.call("close_ticket", ticket_id=state.task_id, solution=state.solution)
    return Outcome(
        writes={"resolution": f"closed: {receipt['applied']}"},
        summary=f"ticket {receipt['ticket_id']} {receipt['status']}",
        value=receipt,
        evidence=[ctx.evidence(f"helpdesk receipt: {receipt['status']}")],
    )


@apply_solution.verifier
def _verify_applied(state: TicketState, outcome: Outcome) -> Verdict:
    receipt = outcome.value or {}
    if receipt.get("ticket_id") != state.task_id or receipt.get("status") != "closed":
        return Verdict.failed(f"helpdesk did not confirm closing {state.task_id}")
    return Verdict.passed()


@apply_solution.rollbacker
def _reopen(state: TicketState, outcome: Outcome | None, ctx: SkillContext) -> None:
    ctx.call("reopen_ticket", ticket_id=state.task_id)


# ---------------------------------------------------------------- policy


def decide(view: View[TicketState]) -> Action:
    """The seed's rule-based ``call_llm``, reading the typed card instead of strings.

    A reply stays in the card until a skill uses it; one the last attempt refused
    (``view.last_failure``) is not tried again: the question is asked again.
    """
    state = view.state
    reply = view.inbox if view.last_failure is None else None
    if state.ticket_type is None:
        if reply:
            return CallSkill(skill="record_ticket_type", params={"text": reply})
        return AskUser(
            question="What is the problem? Describe it in a sentence.",
            next_step=None if state.current_step == "gathering_info" else "gathering_info",
            reason="no ticket type yet",
        )
    if state.priority is None:
        if reply:
            return CallSkill(skill="record_priority", params={"text": reply})
        return AskUser(question="How urgent is it? Answer P1 (critical) to P4 (low).")
    if state.solution is None:
        return CallSkill(skill="plan_solution", reason="type and priority are known")
    if state.resolution is None:
        return CallSkill(skill="apply_solution", reason="a solution is planned")
    return Finish(summary=state.resolution, reason="ticket closed")


agent = Agent(
    name="ticket",
    description="Seed 000: a helpdesk ticket gathered, decided and resolved.",
    state_type=TicketState,
    machine=machine,
    skills=skills,
    policy=ScriptedPolicy(decide),
    tools={
        "classify_ticket": classify_ticket,
        "kb_lookup": kb_lookup,
        "close_ticket": close_ticket,
        "reopen_ticket": reopen_ticket,
    },
    goal="Resolve the user's helpdesk ticket.",
    constraints=(
        "Never close a ticket before its type and priority are known.",
        "Apply only solutions from the knowledge base.",
    ),
    plan=("gathering_info", "deciding", "resolving"),
    sample_inputs=(
        "The VPN connection keeps dropping every few minutes.",
        "It's P1, we're blocked",
    ),
    ref="skillstate.examples.ticket:agent",
)
