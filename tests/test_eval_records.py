"""The records family: the oracle's skills plan passes through the real runtime, the
skill library enforces the start-of-task constraint, verify catches bad steps, and
the long suite is reproducible and covers every length group."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skillstate.engine.actions import CallSkill, Finish
from skillstate.engine.runtime import Runtime, StepReport
from skillstate.errors import UsageError
from skillstate.eval.families import BUILTIN, get_family
from skillstate.eval.families.records import (
    LEDGER,
    SUMMARY,
    RecordsState,
    ledger_line,
    make_record,
    make_spec,
    record_id,
)
from skillstate.eval.suites import list_suites, load_suite, long_suite
from skillstate.eval.tasks import Environment, TaskSpec, group_of
from skillstate.store.memory import MemoryStore
from tests.eval_support import run_plan, scripted_agent

SPECS = [s for s in long_suite(seed=3, count=8) if s.params["n"] <= 30][:3]
ORACLE_SPECS = long_suite(seed=0)  # every task of the default suite, 5 to 60 decisions


def _build(spec: TaskSpec, tmp_path: Path) -> Environment:
    return get_family(spec.family).build(spec, tmp_path / spec.id)


@pytest.mark.parametrize("spec", ORACLE_SPECS, ids=[s.id for s in ORACLE_SPECS])
def test_oracle_skills_plan_passes_every_check(spec: TaskSpec, tmp_path: Path) -> None:
    env = _build(spec, tmp_path)
    assert len(env.plan_skills) == spec.params["n"] + 2
    assert spec.group == group_of(len(env.plan_skills))
    assert len(env.expected_facts) == len(env.plan_skills)
    seen: list[dict[str, object]] = []

    def observe(report: StepReport) -> None:
        # An effect commits twice (its intent, then its outcome): one decision each.
        if report.after.pending_effect is None:
            seen.append({k: getattr(report.after, k) for k in env.expected_facts[-1]})

    store = MemoryStore()
    runtime = Runtime(
        scripted_agent(spec, env, env.plan_skills),
        store,
        max_steps=len(env.plan_skills) + 2,
        observer=observe,
    )
    runtime.start(spec.id, **env.initial)
    result = runtime.run(spec.id)

    assert result.stopped == "completed", result.state.errors
    assert result.steps == len(env.plan_skills)
    checks = env.check(result.state)
    assert {c.name for c in checks} >= {"summary_total", "summary_count", "trap_skipped"}
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    # The expected facts hold after every step of the plan.
    for got, want in zip(seen, env.expected_facts, strict=True):
        assert got == {**got, **want}
    state = result.state
    assert isinstance(state, RecordsState)
    trap = spec.params["trap"]
    assert trap in state.skipped
    assert record_id(trap) not in (env.root / LEDGER).read_text()
    # The transient failure happened once and was retried inside the same step.
    assert not state.errors
    failed = [
        (event.attempts, call)
        for event in store.events(spec.id)
        for call in event.tool_calls
        if not call.ok
    ]
    assert len(failed) == 1
    attempts, call = failed[0]
    assert attempts == 2
    assert call.tool == "get_record"
    assert "ConnectionError" in call.summary
    assert call.args == {"i": spec.params["transient_failure"]}


def test_transient_failure_fails_once_then_works(tmp_path: Path) -> None:
    spec = SPECS[0]
    env = _build(spec, tmp_path)
    k = spec.params["transient_failure"]
    with pytest.raises(ConnectionError):
        env.tools["get_record"](i=k)
    assert env.tools["get_record"](i=k)["id"] == record_id(k)


def test_records_are_noisy_but_carry_amount_eur() -> None:
    record = make_record(SPECS[0].params, 0)
    assert {"amount", "amount_eur", "amount_eur_net", "adjustments", "notes"} <= set(record)
    assert record["amount"] != record["amount_eur"] or record["currency"] == "EUR"
    assert len(json.dumps(record)) > 1200


def test_a_wrong_record_order_is_caught_by_verify_and_rolled_back(tmp_path: Path) -> None:
    spec = SPECS[0]
    env = _build(spec, tmp_path)
    # Find a countable record to jump to: processing it out of order appends a line
    # that verify must refuse and rollback must remove.
    countable = next(
        i
        for i in range(1, spec.params["n"])
        if make_record(spec.params, i)["region"] != spec.params["forbidden_region"]
    )
    step = CallSkill(skill="process_record", params={"i": countable})
    # The index is bound to next_record: out of order, the call is refused before it runs.
    result, _ = run_plan(spec, env, [step], max_steps=1)
    assert "bound to next_record (0)" in result.state.errors[0].message
    assert (env.root / LEDGER).read_text() == ""
    # Unbound (`eval --no-bind`), it runs: verify refuses it and rollback removes its line.
    result, _ = run_plan(spec, env, [step], max_steps=3, bind=False)
    state = result.state
    assert isinstance(state, RecordsState)
    assert state.next_record == 0
    assert state.counted == 0
    kinds = [e.kind for e in state.errors]
    assert "verify_failed" in kinds
    assert "step_failed" in kinds
    assert "not the next one" in next(e.message for e in state.errors if e.kind == "verify_failed")
    assert (env.root / LEDGER).read_text() == ""


def test_a_forbidden_line_in_the_ledger_is_caught_by_verify(tmp_path: Path) -> None:
    spec = make_spec("records-trap", seed=11, n=5)
    env = _build(spec, tmp_path)
    trap = spec.params["trap"]
    # A wrong raw-tool action (what a tools-mode agent that forgot the constraint
    # would do) counts the trap record; the next skill's verify refuses to go on.
    env.tools["append_ledger"](line=ledger_line(trap, make_record(spec.params, trap)["amount_eur"]))
    result, _ = run_plan(
        spec, env, [CallSkill(skill="process_record", params={"i": 0})], max_steps=3
    )
    failed = [e for e in result.state.errors if e.kind == "verify_failed"]
    assert failed
    assert "not processed yet" in failed[0].message
    checks = {c.name: c for c in env.check(result.state)}
    assert not checks["trap_skipped"].ok
    assert not checks["ledger_no_forbidden"].ok


def test_checks_fail_without_output(tmp_path: Path) -> None:
    spec = SPECS[0]
    env = _build(spec, tmp_path)
    checks = {c.name: c for c in env.check(RecordsState(task_id="x"))}
    assert not checks["summary_total"].ok
    assert not checks["ledger_each_once"].ok
    assert "unreadable" in checks["summary_total"].detail


def test_tools_plan_shapes_and_values(tmp_path: Path) -> None:
    spec = SPECS[0]
    env = _build(spec, tmp_path)
    plan = env.plan_tools
    assert isinstance(plan[-1], Finish)
    calls = [a for a in plan if isinstance(a, CallSkill)]
    assert {c.skill for c in calls} == {
        "tool_get_record",
        "tool_append_ledger",
        "remember",
        "tool_write_summary",
    }
    gets = [c.params["i"] for c in calls if c.skill == "tool_get_record"]
    assert gets == list(range(spec.params["n"]))
    assert not any(
        c.params["line"].startswith(record_id(spec.params["trap"]) + " ")
        for c in calls
        if c.skill == "tool_append_ledger"
    )
    # Executing the plan's tool calls directly (the wrappers' job) passes the checks.
    for call in calls:
        if call.skill.startswith("tool_"):
            fn = env.tools[call.skill.removeprefix("tool_")]
            try:
                fn(**call.params)
            except ConnectionError:
                fn(**call.params)  # the wrapper's retry
    assert all(c.ok for c in env.check(RecordsState(task_id="x")))
    summary = json.loads((env.root / SUMMARY).read_text())
    assert summary["count"] == env.expected_facts[-1]["counted"]
    assert spec.max_steps >= len(plan)


def test_long_suite_is_deterministic_and_covers_every_group() -> None:
    first, again = long_suite(seed=0), long_suite(seed=0)
    assert [s.model_dump() for s in first] == [s.model_dump() for s in again]
    assert [s.model_dump() for s in long_suite(seed=1)] != [s.model_dump() for s in first]
    assert {s.group for s in first} == {"short", "medium", "long"}
    assert len({s.id for s in first}) == len(first) == 12
    for spec in first:
        plan = spec.params["n"] + 2
        assert spec.group == group_of(plan)
        assert 5 <= plan <= 60
        assert spec.params["trap"] >= spec.params["n"] - 2
        assert spec.params["transient_failure"] != spec.params["trap"]
        assert spec.params["forbidden_region"] in spec.constraints[0]
        assert TaskSpec.model_validate_json(spec.model_dump_json()) == spec
    assert load_suite("long", 0) == first
    assert {"long", "seeds"} <= set(list_suites())
    assert set(BUILTIN) == {"records", "ticket", "orders", "fix_syntax", "sales", "channels"}
    with pytest.raises(UsageError):
        load_suite("nope")
    with pytest.raises(UsageError):
        get_family("nope")


class _Killed(BaseException):
    """Stands for kill -9 right after the effect: nothing after it runs."""


def test_resume_after_a_crash_mid_effect_never_duplicates_a_line(tmp_path: Path) -> None:
    spec = SPECS[0]
    env = _build(spec, tmp_path)
    first = next(i for i in range(spec.params["n"]) if i not in _skipped(spec))
    plan = env.plan_skills
    append = env.tools["append_ledger"]

    def append_then_die(line: str) -> str:
        append(line=line)
        raise _Killed

    store = MemoryStore()
    crashing = scripted_agent(spec, env, plan, tools={"append_ledger": append_then_die})
    runtime = Runtime(crashing, store, max_steps=len(plan) + 2)
    runtime.start(spec.id, **env.initial)
    with pytest.raises(_Killed):
        runtime.run(spec.id)
    assert store.load(spec.id).state["pending_effect"] is not None
    # A new process resumes: the pending effect is settled by the probe (no decision),
    # then the rest of the plan runs.
    rest = plan[first + 1 :]
    result = Runtime(scripted_agent(spec, env, rest), store, max_steps=len(plan) + 2).run(spec.id)
    assert result.stopped == "completed"
    assert result.steps == len(rest)
    assert not result.state.errors
    assert all(c.ok for c in env.check(result.state))
    assert (env.root / LEDGER).read_text().count(record_id(first) + " ") == 1


def _skipped(spec: TaskSpec) -> set[int]:
    forbidden = spec.params["forbidden_region"]
    return {
        i for i in range(spec.params["n"]) if make_record(spec.params, i)["region"] == forbidden
    }
