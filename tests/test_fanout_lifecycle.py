"""Rollback, fork and cancel of a parent task: what each does to its child tasks.

Children are real tasks of the waiting agent (``tests.tree_support``): each waits for a
signal, unfinished, so a cancel posted to it is taken when it next runs. Every test
checks the store afterwards: the parent's head and event, the children's inboxes and
heads -- not only what a call returned.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skillstate import Runtime
from skillstate.engine.rewind import fork_task, rollback_task
from skillstate.errors import ChildrenCrossed, UsageError
from skillstate.fanout import joined
from skillstate.state.model import ChildRecord, TaskStatus
from skillstate.store.base import Store
from skillstate.store.sqlite import SQLiteStore
from tests.cli_support import run_env
from tests.tree_support import CLI_ENV, commit_changes, end, spawn, start_waiting
from tests.waiting_agent import agent


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    db = SQLiteStore(tmp_path / "state.db")
    yield db
    db.close()


@pytest.fixture
def family(store: Store) -> tuple[int, list[str]]:
    """Parent ``p`` (waiting, then a spawn of a and b); a waits, b has completed.
    Returns the version before the spawn and the children's ids."""
    before = start_waiting(store, "p")
    children = spawn(store, "p", ["a", "b"])
    end(store, children[1])
    return before, children


def cancels(store: Store, task_id: str) -> list[dict[str, object]]:
    return [m.body for m in store.inbox(task_id) if m.kind == "cancel"]


def status(store: Store, task_id: str) -> str:
    return str(store.load(task_id).state["status"])


class TestRollback:
    def test_going_back_before_a_spawn_is_refused_and_names_the_children(
        self, store: Store, family: tuple[int, list[str]]
    ) -> None:
        before, children = family
        head = store.load("p").version
        with pytest.raises(ChildrenCrossed) as raised:
            rollback_task(store, "p", before, effects="keep")
        message = str(raised.value)
        assert "\n" not in message
        assert all(child in message for child in children)
        assert "--children detach" in message
        assert raised.value.children == tuple(children)
        assert store.load("p").version == head  # nothing written
        assert all(cancels(store, child) == [] for child in children)

    def test_detach_keeps_the_children_running_and_marks_the_records(
        self, store: Store, family: tuple[int, list[str]]
    ) -> None:
        before, children = family
        version = rollback_task(store, "p", before, children="detach")
        head = store.load("p").state
        assert head["version"] == version
        assert head["status"] == "waiting"  # the state of the target version
        assert [(c["task_id"], c["status"]) for c in head["children"]] == [
            (children[0], "detached"),
            (children[1], "detached"),
        ]
        assert "rollback to version" in head["children"][0]["error"]
        event = store.events("p")[-1]
        assert event.action["children"] == {"detached": children}
        assert all(cancels(store, child) == [] for child in children)
        assert status(store, children[0]) == "waiting"  # still running its course
        assert status(store, children[1]) == "completed"  # keeps its result

    def test_cascade_cancels_the_unfinished_children_then_detaches(
        self, store: Store, family: tuple[int, list[str]]
    ) -> None:
        before, (waiting, done) = family
        rollback_task(store, "p", before, children="cascade")
        event = store.events("p")[-1]
        posted = event.action["children"]
        assert posted["detached"] == [waiting, done]
        assert list(posted["cancelled"]) == [waiting]  # the completed one is left alone
        assert cancels(store, done) == []
        [body] = cancels(store, waiting)
        assert body["reason"] == f"parent p cancelled: rolled back to version {before}"
        # The cancel really lands: the child's next run takes it.
        result = Runtime(agent, store).run(waiting)
        assert result.state.status is TaskStatus.CANCELLED
        taken = store.events(waiting)[-1]
        assert taken.action["kind"] == "cancel"
        assert taken.action["seq"] == posted["cancelled"][waiting]

    def test_going_back_to_the_spawn_itself_or_later_crosses_nothing(
        self, store: Store, family: tuple[int, list[str]]
    ) -> None:
        before, _ = family
        end(store, "p", "running")
        version = rollback_task(store, "p", before + 1)  # the version that recorded the spawn
        head = store.load("p").state
        assert head["version"] == version
        assert [c["status"] for c in head["children"]] == ["pending", "pending"]
        assert "children" not in store.events("p")[-1].action

    def test_children_already_detached_are_not_crossed_again(
        self, store: Store, family: tuple[int, list[str]]
    ) -> None:
        before, _ = family
        rollback_task(store, "p", before, children="detach")
        # The detached records are on the new head; going back again refuses nothing.
        rollback_task(store, "p", before)
        assert "children" not in store.events("p")[-1].action

    def test_a_child_that_was_never_created_is_not_in_the_way(self, store: Store) -> None:
        """A spawn recorded, its child not created (a crash in between): nothing exists
        to refuse for."""
        before = start_waiting(store, "p")
        head = store.load("p")
        record = ChildRecord(task_id="p.9.x", name="part", key="x", version=head.version + 1)
        commit_changes(store, "p", "spawn", children=[record.model_dump(mode="json")])
        rollback_task(store, "p", before)
        assert store.load("p").state["children"] == []


