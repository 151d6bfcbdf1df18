"""Tasks racing on one shared record, each in its own thread with its own Runtime and
store connection, on every backend a second process could open.

Each task appends its note to the same case file: under last-writer-wins all but one
note would be lost. A barrier holds every task's first ``add_note`` after it read the
record and before anything is committed, so the writes really collide (no timing):
one wins the record's compare-and-set, every other step is undone (its error log and
a ``shared_conflict`` event say the record moved) and decided again on the new version.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from skillstate import Runtime, open_store
from skillstate.shared import load_record, record_id
from tests import shared_agent
from tests.contract.backends import URLS, drop_postgres_schemas, drop_redis_data


@pytest.fixture(autouse=True)
def _cleanup() -> Iterator[None]:
    yield
    drop_postgres_schemas()
    drop_redis_data()


def _race(url: str, case: str, writers: int) -> dict[str, str]:
    """Run ``writers`` tasks on case ``case`` at once; their stop reasons by task."""
    open_store(url).close()  # created once, before the racers open it
    shared_agent.ARRIVED[case] = threading.Barrier(writers)
    stopped: dict[str, str] = {}
    failures: list[BaseException] = []

    def run(task: str) -> None:
        store = open_store(url)
        try:
            runtime = Runtime(shared_agent.agent, store)
            runtime.start(task, case_id=case, note=f"note of {task}")
            stopped[task] = runtime.run(task).stopped
        except BaseException as exc:  # reported by the test, not lost in the thread
            failures.append(exc)
        finally:
            store.close()

    threads = [threading.Thread(target=run, args=(f"{case}-t{i}",)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=240)
    del shared_agent.ARRIVED[case]
    assert not failures, failures
    assert not any(t.is_alive() for t in threads)
    return stopped


@pytest.mark.parametrize("writers", [2, 4])
@pytest.mark.parametrize("backend", sorted(URLS))
def test_racing_writers_all_complete_and_every_note_lands_exactly_once(
    backend: str, writers: int, tmp_path: Path
) -> None:
    url = URLS[backend](tmp_path)
    case = f"R{writers}"
    stopped = _race(url, case, writers)
    tasks = sorted(stopped)
    assert stopped == dict.fromkeys(tasks, "completed")

    store = open_store(url)
    try:
        head = load_record(store, "case", case)
        assert sorted(head.value["notes"]) == sorted(f"note of {t}" for t in tasks)
        assert head.version == writers  # one record version per note: nothing twice
        writes = [e.action for e in store.events(record_id("case", case))]
        assert sorted(w["task"] for w in writes) == tasks
        assert [w["base"] for w in writes] == list(range(writers))

        # The conflicts really happened, and each was observed where a user would look.
        conflicts = {
            t: [e for e in store.events(t) if e.action["kind"] == "shared_conflict"] for t in tasks
        }
        first = [t for t in tasks if not conflicts[t]]
        assert len(first) == 1  # the barrier let every first write through at once: one won
        assert writes[0]["task"] == first[0]
        for task in tasks:
            card = store.load(task).state
            logged = [e for e in card["errors"] if e["kind"] == "shared_conflict"]
            assert len(logged) == len(conflicts[task])
            for event, entry in zip(conflicts[task], logged, strict=True):
                seen, found = event.action["seen"], event.action["found"]
                assert found > seen
                assert f"moved from v{seen} to v{found}" in entry["message"]
                assert event.error == entry["message"]
            assert card["shared_pending"] == []
        # A loser's step was undone: it committed its card writes once, on the version
        # it finally wrote, and the record's version it saw then is the one it wrote on.
        for write in writes:
            events = store.events(write["task"])
            steps = [e for e in events if e.action["kind"] == "call_skill"]
            assert len(steps) == len(conflicts[write["task"]]) + 1
            assert f"{write['task']}@{steps[-1].version}" == write["tag"]
    finally:
        store.close()
