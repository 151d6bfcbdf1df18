"""The orders family (seed 001): the oracle passes under every variant, the final
checks catch the refunded-order trap and the near-identical amounts, and every
skill's verify refuses a wrong outcome while write_answer's rollback undoes it."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from skillstate.engine.actions import Action, CallSkill
from skillstate.engine.runtime import RunResult
from skillstate.errors import UsageError
from skillstate.eval.families import get_family
from skillstate.eval.families.orders import ANSWER, EXCLUDED_STATUSES, OrdersState, make_orders
from skillstate.eval.suites import load_suite
from skillstate.eval.tasks import Environment, group_of
from skillstate.eval.variants import RESULT_CHARS
from skillstate.skills.skill import Outcome
from tests.eval_support import VARIANT_NAMES, assert_oracle_passes, run_plan

SPEC = next(s for s in load_suite("seeds") if s.family == "orders")
DATA = make_orders(dict(SPEC.params))
MONTH = str(SPEC.params["month"])
EMAIL = str(SPEC.params["email"])


def _build(tmp_path: Path) -> Environment:
    return get_family("orders").build(SPEC, tmp_path / SPEC.id)


def _run(env: Environment, actions: Sequence[Action], **fields: Any) -> RunResult:
    return run_plan(SPEC, env, actions, **fields)[0]


def _state(**fields: Any) -> OrdersState:
    return OrdersState(task_id="x", email=EMAIL, month=MONTH, **fields)


def _checks(env: Environment) -> dict[str, Any]:
    return {c.name: c for c in env.check(_state())}


def _verify(env: Environment, skill: str, state: OrdersState) -> tuple[bool, str]:
    verdict = env.skills[skill].verify(state, Outcome())
    return verdict.ok, verdict.reason


def _order(order_id: str) -> dict[str, Any]:
    return next(o for o in DATA.orders if o["id"] == order_id)


@pytest.mark.parametrize("variant", VARIANT_NAMES)
def test_oracle_passes_every_variant(variant: str, tmp_path: Path) -> None:
    """The oracle succeeds, recovers from each interruption and repeats no effect."""
    assert_oracle_passes(SPEC, variant, tmp_path)


def test_spec_group_budget_and_constraints(tmp_path: Path) -> None:
    env = _build(tmp_path)
    assert SPEC.group == group_of(len(env.plan_skills)) == "short"
    assert len(env.plan_skills) <= 8
    assert SPEC.max_steps >= math.ceil(1.5 * len(env.plan_tools)) + 3
    assert len(env.expected_facts) == len(env.plan_skills)
    assert any("Refunded or cancelled" in c for c in SPEC.constraints)
    assert "refund" not in SPEC.goal.lower()  # stated once, as a constraint
    assert env.effect_tools == {"write_answer"}
    assert env.initial == {"email": EMAIL, "month": MONTH}


def test_the_data_sets_every_trap() -> None:
    """The month's largest order is refunded, the next cancelled; amount_gross misleads."""
    month = DATA.month_orders(MONTH)
    by_amount = sorted(month, key=lambda o: -o["amount"])
    assert [o["id"] for o in by_amount[:3]] == [DATA.refunded_id, DATA.cancelled_id, DATA.answer_id]
    assert _order(DATA.refunded_id)["status"] == "refunded"
    assert _order(DATA.cancelled_id)["status"] == "cancelled"
    counting = [o for o in month if o["status"] not in EXCLUDED_STATUSES]
    assert max(counting, key=lambda o: o["amount_gross"])["id"] == DATA.gross_id != DATA.answer_id
    assert max(counting, key=lambda o: o["amount"])["id"] == DATA.answer_id
    assert any(o["amount_refunded"] is None for o in month)
    # Larger orders of the same customer just outside the month.
    mine = [o for o in DATA.orders if o["user_id"] == DATA.user_id and o not in month]
    assert any(o["amount"] > DATA.answer_amount and o["status"] == "delivered" for o in mine)
    # Another customer of the same name, with a near-identical e-mail.
    twins = [u for u in DATA.users if u["name"] == DATA.users[0]["name"]]
    assert len(twins) == 2
    assert make_orders(dict(SPEC.params)) == DATA
    assert make_orders({**SPEC.params, "seed": 2}).answer_id != DATA.answer_id


def test_tools_are_noisy_and_strict(tmp_path: Path) -> None:
    env = _build(tmp_path)
    user = env.tools["find_user"](email=EMAIL.upper())
    assert user["id"] == DATA.user_id
    assert user["external_id"] != user["id"]
    orders = env.tools["list_orders"](user_id=DATA.user_id, month=MONTH)
    assert len(json.dumps(orders)) > RESULT_CHARS
    assert {"amount", "amount_gross", "amount_refunded", "payment", "items"} <= set(orders[0])
    with pytest.raises(LookupError):
        env.tools["find_user"](email="li.wei@example.co")
    with pytest.raises(LookupError):
        env.tools["list_orders"](user_id=user["external_id"], month=MONTH)
    with pytest.raises(ValueError, match="month"):
        env.tools["list_orders"](user_id=DATA.user_id, month="July 2025")


def test_checks_fail_without_an_answer(tmp_path: Path) -> None:
    env = _build(tmp_path)
    checks = _checks(env)
    assert not checks["answer_written"].ok
    assert not checks["answer_order"].ok
    assert "unreadable" in checks["answer_order"].detail