class TestFork:
    def test_the_fork_starts_with_no_live_children(
        self, store: Store, family: tuple[int, list[str]]
    ) -> None:
        before, (waiting, done) = family
        at = before + 1  # the spawn: the parent waits for both children there
        forked = fork_task(store, agent, "p", at, "f", effects="keep")
        assert forked.status is TaskStatus.RUNNING  # nothing left to wait for
        assert [(c.task_id, c.status) for c in forked.children] == [
            (waiting, "detached"),
            (done, "detached"),
        ]
        assert store.events("f")[0].action["children"] == {"detached": [waiting, done]}
        assert cancels(store, waiting) == []
        assert store.load(waiting).state["parent"]["task_id"] == "p"  # still the source's

    def test_joined_records_are_kept_as_data(self, store: Store) -> None:
        start_waiting(store, "p")
        children = spawn(store, "p", ["a"])
        end(store, children[0])
        head = store.load("p").state
        joined = [dict(head["children"][0]) | {"status": "completed", "summary": "ok"}]
        commit_changes(store, "p", "join", children=joined, status="running")
        forked = fork_task(store, agent, "p", store.load("p").version, "f", effects="keep")
        assert [(c.status, c.summary) for c in forked.children] == [("completed", "ok")]
        assert "children" not in store.events("f")[0].action


class TestCancel:
    def test_cancel_of_a_parent_cascades_to_its_unfinished_children(
        self, store: Store, family: tuple[int, list[str]]
    ) -> None:
        _, (waiting, done) = family
        runtime = Runtime(agent, store)
        runtime.cancel("p", reason="not needed", actor="ops")
        result = runtime.run("p")
        assert result.state.status is TaskStatus.CANCELLED
        event = store.events("p")[-1]
        assert event.action["kind"] == "cancel"
        assert list(event.action["children"]) == [waiting]
        assert cancels(store, done) == []
        [body] = cancels(store, waiting)
        reason = "parent p cancelled: not needed"
        assert body == {"reason": reason, "actor": "ops", "compensate": False}
        child = runtime.run(waiting)
        assert child.state.status is TaskStatus.CANCELLED
        assert store.events(waiting)[-1].action["seq"] == event.action["children"][waiting]

    def test_the_cascade_reaches_grandchildren(self, store: Store) -> None:
        start_waiting(store, "p")
        [child] = spawn(store, "p", ["a"])
        [grandchild] = spawn(store, child, ["x"])
        runtime = Runtime(agent, store)
        runtime.cancel("p")
        runtime.run("p")
        assert runtime.run(child).state.status is TaskStatus.CANCELLED
        assert list(store.events(child)[-1].action["children"]) == [grandchild]
        assert runtime.run(grandchild).state.status is TaskStatus.CANCELLED

    def test_cancel_of_a_child_leaves_the_parent_alone(
        self, store: Store, family: tuple[int, list[str]]
    ) -> None:
        _, (waiting, _) = family
        runtime = Runtime(agent, store)
        runtime.cancel(waiting)
        assert runtime.run(waiting).state.status is TaskStatus.CANCELLED
        assert status(store, "p") == "waiting_children"
        assert cancels(store, "p") == []


class TestCli:
    def test_rollback_refused_then_detached(
        self, tmp_path: Path, store: Store, family: tuple[int, list[str]]
    ) -> None:
        before, children = family
        url = f"sqlite:///{tmp_path / 'state.db'}"
        args = ("rollback", "p", "--to", str(before), "--store", url, "--keep-effects")
        code, out, err = run_env(tmp_path, CLI_ENV, *args)
        assert code == 2
        assert len(err.strip().splitlines()) == 1
        assert children[0] in err
        code, out, err = run_env(tmp_path, CLI_ENV, *args, "--children", "cascade")
        assert code == 0, err
        assert f"2 child task(s) detached: {children[0]}, {children[1]}" in out
        assert f"cancel posted to the unfinished ones first: {children[0]}" in out

    def test_a_bad_children_choice_is_one_line(
        self, tmp_path: Path, store: Store, family: tuple[int, list[str]]
    ) -> None:
        before, _ = family
        url = f"sqlite:///{tmp_path / 'state.db'}"
        code, _, err = run_env(
            tmp_path, CLI_ENV, "rollback", "p", "--to", str(before), "--store", url,
            "--children", "drop",
        )  # fmt: skip
        assert code == 2
        assert "unknown --children 'drop'; choose from: refuse, detach, cascade" in err

    def test_fork_says_it_starts_without_children(
        self, tmp_path: Path, store: Store, family: tuple[int, list[str]]
    ) -> None:
        before, children = family
        url = f"sqlite:///{tmp_path / 'state.db'}"
        code, out, err = run_env(
            tmp_path, CLI_ENV, "fork", "p", "--at", str(before + 1), "--new-id", "f",
            "--store", url, "--keep-effects",
        )  # fmt: skip
        assert code == 0, err
        assert "the fork starts with no live children:" in out
        assert children[0] in out


