"""Pinned definitions (issue 26, point 1): a task runs on the definition it started under.

The held-out check: a task started under v1 of the fetcher and stopped mid-way is
refused under v2 (``fetch`` renamed ``download``) with an error naming the change and
nothing written; with the rename declared (``patched(...)``) it completes, running
``download``. Through the Python API (sync and async) here, through the CLI in
``test_definitions_cli.py``, and through workers in ``test_definitions_workers.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skillstate import (
    DefinitionChanged,
    Runtime,
    SkillRegistry,
    TaskStatus,
    UsageError,
    is_patched,
    migration,
    patched,
)
from skillstate.definitions import definition_of
from skillstate.engine.aruntime import AsyncRuntime
from skillstate.events import Event
from skillstate.store.base import Store
from skillstate.store.memory import MemoryStore
from tests.definition_support import RENAME, FetchState, build, v1, v1_fetch2, v2, v2_patched
from tests.test_docs import run_example

TASK = "t1"
HOWTO = Path(__file__).resolve().parents[1] / "docs" / "howto.md"


@pytest.fixture
def store() -> Iterator[Store]:
    db = MemoryStore()
    yield db
    db.close()


def stopped_after_prepare(store: Store, agent: Any = v1, **fields: Any) -> int:
    """A task of ``agent`` stopped after its first step (``fetch`` still to come); its version."""
    runtime = Runtime(agent, store)
    runtime.start(TASK, **fields)
    result = runtime.run(TASK, max_steps=1)
    assert result.stopped == "max_steps"
    assert result.state.pending_steps[0] in ("fetch",)
    return result.state.version


def skills_run(store: Store) -> list[str]:
    """The skills that ran and passed verify, in order."""
    return [e.skill for e in store.events(TASK) if e.skill and e.verdict and e.verdict.ok]


def definition_events(store: Store) -> list[Any]:
    return [e for e in store.events(TASK) if e.action.get("kind") == "definition"]


class TestManifest:
    def test_the_same_definition_has_the_same_ref(self) -> None:
        """Built twice, the same definition pins to the same ref; it is computed once."""
        assert build().definition.ref == v1.definition.ref
        assert v1.definition is v1.definition
        assert v1.definition.ref.startswith("sha256:")
        assert v2.definition.ref != v1.definition.ref

    def test_what_is_part_of_the_contract(self) -> None:
        """Versions and steps are in the manifest; descriptions are not."""
        skills = v1.definition.manifest["skills"]
        assert skills["fetch"]["version"] == "1"
        assert skills["fetch"]["step"] == "fetching"
        assert v1.definition.manifest["state"] == {"class": "FetchState", "schema_version": 1}
        reworded = build()
        reworded.skills["fetch"].description = "Fetch the page, politely."
        assert reworded.definition.ref == v1.definition.ref
        assert v1_fetch2.definition.ref != v1.definition.ref

    def test_a_skill_registered_later_is_seen(self) -> None:
        agent = build()
        before = agent.definition.ref
        extra = build("extra").skills["extra"]
        agent.skills.register(extra)
        assert definition_of(agent).ref != before
        assert "extra" in agent.definition.manifest["skills"]

    def test_a_new_task_is_pinned_and_the_manifest_stored(self, store: Store) -> None:
        state = Runtime(v1, store).start(TASK)
        assert state.definition == v1.definition.ref
        assert store.get_artifact(v1.definition.ref) == v1.definition.data


class TestHeldOut:
    def test_a_renamed_skill_is_refused_then_carried_by_its_patch(self, store: Store) -> None:
        """The done-when check, through the Python API."""
        version = stopped_after_prepare(store)
        head = store.load(TASK).state
        with pytest.raises(DefinitionChanged) as refused:
            Runtime(v2, store).run(TASK)
        message = str(refused.value)
        assert "skill 'fetch' removed" in message
        assert "skill 'download' added" in message
        assert "a rename?" in message
        assert "renamed={'fetch': 'download'}" in message
        assert "\n" not in message
        assert "nothing was written" in message
        assert refused.value.changes == ("skill 'fetch' removed",)
        assert store.load(TASK).version == version
        assert store.load(TASK).state == head

        result = Runtime(v2_patched, store).run(TASK)
        assert result.stopped == "completed"
        assert skills_run(store) == ["prepare", "download", "summarize"]
        [carry] = definition_events(store)
        assert carry.actor == "runtime"
        assert carry.version == version + 1
        assert carry.action["by"] == "patch"
        assert carry.action["patches"] == ["rename-fetch"]
        assert carry.action["from"] == v1.definition.ref
        assert carry.action["to"] == v2_patched.definition.ref
        assert carry.action["changes"] == ["skill 'fetch' renamed 'download' [rename-fetch]"]
        state = result.state
        assert state.definition == v2_patched.definition.ref
        assert state.carried_patches == ("rename-fetch",)
        # History keeps the names it ran under.
        assert [r.skill for r in state.completed_steps if r.skill] == [
            "prepare",
            "download",
            "summarize",
        ]
        assert not is_patched(state, "rename-fetch")

    def test_the_async_runtime_checks_the_pin_too(self, store: Store) -> None:
        version = stopped_after_prepare(store)

        async def main() -> str:
            with pytest.raises(DefinitionChanged, match="skill 'fetch' removed"):
                await AsyncRuntime(v2, store).run(TASK)
            assert store.load(TASK).version == version
            with pytest.raises(DefinitionChanged):
                await AsyncRuntime(v2, store).step(TASK)
            result = await AsyncRuntime(v2_patched, store).run(TASK)
            return result.stopped

        assert asyncio.run(main()) == "completed"
        assert skills_run(store) == ["prepare", "download", "summarize"]

    def test_every_way_in_is_checked(self, store: Store) -> None:
        """step, reply and recheck refuse too, before writing anything."""
        version = stopped_after_prepare(store)
        runtime = Runtime(v2, store)
        for attempt in (runtime.step, runtime.recheck):
            with pytest.raises(DefinitionChanged):
                attempt(TASK)
        assert store.load(TASK).version == version
        assert store.lease(TASK) is None  # the lease went back on the way out

    def test_a_task_started_with_the_patch_is_patched(self, store: Store) -> None:
        runtime = Runtime(v2_patched, store)
        runtime.start(TASK)
        state = runtime.run(TASK).state
        assert state.status is TaskStatus.COMPLETED
        assert is_patched(state, "rename-fetch")
        assert definition_events(store) == []

    def test_an_ended_task_is_left_alone(self, store: Store) -> None:
        Runtime(v1, store).start(TASK)
        done = Runtime(v1, store).run(TASK)
        assert done.stopped == "completed"
        again = Runtime(v2, store).run(TASK)
        assert (again.stopped, again.state.version) == ("completed", done.state.version)


class TestOtherChanges:
    def test_a_version_bump_is_refused_unless_declared(self, store: Store) -> None:
        stopped_after_prepare(store)
        with pytest.raises(DefinitionChanged, match=r"skill 'fetch' version 1 -> 2"):
            Runtime(v1_fetch2, store).run(TASK)
        declared = build(fetch_version="2", patches=[patched("fetch-v2", skills=["fetch"])])
        assert Runtime(declared, store).run(TASK).stopped == "completed"
        [carry] = definition_events(store)
        assert carry.action["changes"] == ["skill 'fetch' version 1 -> 2 [fetch-v2]"]
        assert [e.skill_version for e in store.events(TASK) if e.skill == "fetch"] == ["2"]

    def test_a_bare_marker_carries_a_change_to_the_skill_it_names(self, store: Store) -> None:
        stopped_after_prepare(store)
        declared = build(fetch_version="2", patches=[patched("fetch")])
        assert Runtime(declared, store).run(TASK).stopped == "completed"
        [carry] = definition_events(store)
        assert carry.action["changes"] == ["skill 'fetch' version 1 -> 2 [fetch]"]

    def test_a_bare_marker_does_not_hide_what_the_card_still_needs(self, store: Store) -> None:
        """``patched("fetch")`` lets tasks cross the removal of ``fetch``, but this task's
        plan still names it: refused, naming that, rather than run with a hole in it."""
        version = stopped_after_prepare(store)
        with pytest.raises(DefinitionChanged, match="fetch") as refused:
            Runtime(build("download", patches=[patched("fetch")]), store).run(TASK)
        assert refused.value.blocked
        assert store.load(TASK).version == version

    def test_a_skill_alias_is_a_rename_marker(self, store: Store) -> None:
        stopped_after_prepare(store)
        aliased = build("download", fetch_aliases=("fetch",))
        result = Runtime(aliased, store).run(TASK)
        assert result.stopped == "completed"
        assert skills_run(store) == ["prepare", "download", "summarize"]
        [carry] = definition_events(store)
        assert carry.action["patches"] == ["alias:fetch"]
        assert result.state.carried_patches == ("alias:fetch",)
        with pytest.raises(UsageError, match="a list of names"):
            build("download", fetch_aliases="fetch")  # type: ignore[arg-type]

    def test_a_skill_added_needs_no_declaration(self, store: Store) -> None:
        version = stopped_after_prepare(store)
        more = build()
        more.skills.register(build("archive").skills["archive"])
        result = Runtime(more, store).run(TASK)
        assert result.stopped == "completed"
        [carry] = definition_events(store)
        assert (carry.version, carry.actor, carry.action["by"]) == (
            version + 1,
            "runtime",
            "compatible",
        )
        assert carry.action["changes"] == ["skill 'archive' added [compatible]"]

    def test_a_schema_change_is_carried_by_its_migration(self, store: Store) -> None:
        stopped_after_prepare(store)

        class FetchStateV2(FetchState):
            SCHEMA_VERSION = 2

            @migration(from_version=1)
            def _same(doc: dict[str, Any]) -> dict[str, Any]:
                return doc

        upgraded = build(state_type=FetchStateV2)
        assert Runtime(upgraded, store).run(TASK).stopped == "completed"
        [carry] = definition_events(store)
        assert carry.action["by"] == "migration"
        assert sorted(carry.action["changes"]) == [
            "state class FetchState -> FetchStateV2 [compatible]",
            "state schema 1 -> 2 [migration]",
        ]

    def test_a_removed_step_is_refused(self, store: Store) -> None:
        stopped_after_prepare(store)
        from tests import definition_support as support

        shorter = build()
        transitions = {s: sorted(t) for s, t in support.machine.transitions.items()}
        transitions["preparing"] = ["fetching", "summarizing"]
        transitions["fetching"] = ["done"]
        from skillstate import StateMachine

        shorter.machine = StateMachine(transitions, initial="init")
        with pytest.raises(DefinitionChanged) as refused:
            Runtime(shorter, store).run(TASK)
        assert refused.value.changes == ("machine: transition 'fetching' -> 'summarizing' removed",)

    def test_a_missing_manifest_is_said(self, store: Store) -> None:
        """A task pinned to a definition the store does not hold is refused all the same."""
        stopped_after_prepare(store)
        other = MemoryStore()
        copied = {**store.load(TASK).state, "version": 1}
        other.commit(TASK, 0, copied, Event(task_id=TASK, version=1, actor="runtime", action={}))
        with pytest.raises(DefinitionChanged, match="not in this store"):
            Runtime(v2_patched, other).run(TASK)


class TestInFlight:
    def test_a_call_waiting_for_approval_is_renamed(self, store: Store) -> None:
        """The pending approval names the old skill: carried, it is approved and runs
        under the new name, exactly once."""
        gated = build(fetch_approval=True)
        runtime = Runtime(gated, store)
        runtime.start(TASK)
        assert runtime.run(TASK).stopped == "waiting_approval"
        renamed = build("download", fetch_approval=True, patches=[RENAME])
        approved = Runtime(renamed, store).approve(TASK, actor="alice")
        assert approved.pending_effect is not None
        assert approved.pending_effect.skill == "download"
        assert Runtime(renamed, store).run(TASK).stopped == "completed"
        assert skills_run(store) == ["prepare", "download", "summarize"]

    def test_tried_and_active_skill_follow_the_rename(self, store: Store) -> None:
        from skillstate.definitions.carry import carry_card
        from skillstate.definitions.compare import compare
        from skillstate.state.model import FailedAttempt

        state = v1.new_state(TASK).replace(
            active_skill="fetch",
            tried=(FailedAttempt(action='fetch {"url": "x"}', reason="timeout"),),
            pending_steps=("fetch", "summarize"),
        )
        comparison = compare(
            v1.definition.manifest, v2_patched.definition.manifest, [RENAME], FetchState
        )
        carried = carry_card(
            state, comparison, ref=v2_patched.definition.ref, patches=comparison.patches
        )
        assert carried.active_skill == "download"
        assert carried.tried[0].action == 'download {"url": "x"}'
        assert carried.pending_steps == ("download", "summarize")
        assert carried.carried_patches == ("rename-fetch",)


class TestAccept:
    def test_accept_repins_with_who_and_what(
        self, store: Store, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        version = stopped_after_prepare(store)
        monkeypatch.setenv("SKILLSTATE_ACTOR", "ops-alice")
        result = Runtime(v1_fetch2, store).run(TASK, accept_definition=True)
        assert result.stopped == "completed"
        [accepted] = definition_events(store)
        assert (accepted.version, accepted.actor) == (version + 1, "human")
        assert accepted.action["by"] == "accept"
        assert accepted.action["actor"] == "ops-alice"
        assert accepted.action["changes"] == ["skill 'fetch' version 1 -> 2 [accepted]"]
        assert result.state.carried_patches == ()

    def test_accept_as_a_call_of_its_own(self, store: Store) -> None:
        stopped_after_prepare(store)
        runtime = Runtime(v1_fetch2, store)
        accepted = runtime.accept_definition(TASK, actor="bob", reason="v2 is compatible")
        assert accepted.definition == v1_fetch2.definition.ref
        assert definition_events(store)[0].action["reason"] == "v2 is compatible"
        # Accepting again, or for a task already pinned to it, writes nothing.
        assert runtime.accept_definition(TASK).version == accepted.version

    def test_what_the_card_still_needs_cannot_be_accepted(self, store: Store) -> None:
        """The plan still names ``fetch``: accepting v2 would leave the task stuck."""
        version = stopped_after_prepare(store)
        with pytest.raises(DefinitionChanged) as refused:
            Runtime(v2, store).run(TASK, accept_definition=True)
        assert refused.value.blocked
        assert "its plan names skill 'fetch'" in str(refused.value)
        assert store.load(TASK).version == version


class TestOldCards:
    def test_a_card_without_a_pin_is_pinned_by_its_next_commit(self, store: Store) -> None:
        """A card from before pins (card version 5) runs on, and its next step pins it."""
        document = v1.new_state(TASK).replace(version=1).to_json()
        for name in ("definition", "carried_patches"):
            document.pop(name)
        document["card_version"] = 5  # the last version before pins
        store.commit(
            TASK,
            0,
            document,
            Event(task_id=TASK, version=1, actor="runtime", action={"kind": "create"}),
        )
        report = Runtime(v2_patched, store).step(TASK)
        assert report.after.definition == v2_patched.definition.ref
        assert report.event.version == 2  # no commit of its own
        assert {"op": "replace", "path": "/definition", "value": v2_patched.definition.ref} in (
            report.event.patch
        ) or any(op["path"] == "/definition" for op in report.event.patch)
        assert store.load(TASK).state["definition"] == v2_patched.definition.ref
        assert store.get_artifact(v2_patched.definition.ref) == v2_patched.definition.data


class TestDeclarations:
    def test_a_bare_marker_names_a_skill(self) -> None:
        assert patched("fetch").marks == ("fetch",)
        assert patched("fetch-v2", skills=["fetch"]).marks == ()
        with pytest.raises(UsageError, match="an id is"):
            patched("", skills=["x"])
        with pytest.raises(UsageError, match="a list of names"):
            patched("x", skills="fetch")  # type: ignore[arg-type]

    def test_a_patch_that_does_not_fit_the_agent_is_refused_when_it_is_built(self) -> None:
        with pytest.raises(UsageError, match="renames 'fetch' to 'nowhere', which is not a skill"):
            build("download", patches=[patched("p", renamed={"fetch": "nowhere"})])
        with pytest.raises(UsageError, match="renames 'fetch', which is still a skill"):
            build(patches=[patched("p", renamed={"fetch": "summarize"})])
        with pytest.raises(UsageError, match="declared twice"):
            build("download", patches=[RENAME, RENAME])

    def test_registries_are_not_shared(self) -> None:
        assert isinstance(v1.skills, SkillRegistry)
        assert v1.skills is not v2.skills


def test_the_howto_runs_as_written(tmp_path: Path) -> None:
    """docs/howto.md, "Change an agent while its tasks run": it prints what it says."""
    text = HOWTO.read_text(encoding="utf-8")
    section = text.split("## Change an agent while its tasks run", 1)[1].split("\n## ", 1)[0]
    printed = section.split("It prints:", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    (tmp_path / "section.md").write_text(section, encoding="utf-8")
    assert run_example(tmp_path / "section.md", tmp_path, "howto_pins.py") == printed.splitlines()