def test_checks_name_the_refunded_trap(tmp_path: Path) -> None:
    env = _build(tmp_path)
    refunded = _order(DATA.refunded_id)
    env.tools["write_answer"](order_id=refunded["id"], amount=refunded["amount"])
    checks = _checks(env)
    assert checks["answer_written"].ok
    assert not checks["answer_order"].ok
    assert "is refunded: it does not count" in checks["answer_order"].detail
    assert not checks["answer_amount"].ok
    assert not checks["trap_refunded_skipped"].ok


def test_checks_catch_amount_gross(tmp_path: Path) -> None:
    env = _build(tmp_path)
    gross = _order(DATA.gross_id)
    env.tools["write_answer"](order_id=gross["id"], amount=gross["amount_gross"])
    checks = _checks(env)
    assert not checks["answer_order"].ok
    assert "largest by amount_gross, not by amount" in checks["answer_order"].detail
    assert checks["trap_refunded_skipped"].ok
    env.tools["write_answer"](order_id=DATA.answer_id, amount=DATA.answer_amount + 300)
    checks = _checks(env)
    assert checks["answer_order"].ok
    assert not checks["answer_amount"].ok


def test_tools_plan_executed_directly_passes(tmp_path: Path) -> None:
    env = _build(tmp_path)
    for action in env.plan_tools:
        if isinstance(action, CallSkill) and action.skill.startswith("tool_"):
            env.tools[action.skill.removeprefix("tool_")](**action.params)
    checks = _checks(env)
    assert all(c.ok for c in checks.values()), [c for c in checks.values() if not c.ok]
    assert json.loads((env.root / ANSWER).read_text()) == {
        "order_id": DATA.answer_id,
        "amount": DATA.answer_amount,
    }


def test_verifiers_refuse_wrong_outcomes(tmp_path: Path) -> None:
    """Each verify re-derives from the database, whatever the card claims."""
    env = _build(tmp_path)
    twin = DATA.users[1]["id"]
    assert _verify(env, "identify_user", _state(user_id=DATA.user_id))[0]
    ok, reason = _verify(env, "identify_user", _state(user_id=twin))
    assert not ok
    assert DATA.user_id in reason
    month = DATA.month_orders(MONTH)
    excluded = sorted(o["id"] for o in month if o["status"] in EXCLUDED_STATUSES)
    fetched = {"user_id": DATA.user_id, "orders_ref": "sha256:x", "order_count": len(month)}
    assert _verify(env, "fetch_orders", _state(**fetched, excluded=excluded))[0]
    ok, reason = _verify(env, "fetch_orders", _state(**fetched, excluded=[]))
    assert not ok
    assert DATA.refunded_id in reason
    picked = {"user_id": DATA.user_id, "orders_ref": "sha256:x"}
    refunded = _order(DATA.refunded_id)
    ok, reason = _verify(
        env, "pick_largest", _state(**picked, order_id=refunded["id"], amount=refunded["amount"])
    )
    assert not ok
    assert "refunded" in reason
    gross = _order(DATA.answer_id)["amount_gross"] + 0.01
    ok, reason = _verify(
        env, "pick_largest", _state(**picked, order_id=DATA.answer_id, amount=gross)
    )
    assert not ok
    assert "is not" in reason


def test_write_answer_verify_refuses_and_rollback_restores(tmp_path: Path) -> None:
    env = _build(tmp_path)
    path = env.root / ANSWER
    path.write_text('{"order_id": "draft", "amount": 0}', encoding="utf-8")
    refunded = _order(DATA.refunded_id)
    fields = {
        "current_step": "analyzing",  # as if the earlier steps had run
        "user_id": DATA.user_id,
        "orders_ref": "sha256:x",
        "order_id": refunded["id"],
        "amount": refunded["amount"],
    }
    result = _run(env, [CallSkill(skill="write_answer")], **fields)
    state = result.state
    assert isinstance(state, OrdersState)
    assert state.answered is False
    failed = [e.message for e in state.errors if e.kind == "verify_failed"]
    assert failed
    assert "refunded" in failed[0]
    assert path.read_text(encoding="utf-8") == '{"order_id": "draft", "amount": 0}'
    path.unlink()
    _run(env, [CallSkill(skill="write_answer")], **fields)
    assert not path.exists()


def test_skills_plan_facts_hold(tmp_path: Path) -> None:
    env = _build(tmp_path)
    result = _run(env, env.plan_skills)
    assert result.stopped == "completed"
    assert not result.state.errors
    state = result.state.model_dump()
    assert {k: state[k] for k in env.expected_facts[-1]} == env.expected_facts[-1]
    assert all(c.ok for c in env.check(result.state))


@pytest.mark.parametrize(
    ("params", "message"),
    [({"seed": 1, "email": EMAIL}, "need month"), ({**SPEC.params, "month": "July"}, "YYYY-MM")],
)
def test_bad_params_are_a_usage_error(params: dict[str, Any], message: str, tmp_path: Path) -> None:
    spec = SPEC.model_copy(update={"params": params})
    with pytest.raises(UsageError, match=message):
        get_family("orders").build(spec, tmp_path)
