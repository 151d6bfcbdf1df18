"""Stored cards load strictly, on every backend: damage is never filled in with defaults.

Reproduced before: a head whose ``constraints`` or ``goal`` was removed outside
skillstate was resumed with empty defaults (exit 0), so the agent ran on without
the constraints the user stated; ``view``, ``resume`` and ``doctor`` all exited 0.
Here the damage is written with a recomputed checksum (``rehash=True``: the worst
case, someone who knows the format), so what catches it is the strict load itself.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from skillstate import Runtime
from skillstate.engine.doctor import diagnose
from skillstate.errors import StateCorrupted
from skillstate.examples import ledger
from skillstate.store.base import Store
from skillstate.store.chain import dumps
from tests.contract.damage import Damage


def _task(store: Store, tmp_path: Any) -> dict[str, Any]:
    runtime = Runtime(ledger.agent, store, max_steps=2)
    runtime.start("L", target=3, ledger=str(tmp_path / "ledger.txt"))
    runtime.run("L")
    return dict(store.load("L").state)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda d: d.pop("goal"), "goal"),
        (lambda d: d.pop("constraints"), "constraints"),
        (lambda d: d.pop("appended"), "appended"),
        (lambda d: d.update(appended="2"), "appended"),
        (lambda d: d.update(surprise=1), "surprise"),
        (lambda d: d["completed_steps"][0].pop("id"), "completed_steps.0.id"),
    ],
    ids=["no-goal", "no-constraints", "no-typed-field", "wrong-type", "unknown", "nested"],
)
def test_damaged_head_is_corrupted_naming_the_field(
    store: Store, damage: Damage, tmp_path: Any, change: Any, field: str
) -> None:
    """Load, run and doctor refuse the damaged head with StateCorrupted(field=...)."""
    document = _task(store, tmp_path)
    change(document)
    damage.set_head(store, "L", dumps(document), rehash=True)
    runtime = Runtime(ledger.agent, store)
    with pytest.raises(StateCorrupted) as caught:
        runtime.load("L")
    assert caught.value.field == field
    with pytest.raises(StateCorrupted):
        runtime.run("L")
    report = diagnose(store, "L", ledger.agent)
    assert not report.healthy
    assert any(field.split(".", maxsplit=1)[0] in f.message or f.version for f in report.damage)
    assert json.loads(dumps(store.load("L").state)) == document  # nothing was written


def test_a_damaged_lease_is_reported_by_doctor(store: Store, damage: Damage, tmp_path: Any) -> None:
    """doctor names a lease whose expiry is unreadable and says how to clear it."""
    _task(store, tmp_path)
    store.claim("L", "w", 60)
    damage.damage_lease(store, "L", "garbage")
    report = diagnose(store, "L", ledger.agent)
    assert any("unlock L --force" in f.message for f in report.damage)
    store.force_release("L")
    assert diagnose(store, "L", ledger.agent).healthy
