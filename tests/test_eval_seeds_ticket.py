"""The ticket family (seed 000): the oracle passes under every variant, the final
checks catch each trap on the database, and every skill's verify refuses a wrong
outcome while its rollback undoes the effect."""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from skillstate.engine.actions import Action, CallSkill
from skillstate.engine.runtime import RunResult, Runtime
from skillstate.errors import UsageError
from skillstate.eval.families import get_family
from skillstate.eval.families.ticket import (
    DB,
    SCENARIOS,
    TicketState,
    classify,
    forbidden_words,
    naive_category,
    own_message,
    priority_rule,
    reply_body,
)
from skillstate.eval.runner import run_task
from skillstate.eval.suites import load_suite
from skillstate.eval.tasks import Environment, TaskSpec, group_of
from skillstate.eval.variants import VARIANTS
from skillstate.store.memory import MemoryStore
from tests.eval_support import VARIANT_NAMES, Tools, assert_oracle_passes, run_plan, scripted_agent

SPEC = next(s for s in load_suite("seeds") if s.family == "ticket")
TICKET = str(SPEC.params["ticket_id"])
READ = CallSkill(skill="read_ticket")
TRIAGE = CallSkill(skill="triage_ticket", params={"category": "account", "priority": "P2"})
REPLY = CallSkill(skill="reply_with_kb")
CLOSE = CallSkill(skill="close_ticket")


def _build(tmp_path: Path, spec: TaskSpec = SPEC) -> Environment:
    return get_family("ticket").build(spec, tmp_path / spec.id)


def _run(env: Environment, actions: Sequence[Action], tools: Tools | None = None) -> RunResult:
    return run_plan(SPEC, env, actions, tools=tools)[0]


