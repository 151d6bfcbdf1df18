"""Secret params reach the world as they are, and nothing else ever sees them.

Reproduced before (issue 24): an effect runs from its committed intent, and the intent
was stored masked, so ``login(password="hunter2")`` sent ``"***"`` to the world,
verify passed on the world's say-so and the task completed; on resume after a crash
it was the same. Now the intent keeps the values the redaction policy would mask
*sealed* (``SKILLSTATE_KEY``), the skill, its probe, verify and rollback get the
plaintext, and the store, the event log, the CLI, the traces and the prompts get
ciphertext or ``***``. The world here (``tests.secret_params_agent.World``) refuses a
wrong password or database URL, so a masked value cannot pass for a real one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skillstate import Runtime
from skillstate.engine.rewind import rollback_task
from skillstate.errors import SecretKeyMissing
from skillstate.state.secrets import generate_key
from skillstate.store import open_store
from skillstate.store.base import Store
from tests.contract.backends import drop_postgres_schemas, drop_redis_data
from tests.leaks import stored_bytes
from tests.secret_params_agent import CARD, PLAINTEXTS, World, agent
from tests.test_secrets_e2e import STORES, cli

ROOT = Path(__file__).resolve().parent.parent
BACKENDS = ["sqlite", "file", "postgres", "redis"]


@pytest.fixture(scope="module", autouse=True)
def _drop_service_data() -> Iterator[None]:
    yield
    drop_postgres_schemas()
    drop_redis_data()


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> str:
    value = generate_key()
    monkeypatch.setenv("SKILLSTATE_KEY", value)
    return value


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Store]]:
    url, _ = STORES[request.param](tmp_path)
    store = open_store(url)
    yield url, store
    store.close()


@pytest.fixture
def world(tmp_path: Path) -> World:
    w = World(str(tmp_path / "world"))
    w.create()
    return w


def assert_no_plaintext(where: str, text: str | bytes) -> None:
    data = text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text
    for secret in PLAINTEXTS:
        assert secret.encode() not in data, f"{secret!r} in {where}"


def _read_outputs(url: str, env: dict[str, str]) -> dict[str, str]:
    outputs = {}
    for args in (("show", "t"), ("show", "t", "--json"), ("log", "t"), ("log", "t", "--json")):
        code, out, err = cli(ROOT, env, *args, "--store", url)
        assert code == 0, f"{args}: {err}"
        outputs[" ".join(args)] = out + err
    return outputs


@pytest.mark.usefixtures("key")
def test_the_world_gets_the_real_values_and_no_surface_does(
    backend: tuple[str, Store],
    world: World,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Login with a password and a database URL (one attempt fails quoting the password),
    then pay with a card the user gave through ``reply --into``: all real in the world,
    none of it in the store, the events, the CLI, the spans or the prompts."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from skillstate.integrations.otel import OTelTracer

    url, store = backend
    prompts = tmp_path / "prompts.txt"
    monkeypatch.setenv("SECRET_AGENT_PROMPTS", str(prompts))
    monkeypatch.setenv("SECRET_AGENT_BUSY", "1")
    monkeypatch.setenv("SECRET_AGENT_PAY", "1")
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    runtime = Runtime(agent, store, tracer=OTelTracer(provider))
    runtime.start("t", world=world.root.as_posix())

    asked = runtime.run("t")
    assert asked.stopped == "waiting_user", asked.state.errors
    runtime.reply("t", CARD, into="card")
    done = runtime.run("t")
    assert done.stopped == "completed", done.state.errors

    keys = [e.action["key"] for e in store.events("t") if e.action.get("kind") == "effect"]
    assert len(keys) == 1
    assert world.sessions(keys[0]) == ["bob"]  # the real password and URL got through
    assert (world.root / "payments.log").read_text() == "paid\n"  # and the real card
    assert not world.once("busy")  # the attempt that quoted the password did fail first
    events = store.events("t")
    assert any(e.attempts == 2 for e in events if e.action.get("kind") == "effect")

    assert_no_plaintext("the store", stored_bytes(url))
    assert_no_plaintext("the prompts", prompts.read_text())
    spans = exporter.get_finished_spans()
    assert any(s.status.description for s in spans)  # the failed attempt's span says why
    for span in spans:
        assert_no_plaintext(f"span {span.name}", span.to_json())
    env = {"SKILLSTATE_KEY": os.environ["SKILLSTATE_KEY"]}
    for name, out in _read_outputs(url, env).items():
        assert_no_plaintext(f"skillstate {name}", out)
    provider.shutdown()


def _run_child(url: str, world: World, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    code = "import sys; from tests.secret_params_agent import main; main(*sys.argv[1:])"
    return subprocess.run(
        [sys.executable, "-c", code, url, "t", world.root.as_posix()],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.mark.usefixtures("key")
@pytest.mark.parametrize("when", ["before_effect", "after_effect"])
def test_kill_9_between_intent_and_effect(
    backend: tuple[str, Store], world: World, when: str
) -> None:
    """The process is killed with the intent committed (before the world is touched, or
    right after it was): the stored intent holds ciphertext, and the resumed effect
    logs in with the real password once, or finds the login by its probe."""
    url, store = backend
    child = _run_child(url, world, {"SECRET_AGENT_KILL": when})
    assert child.returncode == -signal.SIGKILL, child.stdout + child.stderr
    pending = store.load("t").state["pending_effect"]
    assert pending is not None
    assert pending["skill"] == "login"
    assert str(pending["params"]["password"]).startswith("enc:v1:")
    assert_no_plaintext("the store after the kill", stored_bytes(url))

    result = Runtime(agent, store).run("t")
    assert result.stopped == "completed", result.state.errors
    assert world.sessions(pending["key"]) == ["bob"]  # once: neither "***" nor twice
    settled = [e for e in store.events("t") if e.action.get("kind") == "effect_resumed"]
    assert len(settled) == 1
    assert settled[0].action.get("found_by_probe", False) is (when == "after_effect")
    assert_no_plaintext("the store after the resume", stored_bytes(url))


@pytest.mark.usefixtures("key")
def test_a_compensating_rollback_undoes_with_the_real_values(
    backend: tuple[str, Store], world: World
) -> None:
    """The rollback hook reads the params from the ledger of effects: sealed there, real
    in the hook (the server refuses a logout with a wrong password)."""
    _, store = backend
    runtime = Runtime(agent, store)
    runtime.start("t", world=world.root.as_posix())
    assert runtime.run("t").stopped == "completed"
    rollback_task(store, "t", 1, effects="compensate", agent=agent)
    assert runtime.compensate("t") == 1
    key = next(e.action["key"] for e in store.events("t") if e.action.get("kind") == "effect")
    assert world.logouts() == [f"{key}\tbob"]


def test_without_a_key_the_step_is_refused_before_anything_runs(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No key, no way to keep the password for a resume: refused loudly, nothing
    committed past the task's creation, the world untouched."""
    monkeypatch.delenv("SKILLSTATE_KEY", raising=False)
    store = open_store("memory://")
    runtime = Runtime(agent, store)
    runtime.start("t", world=world.root.as_posix())
    with pytest.raises(SecretKeyMissing, match=r"param 'password'.*SKILLSTATE_KEY"):
        runtime.run("t")
    assert store.load("t").version == 1
    assert not (world.root / "sessions.log").exists()


