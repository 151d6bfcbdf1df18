"""Fan-out in one process: Spawn/Map, stable child ids, the join, failed children as
data, outputs validated, limits, and children run concurrently under AsyncRuntime."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from skillstate import Agent, Runtime, StateMachine
from skillstate.engine.actions import Map, Spawn, action_json_schema, validate_decision
from skillstate.engine.aruntime import AsyncRuntime
from skillstate.engine.policy import ScriptedPolicy
from skillstate.errors import (
    ActionRejected,
    AgentImportError,
    ChildConflict,
    StaleState,
    UsageError,
)
from skillstate.fanout import Child, child_id, joined
from skillstate.fanout.spawn import check_spawns, requests_of
from skillstate.state.model import ParentLink, TaskStatus
from skillstate.store import open_store
from skillstate.store.base import Store
from skillstate.store.memory import MemoryStore
from tests import fanout_agent
from tests.fanout_agent import PROBE, ChannelState, channel_agent, parent


def _creates(store: Store, task_id: str) -> int:
    return sum(e.action.get("kind") == "create" for e in store.events(task_id))


def _kinds(store: Store, task_id: str) -> list[str]:
    return [str(e.action.get("kind")) for e in store.events(task_id)]


def _children_tasks(store: Store, parent_id: str) -> list[str]:
    return sorted(t for t in store.tasks() if t.startswith(f"{parent_id}."))


@pytest.fixture(autouse=True)
def _probe() -> None:
    PROBE.reset()


class TestSpawnAndIds:
    def test_map_creates_children_with_ids_from_the_spawning_version(self) -> None:
        """A Map is one parent commit; then one task per item, keyed PARENT.VERSION.KEY."""
        store = MemoryStore()
        runtime = Runtime(parent, store, children="dispatch")
        runtime.start("p", channels=["email", "web"])
        result = runtime.run("p")
        assert result.stopped == "waiting_children"
        state = result.state
        assert state.status is TaskStatus.WAITING_CHILDREN
        assert [r.task_id for r in state.children] == [child_id("p", 2, "email"), "p.2.web"]
        assert all(r.status == "pending" for r in state.children)
        assert _kinds(store, "p") == ["create", "map"]  # the spawn: one commit
        for record in state.children:
            child = store.load(record.task_id).state
            assert child["parent"]["task_id"] == "p"
            assert child["parent"]["version"] == 2
            assert child["parent"]["depth"] == 1
            assert child["channel"] == record.key
            assert child["agent"] == "tests.fanout_agent:channel_agent"

    def test_rerunning_a_waiting_parent_spawns_nothing_twice(self) -> None:
        """Driving the parent again finds the same ids: no second child, no second spawn."""
        store = MemoryStore()
        runtime = Runtime(parent, store, children="dispatch")
        runtime.start("p", channels=["a", "b", "c"])
        runtime.run("p")
        for _ in range(3):
            assert runtime.run("p").stopped == "waiting_children"
        assert _children_tasks(store, "p") == ["p.2.a", "p.2.b", "p.2.c"]
        assert all(_creates(store, t) == 1 for t in _children_tasks(store, "p"))
        assert _kinds(store, "p") == ["create", "map"]

    def test_inline_run_joins_once_and_completes(self) -> None:
        store = MemoryStore()
        runtime = Runtime(parent, store)
        runtime.start("p", channels=["email", "web"])
        result = runtime.run("p")
        assert result.stopped == "completed"
        assert result.state.report == "email=5, web=3"
        assert _kinds(store, "p").count("join") == 1
        join = next(e for e in store.events("p") if e.action.get("kind") == "join")
        assert join.actor == "runtime"
        assert join.action["children"] == {"p.2.email": "completed", "p.2.web": "completed"}
        records = joined(result.state, "channel")
        assert [r.outputs for r in records] == [
            {"channel": "email", "score": 5},
            {"channel": "web", "score": 3},
        ]
        assert all(r.fields is None for r in records)  # the child's card holds them now
        assert PROBE.calls == ["email", "web"]  # sync inline: one after another

    def test_a_skill_kind_maps_over_params(self) -> None:
        """Child(skill): one task per item, calling the skill with it, then finishing."""
        store = MemoryStore()
        runtime = Runtime(parent, store)
        runtime.start("p", texts=["ab", "xyz"])
        result = runtime.run("p")
        assert result.stopped == "completed", result.state.errors
        outputs = [r.outputs for r in joined(result.state, "measure")]
        assert outputs == [{"measured": "ab:2"}, {"measured": "xyz:3"}]
        assert [r.key for r in result.state.children] == ["0", "1"]  # keyed by index
        child = store.load("p.2.0").state
        assert child["agent"] == "tests.fanout_agent:parent#children.measure"

    def test_ctx_spawn_commits_with_the_step(self) -> None:
        store = MemoryStore()
        runtime = Runtime(parent, store)
        runtime.start("p", delegate="chat")
        result = runtime.run("p")
        assert result.stopped == "completed"
        step = next(e for e in store.events("p") if e.action.get("kind") == "call_skill")
        assert step.version == 2
        assert [r.task_id for r in result.state.children] == ["p.2.chat"]
        assert result.state.report == "chat=4"

    def test_the_join_is_one_compare_and_set(self) -> None:
        """Two drivers that read the same waiting head: one joins, the other loses the
        compare-and-set and writes nothing (no second join event)."""
        store = MemoryStore()
        runtime = Runtime(parent, store, children="dispatch", lease=False)
        runtime.start("p", channels=["email", "web"])
        waiting = runtime.run("p").state
        for record in waiting.children:
            Runtime(channel_agent, store).run(record.task_id)
        hook = runtime._children  # the run loop's hook, as each driver has its own
        assert hook.settle(waiting) is True
        with pytest.raises(StaleState):
            hook.settle(waiting)
        assert _kinds(store, "p").count("join") == 1
        assert runtime.load("p").status is TaskStatus.RUNNING

    def test_a_waiting_parent_takes_no_step(self) -> None:
        store = MemoryStore()
        runtime = Runtime(parent, store, children="dispatch")
        runtime.start("p", channels=["email"])
        runtime.run("p")
        with pytest.raises(UsageError, match="cannot step \\(status: waiting_children\\)"):
            runtime.step("p")

    def test_a_child_id_taken_by_another_task_fails_loudly(self) -> None:
        store = MemoryStore()
        Runtime(channel_agent, store).start("p.2.email", channel="email")
        runtime = Runtime(parent, store)
        runtime.start("p", channels=["email"])
        with pytest.raises(ChildConflict, match="another parent"):
            runtime.run("p")

    def test_load_agent_resolves_a_child_kind_reference(self) -> None:
        from skillstate import load_agent

        agent = load_agent("tests.fanout_agent:parent#children.measure")
        assert agent.skills.names == ("measure",)
        assert load_agent("tests.fanout_agent:parent#children.channel") is channel_agent
        with pytest.raises(AgentImportError, match="no child kind 'nope'"):
            load_agent("tests.fanout_agent:parent#children.nope")


class TestWaitingChild:
    def test_a_child_waiting_for_a_user_leaves_the_parent_waiting(self) -> None:
        """Inline, a child that cannot end in this run does not spin: the parent's run
        returns waiting_children; once the child is answered, the parent goes on."""
        store = MemoryStore()
        runtime = Runtime(parent, store)
        runtime.start("p", channels=["email", "voice"], ask=["voice"])
        result = runtime.run("p")
        assert result.stopped == "waiting_children"
        assert store.load("p.2.email").state["status"] == "completed"
        assert store.load("p.2.voice").state["status"] == "waiting_user"
        assert runtime.run("p").stopped == "waiting_children"  # still: nobody answered
        assert _kinds(store, "p") == ["create", "map"]
        Runtime(channel_agent, store).reply("p.2.voice", "last week")
        result = runtime.run("p")
        assert result.stopped == "completed"
        assert result.state.report == "email=5, voice=5"
        assert _kinds(store, "p").count("join") == 1


class TestFailedChildren:
    def test_a_failed_child_is_data_and_the_policy_retries(self) -> None:
        store = MemoryStore()
        runtime = Runtime(parent, store)
        runtime.start("p", channels=["ok", "bad"], bad=["bad"], on_failure="retry")
        result = runtime.run("p")
        assert result.stopped == "completed"
        first, retry = [r for r in result.state.children if r.key == "bad"]
        assert first.status == "failed"
        assert "could not be analysed" in (first.error or "")
        assert retry.status == "completed"
        assert retry.task_id == "p.4.bad" != first.task_id
        assert result.state.report == "ok=2, bad=3"
        assert _kinds(store, "p").count("join") == 2
        view = parent.view(result.state).text
        assert "- channel bad [failed]: " in view
        assert "- channel ok [completed]" in view

    def test_the_policy_may_fail_the_parent(self) -> None:
        store = MemoryStore()
        runtime = Runtime(parent, store)
        runtime.start("p", channels=["ok", "bad"], bad=["bad"], on_failure="fail")
        result = runtime.run("p")
        assert result.stopped == "failed"
        assert "channel bad failed" in result.state.errors[-1].message

    def test_outputs_that_do_not_validate_make_a_failed_child(self) -> None:
        class Strict(BaseModel):
            channel: str
            missing: int

        strict = _parent_with({"channel": Child(channel_agent, outputs=Strict)})
        store = MemoryStore()
        runtime = Runtime(strict, store)
        runtime.start("p", channels=["email"], on_failure="skip")
        result = runtime.run("p")
        assert result.stopped == "completed"
        (record,) = result.state.children
        assert record.status == "failed"
        assert record.outputs is None
        assert record.error is not None
        assert "do not validate against Strict" in record.error
        assert "missing" in record.error
        assert store.load("p.2.email").state["status"] == "completed"  # the child did


def _parent_with(children: dict[str, Any], **options: Any) -> Agent[Any]:
    return Agent(
        name="strict-parent",
        state_type=fanout_agent.ParentState,
        machine=StateMachine({"work": ["work", "done"], "done": []}),
        skills=fanout_agent.parent_skills,
        policy=ScriptedPolicy(fanout_agent.plan),
        can_ask=False,
        children=children,
        **options,
    )


class TestLimits:
    def test_a_map_wider_than_max_children_is_refused(self) -> None:
        narrow = _parent_with({"channel": channel_agent}, max_children=2)
        store = MemoryStore()
        runtime = Runtime(narrow, store, max_steps=1)
        runtime.start("p", channels=["a", "b", "c"])
        result = runtime.run("p")
        assert result.state.children == ()
        assert _children_tasks(store, "p") == []
        assert result.state.status is not TaskStatus.WAITING_CHILDREN
        error = result.state.errors[-1]
        assert error.kind == "action_rejected"
        assert error.message == "3 children in one spawn: at most 2 (max_children)"

    def test_depth_total_keys_kinds_and_fields(self) -> None:
        agent = _parent_with({"channel": channel_agent}, max_children=2, max_depth=2)
        state = agent.new_state("p")
        spawn = requests_of(Spawn(child="channel", key="a", set={"channel": "a"}))
        assert check_spawns(agent, state, spawn)[0].task_id == "p.1.a"
        deep = state.replace(parent=ParentLink(task_id="r", version=3, name="x", key="k", depth=2))
        with pytest.raises(ActionRejected, match="depth 3: the tree is at most 2"):
            check_spawns(agent, deep, spawn)
        full = state.replace(children=check_spawns(agent, state, spawn) * 8)
        with pytest.raises(ActionRejected, match="at most 8 \\(4 x max_children\\)"):
            check_spawns(agent, full, spawn)
        cases = [
            (Spawn(child="nope", key="a"), "cannot spawn child kind 'nope'"),
            (Map(child="channel", over=[{"channel": "a"}] * 2, key="channel"), "given twice"),
            (Map(child="channel", over=[{"channel": "a b"}], key="channel"), "must match"),
            (Map(child="channel", over=[{"x": 1}], key="channel"), "no key field"),
            (Spawn(child="channel", key="a", set={"score": "many"}), "score"),
            (Spawn(child="channel", key="a", set={"nothing": 1}), "nothing"),
        ]
        for action, message in cases:
            with pytest.raises(ActionRejected, match=message):
                check_spawns(agent, state, requests_of(action))

    def test_agent_declarations_are_checked(self) -> None:
        with pytest.raises(UsageError, match="max_children must be an integer >= 1"):
            _parent_with({"channel": channel_agent}, max_children=0)
        with pytest.raises(UsageError, match="must be an Agent, a Skill"):
            _parent_with({"channel": 42})
        with pytest.raises(UsageError, match="must match"):
            _parent_with({"bad name": channel_agent})
        with pytest.raises(UsageError, match="children must be 'inline' or 'dispatch'"):
            Runtime(parent, MemoryStore(), children="elsewhere")  # type: ignore[arg-type]


class TestOffered:
    def test_spawn_and_map_are_offered_only_to_agents_that_declare_children(self) -> None:
        reply = '{"kind": "spawn", "child": "channel", "key": "a", "reason": ""}'
        with pytest.raises(ActionRejected, match="declares no children"):
            validate_decision(reply, {}, ())
        action = validate_decision(reply, {}, (), children=("channel",))
        assert isinstance(action, Spawn)
        plain = channel_agent.view(channel_agent.new_state("c")).action_schema
        kinds = {b["properties"]["kind"]["const"] for b in plain["anyOf"]}
        assert "spawn" not in kinds
        assert "map" not in kinds
        schema = parent.view(parent.new_state("p")).action_schema
        branches = {b["properties"]["kind"]["const"]: b for b in schema["anyOf"]}
        assert branches["spawn"]["properties"]["child"] == {"enum": ["channel", "measure"]}
        assert branches["map"]["properties"]["over"]["maxItems"] >= 1
        assert {"spawn", "map"} <= set(action_json_schema()["discriminator"]["mapping"])


class TestAsync:
    def test_ten_children_run_concurrently_bounded_and_join_once(self) -> None:
        """Each child's skill waits until two run together: that only happens when the
        AsyncRuntime really runs them at once (a sequential run would see one at a time)."""
        PROBE.reset(want=2)
        store = MemoryStore()
        channels = [f"c{i}" for i in range(10)]

        async def main() -> Any:
            runtime = AsyncRuntime(parent, store, max_concurrency=4)
            await runtime.start("p", channels=channels)
            return await runtime.run("p")

        result = asyncio.run(main())
        assert result.stopped == "completed"
        assert 2 <= PROBE.most <= 4  # concurrent, and bounded by max_concurrency
        tasks = _children_tasks(store, "p")
        assert tasks == sorted(f"p.2.{c}" for c in channels)
        assert all(_creates(store, t) == 1 for t in tasks)
        assert all(store.load(t).state["status"] == "completed" for t in tasks)
        assert sorted(PROBE.calls) == sorted(channels)  # each child's skill ran once
        assert _kinds(store, "p").count("join") == 1
        assert len(joined(result.state, "channel")) == 10

    @pytest.mark.parametrize("backend", ["sqlite", "postgres"])
    def test_children_share_one_store_of_each_kind(self, backend: str, tmp_path: Path) -> None:
        """The same under AsyncRuntime with a store shared across threads (SQLite) and with
        an async store whose calls run on the loop (PostgreSQL)."""
        from skillstate.store.aio import open_async_store

        PROBE.reset(want=2)
        if backend == "postgres":
            from tests.contract.backends import drop_postgres_schemas, postgres_url_for

            url = postgres_url_for(tmp_path)
        else:
            url = f"sqlite:///{tmp_path / 'state.db'}"

        async def main() -> Any:
            store = await open_async_store(url)
            try:
                runtime = AsyncRuntime(parent, store, max_concurrency=3)
                await runtime.start("p", channels=[f"c{i}" for i in range(6)])
                result = await runtime.run("p")
                events = await store.events("p")
                return result, [e.action.get("kind") for e in events]
            finally:
                await store.close()

        try:
            result, kinds = asyncio.run(main())
        finally:
            if backend == "postgres":
                drop_postgres_schemas()
        assert result.stopped == "completed"
        assert 2 <= PROBE.most <= 3
        assert kinds.count("map") == 1
        assert kinds.count("join") == 1
        assert len(joined(result.state, "channel")) == 6

    def test_max_concurrency_is_checked(self) -> None:
        with pytest.raises(UsageError, match="max_concurrency"):
            AsyncRuntime(parent, MemoryStore(), max_concurrency=0)


class TestView:
    def test_the_children_section_yields_to_the_budget(self) -> None:
        store = MemoryStore()
        runtime = Runtime(parent, store)
        runtime.start("p", channels=[f"channel{i:02d}" for i in range(12)])
        state = runtime.run("p").state
        whole = parent.view(state).text
        assert whole.count("- channel channel") == 12
        from skillstate.state.view import render_view

        view = render_view(state, budget=160, child_kinds=("channel",))
        assert "children" in view.dropped
        assert "earlier children hidden by the view budget" in view.text
        assert "Goal:" in view.text
        assert isinstance(state, fanout_agent.ParentState)
        assert not isinstance(state, ChannelState)


class TestStatusEverywhere:
    def test_tasks_waiting_lists_a_parent_waiting_for_its_children(self, tmp_path: Path) -> None:
        from tests.test_cli import run_cli, store_url

        store = open_store(store_url(tmp_path))
        runtime = Runtime(parent, store, children="dispatch")
        runtime.start("p", channels=["email"])
        assert runtime.run("p").stopped == "waiting_children"
        store.close()
        code, out, err = run_cli(tmp_path, "tasks", "--waiting", "--json")
        assert code == 0, err
        rows = {row["task_id"]: row for row in json.loads(out)}
        assert set(rows) == {"p"}  # the child has not run: it is created, not waiting
        assert rows["p"]["status"] == "waiting_children"

    def test_card_checks_pair_the_status_with_pending_children(self) -> None:
        from skillstate.engine.edits import card_problems

        state = parent.new_state("p")
        records = check_spawns(parent, state, requests_of(Spawn(child="channel", key="a")))
        assert card_problems(parent, state.replace(status=TaskStatus.WAITING_CHILDREN)) == [
            "status waiting_children but no child is pending"
        ]
        running = state.replace(status=TaskStatus.RUNNING, children=records)
        assert "status running with pending children" in card_problems(parent, running)[0]

    def test_cli_resumes_a_child_kind_through_its_parents_allowed_reference(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A skill kind's task records ``parent#children.measure``: allowing the parent's
        reference allows it; resuming the parent then runs the rest and joins."""
        from tests.test_cli import run_cli, store_url

        monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[1]))
        store = open_store(store_url(tmp_path))
        runtime = Runtime(parent, store, children="dispatch")
        runtime.start("p", texts=["ab", "xyz"])
        runtime.run("p")
        store.close()
        code, _, err = run_cli(tmp_path, "resume", "p.2.0", "-q")
        assert code == 2
        assert "not an allowed agent" in err
        monkeypatch.setenv("SKILLSTATE_AGENTS", "tests.fanout_agent:parent")
        code, _, err = run_cli(tmp_path, "resume", "p.2.0", "-q")
        assert code == 0, err
        code, _, err = run_cli(tmp_path, "resume", "p", "-q")
        assert code == 0, err
        store = open_store(store_url(tmp_path))
        try:
            assert store.load("p").state["status"] == "completed"
            assert _kinds(store, "p.2.0") == ["create", "call_skill", "finish"]
            assert _kinds(store, "p").count("join") == 1
        finally:
            store.close()
