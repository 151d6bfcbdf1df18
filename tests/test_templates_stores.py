"""Templates on every store, and the card migration that added the ``template`` field.

Distill reads only the Store protocol (events, checkpoints, artifacts), so the same
finished task gives the same template on each backend. PostgreSQL and Redis skip
without their servers unless ``SKILLSTATE_REQUIRE_SERVICES=1``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from skillstate.engine.runtime import Runtime
from skillstate.state.secrets import generate_key
from skillstate.store.base import Store
from skillstate.store.memory import MemoryStore
from skillstate.templates import distill, instantiate
from skillstate.templates.hint import TemplateHint
from tests.contract.backends import (
    BACKENDS,
    SERVICE_BACKENDS,
    drop_postgres_schemas,
    drop_redis_data,
)
from tests.test_templates import PASSWORD, TOKEN, crm_agent, finish_task

STORES = ("memory", "sqlite", "files", "postgres", "redis")


@pytest.fixture(
    params=[
        pytest.param(name, marks=pytest.mark.services) if name in SERVICE_BACKENDS else name
        for name in STORES
    ]
)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    opened = BACKENDS[request.param](tmp_path)
    yield opened
    opened.close()
    drop_redis_data()
    drop_postgres_schemas()


def test_distill_gives_the_same_template_on_every_store(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The verified steps only, the same parameters, no secret, whatever the backend."""
    monkeypatch.setenv("SKILLSTATE_KEY", generate_key())
    finish_task(store)
    template = distill(store, "A", crm_agent())
    assert [s.skill for s in template.plan] == ["lookup", "fetch_orders", "report"]
    assert list(template.parameters) == ["customer", "region", "api_token", "password"]
    assert template.skills["lookup"]["version"] == "1"  # read from the stored manifest
    text = template.model_dump_json()
    assert TOKEN not in text
    assert PASSWORD not in text
    fields = instantiate(
        template, {"customer": "Initech", "region": "amer", "api_token": "t-777", "password": "x"}
    )
    started = Runtime(crm_agent(), store).start("B", **fields)
    assert started.template is not None
    assert started.template.steps[0].params == {"customer": "Initech"}
    assert started.api_token == "t-777"  # sealed in the store, the value in memory


def test_a_card_v6_loads_without_a_template(monkeypatch: pytest.MonkeyPatch) -> None:
    """Card 7 added ``template``: a card written at 6 (no such key) loads with none."""
    from skillstate.state.model import CARD_VERSION

    monkeypatch.setenv("SKILLSTATE_KEY", generate_key())
    db = MemoryStore()
    runtime = Runtime(crm_agent(), db)
    runtime.start("old", customer="Acme")
    raw = dict(db.load("old").state)
    raw.pop("template")
    raw["card_version"] = 6
    event = db.events("old")[-1]
    older = MemoryStore()
    older.commit("old", 0, raw, event)
    loaded = Runtime(crm_agent(), older).load("old")
    assert (loaded.card_version, loaded.template) == (CARD_VERSION, None)
    assert CARD_VERSION >= 7


def test_a_completed_step_takes_its_entry_off_the_hint() -> None:
    """The first remaining entry of the step's skill leaves; others stay, in order."""
    hint = TemplateHint.model_validate(
        {
            "name": "t",
            "source": "A",
            "total": 3,
            "steps": [{"skill": "a"}, {"skill": "b"}, {"skill": "a", "params": {"i": 2}}],
        }
    )
    after = hint.after("a")
    assert [s.skill for s in after.steps] == ["b", "a"]
    assert after.done == 1
    assert after.after("zzz") is after
    assert after.after("a").after("b").steps == ()
