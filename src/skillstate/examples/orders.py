"""The order query of seed 001: the user's largest order in July 2025.

The order system returns a long, noisy JSON payload. It goes to the artifact store
whole; the state keeps only a ref, a count and the answer. Later steps read the
raw payload back by ref when they need it, so the prompt view never carries it.

With ``ORDERS_API_TOKEN`` set, a new task keeps that token in a ``Sensitive`` field
and ``fetch_orders`` sends it to the order API, which then refuses calls without
it. The token is stored encrypted (set ``SKILLSTATE_KEY``; ``skillstate keygen``
makes one) and shown as ``***`` in views. Unset, the demo runs without a token.
"""

from __future__ import annotations

import os
import random
import re
from typing import Any

from skillstate import (
    Agent,
    AgentState,
    CallSkill,
    Finish,
    NoParams,
    Outcome,
    ScriptedPolicy,
    Sensitive,
    SkillContext,
    SkillRegistry,
    StateMachine,
    Verdict,
    View,
)
from skillstate.engine.actions import Action

MONTH = "2025-07"
TOKEN_ENV = "ORDERS_API_TOKEN"


class OrdersState(AgentState):
    user_id: str | None = None
    month: str = MONTH
    orders_ref: str | None = None
    """Artifact ref of the raw order-system payload (never copied into state)."""
    order_count: int | None = None
    max_order_id: str | None = None
    max_amount: float | None = None
    reply: str | None = None
    api_token: Sensitive[str] | None = None
    """The order API's token, from ``ORDERS_API_TOKEN`` when the task was created."""


machine = StateMachine(
    {
        "init": ["identifying"],
        "identifying": ["querying"],
        "querying": ["analyzing"],
        "analyzing": ["replying"],
        "replying": ["done"],
        "done": [],
    }
)

# ---------------------------------------------------------------- tools


def get_user_info() -> dict[str, Any]:
    return {"user_id": "U123456", "name": "Li Wei", "tier": "gold", "region": "CN-East"}


def query_orders(
    user_id: str, month: str, authorization: str | None = None
) -> list[dict[str, Any]]:
    """A deterministic stand-in for an order API: 12 orders with the usual noise.

    Like a real API it checks the bearer token, when the server has one
    (``ORDERS_API_TOKEN`` here stands in for the server's configuration).
    """
    expected = os.environ.get(TOKEN_ENV)
    if expected and authorization != f"Bearer {expected}":
        # Never echo what was sent: it may be a (wrong) secret.
        raise PermissionError("401 Unauthorized: missing or wrong bearer token")
    rng = random.Random(f"{user_id}/{month}")
    orders = []
    for i in range(12):
        amount = round(rng.uniform(40, 2500), 2)
        if i == 7:
            amount = 3299.00  # the seed's largest order
        orders.append(
            {
                "order_id": f"ORD-{month.replace('-', '')}-{rng.randint(1, 9999):04d}",
                "user_id": user_id,
                "created_at": f"{month}-{rng.randint(1, 31):02d}T{rng.randint(0, 23):02d}:00:00Z",
                "amount": amount,
                "currency": "CNY",
                "status": rng.choice(["paid", "shipped", "delivered"]),
                "items": [
                    {"sku": f"SKU-{rng.randint(1000, 9999)}", "qty": rng.randint(1, 3)}
                    for _ in range(rng.randint(1, 4))
                ],
                "shipping": {"carrier": rng.choice(["SF", "JD", "EMS"]), "eta_days": 2},
                "coupon": rng.choice([None, "SUMMER10", "VIP5"]),
            }
        )
    return orders


# ---------------------------------------------------------------- skills

skills = SkillRegistry()


@skills.skill(
    step="identifying",
    outputs=["user_id"],
    tools=["get_user_info"],
    when=lambda s: s.user_id is None,
)
def identify_user(state: OrdersState, params: NoParams, ctx: SkillContext) -> Outcome:
    """Find out who is asking."""
    info = ctx.call("get_user_info")
    return Outcome(
        writes={"user_id": info["user_id"]},
        summary=f"user {info['user_id']}",
        evidence=[ctx.evidence(f"user {info['user_id']} ({info['tier']})")],
    )


@identify_user.verifier
def _verify_user(state: OrdersState, outcome: Outcome) -> Verdict:
    return Verdict(ok=bool(re.fullmatch(r"U\d{6}", state.user_id or "")), reason="user id U+6")


