"""An agent that waits for a time and for a signal: for the durable-wait tests.

A task waits ``pause`` seconds first (``WaitUntil``, skipped when 0), then, when
``expect_payment`` is set, waits for the ``payment_received`` signal (``WaitFor``,
``timeout`` seconds, escalating to the ``escalated`` step when ``escalate`` is set),
records the payment and ships: one keyed line appended to ``ledger`` (an effect,
exactly once), so a test counts completions in the file as well as in the store.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from skillstate import (
    Action,
    Agent,
    AgentState,
    CallSkill,
    Finish,
    Outcome,
    ScriptedPolicy,
    Signal,
    SkillContext,
    SkillRegistry,
    StateMachine,
    Verdict,
    View,
    WaitFor,
    WaitUntil,
)
from skillstate.effects import files


class PayState(AgentState):
    pause: float = 0.0
    expect_payment: bool = False
    timeout: float | None = None
    escalate: bool = False
    ledger: str = ""
    woke: bool = False
    paid: float | None = None
    shipped: bool = False


class PaymentReceived(BaseModel):
    amount: float = Field(gt=0)
    reference: str = Field(min_length=1, max_length=40)


class Amount(BaseModel):
    amount: float


class NoParams(BaseModel):
    pass


machine = StateMachine(
    {
        "init": ["work", "escalated"],
        "work": ["work", "escalated", "done"],
        "escalated": ["done"],
        "done": [],
    }
)
skills = SkillRegistry()


@skills.skill(outputs=["woke"], step="work")
def note_woke(state: PayState, params: NoParams, ctx: SkillContext) -> Outcome:
    """Note that the pause is over."""
    return Outcome(writes={"woke": True}, summary="woke up")


@note_woke.verifier
def _woke(state: PayState, outcome: Outcome) -> Verdict:
    return Verdict(ok=state.woke)


@skills.skill(outputs=["paid"], step="work")
def record_payment(state: PayState, params: Amount, ctx: SkillContext) -> Outcome:
    """Record the payment the signal brought."""
    return Outcome(writes={"paid": params.amount}, summary=f"paid {params.amount}")


@record_payment.verifier
def _paid(state: PayState, outcome: Outcome) -> Verdict:
    return Verdict(ok=state.paid is not None and state.paid > 0)


@skills.skill(outputs=["shipped"], step="work", effects=True, tools=["append"])
def ship(state: PayState, params: NoParams, ctx: SkillContext) -> Outcome:
    """Ship: one keyed line in the ledger file (the outside world)."""
    assert ctx.idempotency_key is not None
    if state.ledger:
        ctx.call("append", path=state.ledger, line=f"shipped {state.task_id}",
                 key=ctx.idempotency_key)  # fmt: skip
    return Outcome(writes={"shipped": True}, summary="shipped")


@ship.prober
def _shipped(state: PayState, params: NoParams, ctx: SkillContext) -> Outcome | None:
    assert ctx.idempotency_key is not None
    if state.ledger and files.appended(state.ledger, ctx.idempotency_key):
        return Outcome(writes={"shipped": True}, summary="shipped")
    return None


@ship.verifier
def _was_shipped(state: PayState, outcome: Outcome) -> Verdict:
    return Verdict(ok=state.shipped)


def decide(view: View[PayState]) -> Action:
    state = view.state
    last = state.last_decision.action if state.last_decision else None
    if state.current_step == "escalated":
        return Finish(summary="escalated: no payment in time")
    if state.pause and not state.woke:
        if last == "wait_until":  # the runtime woke the task: the pause is over
            return CallSkill(skill="note_woke")
        return WaitUntil(seconds=state.pause, reason="cool-down")
    if state.expect_payment and state.paid is None:
        payment = view.signal("payment_received")
        if isinstance(payment, PaymentReceived):
            return CallSkill(skill="record_payment", params={"amount": payment.amount})
        return WaitFor(
            signal="payment_received",
            timeout=state.timeout,
            on_timeout="escalated" if state.escalate else None,
            reason="no payment yet",
        )
    if not state.shipped:
        return CallSkill(skill="ship")
    return Finish(summary="shipped")


agent = Agent(
    name="waiting",
    state_type=PayState,
    machine=machine,
    skills=skills,
    policy=ScriptedPolicy(decide),
    tools={"append": files.append_once},
    goal="Ship the order once it is paid",
    signals={"payment_received": Signal(PaymentReceived)},
)
