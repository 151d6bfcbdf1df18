"""Sensitive fields: sealed in every stored form, masked in every rendering.

The project rule under test: a secret never reaches the store, the event log or a
prompt in plain text. A state class with a ``Sensitive[str]`` field goes through
serialization, the SQLite store and the runtime, and every form that leaves the
process is searched for the plaintext.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from pydantic import Field

from skillstate import (
    Agent,
    AgentState,
    CallSkill,
    Finish,
    NoParams,
    Outcome,
    Runtime,
    ScriptedPolicy,
    Sensitive,
    SkillContext,
    SkillRegistry,
    StateMachine,
    Verdict,
    View,
    render_view,
)
from skillstate.engine.actions import Action
from skillstate.errors import SecretKeyMissing, UsageError
from skillstate.events import Event, SkillTransition, ToolCall
from skillstate.state import secrets
from skillstate.state.redact import Redactor
from skillstate.state.secrets import (
    MASK,
    PREFIX,
    generate_key,
    mask,
    seal,
    secret_values,
    sensitive_fields,
    unseal,
)
from skillstate.store.memory import MemoryStore
from skillstate.store.sqlite import SQLiteStore

TOKEN = "tok-5f1c9e0a7b3d4c2e"


class VaultState(AgentState):
    api_token: Sensitive[str] | None = None
    pin: str | None = Field(default=None, json_schema_extra={"sensitive": True})
    profile: Sensitive[dict[str, Any]] | None = None
    count: int = 0
    note: str | None = None


class PlainState(AgentState):
    count: int = 0


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh SKILLSTATE_KEY for the test."""
    value = generate_key()
    monkeypatch.setenv("SKILLSTATE_KEY", value)
    return value


@pytest.fixture
def no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SKILLSTATE_KEY", raising=False)


def forget_tokens() -> None:
    """Drop the process-level token caches, as a fresh process would start."""
    secrets._KEYRINGS.clear()


def vault(**fields: Any) -> VaultState:
    return VaultState(task_id="t1", api_token=TOKEN, **fields)


# ---------------------------------------------------------------- which fields


def test_sensitive_fields_by_type_and_by_metadata() -> None:
    assert sensitive_fields(VaultState) == {"api_token", "pin", "profile"}
    assert sensitive_fields(PlainState) == frozenset()
    assert sensitive_fields(AgentState) == frozenset()


def test_sensitive_is_the_plain_type_in_memory() -> None:
    """``Sensitive[str]`` validates like ``str``: a skill uses the value as is."""

    class Bare(AgentState):
        secret: Sensitive[str] = "default-secret"

    state = Bare(task_id="t")
    assert state.secret == "default-secret"
    assert sensitive_fields(Bare) == {"secret"}
    assert issubclass(SecretKeyMissing, UsageError)  # the CLI exits 2 with one line


# ---------------------------------------------------------------- sealing


@pytest.mark.usefixtures("key")
def test_to_json_seals_and_parsing_unseals() -> None:
    state = vault(pin="8812", profile={"login": "li.wei", "otp": 445566})
    stored = state.to_json()
    for name in ("api_token", "pin", "profile"):
        assert stored[name].startswith(PREFIX)
    text = json.dumps(stored)
    assert TOKEN not in text
    assert "8812" not in text
    assert "li.wei" not in text
    back = VaultState.model_validate(stored)
    assert back == state
    assert back.api_token == TOKEN
    assert back.profile == {"login": "li.wei", "otp": 445566}


@pytest.mark.usefixtures("key")
def test_store_round_trip_keeps_plaintext_out_of_the_store() -> None:
    runtime = Runtime(_agent(), MemoryStore())
    runtime.start("t1", api_token=TOKEN)
    stored = runtime.store.load("t1").state
    assert TOKEN not in json.dumps(stored)
    assert runtime.load("t1").api_token == TOKEN  # type: ignore[attr-defined]


@pytest.mark.usefixtures("key")
def test_ciphertext_is_stable_while_the_value_is_unchanged() -> None:
    state = vault()
    first = state.to_json()["api_token"]
    assert state.to_json()["api_token"] == first
    assert state.evolve(count=5).to_json()["api_token"] == first
    # A new process knows the token only from the stored form: decrypting it must
    # make sealing again give the same token, or every commit would diff.
    forget_tokens()
    loaded = VaultState.model_validate(state.to_json() | {"api_token": first})
    assert loaded.evolve(count=6).to_json()["api_token"] == first
    # A changed value is a new ciphertext.
    assert loaded.evolve(api_token=TOKEN + "x").to_json()["api_token"] != first