@skills.skill(
    step="querying",
    outputs=["orders_ref", "order_count"],
    tools=["query_orders"],
    when=lambda s: s.user_id is not None and s.orders_ref is None,
)
def fetch_orders(state: OrdersState, params: NoParams, ctx: SkillContext) -> Outcome:
    """Query the order system for the month; keep the payload as an artifact."""
    # The token is passed only when there is one, so a task without it calls the API
    # (and records the call) exactly as before.
    if state.api_token:
        orders = ctx.call(
            "query_orders",
            user_id=state.user_id,
            month=state.month,
            authorization=f"Bearer {state.api_token}",
        )
    else:
        orders = ctx.call("query_orders", user_id=state.user_id, month=state.month)
    ref = ctx.calls[-1].ref
    return Outcome(
        writes={"orders_ref": ref, "order_count": len(orders)},
        summary=f"{len(orders)} orders in {state.month}",
        evidence=[ctx.evidence(f"{len(orders)} orders for {state.user_id} in {state.month}")],
        value=orders,
    )


@fetch_orders.verifier
def _verify_orders(state: OrdersState, outcome: Outcome) -> Verdict:
    orders = outcome.value or []
    if state.order_count != len(orders) or not state.orders_ref:
        return Verdict.failed("order count or payload ref missing")
    wrong = [o["order_id"] for o in orders if not o["created_at"].startswith(state.month)]
    if wrong:
        return Verdict.failed(f"orders outside {state.month}: {', '.join(wrong)}")
    if any(o["user_id"] != state.user_id for o in orders):
        return Verdict.failed("orders of another user")
    return Verdict.passed()


@skills.skill(
    step="analyzing",
    outputs=["max_order_id", "max_amount"],
    when=lambda s: s.orders_ref is not None and s.max_order_id is None,
)
def find_max_order(state: OrdersState, params: NoParams, ctx: SkillContext) -> Outcome:
    """Pick the order with the largest amount, reading the payload back by ref."""
    assert state.orders_ref is not None
    orders = ctx.artifact_json(state.orders_ref)
    best = max(orders, key=lambda o: o["amount"])
    return Outcome(
        writes={"max_order_id": best["order_id"], "max_amount": best["amount"]},
        summary=f"largest: {best['order_id']} ({best['amount']:.2f})",
        value=orders,
    )


@find_max_order.verifier
def _verify_max(state: OrdersState, outcome: Outcome) -> Verdict:
    orders = outcome.value or []
    by_id = {o["order_id"]: o["amount"] for o in orders}
    if by_id.get(state.max_order_id or "") != state.max_amount:
        return Verdict.failed("the chosen order is not in the payload with that amount")
    if any(amount > (state.max_amount or 0) for amount in by_id.values()):
        return Verdict.failed("a larger order exists")
    return Verdict.passed()


@skills.skill(
    step="replying",
    outputs=["reply"],
    when=lambda s: s.max_order_id is not None and s.reply is None,
)
def compose_reply(state: OrdersState, params: NoParams, ctx: SkillContext) -> Outcome:
    """Write the answer for the user."""
    text = (
        f"Your largest order in {state.month} is {state.max_order_id}, {state.max_amount:.2f} CNY."
    )
    return Outcome(writes={"reply": text}, summary=text)


@compose_reply.verifier
def _verify_reply(state: OrdersState, outcome: Outcome) -> Verdict:
    reply = state.reply or ""
    order_id = state.max_order_id or ""
    ok = bool(order_id) and order_id in reply and f"{state.max_amount:.2f}" in reply
    return Verdict(ok=ok, reason="" if ok else "reply must name the order and its amount")


# ---------------------------------------------------------------- policy


def decide(view: View[OrdersState]) -> Action:
    """Follow the plan: the first pending skill that applies, then finish."""
    for name in view.state.pending_steps:
        if name in view.skills:
            return CallSkill(skill=name, reason="next in plan")
    state = view.state
    assert isinstance(state, OrdersState)
    return Finish(summary=state.reply or "", reason="plan complete")


class OrdersAgent(Agent[OrdersState]):
    """The orders agent: a new task picks up ``ORDERS_API_TOKEN`` into its card."""

    def new_state(self, task_id: str, **fields: Any) -> OrdersState:
        # Read once, when the task is created: a resumed task keeps the token it was
        # created with (sealed in the store) whatever the environment says later.
        token = os.environ.get(TOKEN_ENV)
        if token and "api_token" not in fields:
            fields["api_token"] = token
        return super().new_state(task_id, **fields)


agent = OrdersAgent(
    name="orders",
    description="Seed 001: the user's largest order of July 2025.",
    state_type=OrdersState,
    machine=machine,
    skills=skills,
    policy=ScriptedPolicy(decide),
    tools={"get_user_info": get_user_info, "query_orders": query_orders},
    goal=f"Find the user's largest order in {MONTH} and tell them.",
    constraints=("Only orders of the asking user count.", f"Only orders placed in {MONTH} count."),
    plan=("identify_user", "fetch_orders", "find_max_order", "compose_reply"),
    ref="skillstate.examples.orders:agent",
)
