"""Schema evolution and corrupted-state detection.

The v1 → v2 change is a real one: ``customer`` (a full name) is split into
``first_name`` and ``last_name``, and ``prio`` is renamed ``priority``. The v1
history is written by the real runtime into SQLite, then opened with v2 code.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any, ClassVar, Literal

import pytest
from pydantic import BaseModel

from skillstate import (
    Action,
    Agent,
    AgentState,
    CallSkill,
    Finish,
    NoParams,
    Outcome,
    Runtime,
    ScriptedPolicy,
    SkillContext,
    SkillRegistry,
    StateMachine,
    TaskStatus,
    UsageError,
    Verdict,
    View,
    migration,
    patched,
)
from skillstate.errors import SchemaTooNew, StateCorrupted
from skillstate.state.migrate import (
    chain_problems,
    migrate_document,
    migrations,
    validate_state,
)
from skillstate.store.sqlite import SQLiteStore

TASK = "T-1"

# ---------------------------------------------------------------- the two schemas


class TicketV1(AgentState):
    """The card as first shipped."""

    customer: str = ""
    """The customer's full name."""
    prio: str | None = None
    resolution: str | None = None


class TicketV2(AgentState):
    """The card after the change: the name is split, ``prio`` is renamed."""

    SCHEMA_VERSION: ClassVar[int] = 2

    first_name: str = ""
    last_name: str = ""
    priority: Literal["low", "high"] | None = None
    resolution: str | None = None

    @migration(from_version=1)
    def _split_customer(doc: dict[str, Any]) -> dict[str, Any]:
        first, _, last = (doc.pop("customer", "") or "").strip().partition(" ")
        doc["first_name"], doc["last_name"] = first, last.strip()
        doc["priority"] = doc.pop("prio", None)
        return doc


class TicketV2Unmigrated(AgentState):
    """v2's fields without the migration: old tasks cannot be read."""

    SCHEMA_VERSION: ClassVar[int] = 2

    first_name: str = ""
    last_name: str = ""
    priority: Literal["low", "high"] | None = None
    resolution: str | None = None


MACHINE = StateMachine({"init": ["intake"], "intake": ["intake", "done"], "done": []})


class NameParams(BaseModel):
    name: str


class PrioParams(BaseModel):
    prio: str


def v1_agent() -> Agent:
    skills = SkillRegistry()

    @skills.skill(step="intake", outputs=["customer"])
    def record_customer(state: TicketV1, params: NameParams, ctx: SkillContext) -> Outcome:
        """Record who is asking."""
        return Outcome(writes={"customer": params.name}, summary=f"customer: {params.name}")

    @record_customer.verifier
    def _named(state: TicketV1, outcome: Outcome) -> Verdict:
        return Verdict(ok=bool(state.customer.strip()), reason="a customer name is recorded")

    @skills.skill(step="intake", outputs=["prio"])
    def record_prio(state: TicketV1, params: PrioParams, ctx: SkillContext) -> Outcome:
        """Record how urgent it is."""
        return Outcome(writes={"prio": params.prio}, summary=f"prio: {params.prio}")

    @record_prio.verifier
    def _known_prio(state: TicketV1, outcome: Outcome) -> Verdict:
        return Verdict(ok=state.prio in ("low", "high"), reason="prio is low or high")

    def decide(view: View) -> Action:
        state = view.state
        assert isinstance(state, TicketV1)
        if not state.customer:
            return CallSkill(skill="record_customer", params={"name": "Ada King Lovelace"})
        if state.prio is None:
            return CallSkill(skill="record_prio", params={"prio": "high"})
        return Finish(summary="intake done")

    return Agent(
        name="ticket-v1",
        state_type=TicketV1,
        machine=MACHINE,
        skills=skills,
        policy=ScriptedPolicy(decide),
        goal="close the ticket",
    )