@pytest.mark.usefixtures("key")
def test_seal_is_idempotent_and_returns_copies() -> None:
    doc = vault().model_dump(mode="json")
    sealed = seal(VaultState, doc)
    assert doc["api_token"] == TOKEN  # the input is not modified
    assert seal(VaultState, sealed) == sealed
    assert unseal(VaultState, sealed)["api_token"] == TOKEN
    assert unseal(VaultState, doc) == doc  # plaintext passes through


@pytest.mark.usefixtures("no_key")
def test_without_a_key_a_value_is_refused() -> None:
    state = vault()
    with pytest.raises(
        SecretKeyMissing, match=r"field 'api_token' is sensitive: set SKILLSTATE_KEY"
    ):
        state.to_json()
    with pytest.raises(SecretKeyMissing, match="skillstate keygen"):
        seal(VaultState, state.model_dump(mode="json"))


@pytest.mark.usefixtures("no_key")
def test_without_a_key_none_is_fine() -> None:
    state = VaultState(task_id="t1", count=3)
    assert state.to_json()["api_token"] is None
    assert VaultState.model_validate(state.to_json()) == state


def test_without_a_key_a_sealed_value_does_not_load(
    key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    stored = vault().to_json()
    monkeypatch.delenv("SKILLSTATE_KEY")
    with pytest.raises(SecretKeyMissing, match="field 'api_token' is encrypted"):
        VaultState.model_validate(stored)


def test_wrong_key_is_refused(key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    stored = vault().to_json()
    monkeypatch.setenv("SKILLSTATE_KEY", generate_key())
    with pytest.raises(
        SecretKeyMissing,
        match="cannot decrypt field 'api_token': SKILLSTATE_KEY does not match the key",
    ):
        VaultState.model_validate(stored)


def test_invalid_key_text_says_how_to_make_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SKILLSTATE_KEY", "not-a-key-at-all")
    with pytest.raises(SecretKeyMissing) as info:
        vault().to_json()
    message = str(info.value)
    assert "skillstate keygen" in message
    assert "Fernet.generate_key()" in message
    assert "not-a-key-at-all" not in message  # never echo key material
    assert "\n" not in message


def test_key_rotation(monkeypatch: pytest.MonkeyPatch) -> None:
    old, new = generate_key(), generate_key()
    monkeypatch.setenv("SKILLSTATE_KEY", old)
    stored_old = vault().to_json()

    # The new key first encrypts; the old one still decrypts.
    monkeypatch.setenv("SKILLSTATE_KEY", f"{new}, {old}")
    loaded = VaultState.model_validate(stored_old)
    assert loaded.api_token == TOKEN
    resealed = loaded.to_json()
    assert resealed["api_token"] != stored_old["api_token"]  # re-encrypted under the new key
    assert loaded.to_json() == resealed  # and stable from then on

    # Once every record is rewritten the old key can go.
    monkeypatch.setenv("SKILLSTATE_KEY", new)
    forget_tokens()
    assert VaultState.model_validate(resealed).api_token == TOKEN
    with pytest.raises(SecretKeyMissing, match="does not match"):
        VaultState.model_validate(stored_old)


def test_states_without_sensitive_fields_need_no_key(no_key: None) -> None:
    state = PlainState(task_id="p", count=2)
    assert state.to_json() == state.model_dump(mode="json")


# ---------------------------------------------------------------- masking


@pytest.mark.usefixtures("key")
def test_views_and_renderings_are_masked(capsys: pytest.CaptureFixture[str]) -> None:
    from skillstate._render import print_state

    state = vault(pin="8812", note="visible")
    masked = state.to_view_json()
    assert masked["api_token"] == MASK
    assert masked["pin"] == MASK
    assert masked["profile"] is None  # None stays None
    assert mask(VaultState, state.model_dump(mode="json")) == masked

    text = render_view(state).text
    assert TOKEN not in text
    assert "8812" not in text
    assert f"api_token: {MASK}" in text
    assert "note: visible" in text

    for rendered in (repr(state), str(state)):
        assert TOKEN not in rendered
        assert "8812" not in rendered

    print_state(state)
    out = capsys.readouterr().out
    assert TOKEN not in out
    assert "api_token" in out
    assert MASK in out


def test_secret_values_lists_the_plaintext() -> None:
    state = vault(pin="8812", profile={"login": "li.wei", "otp": 445566, "flag": True})
    assert set(secret_values(state)) == {TOKEN, "8812", "li.wei", "445566"}
    assert secret_values(VaultState(task_id="t")) == ()


# ---------------------------------------------------------------- redaction


def test_redactor_text_json_and_bytes() -> None:
    redact = Redactor([TOKEN, "abc", "", TOKEN[:8]])
    assert redact
    assert not Redactor([])
    assert not Redactor(["abc", ""])  # too short to redact meaningfully
    # The longest secret wins: no tail of TOKEN is left behind.
    assert redact.text(f"Bearer {TOKEN}; again {TOKEN[:8]}") == "Bearer ***; again ***"
    assert redact.text("abc stays") == "abc stays"
    value = {"args": [f"x{TOKEN}", 3, None], TOKEN: ("k", True)}
    assert redact.json(value) == {"args": ["x***", 3, None], "***": ("k", True)}
    assert value["args"] == [f"x{TOKEN}", 3, None]  # a copy, not in place
    assert redact.bytes(f'{{"auth": "{TOKEN}"}}'.encode()) == b'{"auth": "***"}'
    assert TOKEN not in repr(redact)


def test_redactor_finds_json_escaped_forms() -> None:
    secret = 'pa"ss\\wörd'
    redact = Redactor([secret])
    raw = json.dumps({"password": secret}).encode()  # ASCII-escaped, as tool artifacts are
    assert redact.bytes(raw) == b'{"password": "***"}'
    assert redact.text(json.dumps([secret], ensure_ascii=False)) == '["***"]'


def test_redactor_event() -> None:
    event = Event(
        task_id="t",
        version=3,
        actor="policy",
        action={"kind": "call_skill", "params": {"token": TOKEN}},
        tool_calls=(
            ToolCall(tool="api", args={"authorization": f"Bearer {TOKEN}"}, summary=TOKEN),
        ),
        verdict=Verdict.failed(f"rejected {TOKEN}"),
        skill_transition=SkillTransition(from_skill=None, to_skill="a", reason=TOKEN),
        error=f"boom {TOKEN}",
        patch=[{"op": "add", "path": "/facts/t", "value": TOKEN}],
    )
    clean = Redactor([TOKEN]).event(event)
    assert TOKEN not in clean.model_dump_json()
    assert clean.tool_calls[0].args == {"authorization": "Bearer ***"}
    assert clean.verdict == Verdict.failed("rejected ***")
    assert clean.error == "boom ***"
    assert clean.started_at == event.started_at
    assert Redactor([]).event(event) is event


# ---------------------------------------------------------------- through the runtime


def _agent() -> Agent:
    """A counter whose skill reads the token from state (a stand-in for an API client)."""
    skills = SkillRegistry()

    @skills.skill(step="counting", outputs=["count", "note"], tools=["ping"])
    def bump(state: VaultState, params: NoParams, ctx: SkillContext) -> Outcome:
        """Count once, proving the token is usable in memory."""
        assert state.api_token == TOKEN
        ctx.call("ping", n=state.count)
        return Outcome(writes={"count": state.count + 1, "note": f"ping {state.count}"})

    bump.verifier(lambda state, outcome: state.count > 0)

    def decide(view: View) -> Action:
        state = view.state
        assert isinstance(state, VaultState)
        if state.count < 4:
            return CallSkill(skill="bump", reason="count")
        return Finish(reason="done")

    return Agent(
        name="vault",
        state_type=VaultState,
        machine=StateMachine({"init": ["counting"], "counting": ["counting", "done"], "done": []}),
        skills=skills,
        policy=ScriptedPolicy(decide),
        tools={"ping": lambda n: {"pong": n}},
        goal="count with a token",
    )


def _raw_files(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(path.parent.glob(path.name + "*")))


@pytest.mark.usefixtures("key")
def test_sqlite_file_never_holds_the_token(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = SQLiteStore(path)
    try:
        runtime = Runtime(_agent(), store)
        runtime.start("t1", api_token=TOKEN)
        result = runtime.run("t1")
        assert result.stopped == "completed"
        assert result.state.version >= 6  # several commits
        assert result.state.api_token == TOKEN  # type: ignore[attr-defined]
        # The token stays one ciphertext through every commit: no patch touches it.
        for event in store.events("t1")[1:]:
            assert not any(op["path"] == "/api_token" for op in event.patch)
        raw_live = _raw_files(path)
        assert b"enc:v1:" in raw_live  # the file does hold the sealed field
        assert TOKEN.encode() not in raw_live
    finally:
        store.close()
    raw = _raw_files(path)
    assert TOKEN.encode() not in raw
    # Every stored version decrypts back to the token.
    with sqlite3.connect(path) as db:
        head = db.execute("SELECT head FROM tasks WHERE task_id = 't1'").fetchone()[0]
    assert VaultState.model_validate(json.loads(head)).api_token == TOKEN


def test_runtime_without_a_key_refuses_before_writing(no_key: None, tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "state.db")
    try:
        with pytest.raises(SecretKeyMissing, match="api_token"):
            Runtime(_agent(), store).start("t1", api_token=TOKEN)
        assert store.tasks() == []
    finally:
        store.close()
    assert TOKEN.encode() not in _raw_files(tmp_path / "state.db")
