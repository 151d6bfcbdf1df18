"""Expected tool errors are data: ``ctx.call(..., errors="return")`` or a tuple of types.

Reproduced before: a tool answering "order not found" by raising crashed the step
(retried, rolled back, ``step_failed``) when the skill only needed to record that
the order does not exist.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from skillstate import (
    Agent,
    AgentState,
    CallSkill,
    Outcome,
    Runtime,
    ScriptedPolicy,
    SkillContext,
    SkillRegistry,
    StateMachine,
    ToolError,
    Verdict,
)
from skillstate.store.memory import MemoryStore


class OrderNotFound(LookupError):
    pass


class Lookup(AgentState):
    order_status: str | None = None


class Order(BaseModel):
    order_id: str


ORDERS = {"A-1": "shipped"}


def get_order(order_id: str) -> dict[str, Any]:
    if order_id == "boom":
        raise ConnectionError("order service unreachable")
    if order_id not in ORDERS:
        raise OrderNotFound(f"no order {order_id}")
    return {"id": order_id, "status": ORDERS[order_id]}


def agent(errors: Any, rollbacks: list[str]) -> Agent:
    skills = SkillRegistry()

    @skills.skill(outputs=["order_status"], tools=["get_order"], max_retries=2)
    def check_order(state: Lookup, params: Order, ctx: SkillContext) -> Outcome:
        """Look an order up; a missing one is an answer too."""
        found = ctx.call("get_order", order_id=params.order_id, errors=errors)
        if isinstance(found, ToolError):
            return Outcome(writes={"order_status": "not found"}, summary=str(found))
        return Outcome(writes={"order_status": found["status"]})

    check_order.verifier(lambda s, o: Verdict(ok=s.order_status is not None))
    check_order.rollbacker(lambda s, o, ctx: rollbacks.append("rollback"))
    return Agent(
        name="orders",
        state_type=Lookup,
        machine=StateMachine({"init": ["init"]}),
        skills=skills,
        policy=ScriptedPolicy(lambda view: CallSkill(skill="check_order")),
        tools={"get_order": get_order},
    )


def step(errors: Any, order_id: str) -> tuple[Any, list[str]]:
    rollbacks: list[str] = []
    runtime = Runtime(agent(errors, rollbacks), MemoryStore())
    runtime.start("t")
    runtime.agent.policy = ScriptedPolicy(
        lambda view: CallSkill(skill="check_order", params={"order_id": order_id})
    )
    return runtime.step("t"), rollbacks


@pytest.mark.parametrize("errors", ["return", (OrderNotFound,), (LookupError,)])
def test_an_expected_error_is_an_outcome_not_a_crash(errors: Any) -> None:
    """The skill gets a ToolError value: one attempt, no rollback, the answer recorded."""
    report, rollbacks = step(errors, "Z-9")
    assert report.after.order_status == "not found"  # type: ignore[attr-defined]
    assert report.event.attempts == 1
    assert rollbacks == []
    assert [e.kind for e in report.after.errors] == []
    (call,) = report.event.tool_calls
    assert not call.ok
    assert call.summary == "OrderNotFound: no order Z-9"
    assert report.after.completed_steps[-1].summary == "OrderNotFound: no order Z-9"


def test_an_unexpected_error_still_fails_the_attempt() -> None:
    """Only the listed types come back as values; anything else fails the attempt as before."""
    report, rollbacks = step((OrderNotFound,), "boom")
    assert report.event.attempts == 3
    assert rollbacks == ["rollback"]
    assert report.after.errors[-1].kind == "step_failed"
    assert "ConnectionError" in report.after.errors[-1].message


def test_by_default_an_error_raises() -> None:
    """errors="raise" (the default) keeps the old behaviour: retried, then rolled back."""
    report, rollbacks = step("raise", "Z-9")
    assert report.event.attempts == 3
    assert rollbacks == ["rollback"]
    assert "OrderNotFound" in report.after.errors[-1].message


def test_a_found_order_is_unaffected() -> None:
    """A call that succeeds returns the tool's value whatever ``errors`` says."""
    report, _ = step("return", "A-1")
    assert report.after.order_status == "shipped"  # type: ignore[attr-defined]
    assert report.event.tool_calls[0].ok


def test_tool_error_reads_well() -> None:
    """str(ToolError) is "Kind: message"; the exception object is kept but not compared."""
    one = ToolError(tool="t", kind="KeyError", message="'x'", exception=KeyError("x"))
    two = ToolError(tool="t", kind="KeyError", message="'x'")
    assert str(one) == "KeyError: 'x'"
    assert one == two