def v2_agent(state_type: type[AgentState] = TicketV2) -> Agent:
    skills = SkillRegistry()

    @skills.skill(step="intake", outputs=["resolution"])
    def resolve(state: TicketV2, params: NoParams, ctx: SkillContext) -> Outcome:
        """Call the customer back by first name."""
        text = f"called {state.first_name} ({state.priority})"
        return Outcome(writes={"resolution": text}, summary=text)

    @resolve.verifier
    def _addressed(state: TicketV2, outcome: Outcome) -> Verdict:
        ok = state.resolution == f"called {state.first_name} ({state.priority})"
        return Verdict(ok=ok, reason="resolution names the customer and priority")

    def decide(view: View) -> Action:
        state = view.state
        assert isinstance(state, TicketV2)
        if state.resolution is None:
            return CallSkill(skill="resolve")
        return Finish(summary=state.resolution)

    return Agent(
        name="ticket-v2",
        state_type=state_type,
        machine=MACHINE,
        skills=skills,
        policy=ScriptedPolicy(decide),
        goal="close the ticket",
        # v1's intake skills are gone on purpose: its tasks are carried across (issue 26).
        patches=[patched("ticket-v2", removed=["record_customer", "record_prio"])],
    )


# ---------------------------------------------------------------- fixtures and helpers


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """A SQLite file holding task T-1 half done by v1 code: created, then two steps."""
    path = tmp_path / "tasks.db"
    store = SQLiteStore(path)
    try:
        result = Runtime(v1_agent(), store).run(TASK, max_steps=2, create=True)
        assert result.stopped == "max_steps"
        assert store.load(TASK).version == 3
    finally:
        store.close()
    return path


@pytest.fixture
def store(db_path: Path) -> Iterator[SQLiteStore]:
    opened = SQLiteStore(db_path)
    yield opened
    opened.close()


def raw_rows(path: Path) -> list[tuple[Any, ...]]:
    """Every stored byte of the task: head row, checkpoints and events."""
    with closing(sqlite3.connect(path)) as conn:
        return [
            *conn.execute("SELECT * FROM tasks ORDER BY task_id"),
            *conn.execute("SELECT * FROM versions ORDER BY task_id, version"),
        ]


def checkpoint_rows(path: Path) -> list[tuple[Any, ...]]:
    """The stored checkpoint rows of T-1 (snapshot or patch), oldest first."""
    with closing(sqlite3.connect(path)) as conn:
        return list(
            conn.execute("SELECT * FROM versions WHERE task_id = ? ORDER BY version", (TASK,))
        )


