"""The Store contract, continued: fencing, checksums, damage, task ids.

Every backend must pass every test here, unchanged. Damage is written straight
into each backend's own storage (``tests/contract/damage.py``), never through the
protocol: the store must notice what it did not write.
"""

from __future__ import annotations

import itertools
import threading
import time
from datetime import datetime, timezone
from typing import Any

import pytest

from skillstate.errors import (
    LeaseHeld,
    LeaseLost,
    StaleState,
    StateCorrupted,
    StoreError,
    TaskNotFound,
    UsageError,
)
from skillstate.state.diff import make_patch
from skillstate.store.base import Store
from skillstate.store.chain import CHECKSUM_MISMATCH, dumps
from tests.contract.damage import Damage, LeaseDamage
from tests.contract.test_store_contract import commit, doc, event, grow, snapshot


def fenced(store: Store, task_id: str, version: int, fence: int | None, **extra: Any) -> int:
    state = doc(task_id, version, **extra)
    return store.commit(task_id, version - 1, state, event(task_id, version), fence=fence)


class TestFencing:
    def test_first_claim_is_generation_one_and_renewal_keeps_it(self, store: Store) -> None:
        """The first claim ever gets generation 1; the holder renewing keeps it."""
        first = store.claim("t", "w1", 30)
        assert first.generation == 1
        renewed = store.claim("t", "w1", 60)
        assert renewed.generation == 1
        assert renewed.expires_at > first.expires_at
        current = store.lease("t")
        assert current is not None
        assert (current.task_id, current.worker, current.generation) == ("t", "w1", 1)
        assert abs((current.expires_at - renewed.expires_at).total_seconds()) < 0.002

    def test_renewing_an_expired_lease_nobody_took_keeps_it(self, store: Store) -> None:
        """A holder whose lease lapsed, with nobody claiming meanwhile, keeps its generation."""
        store.claim("t", "w1", 0.05)
        time.sleep(0.15)
        lease = store.lease("t")
        assert lease is not None
        assert lease.worker == "w1"
        assert lease.expires_at <= datetime.now(timezone.utc)
        assert store.claim("t", "w1", 30).generation == 1
        fenced(store, "t", 1, 1)

    def test_takeover_and_release_move_the_generation(self, store: Store) -> None:
        """A takeover, and any claim after a release (even by the same worker), is +1."""
        store.claim("t", "w1", 0.05)
        time.sleep(0.15)
        assert store.claim("t", "w2", 30).generation == 2
        store.release("t", "w2")
        assert store.lease("t") is None
        assert store.claim("t", "w2", 30).generation == 3
        store.release("t", "w2")
        assert store.claim("t", "w3", 30).generation == 4

    def test_generations_are_per_task(self, store: Store) -> None:
        """Each task counts its own generations."""
        store.claim("a", "w1", 30)
        store.release("a", "w1")
        assert store.claim("a", "w1", 30).generation == 2
        assert store.claim("b", "w1", 30).generation == 1

    def test_current_fence_commits(self, store: Store) -> None:
        """A commit under the task's current generation lands, creating the task too."""
        lease = store.claim("t", "w1", 30)  # before the task exists
        assert fenced(store, "t", 1, lease.generation) == 1
        assert fenced(store, "t", 2, lease.generation) == 2
        assert store.load("t").version == 2

    def test_taken_over_worker_cannot_commit(self, store: Store) -> None:
        """After a takeover the old generation is LeaseLost and nothing is written."""
        old = store.claim("t", "w1", 0.05)
        fenced(store, "t", 1, old.generation)
        time.sleep(0.15)
        new = store.claim("t", "w2", 30)
        before = snapshot(store, "t")
        with pytest.raises(LeaseLost) as info:
            fenced(store, "t", 2, old.generation, facts={"stale": True})
        assert (info.value.fence, info.value.current) == (old.generation, new.generation)
        assert "\n" not in str(info.value)
        assert snapshot(store, "t") == before
        assert fenced(store, "t", 2, new.generation) == 2

    def test_creating_with_a_stale_fence_writes_nothing(self, store: Store) -> None:
        """A stale fence refuses even the first commit: the task is not created."""
        store.claim("t", "w1", 30)
        store.release("t", "w1")
        store.claim("t", "w2", 30)
        with pytest.raises(LeaseLost):
            fenced(store, "t", 1, 1)
        with pytest.raises(TaskNotFound):
            store.load("t")
        assert "t" not in store.tasks()

    def test_released_or_never_claimed_lease_refuses_a_fence(self, store: Store) -> None:
        """A fence needs a held lease: after a release, or with no lease, it is LeaseLost."""
        with pytest.raises(LeaseLost) as info:
            fenced(store, "t", 1, 1)
        assert info.value.current is None
        lease = store.claim("t", "w1", 30)
        fenced(store, "t", 1, lease.generation)
        store.release("t", "w1")
        with pytest.raises(LeaseLost) as info:
            fenced(store, "t", 2, lease.generation)
        assert info.value.current is None
        assert store.load("t").version == 1

    def test_no_fence_skips_the_check(self, store: Store) -> None:
        """fence=None (a person's edit) commits whoever holds the lease."""
        store.claim("t", "w1", 30)
        assert fenced(store, "t", 1, None) == 1

    def test_stale_version_with_a_good_fence_is_stale_state(self, store: Store) -> None:
        """The fence and the version are both checked: a good fence does not excuse a stale read."""
        lease = store.claim("t", "w1", 30)
        fenced(store, "t", 1, lease.generation)
        fenced(store, "t", 2, lease.generation)
        with pytest.raises(StaleState):
            fenced(store, "t", 2, lease.generation)

    def test_force_release_drops_the_lease_and_keeps_the_generation(self, store: Store) -> None:
        """force_release returns what it dropped; the old holder's fence is refused after it."""
        assert store.force_release("t") is None
        held = store.claim("t", "w1", 30)
        fenced(store, "t", 1, held.generation)
        dropped = store.force_release("t")
        assert dropped is not None
        assert (dropped.worker, dropped.generation) == ("w1", held.generation)
        assert store.lease("t") is None
        assert store.force_release("t") is None
        with pytest.raises(LeaseLost):
            fenced(store, "t", 2, held.generation)
        assert store.claim("t", "w2", 30).generation == held.generation + 1

    def test_racing_fences_only_the_current_one_lands(self, store: Store) -> None:
        """Writers with the old and the new generation race on one version: only a new one wins."""
        old = store.claim("t", "w1", 0.05)
        fenced(store, "t", 1, old.generation)
        time.sleep(0.15)
        new = store.claim("t", "w2", 30)
        barrier = threading.Barrier(8)
        outcomes: list[str] = []
        lock = threading.Lock()

        def writer(n: int) -> None:
            fence = new.generation if n % 2 else old.generation
            barrier.wait()
            try:
                fenced(store, "t", 2, fence, facts={"writer": n})
                result = "won"
            except LeaseLost:
                result = "lost"
            except StaleState:
                result = "stale"
            with lock:
                outcomes.append(f"{result}:{n % 2}")

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(outcomes) == ["lost:0"] * 4 + ["stale:1"] * 3 + ["won:1"]
        assert store.load("t").state["facts"]["writer"] % 2 == 1

    @pytest.mark.parametrize("ttl", [float("inf"), float("nan"), 10 * 366 * 24 * 3600.0])
    def test_unusable_ttl_is_refused(self, store: Store, ttl: float) -> None:
        """A lease must end: an infinite, NaN or years-long ttl is a StoreError, nothing held."""
        with pytest.raises(StoreError):
            store.claim("t", "w1", ttl)
        assert store.lease("t") is None

    def test_bad_fence_type_is_refused(self, store: Store) -> None:
        """A fence is an int generation (not a string, not a bool)."""
        for fence in ("1", True):
            with pytest.raises(StoreError):
                fenced(store, "t", 1, fence)  # type: ignore[arg-type]


