"""The async API (issue 17, point 1): ``AsyncRuntime`` drives the one runtime from asyncio.

Reproduced before: skillstate had no ``async def`` anywhere; a web server or an
asyncio agent had to block its loop on every step.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field

from skillstate import (
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
    Verdict,
)
from skillstate.engine.aruntime import AsyncRuntime
from skillstate.engine.policy import StatePolicy
from skillstate.examples.ledger import agent as ledger_agent
from skillstate.examples.ticket import agent as ticket_agent
from skillstate.llm.base import Completion, Message, Usage
from skillstate.skills.context import ToolError
from skillstate.store.memory import MemoryStore
from skillstate.store.sqlite import SQLiteStore


def same_history(a: Any, b: Any, task_id: str) -> None:
    """Two stores hold the same versions, decisions and final card (timestamps aside)."""
    ea, eb = a.events(task_id), b.events(task_id)
    assert [(e.version, e.action, e.skill, e.patch) for e in ea] == [
        (e.version, e.action, e.skill, e.patch) for e in eb
    ]


class TestDemos:
    def test_the_ticket_demo_runs_as_it_does_synchronously(self, tmp_path: Path) -> None:
        """Same decisions, same patches, same end: one step logic, two drivers."""
        sync_store = SQLiteStore(tmp_path / "sync.db")
        async_store = SQLiteStore(tmp_path / "async.db")
        inputs = list(ticket_agent.sample_inputs)
        done = Runtime(ticket_agent, sync_store).run("t", inputs=inputs, create=True)
        result = asyncio.run(
            AsyncRuntime(ticket_agent, async_store).run("t", inputs=inputs, create=True)
        )
        assert result.stopped == done.stopped == "completed"
        assert result.state.resolution == done.state.resolution
        same_history(sync_store, async_store, "t")

    def test_the_ledger_demo_writes_each_entry_once(self, tmp_path: Path) -> None:
        ledger = tmp_path / "ledger.txt"
        store = SQLiteStore(tmp_path / "s.db")

        async def go() -> Any:
            runtime = AsyncRuntime(ledger_agent, store)
            await runtime.start("l", ledger=str(ledger), target=5)
            return await runtime.run("l")

        result = asyncio.run(go())
        assert result.stopped == "completed"
        lines = ledger.read_text(encoding="utf-8").splitlines()
        assert [line.split()[-1] for line in lines] == ["1", "2", "3", "4", "5"]


# ---------------------------------------------------------------- a model that waits


class Count(AgentState):
    n: int = 0
    target: int = 3
    fetched: list[str] = Field(default_factory=list)


class NoArgs(BaseModel):
    pass


MACHINE = StateMachine({"init": ["init"]}, final=["init"])


class SlowModel:
    """An async provider that answers after ``delay`` seconds, counting calls in flight."""

    name = "slow"

    def __init__(self, delay: float = 0.05) -> None:
        self.delay = delay
        self.in_flight = 0
        self.most = 0

    def complete(self, messages: Sequence[Message], **_: Any) -> Completion:
        raise AssertionError("the async runtime must await acomplete")

    async def acomplete(self, messages: Sequence[Message], **_: Any) -> Completion:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            await asyncio.sleep(self.delay)
        finally:
            self.in_flight -= 1
        done = "n: 3" in messages[-1].content
        action = {"kind": "finish"} if done else {"kind": "call_skill", "skill": "bump"}
        return Completion(json.dumps(action), Usage(10, 5), "slow")


def count_agent(provider: Any) -> Agent:
    skills = SkillRegistry()

    @skills.skill(outputs=["n"], when=lambda s: s.n < s.target)
    def bump(state: Count, params: NoArgs, ctx: SkillContext) -> Outcome:
        """Add one."""
        return Outcome(writes={"n": state.n + 1})

    @bump.verifier
    def _one_more(state: Count, outcome: Outcome) -> bool:
        return 0 < state.n <= state.target

    return Agent(
        name="count", state_type=Count, machine=MACHINE, skills=skills,
        policy=StatePolicy(provider),
    )  # fmt: skip


class TestConcurrency:
    def test_one_loop_waits_for_many_models_at_once(self, tmp_path: Path) -> None:
        """50 tasks on one loop: their model calls overlap (observed, not timed), and
        every task ends right."""
        model = SlowModel()
        runtime = AsyncRuntime(count_agent(model), SQLiteStore(tmp_path / "s.db"))

        async def go() -> list[Any]:
            return await asyncio.gather(*(runtime.run(f"t{i}", create=True) for i in range(50)))

        results = asyncio.run(go())
        assert all(r.stopped == "completed" and r.state.n == 3 for r in results)
        assert model.most >= 10, f"at most {model.most} model calls were in flight at once"


# ---------------------------------------------------------------- async skills and tools


class FlakyTools:
    def __init__(self) -> None:
        self.tries = 0

    async def fetch(self, key: str) -> dict[str, str]:
        self.tries += 1
        if self.tries == 1:
            raise ConnectionError("first try fails")
        await asyncio.sleep(0)
        return {"key": key, "value": key.upper()}

    async def stuck(self, key: str) -> str:
        await asyncio.sleep(30)
        return "never"


def fetch_agent(tools: FlakyTools, **options: Any) -> Agent:
    skills = SkillRegistry()

    @skills.skill(outputs=["fetched"], tools=["fetch", "stuck"], when=lambda s: not s.fetched)
    async def fetch(state: Count, params: NoArgs, ctx: SkillContext) -> Outcome:
        """Fetch a value, then try a stuck tool once."""
        got = await ctx.acall("fetch", key="a", retries=2, backoff=0.01, timeout=5)
        late = await ctx.acall("stuck", key="b", timeout=0.05, errors="return")
        assert isinstance(late, ToolError)
        return Outcome(writes={"fetched": [got["value"], late.kind]})

    @fetch.verifier
    async def _fetched(state: Count, outcome: Outcome) -> Verdict:
        await asyncio.sleep(0)
        return Verdict(ok=state.fetched == ["A", "TimeoutError"])

    return Agent(
        name="fetch", state_type=Count, machine=MACHINE, skills=skills,
        policy=ScriptedPolicy(
            lambda v: CallSkill(skill="fetch") if not v.state.fetched else Finish()
        ),
        tools={"fetch": tools.fetch, "stuck": tools.stuck}, **options,
    )  # fmt: skip


class TestAsyncSkills:
    @pytest.mark.parametrize("driver", ["async", "sync"])
    def test_awaited_tools_retry_and_time_out_and_every_try_is_recorded(self, driver: str) -> None:
        """`async def run` + `await ctx.acall(...)`: a failed try is retried after its
        backoff, a stuck tool times out into a ToolError; the async verify is awaited.
        The synchronous Runtime runs the same skill (on a private loop)."""
        tools = FlakyTools()
        agent = fetch_agent(tools)
        store = MemoryStore()
        if driver == "async":
            result = asyncio.run(AsyncRuntime(agent, store).run("t", max_steps=3, create=True))
        else:
            result = Runtime(agent, store).run("t", max_steps=3, create=True)
        assert result.stopped == "completed", result.state.errors
        assert result.state.fetched == ["A", "TimeoutError"]
        (event,) = [e for e in store.events("t") if e.skill == "fetch"]
        calls = [(c.tool, c.ok, c.summary.split(":")[0]) for c in event.tool_calls]
        assert calls == [
            ("fetch", False, "ConnectionError"),
            ("fetch", True, '{"key"'),
            ("stuck", False, "TimeoutError"),
        ]
        assert tools.tries == 2


class TestStream:
    def test_each_decision_arrives_as_it_is_committed(self) -> None:
        runtime = AsyncRuntime(count_agent(SlowModel(0.0)), MemoryStore())

        async def go() -> list[tuple[int, str]]:
            return [
                (r.event.version, r.event.label) async for r in runtime.stream("t", create=True)
            ]

        seen = asyncio.run(go())
        assert seen == [(2, "call_skill:bump"), (3, "call_skill:bump"), (4, "call_skill:bump"),
                        (5, "finish")]  # fmt: skip

    def test_leaving_early_releases_the_lease_and_the_task_resumes(self) -> None:
        store = MemoryStore()
        runtime = AsyncRuntime(count_agent(SlowModel(0.0)), store, worker="first")

        async def first_step() -> int:
            async for report in runtime.stream("t", create=True):
                return report.event.version
            raise AssertionError("no step")

        assert asyncio.run(first_step()) == 2
        assert store.lease("t") is None  # released when the stream was left
        other = AsyncRuntime(count_agent(SlowModel(0.0)), store, worker="second")
        result = asyncio.run(other.resume("t"))
        assert result.stopped == "completed"
        assert result.state.n == 3


def test_a_sync_policy_is_called_in_a_thread_and_errors_reach_the_caller() -> None:
    """A policy without `adecide` still works; a skill that raises is the step's failure,
    an exception from the policy propagates out of `await run` (lease released)."""
    agent, store = count_agent(SlowModel(0.0)), MemoryStore()

    def boom(view: Any) -> Any:
        raise RuntimeError("policy crashed")

    crashing = replace(agent, policy=ScriptedPolicy(boom))
    runtime = AsyncRuntime(crashing, store, worker="w1")
    with pytest.raises(RuntimeError, match="policy crashed"):
        asyncio.run(runtime.run("t", create=True))
    assert store.lease("t") is None
