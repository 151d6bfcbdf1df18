"""An agent whose effect needs secret params: ``login(user, password, dsn)``.

The outside world is a small file-backed auth server (``World``): it keeps accounts
and a database URL, and a login with the wrong password, or a connection with the
wrong URL, fails there. So the task completes only if the effect received the real
values: a ``"***"`` sent to it is a failed login, not a silent success.

Environment, for the crash tests (a subprocess runs ``main()``):

* ``SECRET_AGENT_KILL=before_effect``: the first run of the effect ``kill -9``\\ s its
  own process after the intent is committed and before the world is touched;
  ``after_effect``: right after the world recorded the login, before the outcome
  is committed. A marker file in the world makes it happen once.
* ``SECRET_AGENT_BUSY=1``: the first attempt fails with an error that quotes the
  password (masked before it reaches the error log, a span or a trace artifact).
* ``SECRET_AGENT_PROMPTS``: a file every prompt the model is sent is appended to.
* ``SECRET_AGENT_PAY=1``: after logging in, ask the user for a card, and pay with it
  through its handle (``reply --into card``).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from skillstate import (
    Agent,
    AgentState,
    Outcome,
    Runtime,
    Sensitive,
    SkillContext,
    SkillRegistry,
    StateMachine,
    Verdict,
    VerifyContext,
    open_store,
    per_task,
)
from skillstate.engine.policy import StatePolicy
from skillstate.llm.base import Message
from skillstate.llm.replay import ScriptedProvider

PASSWORD = "hunter2"
DSN = "postgresql://admin:S3cret@db.internal:5432/app"
CARD = "4556 7375 8689 9855"
PLAINTEXTS = (PASSWORD, "S3cret", CARD, "4556737586899855")


class World:
    """The outside world: accounts, the database URL, and who logged in under which key."""

    def __init__(self, root: str) -> None:
        self.root = Path(root)

    def create(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "accounts.json").write_text(json.dumps({"bob": PASSWORD, "dsn": DSN}))

    def login(self, user: str, password: str, dsn: str, key: str) -> str:
        accounts = json.loads((self.root / "accounts.json").read_text())
        if accounts.get(user) != password:
            raise PermissionError(f"login refused for {user!r}")
        if dsn != accounts["dsn"]:
            raise ConnectionError("no database at that URL")
        with (self.root / "sessions.log").open("a") as f:
            f.write(f"{key}\t{user}\n")
        return f"session for {user}"

    def logout(self, user: str, password: str, key: str) -> None:
        accounts = json.loads((self.root / "accounts.json").read_text())
        if accounts.get(user) != password:
            raise PermissionError(f"logout refused for {user!r}")
        with (self.root / "logouts.log").open("a") as f:
            f.write(f"{key}\t{user}\n")

    def logouts(self) -> list[str]:
        path = self.root / "logouts.log"
        return path.read_text().splitlines() if path.exists() else []

    def sessions(self, key: str) -> list[str]:
        path = self.root / "sessions.log"
        lines = path.read_text().splitlines() if path.exists() else []
        return [line.split("\t")[1] for line in lines if line.split("\t")[0] == key]

    def pay(self, card: str) -> None:
        if card != CARD:
            raise ValueError("card declined")
        with (self.root / "payments.log").open("a") as f:
            f.write("paid\n")

    def once(self, name: str) -> bool:
        """True the first time ``name`` is asked for (a marker file in the world)."""
        marker = self.root / f"{name}.done"
        if marker.exists():
            return False
        marker.write_text("")
        return True


class LoginState(AgentState):
    world: str = ""
    logged_in: bool = False
    paid: bool = False
    card: Sensitive[str] | None = None


class Login(BaseModel):
    user: str
    password: str
    dsn: str


class Pay(BaseModel):
    card: str


skills = SkillRegistry()


@skills.skill(outputs=["logged_in"], tools=["world"], effects=True, step="work")
def login(state: LoginState, params: Login, ctx: SkillContext) -> Outcome:
    """Log in to the auth server (an effect: it records a session)."""
    world: World = ctx.call("world")
    if os.environ.get("SECRET_AGENT_KILL") == "before_effect" and world.once("kill"):
        os.kill(os.getpid(), signal.SIGKILL)
    if os.environ.get("SECRET_AGENT_BUSY") and world.once("busy"):
        raise RuntimeError(f"server busy, retry login {params.user}/{params.password}")
    assert ctx.idempotency_key is not None
    world.login(params.user, params.password, params.dsn, ctx.idempotency_key)
    if os.environ.get("SECRET_AGENT_KILL") == "after_effect" and world.once("kill"):
        os.kill(os.getpid(), signal.SIGKILL)
    return Outcome(writes={"logged_in": True}, summary=f"logged in as {params.user}")


@login.prober
def _logged_in(state: LoginState, params: Login, ctx: SkillContext) -> Outcome | None:
    assert ctx.idempotency_key is not None
    found = World(state.world).sessions(ctx.idempotency_key)
    return Outcome(writes={"logged_in": True}, summary="found the session") if found else None


@login.rollbacker
def _log_out(state: LoginState, outcome: Outcome | None, ctx: SkillContext) -> None:
    """Undo a login: the server wants the password again."""
    assert ctx.idempotency_key is not None
    assert isinstance(ctx.params, Login)
    World(state.world).logout(ctx.params.user, ctx.params.password, ctx.idempotency_key)


@login.verifier
def _one_session(state: LoginState, outcome: Outcome, ctx: VerifyContext[Any, Any]) -> Verdict:
    """Exactly one session under this step's key, for the user it asked for."""
    assert ctx.idempotency_key is not None
    users = World(state.world).sessions(ctx.idempotency_key)
    if users != [ctx.params.user]:
        return Verdict.failed(f"sessions under the key: {len(users)}, wanted 1")
    return Verdict.passed()