class TestChecksums:
    def test_head_edited_outside_is_corrupted(self, store: Store, damage: Damage) -> None:
        """A head changed behind the store's back fails its checksum; verify=False reads it."""
        commit(store, "t", 1, facts={"amount": 10})
        edited = doc("t", 1, facts={"amount": 10_000})
        damage.set_head(store, "t", dumps(edited))
        for read in (lambda: store.load("t"), lambda: store.checkpoint("t", 1)):
            with pytest.raises(StateCorrupted) as info:
                read()
            assert CHECKSUM_MISMATCH in str(info.value)
            assert info.value.version == 1
            assert "\n" not in str(info.value)
        raw = store.load("t", verify=False)
        assert (raw.version, raw.state) == (1, edited)

    def test_a_damaged_head_hides_nothing_before_it(self, store: Store, damage: Damage) -> None:
        """Older versions, the checkpoint list and the audit trail still read (doctor, log)."""
        committed = grow(store, "t", 5)
        damage.set_head(store, "t", dumps({**committed[5], "facts": {"forged": True}}))
        with pytest.raises(StateCorrupted):
            store.load("t")
        assert store.checkpoint("t", 4).state == committed[4]
        assert [c.version for c in store.checkpoints("t")] == [1, 2, 3, 4, 5]
        assert [e.version for e in store.events("t")] == [1, 2, 3, 4, 5]
        store.prune("t", keep_last=2)
        assert store.checkpoint("t", 4).state == committed[4]

    def test_a_repair_commits_over_a_damaged_head(self, store: Store, damage: Damage) -> None:
        """What set/edit do: read the damaged head unverified, commit a new version over it."""
        commit(store, "t", 1, facts={"amount": 10})
        damage.set_head(store, "t", dumps(doc("t", 1, facts={"amount": -1})))
        head = store.load("t", verify=False)
        fixed = doc("t", 2, facts={"amount": 10})
        store.commit("t", head.version, fixed, event("t", 2, patch=make_patch(head.state, fixed)))
        assert store.load("t").state == fixed

    def test_snapshot_edited_outside_is_corrupted(self, store: Store, damage: Damage) -> None:
        """A snapshot changed behind the store's back fails, and so does every delta on it."""
        committed = grow(store, "t", 30)
        infos = store.checkpoints("t")
        base = next(
            a.version for a, b in itertools.pairwise(infos) if a.snapshot and not b.snapshot
        )
        edited = {**committed[base], "facts": {"n": base, "even": "forged"}}
        damage.set_snapshot(store, "t", base, dumps(edited))
        for version in (base, base + 1):
            with pytest.raises(StateCorrupted, match="checksum does not match") as info:
                store.checkpoint("t", version)
            assert info.value.version == base  # names the record that was changed
        assert store.load("t").state == committed[30]  # the head is whole: unaffected

    def test_delta_edited_outside_is_corrupted(self, store: Store, damage: Damage) -> None:
        """A patch changed behind the store's back rebuilds a state its checksum refuses."""
        committed = grow(store, "t", 30)
        infos = store.checkpoints("t")
        delta = next(i.version for i in infos[:-1] if not i.snapshot)
        forged = make_patch(committed[delta - 1], {**committed[delta], "facts": {"forged": 1}})
        damage.set_patch(store, "t", delta, dumps(forged))
        with pytest.raises(StateCorrupted, match="checksum does not match") as info:
            store.checkpoint("t", delta)
        assert info.value.version == delta
        assert store.checkpoint("t", delta - 1).state == committed[delta - 1]

    def test_a_delta_that_reorders_keys_is_not_damage(self, store: Store) -> None:
        """A patch does not carry key order: a version rebuilt with its keys in another
        order than was committed is the same state, not a checksum failure."""
        log = ["a line long enough to make the patches small next to the state"] * 20
        first = doc("t", 1, facts={"a": 1, "b": {"x": 1, "y": 2}}, log=log)
        store.commit("t", 0, first, event("t", 1, patch=make_patch({}, first)))
        # Keys reordered (no op says so) and a key inserted before an existing one.
        second = doc("t", 2, facts={"new": 0, "b": {"y": 2, "x": 1}, "a": 1}, log=log)
        store.commit("t", 1, second, event("t", 2, patch=make_patch(first, second)))
        third = doc("t", 3, facts=second["facts"], log=[*log, "one more"])
        store.commit("t", 2, third, event("t", 3, patch=make_patch(second, third)))
        assert [i.snapshot for i in store.checkpoints("t")] == [True, False, False]
        assert store.checkpoint("t", 2).state == second
        assert store.checkpoint("t", 3).state == third
        assert dumps(store.load("t").state) == dumps(third)  # the head keeps its order

    def test_versions_without_checksums_load_unverified(self, store: Store, damage: Damage) -> None:
        """Records written before checksums load (unverified) and the task goes on."""
        committed = grow(store, "t", 6)
        damage.drop_checksums(store, "t")
        for version, state in committed.items():
            assert store.checkpoint("t", version).state == state
        assert store.load("t").state == committed[6]
        damage.set_head(store, "t", dumps({**committed[6], "facts": {"legacy": True}}))
        assert store.load("t").state["facts"] == {"legacy": True}  # nothing to check against
        nxt = doc("t", 7)
        store.commit("t", 6, nxt, event("t", 7))
        assert store.load("t").state == nxt
        assert store.checkpoint("t", 7).state == nxt