@pytest.mark.usefixtures("key")
def test_reply_into_refuses_what_it_cannot_keep(world: World) -> None:
    """``into`` names a Sensitive field, or the reply is refused without being echoed."""
    from skillstate.errors import UsageError

    store = open_store("memory://")
    runtime = Runtime(agent, store)
    runtime.start("t", world=world.root.as_posix())
    os.environ["SECRET_AGENT_PAY"] = "1"
    try:
        assert runtime.run("t").stopped == "waiting_user"
    finally:
        del os.environ["SECRET_AGENT_PAY"]
    with pytest.raises(UsageError, match="not a Sensitive field") as refused:
        runtime.reply("t", CARD, into="world")
    assert CARD not in str(refused.value)
    state = runtime.load("t")
    assert state.status.value == "waiting_user"


def test_handles_of_fields_that_are_not_sensitive_are_refused() -> None:
    """A decision cannot use a handle to read an ordinary field (or one with no value)."""
    from skillstate.errors import ActionRejected
    from skillstate.skills.handles import resolve_handles
    from tests.secret_params_agent import LoginState

    state = LoginState(task_id="t", card=None)
    with pytest.raises(ActionRejected, match="names no Sensitive field"):
        resolve_handles({"x": "<sensitive:world>"}, state)
    with pytest.raises(ActionRejected, match="holds no value"):
        resolve_handles({"x": ["<sensitive:card>"]}, state)
    filled = state.model_copy(update={"card": CARD})
    resolved: dict[str, Any] = resolve_handles({"x": ["<sensitive:card>"], "y": 1}, filled)
    assert resolved == {"x": [CARD], "y": 1}
