"""Schedules without a broker: ticks and their task ids, the registry, one tick's task,
and Celery beat's own scheduler driven by a controlled clock (restarts included).

Real ``skillstate beat`` and ``skillstate worker`` processes on Redis and RabbitMQ are
in ``test_schedules_beat.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from skillstate import (
    Agent,
    AgentState,
    Finish,
    Runtime,
    ScriptedPolicy,
    SkillRegistry,
    StateMachine,
    View,
)
from skillstate.control.schedule_registry import (
    REGISTRY,
    add_schedule,
    load_registry,
    remove_schedule,
)
from skillstate.control.schedules import Schedule, card_fields_for, cron_slot, parse_cron
from skillstate.control.ticks import fire
from skillstate.engine.actions import Action
from skillstate.errors import (
    ScheduleNotFound,
    SecretKeyMissing,
    StaleState,
    StateCorrupted,
    UsageError,
)
from skillstate.events import Event
from skillstate.examples import ledger
from skillstate.state.secrets import Sensitive, generate_key, is_sealed
from skillstate.store.base import Store
from skillstate.store.sqlite import SQLiteStore
from skillstate.workers import Message
from skillstate.workers.sweep import stranded

UTC = timezone.utc
LEDGER = "skillstate.examples.ledger:agent"
T0 = datetime(2026, 12, 3, 5, 0, 0, tzinfo=UTC)
"""A Thursday."""


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def make(name: str = "nightly", **options: Any) -> Schedule:
    body: dict[str, Any] = {
        "name": name,
        "agent": LEDGER,
        "queue": "skillstate",
        "created_at": T0 - timedelta(days=400),
    }
    body.update(options)
    if "cron" not in body and "every" not in body:
        body["cron"] = "* * * * *"
    return Schedule(**body)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    db = SQLiteStore(tmp_path / "state.db")
    yield db
    db.close()


# ---------------------------------------------------------------- ticks and ids


class TestSlots:
    """Which tick a moment belongs to, and the task id each tick makes."""

    @pytest.mark.parametrize(
        ("expr", "now", "slot"),
        [
            ("* * * * *", "2026-12-03T05:01:59.999", "2026-12-03T05:01:00"),
            ("* * * * *", "2026-12-03T05:01:00", "2026-12-03T05:01:00"),
            ("*/5 * * * *", "2026-12-03T05:04:59", "2026-12-03T05:00:00"),
            ("55 23 * * *", "2026-12-03T00:03:00", "2026-12-02T23:55:00"),
            ("0 2 * * *", "2026-12-03T01:59:00", "2026-12-02T02:00:00"),
            # 02:00 on weekdays: on Sunday the 6th the latest is Friday the 4th.
            ("0 2 * * 1-5", "2026-12-06T12:00:00", "2026-12-04T02:00:00"),
            ("0 2 * * mon-fri", "2026-12-07T02:00:00", "2026-12-07T02:00:00"),
            # Day of month AND day of week, as Celery fires: the 1st when it is a Monday.
            ("0 0 1 * 1", "2026-12-03T00:00:00", "2026-06-01T00:00:00"),
            ("30 4 29 2 *", "2026-12-03T00:00:00", "2024-02-29T04:30:00"),
            ("15,45 9-17 * * *", "2026-12-03T09:44:00", "2026-12-03T09:15:00"),
        ],
    )
    def test_a_cron_slot_is_the_latest_match_at_or_before_now(
        self, expr: str, now: str, slot: str
    ) -> None:
        """The latest minute every field matches, in UTC, however far back it is."""
        assert cron_slot(expr, at(now)) == at(slot)

    def test_the_slot_is_the_same_whenever_the_tick_fires(self) -> None:
        """A tick fired late (a restarted beat) names the same task as one fired on time."""
        item = make(cron="*/5 * * * *")
        on_time = item.slot(at("2026-12-03T05:05:00.002"))
        late = item.slot(at("2026-12-03T05:09:59"))
        assert on_time == late == at("2026-12-03T05:05:00")
        assert item.task_id(on_time) == "nightly-20261203T0505Z"

    def test_every_is_aligned_to_the_epoch(self) -> None:
        """``every`` ticks sit on a grid, so any beat computes the same slot and id."""
        item = make(every=15)
        assert item.slot(at("2026-12-03T05:00:14.9")) == at("2026-12-03T05:00:00")
        assert item.slot(at("2026-12-03T05:00:15")) == at("2026-12-03T05:00:15")
        assert item.task_id(at("2026-12-03T05:00:15")) == "nightly-20261203T050015Z"

    def test_no_tick_from_before_the_schedule_existed(self) -> None:
        item = make(cron="0 2 * * *", created_at=at("2026-12-03T03:00:00"))
        assert item.slot(at("2026-12-03T04:00:00")) is None
        assert item.slot(at("2026-12-04T02:00:00")) == at("2026-12-04T02:00:00")

    def test_naive_times_are_utc(self) -> None:
        item = make(every=60)
        assert item.slot(datetime(2026, 12, 3, 5, 0, 30)) == at("2026-12-03T05:00:00")


class TestCronExpressions:
    @pytest.mark.parametrize(
        ("expr", "says"),
        [
            ("* * * *", "five fields"),
            ("* * * * * *", "five fields"),
            ("61 * * * *", "invalid cron expression .*61 > 59"),
            ("* 25 * * *", "invalid cron expression"),
            ("0 0 30 2 *", "never occurs"),
            ("x * * * *", "invalid cron expression"),
            ("* * * * funday", "invalid cron expression"),
        ],
    )
    def test_a_bad_expression_is_one_line(self, expr: str, says: str) -> None:
        with pytest.raises(UsageError, match=says) as caught:
            parse_cron(expr)
        assert "\n" not in str(caught.value)

    def test_the_record_refuses_what_the_command_refuses(self) -> None:
        """A damaged registry entry does not load as a schedule (name, clock)."""
        with pytest.raises(ValueError, match="either cron or every"):
            make(cron="* * * * *", every=5)
        with pytest.raises(ValueError, match="invalid schedule name"):
            make(name="no spaces")
        with pytest.raises(ValueError, match="invalid cron"):
            make(cron="61 * * * *")


# ---------------------------------------------------------------- the registry


class TestRegistry:
    def test_add_list_remove_audited(self, store: Store) -> None:
        """Each change is a compare-and-set commit with an event naming who did it."""
        assert load_registry(store).version == 0
        add_schedule(store, make("a", created_by="alice"))
        add_schedule(store, make("b", every=30))
        registry = load_registry(store)
        assert (registry.version, sorted(registry.schedules)) == (2, ["a", "b"])
        assert registry.schedules["b"].every == 30
        removed = remove_schedule(store, "a", by="bob")
        assert removed.name == "a"
        assert sorted(load_registry(store).schedules) == ["b"]
        events = store.events(REGISTRY)
        assert [(e.actor, e.action["kind"], e.action["name"], e.action["by"]) for e in events] == [
            ("human", "schedule_add", "a", "alice"),
            ("human", "schedule_add", "b", ""),
            ("human", "schedule_remove", "a", "bob"),
        ]
        assert any(op["path"] == "/schedules/a" for op in events[-1].patch)

    def test_a_name_is_registered_once(self, store: Store) -> None:
        add_schedule(store, make("a"))
        with pytest.raises(UsageError, match="schedule 'a' exists"):
            add_schedule(store, make("a", every=5))
        assert load_registry(store).version == 1

    def test_removing_an_unknown_name(self, store: Store) -> None:
        with pytest.raises(ScheduleNotFound, match="no schedule 'zz'"):
            remove_schedule(store, "zz", by="me")
        assert load_registry(store).version == 0

    def test_two_writers_both_get_their_schedule(self, store: Store) -> None:
        """The loser of the compare-and-set reads the record again and adds to it."""
        racing = Racing(store, lambda: add_schedule(store, make("first")))
        add_schedule(racing, make("second"))  # type: ignore[arg-type]
        assert racing.lost == 1
        assert sorted(load_registry(store).schedules) == ["first", "second"]

    def test_a_damaged_record_is_reported_not_overwritten(self, store: Store) -> None:
        add_schedule(store, make("a"))
        doc = store.load(REGISTRY).state
        doc = {**doc, "version": 2, "schedules": {"a": {**doc["schedules"]["a"], "cron": "?"}}}
        store.commit(
            REGISTRY,
            1,
            doc,
            Event(task_id=REGISTRY, version=2, actor="human", action={"kind": "edit"}),
        )
        with pytest.raises(StateCorrupted, match="schedule 'a'"):
            load_registry(store)
        with pytest.raises(StateCorrupted):
            add_schedule(store, make("b"))
        assert store.load(REGISTRY).version == 2

    def test_the_registry_is_never_a_stranded_task(self, store: Store) -> None:
        """The record has no status: the workers' sweeper leaves it alone."""
        add_schedule(store, make("a"))
        assert stranded(store, 0, now=datetime.now(UTC) + timedelta(days=1)) == []