class TestHeadBelongsToItsRow:
    @pytest.mark.parametrize(
        ("field", "value"), [("version", 5), ("task_id", "other"), ("version", "1")]
    )
    def test_head_naming_another_row_is_corrupted(
        self, store: Store, damage: Damage, field: str, value: Any
    ) -> None:
        """A head (checksum intact) whose task_id or version is not its row's names the field."""
        commit(store, "t", 1)
        moved = {**doc("t", 1), field: value}
        damage.set_head(store, "t", dumps(moved), rehash=True)
        with pytest.raises(StateCorrupted) as info:
            store.load("t")
        assert info.value.field == field
        assert "\n" not in str(info.value)
        raw = store.load("t", verify=False)  # what a repair reads
        assert raw.version == 1
        assert raw.state == moved


class TestAuditTrail:
    def test_unparsable_event_is_corrupted(self, store: Store, damage: Damage) -> None:
        """An event that does not parse is StateCorrupted naming where it is, never skipped."""
        for v in (1, 2, 3):
            commit(store, "t", v)
        damage.break_event(store, "t", 2)
        with pytest.raises(StateCorrupted) as info:
            store.events("t")
        assert info.value.version == 2 or "line 2" in str(info.value)
        assert "\n" not in str(info.value)

    def test_missing_event_is_a_visible_gap(self, store: Store, damage: Damage) -> None:
        """A deleted event is not filled in or hidden: its version is missing from events()."""
        for v in (1, 2, 3):
            commit(store, "t", v)
        damage.drop_event(store, "t", 2)
        assert [e.version for e in store.events("t")] == [1, 3]


