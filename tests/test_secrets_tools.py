"""Secrets that arrive from tools, searched for on every backend and every surface.

Reproduced before: a token returned by ``ctx.call`` was stored in plain text in the
artifacts and sent to the model in the history transcript; phone and ID numbers
in ordinary fields were stored in the clear. Now the agent's redaction policy
(key names and value shapes) masks them in the stored card, the events, the
artifacts, views, transcripts and replays, and artifacts are sealed at rest when
``SKILLSTATE_KEY`` is set.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from skillstate import (
    Action,
    Agent,
    AgentState,
    CallSkill,
    Finish,
    Outcome,
    Runtime,
    ScriptedPolicy,
    Sensitive,
    SkillContext,
    SkillRegistry,
    StateMachine,
    Verdict,
    View,
)
from skillstate.engine.replay import timeline
from skillstate.engine.transcript import conversation
from skillstate.state.secrets import generate_key
from skillstate.store import open_store
from skillstate.store.sealing import MAGIC, read_artifact
from tests.contract.backends import drop_postgres_schemas, drop_redis_data
from tests.test_secrets_e2e import STORES

JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9."
    "eyJzdWIiOiJ1c2VyLTQyIiwiZXhwIjoxOTk5OTk5OTk5fQ."
    "c2lnbmF0dXJlLXRoYXQtbG9va3MtcmVhbC0xMjM0NTY3OA"
)
OPAQUE = "opaq-9f8e7d6c5b4a3f2e1d0c"  # no known shape: only its key name gives it away
PHONE = "13812345678"
CN_ID = "11010519491231002X"
CARD = "4556 7375 8689 9855"  # not a published test number (those are not secret)
PLAINTEXTS = (JWT, OPAQUE, PHONE, CN_ID, CARD, "4556737586899855")


class CrmState(AgentState):
    session: Sensitive[str] | None = None
    """The login token, kept (sealed) for the next call."""
    customer: dict[str, Any] | None = None


class NoArgs(BaseModel):
    pass


def crm_tool(action: str, authorization: str = "") -> dict[str, Any]:
    if action == "login":
        return {"access_token": JWT, "refresh_token": OPAQUE, "expires_in": 3600}
    return {
        "name": "Li Wei",
        "user_phone": PHONE,
        "id_card": CN_ID,
        "note": f"prefers card {CARD}, call {PHONE}",
        "seen_with": authorization,
    }


def crm_agent(*, login: bool = True) -> Agent:
    """Log in (keeping the token, sealed), then fetch the customer; without ``login`` (no key
    to seal a token with) fetch right away."""
    skills = SkillRegistry()
    if login:

        @skills.skill(outputs=["session"], tools=["crm"], when=lambda s: s.session is None)
        def login_(state: CrmState, params: NoArgs, ctx: SkillContext) -> Outcome:
            """Log in to the CRM."""
            reply = ctx.call("crm", action="login")
            return Outcome(writes={"session": reply["access_token"]}, summary="logged in")

        login_.verifier(lambda s, o: bool(s.session))

    @skills.skill(outputs=["customer"], tools=["crm"])
    def fetch(state: CrmState, params: NoArgs, ctx: SkillContext) -> Outcome:
        """Fetch the customer; copy the record into the card."""
        record = ctx.call("crm", action="fetch", authorization=f"Bearer {state.session}")
        return Outcome(
            writes={"customer": record},
            summary=f"customer {record['name']}, phone {record['user_phone']}",
            evidence=[ctx.evidence(f"record of {record['name']}: {record['note']}")],
        )

    fetch.verifier(lambda s, o: s.customer is not None)

    def decide(view: View) -> Action:
        state = view.state
        assert isinstance(state, CrmState)
        if state.session is None and login:
            return CallSkill(skill="login_")
        if state.customer is None:
            return CallSkill(skill="fetch", reason=f"look up the caller {PHONE}")
        return Finish(summary="done")

    return Agent(
        name="crm",
        state_type=CrmState,
        machine=StateMachine({"init": ["init"]}, final=["init"]),
        skills=skills,
        policy=ScriptedPolicy(decide),
        tools={"crm": crm_tool},
        goal="Look up the caller",
    )


@pytest.fixture(scope="module", autouse=True)
def _cleanup() -> Iterator[None]:
    yield
    drop_postgres_schemas()
    drop_redis_data()


@pytest.fixture(params=sorted(STORES))
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Any]:
    url, raw = STORES[request.param](tmp_path)
    return url, raw


def assert_clean(text: str | bytes, where: str) -> None:
    data = text if isinstance(text, bytes) else text.encode()
    for secret in PLAINTEXTS:
        assert secret.encode() not in data, f"{secret[:12]}... found in {where}"


@pytest.mark.parametrize("keyed", [True, False], ids=["with-key", "no-key"])
def test_tool_borne_secrets_never_reach_a_surface(
    backend: tuple[str, Any], keyed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Raw store bytes, events, artifacts, views, transcripts and replays hold no plaintext."""
    url, raw = backend
    if keyed:
        monkeypatch.setenv("SKILLSTATE_KEY", generate_key())
    else:
        monkeypatch.delenv("SKILLSTATE_KEY", raising=False)
    # Without a key the login token cannot be kept (it is Sensitive): no login then.
    agent = crm_agent(login=keyed)
    store = open_store(url)
    try:
        result = Runtime(agent, store).run("t", create=True)
        assert result.stopped == "completed", result.state.errors
        state = result.state
        assert isinstance(state, CrmState)
        if keyed:
            assert state.session == JWT  # sealed, not masked: the agent can still use it
        customer = state.customer or {}
        assert customer["name"] == "Li Wei"
        assert customer["user_phone"] == "***"  # masked by its key name
        assert customer["note"] == "prefers card ***, call ***"  # masked by shape
        assert_clean(raw(), "the raw store")
        events = store.events("t")
        assert_clean(json.dumps([e.model_dump(mode="json") for e in events]), "the events")
        refs = [c.ref for e in events for c in e.tool_calls if c.ref]
        assert len(refs) == (2 if keyed else 1)
        for ref in refs:
            stored = store.get_artifact(ref)
            assert stored.startswith(MAGIC) is keyed  # sealed at rest only with a key
            assert_clean(stored, "a stored artifact")
            assert_clean(read_artifact(store, ref), "an artifact read back")
        assert_clean(agent.view(state).text, "the view")
        transcript = conversation(store, "t")
        assert_clean("\n".join(m.content for m in transcript), "the history transcript")
        steps, _ = timeline(store, "t")
        assert_clean(json.dumps([s.as_json() for s in steps], default=str), "the replay")
    finally:
        store.close()


