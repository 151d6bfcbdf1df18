"""An agent whose payments need a person's approval (imported by CLI and worker
subprocesses as ``tests.approval_agent:agent``).

The outside world is a ledger file: ``pay`` appends one keyed line under its
idempotency key (``skillstate.effects.files``), its probe looks for the key, its
verify counts the task's lines. A payment over 100 waits for approval
(``approval=`` is a predicate on the params); after a rejection the policy, reading
the rejection in its view, proposes 50, which needs none. ``note`` (mode ``note``)
is a skill without effects that always needs approval; each of its runs appends a
line to ``<ledger>.notes`` so a test can count them.

Environment, for the kill -9 tests: ``APPROVAL_KILL=before`` makes the first run of
``pay`` kill its own process before it touches the ledger, ``after`` right after
the append (before the outcome is committed). A marker file next to the ledger
makes it happen once.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from pydantic import BaseModel, Field

from skillstate import (
    Agent,
    AgentState,
    CallSkill,
    Finish,
    Outcome,
    ScriptedPolicy,
    SkillContext,
    SkillRegistry,
    StateMachine,
    Verdict,
    View,
)
from skillstate.effects import files
from skillstate.engine.actions import Action

PASSWORD = "hunter2-approval"
"""The payee's password: a secret param (its name is one the redaction policy masks)."""


class PayState(AgentState):
    ledger: str = ""
    amount: int = 250
    mode: str = "pay"
    paid: int | None = None
    noted: int = 0


class Payment(BaseModel):
    amount: int = Field(ge=1, le=1000)
    to: str = Field(min_length=1)
    password: str = ""


class Note(BaseModel):
    text: str = Field(min_length=1, max_length=40)


machine = StateMachine(
    {"init": ["paying", "done"], "paying": ["paying", "done"], "done": []}, initial="init"
)
skills = SkillRegistry()


def _kill_once(ledger: str, when: str) -> None:
    if os.environ.get("APPROVAL_KILL") != when:
        return
    marker = Path(f"{ledger}.killed")
    if marker.exists():
        return
    marker.write_text(when)
    os.kill(os.getpid(), signal.SIGKILL)


@skills.skill(
    outputs=["paid"],
    step="paying",
    effects=True,
    approval=lambda state, params: params.amount > 100,
)
def pay(state: PayState, params: Payment, ctx: SkillContext) -> Outcome:
    """Pay ``amount`` to ``to`` (over 100 needs a person's approval)."""
    assert ctx.idempotency_key is not None
    if params.password and params.password != PASSWORD:
        raise PermissionError("the bank refused the password")
    _kill_once(state.ledger, "before")
    files.append_once(state.ledger, f"pay {params.amount} to {params.to}", ctx.idempotency_key)
    _kill_once(state.ledger, "after")
    return Outcome(writes={"paid": params.amount}, summary=f"paid {params.amount}")


@pay.prober
def _paid_already(state: PayState, params: Payment, ctx: SkillContext) -> Outcome | None:
    assert ctx.idempotency_key is not None
    if files.appended(state.ledger, ctx.idempotency_key):
        return Outcome(writes={"paid": params.amount}, summary=f"paid {params.amount}")
    return None


@pay.verifier
def _one_payment(state: PayState, outcome: Outcome) -> Verdict:
    mine = [key for key, _ in files.entries(state.ledger) if key.startswith(f"{state.task_id}:")]
    return Verdict(ok=len(mine) == 1, reason=f"{len(mine)} payments in the ledger")


@skills.skill(outputs=["noted"], step="paying", approval=True)
def note(state: PayState, params: Note, ctx: SkillContext) -> Outcome:
    """Write a note (no effects, but a person approves it)."""
    with open(f"{state.ledger}.notes", "a", encoding="utf-8") as out:
        out.write(f"{state.task_id} {params.text}\n")
    return Outcome(writes={"noted": state.noted + 1}, summary=params.text)


@note.verifier
def _noted(state: PayState, outcome: Outcome) -> Verdict:
    return Verdict(ok=state.noted >= 1)


def decide(view: View[PayState]) -> Action:
    state = view.state
    if state.mode == "note":
        if state.noted == 0:
            return CallSkill(skill="note", params={"text": "hello"}, reason="leave a note")
        return Finish(summary="noted")
    if state.paid is None:
        last = view.last_failure
        if last is not None and "rejected" in last.reason:
            return CallSkill(
                skill="pay", params={"amount": 50, "to": "bob"}, reason="a smaller payment"
            )
        params = {"amount": state.amount, "to": "bob", "password": PASSWORD}
        return CallSkill(skill="pay", params=params, reason="pay the invoice")
    return Finish(summary=f"paid {state.paid}")


agent = Agent(
    name="payer",
    description="Payments over 100 wait for a person's approval.",
    state_type=PayState,
    machine=machine,
    skills=skills,
    policy=ScriptedPolicy(decide),
    goal="Pay the invoice once.",
)