BAD_IDS = ["", "a\x00b", "\x00", "\udcff", "caf\udce9"]


class TestTaskIds:
    @pytest.mark.parametrize("task_id", BAD_IDS, ids=repr)
    def test_every_method_refuses_an_invalid_id(self, store: Store, task_id: str) -> None:
        """Empty, NUL-carrying and non-UTF-8 ids are one-line UsageErrors, everywhere."""
        calls = {
            "load": lambda: store.load(task_id),
            "commit": lambda: store.commit(task_id, 0, doc(task_id, 1), event("t", 1)),
            "checkpoint": lambda: store.checkpoint(task_id, 1),
            "checkpoints": lambda: store.checkpoints(task_id),
            "events": lambda: store.events(task_id),
            "prune": lambda: store.prune(task_id, keep_last=1),
            "claim": lambda: store.claim(task_id, "w", 30),
            "release": lambda: store.release(task_id, "w"),
            "lease": lambda: store.lease(task_id),
            "force_release": lambda: store.force_release(task_id),
        }
        for name, call in calls.items():
            with pytest.raises(UsageError) as info:
                call()
            message = str(info.value)
            assert message.startswith("invalid task id"), (name, message)
            assert "\n" not in message
        assert store.tasks() == []

    def test_unusual_but_valid_ids_work(self, store: Store) -> None:
        """Spaces, slashes, dots and non-ASCII text are ids like any other."""
        for task_id in ("a b", "a/b", "..", "工单-7", "x" * 200):
            commit(store, task_id, 1)
            assert store.load(task_id).version == 1
            assert store.claim(task_id, "w", 30).generation == 1


class TestDamagedLeases:
    @pytest.mark.parametrize("kind", ["far", "garbage"])
    def test_damaged_lease_is_reported_and_force_release_clears_it(
        self, store: Store, damage: Damage, kind: LeaseDamage
    ) -> None:
        """An unreadable or absurd expiry is StateCorrupted naming the task, not a crash."""
        held = store.claim("t", "w1", 30)
        damage.damage_lease(store, "t", kind)
        for call in (
            lambda: store.lease("t"),
            lambda: store.claim("t", "w2", 30),
            lambda: store.claim("t", "w1", 30),
        ):
            with pytest.raises(StateCorrupted) as info:
                call()
            message = str(info.value)
            assert "'t'" in message
            assert "lease" in message
            assert "\n" not in message
        dropped = store.force_release("t")
        assert dropped is not None
        assert dropped.worker == "w1"
        assert store.lease("t") is None
        with pytest.raises(LeaseLost):
            fenced(store, "t", 1, held.generation)
        again = store.claim("t", "w2", 30)
        assert again.generation > held.generation
        fenced(store, "t", 1, again.generation)


def test_claim_does_not_need_the_task(store: Store) -> None:
    """A lease on a task with no state yet neither creates the task nor lists it."""
    store.claim("t", "w1", 30)
    assert store.tasks() == []
    with pytest.raises(TaskNotFound):
        store.load("t")
    with pytest.raises(LeaseHeld):
        store.claim("t", "w2", 30)