@skills.skill(outputs=["paid"], tools=["world"], step="work", when=lambda s: s.card is not None)
def pay(state: LoginState, params: Pay, ctx: SkillContext) -> Outcome:
    """Pay with the card the user gave (its handle stands in the decision)."""
    ctx.call("world").pay(params.card)
    return Outcome(writes={"paid": True})


@pay.verifier
def _paid(state: LoginState, outcome: Outcome) -> Verdict:
    log = Path(state.world) / "payments.log"
    return Verdict.passed() if log.exists() else Verdict.failed("no payment recorded")


machine = StateMachine({"init": ["work"], "work": ["work", "done"], "done": []})


def decide(messages: list[Message], schema: Any) -> str:
    """The "model": log in with the password it was told, pay if a card was given, finish."""
    prompts = os.environ.get("SECRET_AGENT_PROMPTS")
    if prompts:
        with open(prompts, "a", encoding="utf-8") as f:
            f.write("\n".join(m.content for m in messages) + "\n")
    view = messages[1].content  # [system, the state view, then any repair turns]
    if "logged_in: false" in view:
        call = {"user": "bob", "password": PASSWORD, "dsn": DSN}
        return json.dumps({"kind": "call_skill", "skill": "login", "params": call})
    if "<sensitive:card>" in view and "paid: false" in view:
        return json.dumps(
            {"kind": "call_skill", "skill": "pay", "params": {"card": "<sensitive:card>"}}
        )
    if os.environ.get("SECRET_AGENT_PAY") and "paid: false" in view:
        return json.dumps({"kind": "ask_user", "question": "Which card should I charge?"})
    return json.dumps({"kind": "finish", "summary": "done", "next_step": "done"})


agent = Agent(
    name="secret-login",
    state_type=LoginState,
    machine=machine,
    skills=skills,
    policy=StatePolicy(ScriptedProvider(decide)),
    tools={"world": per_task(lambda state: lambda: World(state.world))},
)


def main(url: str, task_id: str, world: str) -> None:
    """Run the task to its end (or its kill) in this process."""
    store = open_store(url)
    runtime = Runtime(agent, store)
    try:
        store.load(task_id)
    except Exception:
        runtime.start(task_id, world=world)
    result = runtime.run(task_id)
    print(result.stopped)


if __name__ == "__main__":
    main(*sys.argv[1:4])