def edit_head(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Hand-edit the stored head of T-1, as someone with a SQL shell might."""
    conn = sqlite3.connect(path)
    try:
        (text,) = conn.execute("SELECT head FROM tasks WHERE task_id = ?", (TASK,)).fetchone()
        doc = json.loads(text)
        change(doc)
        # digest = NULL: the record then loads as one written before checksums, so the
        # test reaches the schema checks (tests/contract/test_integrity.py covers the
        # checksum that catches an edit like this one first).
        conn.execute(
            "UPDATE tasks SET head = ?, digest = NULL WHERE task_id = ?", (json.dumps(doc), TASK)
        )
        conn.commit()
    finally:
        conn.close()


def set_key(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda doc: doc.__setitem__(key, value)


# ---------------------------------------------------------------- v1 history → v2 code


class TestUpgrade:
    def test_v1_history_is_stored_as_v1(self, store: SQLiteStore) -> None:
        """The fixture really wrote v1 documents (so the rest tests a real upgrade)."""
        head = store.load(TASK).state
        assert head["schema_version"] == 1
        assert (head["customer"], head["prio"]) == ("Ada King Lovelace", "high")
        assert "first_name" not in head

    def test_load_migrates_the_head(self, store: SQLiteStore) -> None:
        """``Runtime.load`` with v2 code gives a v2 card: name split, prio renamed."""
        state = Runtime(v2_agent(), store).load(TASK)
        assert isinstance(state, TicketV2)
        assert state.schema_version == 2
        assert (state.first_name, state.last_name) == ("Ada", "King Lovelace")
        assert state.priority == "high"
        assert state.version == 3
        assert [s.skill for s in state.completed_steps] == ["record_customer", "record_prio"]

    def test_every_old_checkpoint_parses_into_v2(self, store: SQLiteStore) -> None:
        """Each kept v1 version loads into v2, and loading rewrites nothing."""
        agent = v2_agent()
        expected: dict[int, tuple[str, str, str | None]] = {
            1: ("", "", None),
            2: ("Ada", "King Lovelace", None),
            3: ("Ada", "King Lovelace", "high"),
        }
        versions = [info.version for info in store.checkpoints(TASK)]
        assert versions == [1, 2, 3]
        for version in versions:
            raw = store.checkpoint(TASK, version).state
            state = agent.parse_state(raw)
            assert isinstance(state, TicketV2)
            assert (state.first_name, state.last_name, state.priority) == expected[version]
            assert state.version == version
            assert state.schema_version == 2
            assert raw["schema_version"] == 1  # the stored record stays as committed
            assert "customer" in raw

    def test_runtime_continues_a_migrated_task(self, store: SQLiteStore, db_path: Path) -> None:
        """v2 code takes further steps on the upgraded task; old records stay v1."""
        before = checkpoint_rows(db_path)
        result = Runtime(v2_agent(), store).run(TASK)
        assert result.stopped == "completed"
        state = result.state
        assert isinstance(state, TicketV2)
        assert state.resolution == "called Ada (high)"
        assert state.version == 6  # v4 carried it across the ticket-v2 patch (re-pinned)
        head = store.load(TASK).state
        assert head["schema_version"] == 2
        assert "customer" not in head
        assert head["first_name"] == "Ada"
        # The v1 versions are still there, byte for byte.
        assert checkpoint_rows(db_path)[:3] == before
        # And every version, old or new, still parses into v2.
        agent = v2_agent()
        for info in store.checkpoints(TASK):
            assert agent.parse_state(store.checkpoint(TASK, info.version).state).version == (
                info.version
            )

    def test_checkpoints_after_the_upgrade_rebuild_exactly(self, store: SQLiteStore) -> None:
        """A version committed by v2 code rebuilds as the v2 document that was committed.

        This needs each event's patch to be made against the *stored* head (v1), not
        the migrated state; the version right after the upgrade is the one at risk.
        """
        committed: dict[int, dict[str, Any]] = {}
        runtime = Runtime(
            v2_agent(),
            store,
            observer=lambda r: committed.update({r.after.version: r.after.to_json()}),
        )
        runtime.run(TASK)
        assert sorted(committed) == [4, 5, 6]  # 4: carried across the ticket-v2 patch
        for version, document in committed.items():
            assert store.checkpoint(TASK, version).state == document


# ---------------------------------------------------------------- refusals


class TestRefusals:
    def test_newer_schema_is_refused(self, store: SQLiteStore, db_path: Path) -> None:
        """A head written by a schema newer than the code knows is SchemaTooNew."""
        store.close()
        edit_head(db_path, set_key("schema_version", 3))
        before = raw_rows(db_path)
        reopened = SQLiteStore(db_path)
        try:
            runtime = Runtime(v2_agent(), reopened)
            with pytest.raises(SchemaTooNew) as caught:
                runtime.load(TASK)
            assert (caught.value.found, caught.value.known) == (3, 2)
            with pytest.raises(SchemaTooNew):
                runtime.run(TASK)
        finally:
            reopened.close()
        assert raw_rows(db_path) == before

    def test_missing_migration_is_corruption(self, store: SQLiteStore) -> None:
        """v2 code without a 1 → 2 migration cannot read v1 and says which step is missing."""
        runtime = Runtime(v2_agent(TicketV2Unmigrated), store)
        with pytest.raises(StateCorrupted) as caught:
            runtime.load(TASK)
        assert caught.value.reason == (
            "no migration from schema version 1 to 2 for TicketV2Unmigrated"
        )
        assert caught.value.version == 3
        with pytest.raises(StateCorrupted):
            runtime.run(TASK)
        assert store.load(TASK).version == 3

    def test_gap_in_chain_refused_when_agent_is_built(self) -> None:
        """An agent whose state class has a hole in its migration chain is not built."""

        class TicketV4(TicketV2):
            SCHEMA_VERSION: ClassVar[int] = 4

            @migration(from_version=3)
            def _noop(doc: dict[str, Any]) -> dict[str, Any]:
                return doc

        assert chain_problems(TicketV4) == ["TicketV4 has no migration from schema version 2 to 3"]
        with pytest.raises(UsageError, match="no migration from schema version 2 to 3"):
            v2_agent(TicketV4)

    @pytest.mark.parametrize(
        ("change", "field"),
        [
            pytest.param(set_key("status", "paused"), "status", id="unknown-status"),
            pytest.param(set_key("first_name", 42), "first_name", id="wrong-type"),
            pytest.param(set_key("priority", "urgent"), "priority", id="bad-literal"),
            pytest.param(set_key("surprise", 1), "surprise", id="unknown-field"),
            pytest.param(
                lambda doc: doc["completed_steps"][0].pop("id"),
                "completed_steps.0.id",
                id="nested-missing",
            ),
            pytest.param(set_key("task_id", ""), "task_id", id="empty-id"),
        ],
    )
    def test_hand_broken_head_stops_the_task(
        self,
        store: SQLiteStore,
        db_path: Path,
        change: Callable[[dict[str, Any]], None],
        field: str,
    ) -> None:
        """A broken record is StateCorrupted naming the field; nothing is overwritten."""
        # The head is now a v2 record: carried across the patch (4), one step (5).
        Runtime(v2_agent(), store).run(TASK, max_steps=1)
        store.close()
        edit_head(db_path, change)
        before = raw_rows(db_path)
        reopened = SQLiteStore(db_path)
        try:
            runtime = Runtime(v2_agent(), reopened)
            with pytest.raises(StateCorrupted) as caught:
                runtime.load(TASK)
            error = caught.value
            assert error.field == field
            if field != "task_id":  # with the record's own id broken, the runtime must say
                assert error.task_id == TASK
            assert error.version == 5
            assert "\n" not in str(error)
            assert f"field {field!r}" in str(error)
            with pytest.raises(StateCorrupted):
                runtime.run(TASK)
            with pytest.raises(StateCorrupted):
                runtime.step(TASK)
        finally:
            reopened.close()
        assert raw_rows(db_path) == before

    def test_broken_v1_record_names_the_migrated_field(
        self, store: SQLiteStore, db_path: Path
    ) -> None:
        """A bad value in an old record is reported under the field it loads into."""
        store.close()
        edit_head(db_path, set_key("prio", "whenever"))
        before = raw_rows(db_path)
        reopened = SQLiteStore(db_path)
        try:
            with pytest.raises(StateCorrupted) as caught:
                Runtime(v2_agent(), reopened).run(TASK)
        finally:
            reopened.close()
        assert caught.value.field == "priority"
        assert raw_rows(db_path) == before


# ---------------------------------------------------------------- migrate_document


def v1_doc(**changes: Any) -> dict[str, Any]:
    doc = TicketV1(task_id="t", customer="Grace Hopper", prio="low").to_json()
    doc.update(changes)
    return doc


class TestMigrateDocument:
    def test_current_document_is_unchanged(self) -> None:
        doc = TicketV2(task_id="t", first_name="Grace").to_json()
        migrated, passed = migrate_document(TicketV2, doc)
        assert (migrated, passed) == (doc, [])
        assert migrated is not doc

    def test_missing_schema_version_means_one(self) -> None:
        doc = v1_doc()
        del doc["schema_version"]
        migrated, passed = migrate_document(TicketV2, doc)
        assert passed == [1]
        assert migrated["schema_version"] == 2
        assert (migrated["first_name"], migrated["last_name"]) == ("Grace", "Hopper")

    def test_input_is_never_modified(self) -> None:
        """The migration edits its argument in place; the caller's document is untouched."""
        doc = v1_doc()
        snapshot = json.loads(json.dumps(doc))
        migrate_document(TicketV2, doc)
        assert doc == snapshot

    def test_chain_runs_one_version_at_a_time_and_inherits(self) -> None:
        """A v3 subclass adds 2 → 3 and inherits 1 → 2; a v1 document goes through both."""
        seen: list[int] = []

        class TicketV3(TicketV2):
            SCHEMA_VERSION: ClassVar[int] = 3
            channel: str = "email"

            @migration(from_version=2)
            def _add_channel(doc: dict[str, Any]) -> dict[str, Any]:
                seen.append(doc["schema_version"])
                return {**doc, "channel": "phone" if doc["priority"] == "high" else "email"}

        assert sorted(migrations(TicketV3)) == [1, 2]
        migrated, passed = migrate_document(TicketV3, v1_doc(prio="high"))
        assert passed == [1, 2]
        assert seen == [2]  # the 2 → 3 step saw the output of 1 → 2
        state = validate_state(TicketV3, migrated)
        assert isinstance(state, TicketV3)
        assert (state.first_name, state.channel, state.schema_version) == ("Grace", "phone", 3)

    def test_subclass_overrides_a_parent_migration(self) -> None:
        class Shouting(TicketV2):
            @migration(from_version=1)
            def _loud(doc: dict[str, Any]) -> dict[str, Any]:
                doc = TicketV2._split_customer(doc)
                return {**doc, "first_name": doc["first_name"].upper()}

        migrated, _ = migrate_document(Shouting, v1_doc())
        assert migrated["first_name"] == "GRACE"

    def test_newer_than_known_is_refused(self) -> None:
        with pytest.raises(SchemaTooNew, match="schema version 7, newer than 2"):
            migrate_document(TicketV2, v1_doc(schema_version=7))

    @pytest.mark.parametrize("bad", ["2", 0, -1, True, None, 1.5])
    def test_bad_schema_version_is_corruption(self, bad: Any) -> None:
        with pytest.raises(StateCorrupted) as caught:
            migrate_document(TicketV2, v1_doc(schema_version=bad))
        assert caught.value.field == "schema_version"

    def test_failing_migration_is_corruption(self) -> None:
        class Picky(AgentState):
            SCHEMA_VERSION: ClassVar[int] = 2

            @migration(from_version=1)
            def _explode(doc: dict[str, Any]) -> dict[str, Any]:
                raise KeyError("customer")

        with pytest.raises(StateCorrupted) as caught:
            migrate_document(Picky, {"task_id": "t", "version": 9, "schema_version": 1})
        error = caught.value
        assert isinstance(error.__cause__, KeyError)
        assert (error.task_id, error.version) == ("t", 9)
        assert "Picky._explode from schema version 1 failed: KeyError" in str(error)

    def test_migration_must_return_a_dict(self) -> None:
        class Sloppy(AgentState):
            SCHEMA_VERSION: ClassVar[int] = 2

            @migration(from_version=1)
            def _forgot_return(doc: dict[str, Any]) -> dict[str, Any]:
                doc["x"] = 1
                return None  # type: ignore[return-value]

        with pytest.raises(StateCorrupted, match="returned NoneType, not a dict"):
            migrate_document(Sloppy, {"task_id": "t", "schema_version": 1})

    def test_task_id_argument_names_the_task(self) -> None:
        with pytest.raises(StateCorrupted, match="task 'from-the-key'"):
            validate_state(TicketV2, {"task_id": 5}, task_id="from-the-key")


# ---------------------------------------------------------------- the decorator


class TestDecorator:
    def test_invisible_to_pydantic(self) -> None:
        """A migration is neither a field nor a private attribute, and stays callable."""
        assert "_split_customer" not in TicketV2.model_fields
        assert "_split_customer" not in TicketV2.__private_attributes__
        out = TicketV2._split_customer({"customer": "Alan Turing", "prio": None})
        assert out == {"first_name": "Alan", "last_name": "Turing", "priority": None}
        state = TicketV2(task_id="t", first_name="Alan")
        assert "_split_customer" not in state.to_json()
        assert state.schema_version == 2

    def test_public_name_and_stacked_staticmethod(self) -> None:
        """A public name is not taken for a field; ``@staticmethod`` underneath is fine."""

        class Stacked(AgentState):
            SCHEMA_VERSION: ClassVar[int] = 2
            n: int = 0

            @migration(from_version=1)
            @staticmethod
            def upgrade(doc: dict[str, Any]) -> dict[str, Any]:
                return {**doc, "n": 1}

        assert list(Stacked.model_fields).count("upgrade") == 0
        assert migrate_document(Stacked, {"task_id": "t"})[0]["n"] == 1
        assert Stacked.upgrade({})["n"] == 1

    def test_duplicate_from_version_fails_at_class_creation(self) -> None:
        with pytest.raises(UsageError, match="2 migrations from schema version 1: _a, _b"):

            class Twice(AgentState):
                SCHEMA_VERSION: ClassVar[int] = 2

                @migration(from_version=1)
                def _a(doc: dict[str, Any]) -> dict[str, Any]:
                    return doc

                @migration(from_version=1)
                def _b(doc: dict[str, Any]) -> dict[str, Any]:
                    return doc

    @pytest.mark.parametrize("version", [2, 3])
    def test_from_version_must_be_below_schema_version(self, version: int) -> None:
        with pytest.raises(UsageError, match="from_version must be lower"):

            class Ahead(AgentState):
                SCHEMA_VERSION: ClassVar[int] = 2

                @migration(from_version=version)
                def _m(doc: dict[str, Any]) -> dict[str, Any]:
                    return doc

    @pytest.mark.parametrize("version", [0, -1, True])
    def test_from_version_must_be_positive(self, version: int) -> None:
        with pytest.raises(UsageError, match="needs an int >= 1"):
            migration(from_version=version)

    def test_unchanged_classes_need_no_migrations(self) -> None:
        """Classes that never bumped their version have an empty, complete chain."""
        assert migrations(TicketV1) == {}
        assert chain_problems(TicketV1) == []
        assert chain_problems(TicketV2) == []
        state = v1_agent().parse_state(v1_doc())
        assert isinstance(state, TicketV1)
        assert state.status is TaskStatus.CREATED


def test_a_card_v3_task_loads_and_continues_with_no_replies_ahead(tmp_path: Path) -> None:
    """Card 4 added ``replies_ahead``: a task written at card 3 loads with none and runs on."""
    from skillstate import Runtime
    from skillstate.examples import ticket
    from skillstate.state.model import CARD_VERSION
    from skillstate.store import open_store
    from skillstate.store.memory import MemoryStore

    db = open_store(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        runtime = Runtime(ticket.agent, db)
        parked = runtime.run("t", create=True).state
        raw = parked.model_dump(mode="json")
        raw.pop("replies_ahead")
        raw["card_version"] = 3
        old = MemoryStore()
        event = db.events("t")[-1]
        old.commit("t", 0, {**raw, "version": 1}, event.model_copy(update={"version": 1}))
        loaded = Runtime(ticket.agent, old).load("t")
        assert (loaded.card_version, loaded.replies_ahead) == (CARD_VERSION, ())
        answered = Runtime(ticket.agent, old).run("t", inputs=["VPN keeps dropping", "P2"])
        assert answered.stopped == "completed"
    finally:
        db.close()
