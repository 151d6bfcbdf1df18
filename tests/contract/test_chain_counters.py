"""A head's chain counters changed outside skillstate: refused on load, named by doctor.

Reproduced before: a files-store ``head.json`` (or a SQLite row, or a Redis hash) whose
``chain_len`` was ``"abc"`` loaded, then failed the next commit with a raw
``TypeError: can only concatenate str (not "int") to str``; a negative ``chain_len``
(PostgreSQL, Redis, any backend) loaded and ran, and stopped snapshots for that
many commits; ``doctor`` said the task was healthy. Every backend, sync and async.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from skillstate import Runtime
from skillstate.engine.doctor import diagnose
from skillstate.engine.edits import set_fields
from skillstate.errors import StateCorrupted
from skillstate.examples import ledger
from skillstate.store.base import Store
from tests.contract.damage import Damage

DAMAGE = [
    ("chain_len", -1_000_000),
    ("chain_len", "abc"),
    ("chain_len", 1.5),
    ("chain_len", "9" * 5_000),
    ("chain_bytes", -3),
    ("chain_bytes", "x"),
]


@pytest.mark.parametrize(
    ("name", "value"),
    DAMAGE,
    ids=["len-negative", "len-text", "len-fraction", "len-huge", "bytes-negative", "bytes-text"],
)
def test_a_damaged_chain_counter_is_refused_reported_and_repaired(
    store: Store, damage: Damage, tmp_path: Path, name: str, value: Any
) -> None:
    """load and run refuse it (StateCorrupted, one line); doctor names it; a set repairs it."""
    runtime = Runtime(ledger.agent, store, max_steps=2)
    runtime.start("L", target=4, ledger=str(tmp_path / "ledger.txt"))
    runtime.run("L")
    version = store.load("L").version
    damage.set_counter(store, "L", name, value)
    with pytest.raises(StateCorrupted) as caught:
        store.load("L")
    assert name in str(caught.value)
    assert "\n" not in str(caught.value)
    with pytest.raises(StateCorrupted):
        Runtime(ledger.agent, store).run("L")
    report = diagnose(store, "L", ledger.agent)
    assert any(name in finding.message for finding in report.damage), report.findings
    assert store.load("L", verify=False).version == version  # nothing was written
    # The repair: a person's change commits over it (a snapshot, fresh counters).
    set_fields(store, ledger.agent, "L", {"target": 5})
    assert store.load("L").version == version + 1
    assert diagnose(store, "L", ledger.agent).healthy
    result = Runtime(ledger.agent, store).run("L")
    assert result.state.appended == 5
    assert diagnose(store, "L", ledger.agent).healthy
