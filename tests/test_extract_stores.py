"""Accepting a proposal on every store: the card, the human event, the stored turns the
evidence points at, and a refusal that leaves the store as it was."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skillstate.engine.actions import LoadEvidence
from skillstate.engine.agent import load_agent
from skillstate.engine.evidence import load_evidence
from skillstate.errors import UsageError
from skillstate.extract import accept_proposal, extract, parse_transcript
from skillstate.store.base import Store
from skillstate.store.sealing import read_artifact
from tests.contract.backends import (
    BACKENDS,
    SERVICE_BACKENDS,
    drop_postgres_schemas,
    drop_redis_data,
)

NAMES = ("memory", "sqlite", "files", "postgres", "redis")
CHAT = """\
user: Please triage my ticket. The printer on floor 2 is jammed.
Never close the ticket before it is fixed.
The priority is P3.
assistant: On it.
tool: ticket_type: hardware
"""


@pytest.fixture(
    params=[
        pytest.param(n, marks=pytest.mark.services) if n in SERVICE_BACKENDS else n for n in NAMES
    ]
)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    opened = BACKENDS[request.param](tmp_path)
    yield opened
    opened.close()
    drop_redis_data()
    drop_postgres_schemas()


@pytest.fixture(scope="module")
def agent() -> Any:
    return load_agent("skillstate.examples.ticket:agent")


def test_accept_on_every_store(store: Store, agent: Any) -> None:
    proposal = extract(parse_transcript(CHAT, source="chat.txt"), agent)
    state = accept_proposal(store, agent, proposal, task_id="t1", actor="dana")
    head = store.load("t1")
    assert head.version == 1 == state.version
    assert (head.state["priority"], head.state["ticket_type"]) == ("P3", "hardware")
    assert "Never close the ticket before it is fixed." in head.state["constraints"]
    [event] = store.events("t1")
    assert (event.actor, event.action["by"], event.action["actor"]) == ("human", "extract", "dana")
    loaded = agent.parse_state(head.state)
    refs = {e.source: e.ref for e in loaded.evidence}
    assert read_artifact(store, refs["turn 3 (tool)"]) == b"ticket_type: hardware"
    draft = load_evidence(store, loaded, LoadEvidence(ref=refs["turn 1 (user)"]), "0001")
    assert draft.after.peek == refs["turn 1 (user)"]


def test_a_second_accept_under_the_same_id_writes_nothing(store: Store, agent: Any) -> None:
    proposal = extract(parse_transcript(CHAT, source="chat.txt"), agent)
    accept_proposal(store, agent, proposal, task_id="t1", actor="dana")
    artifacts = sorted(store.artifact_refs())
    with pytest.raises(UsageError, match="task 't1' already exists; nothing was written"):
        accept_proposal(store, agent, proposal, task_id="t1", actor="dana")
    assert sorted(store.artifact_refs()) == artifacts
    assert store.load("t1").version == 1