class Racing:
    """A store whose first commit loses to ``other`` (run just before it)."""

    def __init__(self, store: Store, other: Callable[[], object]) -> None:
        self.store = store
        self.other: Callable[[], object] | None = other
        self.lost = 0

    def commit(self, *args: Any, **kwargs: Any) -> int:
        if self.other is not None:
            other, self.other = self.other, None
            other()
        try:
            return self.store.commit(*args, **kwargs)
        except StaleState:
            self.lost += 1
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


# ---------------------------------------------------------------- card fields


class VaultState(AgentState):
    endpoint: str = ""
    token: Sensitive[str] | None = None
    count: int = 0


def _finish(view: View[VaultState]) -> Action:
    return Finish(summary="done")


vault = Agent(
    name="vault",
    state_type=VaultState,
    machine=StateMachine({"init": ["done"], "done": []}),
    skills=SkillRegistry(),
    policy=ScriptedPolicy(_finish),
)


class TestCardFields:
    def test_fields_are_checked_against_the_agents_card(self) -> None:
        assert card_fields_for(ledger.agent, {"target": 3, "ledger": "l.txt"}) == {
            "ledger": "l.txt",
            "target": 3,
        }
        with pytest.raises(UsageError, match="target: Input should be greater than"):
            card_fields_for(ledger.agent, {"target": -1})
        with pytest.raises(UsageError, match="nope: Extra inputs are not permitted"):
            card_fields_for(ledger.agent, {"nope": 1})
        with pytest.raises(UsageError, match="--set task_id: a schedule sets it"):
            card_fields_for(ledger.agent, {"task_id": "x"})

    def test_a_sensitive_field_is_sealed(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """The registry never holds a secret in the clear; the tick's card gets it back."""
        monkeypatch.setenv("SKILLSTATE_KEY", generate_key())
        stored = card_fields_for(vault, {"token": "hunter2", "count": 1})
        assert is_sealed(stored["token"])
        assert "hunter2" not in str(stored)
        assert vault.new_state("t", **stored).token == "hunter2"

    def test_a_sensitive_field_without_a_key(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.delenv("SKILLSTATE_KEY", raising=False)
        with pytest.raises(SecretKeyMissing, match="token"):
            card_fields_for(vault, {"token": "hunter2"})

    def test_a_value_the_policy_would_mask_is_refused(self) -> None:
        """Kept as given, every tick's card would get ``***`` in its place."""
        with pytest.raises(UsageError, match="endpoint: the value looks like a secret"):
            card_fields_for(vault, {"endpoint": "postgresql://admin:S3cretPw@db/x"})


# ---------------------------------------------------------------- one tick


class Sent(list[Message]):
    """The ``send`` of a tick: records the messages; ``fail`` makes the next ones raise."""

    fail = False

    def __call__(self, message: Message) -> None:
        if self.fail:
            raise ConnectionError("broker down")
        self.append(message)


def _ledger_schedule(tmp_path: Path, **options: Any) -> Schedule:
    fields = card_fields_for(ledger.agent, {"ledger": str(tmp_path / "ledger.txt"), "target": 2})
    return make(fields=fields, **options)


class TestFire:
    def test_a_tick_makes_its_task_once(self, store: Store, tmp_path: Path) -> None:
        """Fired again in the same slot (a restart, a second beat), it creates nothing."""
        item = _ledger_schedule(tmp_path)
        sent = Sent()
        first = fire(store, item, ledger.agent, at("2026-12-03T05:01:00.01"), sent)
        again = fire(store, item, ledger.agent, at("2026-12-03T05:01:40"), sent)
        assert (first.kind, first.task_id, first.version) == (
            "created",
            "nightly-20261203T0501Z",
            1,
        )
        assert again.kind == "resent"  # nobody has started it yet: harmless duplicate
        Runtime(ledger.agent, store).run("nightly-20261203T0501Z")
        assert fire(store, item, ledger.agent, at("2026-12-03T05:01:50"), sent).kind == "done"
        assert [t for t in store.tasks() if t != REGISTRY] == ["nightly-20261203T0501Z"]
        card = Runtime(ledger.agent, store).load("nightly-20261203T0501Z")
        assert (card.status.value, card.target, card.appended) == ("completed", 2, 2)

    def test_a_tick_held_by_a_worker_is_left_alone(self, store: Store, tmp_path: Path) -> None:
        item = _ledger_schedule(tmp_path)
        sent = Sent()
        fire(store, item, ledger.agent, at("2026-12-03T05:01:00"), sent)
        store.claim("nightly-20261203T0501Z", "m1@elsewhere:1", 30)
        assert fire(store, item, ledger.agent, at("2026-12-03T05:01:30"), sent).kind == "done"
        assert len(sent) == 1

    def test_beat_dying_between_create_and_send(self, store: Store, tmp_path: Path) -> None:
        """The task is committed before its message; the next firing sends it."""
        item = _ledger_schedule(tmp_path)
        sent = Sent()
        sent.fail = True
        with pytest.raises(ConnectionError):
            fire(store, item, ledger.agent, at("2026-12-03T05:01:00"), sent)
        assert store.load("nightly-20261203T0501Z").version == 1
        sent.fail = False
        tick = fire(store, item, ledger.agent, at("2026-12-03T05:01:20"), sent)
        assert (tick.kind, [m.task_id for m in sent]) == ("resent", ["nightly-20261203T0501Z"])

    def test_an_unsent_task_whose_tick_never_comes_back_is_stranded(
        self, store: Store, tmp_path: Path
    ) -> None:
        """The workers' sweeper requeues it (created, no lease, no commit for a while)."""
        item = _ledger_schedule(tmp_path)
        sent = Sent()
        sent.fail = True
        with pytest.raises(ConnectionError):
            fire(store, item, ledger.agent, at("2026-12-03T05:01:00"), sent)
        later = datetime.now(UTC) + timedelta(seconds=700)
        assert [s.task_id for s in stranded(store, 600, now=later)] == ["nightly-20261203T0501Z"]

    def test_each_slot_has_its_own_task(self, store: Store, tmp_path: Path) -> None:
        item = _ledger_schedule(tmp_path, every=10)
        sent = Sent()
        for second in (0, 5, 10, 19, 20):
            fire(store, item, ledger.agent, T0 + timedelta(seconds=second), sent)
        assert [m.task_id for m in sent if m.task_id.endswith(("00Z", "10Z", "20Z"))] == [
            "nightly-20261203T050000Z",
            "nightly-20261203T050000Z",
            "nightly-20261203T050010Z",
            "nightly-20261203T050010Z",
            "nightly-20261203T050020Z",
        ]
        assert sorted(t for t in store.tasks() if t != REGISTRY) == [
            "nightly-20261203T050000Z",
            "nightly-20261203T050010Z",
            "nightly-20261203T050020Z",
        ]

    def test_no_slot_since_creation(self, store: Store, tmp_path: Path) -> None:
        item = _ledger_schedule(tmp_path, cron="0 2 * * *", created_at=T0)
        assert fire(store, item, ledger.agent, T0 + timedelta(hours=1), Sent()).kind == "no_slot"
        assert store.tasks() == []