def test_a_typed_field_named_like_a_secret_must_be_declared() -> None:
    """A plain ``user_phone: str`` field would be masked away: the agent is refused at build."""

    class Bad(AgentState):
        user_phone: str | None = None

    skills = SkillRegistry()
    with pytest.raises(Exception, match="field 'user_phone' looks sensitive"):
        Agent(
            name="bad",
            state_type=Bad,
            machine=StateMachine({"init": []}),
            skills=skills,
            policy=ScriptedPolicy(lambda v: Finish()),
        )


def test_the_policy_is_per_agent() -> None:
    """RedactionPolicy.OFF keeps ordinary values (only Sensitive fields' plaintext is masked)."""
    from skillstate.state.redact import RedactionPolicy
    from skillstate.store.memory import MemoryStore

    agent = crm_agent(login=False)
    agent.redaction = RedactionPolicy.OFF
    result = Runtime(agent, MemoryStore()).run("t", create=True)
    assert result.state.customer["user_phone"] == PHONE  # type: ignore[attr-defined]


def test_verdict_reasons_and_errors_are_masked_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """A verify reason quoting a card number is masked in the error log and the event."""
    from skillstate.store.memory import MemoryStore

    agent = crm_agent(login=False)
    agent.skills["fetch"].verifier(lambda s, o: Verdict.failed(f"card {CARD} is blocked"))
    store = MemoryStore()
    runtime = Runtime(agent, store)
    runtime.start("t")
    report = runtime.step("t")
    assert report.after.errors[-1].message.count("***") >= 1
    assert_clean(report.event.model_dump_json(), "the event")
    assert_clean(json.dumps(report.after.to_json()), "the card")
