"""An agent whose payment *tool* needs a person's approval (imported by CLI and worker
subprocesses as ``tests.tool_approval_agent:agent``).

``pay`` (a skill with effects) first reads the invoice (``lookup_invoice``: the payee
from ``<ledger>.payee``, ``bob`` when absent; every read appends a line to
``<ledger>.reads``), then calls the gated tool ``send_payment``, which appends one
keyed line to the ledger under the step's idempotency key. A payment over 100 waits
for approval (the tool's ``approval=`` predicate on its arguments); the skill itself
needs none. After a rejection the policy, reading it in its view, proposes 50.

Modes (``mode``): ``pay``; ``swallow`` wraps the payment in ``try/except Exception``
(and would write ``paid = 0`` if it caught anything).

Environment, for the kill -9 tests: ``APPROVAL_KILL=before`` makes the first payment
kill its own process before it touches the ledger, ``after`` right after the append.
A marker file next to the ledger makes it happen once.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
    gated,
    per_task,
)
from skillstate.effects import files
from skillstate.engine.actions import Action

PASSWORD = "hunter2-tool-approval"
"""The bank password the skill hands the payment tool: an argument the redaction
policy masks (by its name), so it is kept sealed while the call waits."""


class PayState(AgentState):
    ledger: str = ""
    amount: int = 250
    mode: str = "pay"
    paid: int | None = None


class Payment(BaseModel):
    amount: int = Field(ge=1, le=1000)


class PaymentArgs(BaseModel):
    """The payment tool's arguments: what ``approve --edit`` is checked against."""

    amount: int = Field(ge=1, le=1000)
    to: str = Field(min_length=1)
    password: str = ""


def lookup_invoice(path: str) -> dict[str, Any]:
    """Read the invoice's payee (a read: counted, and repeated after an approval)."""
    with open(f"{path}.reads", "a", encoding="utf-8") as out:
        out.write("read\n")
    payee = Path(f"{path}.payee")
    return {"to": payee.read_text().strip() if payee.exists() else "bob"}


def _kill_once(ledger: str, when: str) -> None:
    if os.environ.get("APPROVAL_KILL") != when:
        return
    marker = Path(f"{ledger}.killed")
    if marker.exists():
        return
    marker.write_text(when)
    os.kill(os.getpid(), signal.SIGKILL)


def _payment_tool(state: PayState, ctx: SkillContext) -> Callable[..., dict[str, Any]]:
    """The bank, for one attempt: a payment is one ledger line under the step's key."""
    key = ctx.idempotency_key
    assert key is not None

    def send_payment(amount: int, to: str, password: str = "") -> dict[str, Any]:
        if password != PASSWORD:
            raise PermissionError("the bank refused the password")
        _kill_once(state.ledger, "before")
        files.append_once(state.ledger, f"pay {amount} to {to}", key)
        _kill_once(state.ledger, "after")
        return {"paid": amount, "to": to}

    return send_payment


def _big(state: PayState, args: dict[str, Any]) -> bool:
    return int(args["amount"]) > 100


machine = StateMachine(
    {"init": ["paying", "done"], "paying": ["paying", "done"], "done": []}, initial="init"
)
skills = SkillRegistry()


@skills.skill(
    outputs=["paid"], step="paying", effects=True, tools=["lookup_invoice", "send_payment"]
)
def pay(state: PayState, params: Payment, ctx: SkillContext) -> Outcome:
    """Read the invoice, then pay it (a payment over 100 waits for a person)."""
    invoice = ctx.call("lookup_invoice", path=state.ledger)
    args = {"amount": params.amount, "to": invoice["to"], "password": PASSWORD}
    if state.mode == "swallow":
        try:
            sent = ctx.call("send_payment", **args)
        except Exception:  # what a careless skill does: it must not eat the pause
            return Outcome(writes={"paid": 0}, summary="gave up on the payment")
    else:
        sent = ctx.call("send_payment", **args)
    return Outcome(writes={"paid": sent["paid"]}, summary=f"paid {sent['paid']} to {sent['to']}")


def _line(state: PayState, key: str | None) -> str | None:
    return next((line for k, line in files.entries(state.ledger) if k == key), None)


@pay.prober
def _paid_already(state: PayState, params: Payment, ctx: SkillContext) -> Outcome | None:
    line = _line(state, ctx.idempotency_key)
    if line is None:
        return None
    amount = int(line.split()[1])  # "pay 120 to bob": an approval may have changed it
    return Outcome(writes={"paid": amount}, summary=line)


@pay.verifier
def _one_payment(state: PayState, outcome: Outcome) -> Verdict:
    task = f"{state.task_id}:"
    mine = [line for key, line in files.entries(state.ledger) if key.startswith(task)]
    if len(mine) != 1:
        return Verdict(ok=False, reason=f"{len(mine)} payments in the ledger")
    return Verdict(ok=mine[0].split()[1] == str(state.paid), reason="paid what the ledger says")


def decide(view: View[PayState]) -> Action:
    state = view.state
    if state.paid is None:
        last = view.last_failure
        if last is not None and "rejected" in last.reason:
            return CallSkill(skill="pay", params={"amount": 50}, reason="a smaller payment")
        return CallSkill(skill="pay", params={"amount": state.amount}, reason="pay the invoice")
    return Finish(summary=f"paid {state.paid}")


agent = Agent(
    name="tool-payer",
    description="Payments over 100 wait for a person's approval of the payment call.",
    state_type=PayState,
    machine=machine,
    skills=skills,
    tools={
        "lookup_invoice": lookup_invoice,
        "send_payment": gated(per_task(_payment_tool), approval=_big, params=PaymentArgs),
    },
    policy=ScriptedPolicy(decide),
    goal="Pay the invoice once.",
)
