"""Every backend keeps a decision's skill candidates (``Event.candidates``, skill library).

An event without candidates stores none (``None`` fields are left out), so events written
before the field existed read back unchanged.
"""

from __future__ import annotations

from skillstate.events import Candidate, Event
from skillstate.store.base import Store


def test_candidates_round_trip(store: Store) -> None:
    offered = (
        Candidate(skill="export_orders", score=0.81, relevance=1.62, success_rate=1.0,
                  attempts=3),
        Candidate(skill="refund-policy", score=0.0, relevance=0.0, pinned=True),
    )  # fmt: skip
    plain = Event(task_id="t", version=1, actor="runtime", action={"kind": "create"})
    decided = Event(
        task_id="t",
        version=2,
        actor="policy",
        action={"kind": "call_skill", "skill": "export_orders"},
        candidates=offered,
    )
    store.commit("t", 0, {"task_id": "t", "version": 1}, plain)
    store.commit("t", 1, {"task_id": "t", "version": 2}, decided)
    first, second = store.events("t")
    assert first == plain
    assert first.candidates is None
    assert second == decided
    assert second.candidates == offered
