"""The stall guard: a decision that keeps failing the same way stops the task early.

Reproduced before the guard: a stuck decision (the same refused action, the same
failing verify, an exception inside a skill, a missing transition) ran until the
step budget: 50 error versions and 150 skill runs for one entry.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import BaseModel

from skillstate import (
    Action,
    Agent,
    AgentState,
    CallSkill,
    Finish,
    Outcome,
    Runtime,
    ScriptedPolicy,
    SkillContext,
    SkillRegistry,
    StateMachine,
    TaskStatus,
    Verdict,
    View,
)
from skillstate.store.memory import MemoryStore
from tests.test_cli import assert_no_traceback, run_cli, store_url


class Box(AgentState):
    items: int = 0


class Put(BaseModel):
    n: int = 1


def _added(state: Box, outcome: Outcome) -> Verdict:
    if state.items != outcome.writes["items"]:
        return Verdict.failed("the items were not added")
    return Verdict.passed()


def agent_with(
    decide: Callable[[View], Action],
    *,
    verify: Callable[[Box, Outcome], Verdict] | None = None,
    runs: list[int] | None = None,
    rollbacks: list[int] | None = None,
) -> Agent:
    """One skill, ``put``, that adds ``n`` items; its verify can be made to refuse."""
    skills = SkillRegistry()
    seen = runs if runs is not None else []
    undone = rollbacks if rollbacks is not None else []

    @skills.skill(step="filling", outputs=["items"], max_retries=2)
    def put(state: Box, params: Put, ctx: SkillContext) -> Outcome:
        """Add n items."""
        seen.append(params.n)
        return Outcome(writes={"items": state.items + params.n})

    put.verifier(verify or _added)
    put.rollbacker(lambda state, outcome, ctx: undone.append(1))
    return Agent(
        name="box",
        state_type=Box,
        machine=StateMachine({"init": ["filling"], "filling": ["filling", "done"], "done": []}),
        skills=skills,
        policy=ScriptedPolicy(decide),
    )


def always(action: Action) -> Callable[[View], Action]:
    return lambda view: action


class TestStall:
    def test_the_same_failing_verify_stops_after_three_decisions(self) -> None:
        """A verify that always refuses: 3 decisions (9 runs), not 50 (150), then failed."""
        runs: list[int] = []
        agent = agent_with(
            always(CallSkill(skill="put")),
            verify=lambda s, o: Verdict.failed("the box is sealed"),
            runs=runs,
        )
        store = MemoryStore()
        result = Runtime(agent, store, max_steps=50).run("t", create=True)
        assert result.stopped == "stalled"
        assert result.steps == 3
        assert len(runs) == 9  # 3 decisions x 3 attempts
        state = result.state
        assert state.status is TaskStatus.FAILED
        assert state.errors[-1].kind == "stalled"
        assert "the same decision failed 3 times: put" in state.errors[-1].message
        assert "the box is sealed" in state.errors[-1].message

    def test_decisions_without_progress_stop_at_max_stalled(self) -> None:
        """Different refusals, none making progress: stopped after max_stalled decisions."""
        counter = iter(range(100))

        def decide(view: View) -> Action:
            return CallSkill(skill="nope", params={"i": next(counter)})  # always unknown

        result = Runtime(agent_with(decide), MemoryStore(), max_stalled=4).run("t", create=True)
        assert result.stopped == "stalled"
        assert result.steps == 4
        assert "no progress in 4 decisions in a row" in result.state.errors[-1].message

    def test_a_missing_transition_and_an_exception_count_too(self) -> None:
        """An illegal transition repeated is stopped like a failing verify."""
        result = Runtime(
            agent_with(always(CallSkill(skill="put", next_step="done"))), MemoryStore()
        ).run("t", create=True)
        assert result.stopped == "stalled"
        assert "illegal transition" in result.state.errors[-1].message

    def test_progress_resets_the_count(self) -> None:
        """Failures between successful steps never add up to a stall."""
        calls = iter(range(100))

        def decide(view: View) -> Action:
            state = view.state
            assert isinstance(state, Box)
            if state.items >= 6:
                return Finish()
            # Two refusals, then a good step, over and over.
            return CallSkill(skill="put") if next(calls) % 3 == 2 else CallSkill(skill="nope")

        result = Runtime(agent_with(decide), MemoryStore(), max_stalled=3, max_repeats=3).run(
            "t", create=True
        )
        assert result.stopped == "completed"
        assert result.state.no_progress == 0
        assert result.state.tried == ()

    def test_a_success_that_changes_nothing_is_not_progress(self) -> None:
        """Adding 0 items, again and again: the guard stops it (and says it changed nothing)."""
        result = Runtime(
            agent_with(always(CallSkill(skill="put", params={"n": 0}))), MemoryStore()
        ).run("t", create=True)
        assert result.stopped == "stalled"
        assert "succeeded but changed nothing" in result.state.errors[-1].message

    def test_the_count_survives_a_resume(self) -> None:
        """One decision per process: the card keeps the count, so resuming cannot loop forever."""
        agent = agent_with(
            always(CallSkill(skill="put")), verify=lambda s, o: Verdict.failed("sealed")
        )
        store = MemoryStore()
        stopped = [
            Runtime(agent, store, max_steps=1).run("t", create=True).stopped for _ in range(3)
        ]
        assert stopped == ["max_steps", "max_steps", "stalled"]

    def test_off_when_asked(self) -> None:
        """max_stalled=None and max_repeats=None turn the guard off (the step budget applies)."""
        agent = agent_with(always(CallSkill(skill="nope")))
        result = Runtime(
            agent, MemoryStore(), max_steps=12, max_stalled=None, max_repeats=None
        ).run("t", create=True)
        assert result.stopped == "max_steps"
        assert result.state.no_progress == 12


class TestPark:
    def test_park_waits_for_a_person_and_a_reply_goes_on(self) -> None:
        """on_stall="park": the task waits with a question; a reply clears the count."""
        fixed = {"sealed": True}

        def verify(state: Box, outcome: Outcome) -> Verdict:
            return Verdict.failed("sealed") if fixed["sealed"] else Verdict.passed()

        def decide(view: View) -> Action:
            state = view.state
            assert isinstance(state, Box)
            return Finish() if state.items else CallSkill(skill="put")

        agent = agent_with(decide, verify=verify)
        store = MemoryStore()
        runtime = Runtime(agent, store, on_stall="park")
        parked = runtime.run("t", create=True)
        assert parked.stopped == "stalled"
        assert parked.state.status is TaskStatus.WAITING_USER
        assert parked.state.question is not None
        assert "stuck" in parked.state.question
        fixed["sealed"] = False  # a person fixed the world
        done = runtime.run("t", inputs=["unsealed it, go on"])
        assert done.stopped == "completed"
        assert done.state.no_progress == 0


class TestPermanent:
    def test_a_permanent_failure_is_not_retried(self) -> None:
        """Verdict.failed(..., permanent=True): one attempt, rollback at once, logged as such."""
        runs: list[int] = []
        undone: list[int] = []
        agent = agent_with(
            always(CallSkill(skill="put")),
            verify=lambda s, o: Verdict.failed("wrong box", permanent=True),
            runs=runs,
            rollbacks=undone,
        )
        store = MemoryStore()
        runtime = Runtime(agent, store)
        runtime.start("t")
        report = runtime.step("t")
        assert runs == [1]
        assert undone == [1]
        assert report.event.attempts == 1
        assert report.event.verdict is not None
        assert report.event.verdict.permanent
        assert report.after.errors[-1].kind == "step_failed"
        assert report.after.errors[-1].permanent


class TestView:
    def test_the_view_says_in_one_line_what_was_tried(self) -> None:
        """Failed attempts since the last progress: one line, with counts and the reason."""
        agent = agent_with(
            always(CallSkill(skill="put", params={"n": 2})),
            verify=lambda s, o: Verdict.failed("only 1 fits"),
        )
        store = MemoryStore()
        runtime = Runtime(agent, store)
        runtime.start("t")
        runtime.step("t")
        runtime.step("t")
        text = agent.view(runtime.load("t")).text
        tried = [line for line in text.splitlines() if line.startswith("Already tried")]
        assert tried == ['Already tried without progress: put {"n": 2} (2x) -> only 1 fits']
        assert "verify_failed" not in text  # the error log's details stay out of the prompt
        assert "attempt 3/3" not in text


def test_cli_exit_code_6_and_one_line_reason(tmp_path: Path) -> None:
    """skillstate resume of a task that stalls: exit 6, the reason, no traceback."""
    url = store_url(tmp_path)
    code, _, err = run_cli(
        tmp_path, "demo", "ledger", "--task-id", "L", "--steps", "5", "--max-steps", "3",
        "--ledger", str(tmp_path / "ledger.txt"), "--store", url, "-q",
    )  # fmt: skip
    assert code == 4, err
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("a file where a directory should be")
    code, _, err = run_cli(tmp_path, "set", "L", f"ledger={blocked}/ledger.txt", "--store", url)
    assert code == 0, err
    code, out, err = run_cli(tmp_path, "resume", "L", "--store", url, "-q")
    assert code == 6, out + err
    assert_no_traceback(out, err)
    assert "stalled" in out
    assert "the same decision failed 3 times" in out
    code, out, _ = run_cli(tmp_path, "view", "L", "--store", url)
    assert "Already tried without progress: append_entry" in out


@pytest.mark.parametrize("mode", ["sideways", "0"])
def test_cli_rejects_a_bad_on_stall(tmp_path: Path, mode: str) -> None:
    """--on-stall takes fail or park; anything else is exit 2 with one line."""
    args = ["--on-stall", mode] if mode != "0" else ["--max-stalled", "-1"]
    code, out, err = run_cli(tmp_path, "demo", "ledger", *args, "--store", store_url(tmp_path))
    assert code == 2
    assert_no_traceback(out, err)