def test_usage_errors_are_usage_errors() -> None:
    assert issubclass(ChildrenCrossed, UsageError)


def test_cli_cancel_of_a_parent_takes_the_childrens_cancels_here(
    tmp_path: Path, store: Store, family: tuple[int, list[str]]
) -> None:
    """No broker, nobody holds the children: ``cancel`` takes the parent's cancel, then
    each unfinished child's (and says so); the completed child is left alone."""
    _, (waiting, done) = family
    grandchild = spawn(store, waiting, ["x"])[0]
    url = f"sqlite:///{tmp_path / 'state.db'}"
    code, out, err = run_env(tmp_path, CLI_ENV, "cancel", "p", "--store", url, "-q")
    assert code == 0, err
    assert f"task p: cancel cascaded to 1 unfinished child task(s): {waiting}" in out
    assert f"{waiting}: cancelled" in out
    assert f"{grandchild}: cancelled" in out
    assert [status(store, t) for t in ("p", waiting, grandchild, done)] == [
        "cancelled",
        "cancelled",
        "cancelled",
        "completed",
    ]


class TestThroughARealSpawn:
    """The same semantics with children the fan-out engine spawned (``Map``), driven by
    ``Runtime(children="dispatch")`` so the test decides when each child runs."""

    @staticmethod
    def spawned(store: Store) -> tuple[Runtime[Any], list[str]]:
        from tests.fanout_agent import parent

        runtime = Runtime(parent, store, children="dispatch")
        runtime.start("p", channels=["a", "b"])
        result = runtime.run("p")
        assert result.stopped == "waiting_children"
        children = [c.task_id for c in result.state.children]
        assert len(children) == 2
        assert all(store.load(c).state["parent"]["task_id"] == "p" for c in children)
        return runtime, children

    def test_a_cancelled_child_is_joined_as_cancelled(self, store: Store) -> None:
        from tests.fanout_agent import channel_agent, parent

        _, (first, second) = self.spawned(store)
        child = Runtime(channel_agent, store)
        child.cancel(first, reason="not needed")
        assert child.run(first).state.status is TaskStatus.CANCELLED
        assert child.run(second).state.status is TaskStatus.COMPLETED
        done = Runtime(parent, store).run("p")
        assert done.stopped == "completed"
        join = next(e for e in store.events("p") if e.action.get("kind") == "join")
        assert join.action["children"] == {first: "cancelled", second: "completed"}
        assert done.state.report == "a:cancelled, b=1"  # a cancelled child is data

    def test_cancel_of_the_parent_reaches_the_spawned_children(self, store: Store) -> None:
        from tests.fanout_agent import channel_agent

        runtime, children = self.spawned(store)
        runtime.cancel("p", reason="stop")
        assert runtime.run("p").state.status is TaskStatus.CANCELLED
        event = store.events("p")[-1]
        assert list(event.action["children"]) == children
        for child in children:
            assert Runtime(channel_agent, store).run(child).state.status is TaskStatus.CANCELLED

    def test_rollback_before_the_spawn_refused_then_detached(self, store: Store) -> None:
        _, children = self.spawned(store)
        with pytest.raises(ChildrenCrossed):
            rollback_task(store, "p", 1)
        rollback_task(store, "p", 1, children="cascade")
        head = store.load("p").state
        assert head["status"] == "created"
        assert [c["status"] for c in head["children"]] == ["detached", "detached"]
        assert all(len(cancels(store, child)) == 1 for child in children)

    def test_the_fork_of_a_waiting_parent_starts_without_children(self, store: Store) -> None:
        from tests.fanout_agent import parent

        _, children = self.spawned(store)
        at = store.load("p").version
        forked = fork_task(store, parent, "p", at, "f")
        assert forked.status is TaskStatus.RUNNING
        assert [c.status for c in forked.children] == ["detached", "detached"]
        assert store.events("f")[0].action["children"] == {"detached": children}
        assert all(status(store, child) == "created" for child in children)  # untouched
        assert joined(forked) == ()  # a join skill of the fork does not see them


def test_tree_of_a_real_spawn(tmp_path: Path, store: Store) -> None:
    """``tasks --tree`` of children the engine created."""
    _, children = TestThroughARealSpawn.spawned(store)
    url = f"sqlite:///{tmp_path / 'state.db'}"
    code, out, err = run_env(tmp_path, CLI_ENV, "tasks", "--tree", "--store", url)
    assert code == 0, err
    cells = [line.split()[:2] for line in out.splitlines()[1:-1]]
    assert cells == [["p", "waiting_children"], ["├─", children[0]], ["└─", children[1]]]