def _db(env: Environment, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    with sqlite3.connect(env.root / DB) as conn:
        return list(conn.execute(sql, args))


def _checks(env: Environment) -> dict[str, Any]:
    return {c.name: c for c in env.check(TicketState(task_id="x"))}


def _state(result: RunResult) -> TicketState:
    assert isinstance(result.state, TicketState)
    return result.state


def _errors(result: RunResult, kind: str) -> list[str]:
    return [e.message for e in result.state.errors if e.kind == kind]


@pytest.mark.parametrize("variant", VARIANT_NAMES)
def test_oracle_passes_every_variant(variant: str, tmp_path: Path) -> None:
    """The oracle succeeds, recovers from each interruption and repeats no effect."""
    assert_oracle_passes(SPEC, variant, tmp_path)


def test_spec_group_budget_and_constraints(tmp_path: Path) -> None:
    """The seed spec is short, its budget covers the tools plan, its rules are stated."""
    env = _build(tmp_path)
    assert SPEC.group == group_of(len(env.plan_skills)) == "short"
    assert len(env.plan_skills) <= 8
    assert SPEC.max_steps >= math.ceil(1.5 * len(env.plan_tools)) + 3
    assert len(env.expected_facts) == len(env.plan_skills)
    assert any("P1 only" in c for c in SPEC.constraints)
    assert any("refund" in c for c in SPEC.constraints)
    assert env.effect_tools == {"update_ticket", "post_reply", "close_ticket"}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_tickets_are_noisy_with_a_misleading_keyword(name: str) -> None:
    """Keyword matching over the whole mail picks the decoy; the requester's own words don't."""
    s = SCENARIOS[name]
    assert naive_category(s.subject, s.body) == s.decoy != s.category
    assert classify(s.body) == s.category
    assert len(s.body) > 1000
    assert len(own_message(s.body)) < len(s.body) / 2
    assert forbidden_words(own_message(s.body))  # the requester asks for money back
    assert s.reported_priority != priority_rule(s.kind, s.users_affected, s.blocking)


def test_get_ticket_returns_the_whole_noisy_row(tmp_path: Path) -> None:
    env = _build(tmp_path)
    row = env.tools["get_ticket"](ticket_id=TICKET)
    assert row["reported_priority"] == "P1"
    assert row["users_affected"] == 1
    assert "> " in row["body"]
    assert row["asset_tag"] is None
    articles = env.tools["search_kb"](category="account")
    assert [a["superseded_by"] is None for a in articles] == [False, True]
    with pytest.raises(LookupError):
        env.tools["get_ticket"](ticket_id="T-0000")
    with pytest.raises(ValueError, match="unknown category"):
        env.tools["update_ticket"](ticket_id=TICKET, category="billing", priority="P2")


def test_checks_fail_on_an_untouched_database(tmp_path: Path) -> None:
    env = _build(tmp_path)
    checks = _checks(env)
    assert not checks["ticket_category"].ok
    assert not checks["ticket_priority"].ok
    assert not checks["reply_posted_once"].ok
    assert not checks["reply_quotes_kb"].ok
    assert not checks["ticket_closed"].ok
    assert checks["reply_no_refund"].ok
    assert checks["other_tickets_untouched"].ok


def test_checks_name_every_trap_taken(tmp_path: Path) -> None:
    """Decoy category, the requester's P1, the superseded article and a refund promise."""
    env = _build(tmp_path)
    tools = env.tools
    tools["update_ticket"](ticket_id=TICKET, category="network", priority="P1")
    old = tools["search_kb"](category="network")[0]
    body = f"{old['solution']} We will refund this month's fee."
    tools["post_reply"](ticket_id=TICKET, body=body)
    tools["close_ticket"](ticket_id=TICKET)
    checks = _checks(env)
    assert not checks["ticket_category"].ok
    assert "'network', expected 'account'" in checks["ticket_category"].detail
    assert not checks["ticket_priority"].ok
    assert "one user who cannot work" in checks["ticket_priority"].detail
    assert not checks["reply_quotes_kb"].ok
    assert "KB-311" in checks["reply_quotes_kb"].detail
    assert not checks["reply_no_refund"].ok
    assert "refund" in checks["reply_no_refund"].detail
    assert checks["reply_posted_once"].ok
    assert checks["ticket_closed"].ok


def test_tools_plan_passes_and_a_second_reply_or_another_ticket_fails(tmp_path: Path) -> None:
    env = _build(tmp_path)
    for action in env.plan_tools:
        if isinstance(action, CallSkill) and action.skill.startswith("tool_"):
            env.tools[action.skill.removeprefix("tool_")](**action.params)
    checks = _checks(env)
    assert all(c.ok for c in checks.values()), [c for c in checks.values() if not c.ok]
    env.tools["post_reply"](ticket_id=TICKET, body="Following up.")
    other = env.tools["get_ticket"](ticket_id="T-2046")
    category = next(c for c in ("network", "hardware") if c != other["category"])
    env.tools["update_ticket"](ticket_id="T-2046", category=category, priority="P1")
    checks = _checks(env)
    assert not checks["reply_posted_once"].ok
    assert "2 replies" in checks["reply_posted_once"].detail
    assert not checks["other_tickets_untouched"].ok
    assert "T-2046" in checks["other_tickets_untouched"].detail


def test_read_verify_refuses_a_ticket_read_wrong(tmp_path: Path) -> None:
    env = _build(tmp_path)
    real = env.tools["get_ticket"]

    def misread(ticket_id: str) -> dict[str, Any]:
        return {**real(ticket_id=ticket_id), "users_affected": 12}

    result = _run(env, [READ], tools={"get_ticket": misread})
    assert _state(result).message is None
    assert any("users_affected" in m for m in _errors(result, "verify_failed"))


def test_triage_verify_refuses_the_decoy_and_rollback_restores_the_row(tmp_path: Path) -> None:
    env = _build(tmp_path)
    wrong = CallSkill(skill="triage_ticket", params={"category": "network", "priority": "P1"})
    result = _run(env, [READ, wrong])
    state = _state(result)
    assert state.category is None
    assert state.priority is None
    message = _errors(result, "verify_failed")[0]
    assert "own words are about account" in message
    assert "priority is P2" in message
    assert "rolled back" in _errors(result, "step_failed")[0]
    assert _db(env, "SELECT category, priority FROM tickets WHERE id = ?", TICKET) == [(None, None)]


def test_reply_verify_refuses_a_second_reply_and_removes_only_its_own(tmp_path: Path) -> None:
    env = _build(tmp_path)
    env.tools["post_reply"](ticket_id=TICKET, body="Sorry, we will refund you.")
    result = _run(env, [READ, TRIAGE, REPLY])
    messages = _errors(result, "verify_failed")
    assert any("2 replies" in m for m in messages)
    assert _state(result).reply_id is None
    bodies = [b for (b,) in _db(env, "SELECT body FROM replies WHERE ticket_id = ?", TICKET)]
    assert bodies == ["Sorry, we will refund you."]


def test_close_verify_refuses_and_rollback_reopens(tmp_path: Path) -> None:
    env = _build(tmp_path)
    close = env.tools["close_ticket"]

    def close_and_reply(ticket_id: str) -> str:
        # Someone answers again while the ticket is being closed: verify must refuse.
        env.tools["post_reply"](ticket_id=ticket_id, body="Any news?")
        return str(close(ticket_id=ticket_id))

    result = _run(env, [READ, TRIAGE, REPLY, CLOSE], tools={"close_ticket": close_and_reply})
    assert _state(result).closed is False
    assert any("2 replies" in m for m in _errors(result, "verify_failed"))
    assert _db(env, "SELECT status, closed_at FROM tickets WHERE id = ?", TICKET) == [
        ("open", None)
    ]


class _Killed(BaseException):
    """Stands for kill -9 right after the effect: nothing after it runs."""


def test_resume_after_a_crash_mid_reply_never_posts_twice(tmp_path: Path) -> None:
    env = _build(tmp_path)
    post = env.tools["post_reply"]

    def post_then_die(ticket_id: str, body: str) -> dict[str, Any]:
        post(ticket_id=ticket_id, body=body)
        raise _Killed

    store = MemoryStore()
    crashing = scripted_agent(SPEC, env, env.plan_skills, tools={"post_reply": post_then_die})
    runtime = Runtime(crashing, store, max_steps=10)
    runtime.start("t", **env.initial)
    with pytest.raises(_Killed):
        runtime.run("t")
    assert store.load("t").state["pending_effect"] is not None
    rest = env.plan_skills[3:]
    result = Runtime(scripted_agent(SPEC, env, rest), store, max_steps=10).run("t")
    assert result.stopped == "completed"
    assert not result.state.errors
    assert all(c.ok for c in env.check(result.state))
    assert len(_db(env, "SELECT id FROM replies WHERE ticket_id = ?", TICKET)) == 1


def test_a_multi_user_outage_is_p1_and_passes(tmp_path: Path) -> None:
    """The other scenario: a network outage of 14 users, reported as P3 with a credit ask."""
    params = {**SPEC.params, "scenario": "vpn_outage", "ticket_id": "T-3100", "seed": 5}
    spec = SPEC.model_copy(update={"id": "ticket-vpn", "params": params})
    env = _build(tmp_path, spec)
    triage = next(a for a in env.plan_skills if isinstance(a, CallSkill) and a.params)
    assert triage.params == {"category": "network", "priority": "P1"}
    result = run_task(spec, VARIANTS["skillstate"], seed=0, workdir=tmp_path, recovery=False)
    assert result.success, (result.failure, result.checks)
    body = reply_body("T-3100", "network", "P1", "KB-117", "x")
    assert not forbidden_words(body)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"seed": 0, "ticket_id": "T-1"}, "need scenario"),
        ({**SPEC.params, "scenario": "nope"}, "unknown scenario 'nope'"),
        ({**SPEC.params, "ticket_id": "2047"}, "T-2047"),
    ],
)
def test_bad_params_are_a_usage_error(params: dict[str, Any], message: str, tmp_path: Path) -> None:
    spec = SPEC.model_copy(update={"params": params})
    with pytest.raises(UsageError, match=message):
        get_family("ticket").build(spec, tmp_path)
