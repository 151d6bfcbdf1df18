"""Helpers of tests/test_rekey.py: a card with a rotating secret, and the raw store read back.

:func:`raw_values` reads every value a store holds from outside the Store protocol
(every row of every table, every hash field, every file) and decompresses what is
compressed, so a test can look for ciphertext wherever it is.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
import zlib
from pathlib import Path
from typing import Any

from cryptography.fernet import Fernet, InvalidToken

from skillstate import (
    Agent,
    AgentState,
    CallSkill,
    Finish,
    NoParams,
    Outcome,
    ScriptedPolicy,
    Sensitive,
    SkillContext,
    SkillRegistry,
    StateMachine,
    View,
)
from skillstate.engine.actions import Action
from skillstate.events import Event
from skillstate.state.diff import make_patch
from skillstate.state.secrets import PREFIX, is_sealed
from skillstate.store.base import Store
from skillstate.store.sealing import MAGIC, read_artifact
from tests.contract.backends import POSTGRES_URL, REDIS_URL

STEPS = 8
"""Skill runs of the runtime-built task: each changes the token every other run."""


class VaultState(AgentState):
    api_token: Sensitive[str] | None = None
    count: int = 0
    note: str | None = None


def vault_agent() -> Agent:
    """A counter whose skill uses the token, rotates it every other run and calls a tool
    (whose output becomes an artifact, sealed at rest)."""
    skills = SkillRegistry()

    @skills.skill(step="counting", outputs=["count", "note", "api_token"], tools=["ping"])
    def bump(state: VaultState, params: NoParams, ctx: SkillContext) -> Outcome:
        """Count once, with the current token."""
        assert state.api_token is not None
        assert state.api_token.startswith("tok-")
        ctx.call("ping", n=state.count)
        count = state.count + 1
        return Outcome(
            writes={"count": count, "note": f"ping {count}", "api_token": f"tok-{count // 2}"}
        )

    bump.verifier(lambda state, outcome: state.count > 0)

    def decide(view: View) -> Action:
        state = view.state
        assert isinstance(state, VaultState)
        if state.count < STEPS:
            return CallSkill(skill="bump", reason="count")
        return Finish(reason="done")

    return Agent(
        name="vault",
        state_type=VaultState,
        machine=StateMachine({"init": ["counting"], "counting": ["counting", "done"], "done": []}),
        skills=skills,
        policy=ScriptedPolicy(decide),
        tools={"ping": lambda n: {"pong": n, "detail": "x" * 40}},
        goal="count with a rotating token",
    )


# ---------------------------------------------------------------- the raw store


SEALED = re.compile(rb"enc:v1:[A-Za-z0-9_\-]+=*")


def raw_values(url: str) -> list[bytes]:
    """Every value the store holds (rows, hash fields, files), and each one decompressed."""
    values = _raw(url)
    out = list(values)
    for value in values:
        for body in (value, value[1:]):  # SQLite/PostgreSQL zlib; Redis NUL + zlib
            with contextlib.suppress(zlib.error):
                out.append(zlib.decompress(body))
    return out


def _raw(url: str) -> list[bytes]:
    scheme, _, rest = url.partition("://")
    if scheme == "sqlite":
        with sqlite3.connect(rest[1:]) as db:
            tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
            return [
                _bytes(v) for t in tables for row in db.execute(f"SELECT * FROM {t}") for v in row
            ]
    if scheme == "file":
        return [p.read_bytes() for p in Path(rest).rglob("*") if p.is_file()]
    if scheme == "postgresql":
        import psycopg
        from psycopg import sql

        schema = url.rsplit("schema=", 1)[1]
        with psycopg.connect(POSTGRES_URL) as conn:
            tables = conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                (schema,),
            ).fetchall()
            query = "SELECT * FROM {}.{}"
            return [
                _bytes(v)
                for (table,) in tables
                for row in conn.execute(
                    sql.SQL(query).format(sql.Identifier(schema), sql.Identifier(table))
                )
                for v in row
            ]
    import redis

    prefix = url.rsplit("prefix=", 1)[1]
    client = redis.Redis.from_url(REDIS_URL)
    out: list[Any] = []
    try:
        for key in client.scan_iter(match=f"{prefix}:*"):
            kind = client.type(key)
            if kind == b"hash":
                for field, value in client.hgetall(key).items():
                    out += [field, value]
            elif kind == b"zset":
                out += list(client.zrange(key, 0, -1))
            else:
                out.append(client.dump(key) or b"")
    finally:
        client.close()
    return [_bytes(value) for value in out]


def _bytes(value: Any) -> bytes:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    return str(value).encode()


def sealed_in(url: str) -> tuple[set[bytes], set[bytes]]:
    """The Fernet tokens of every sealed value and every sealed artifact in the raw store."""
    values: set[bytes] = set()
    artifacts: set[bytes] = set()
    for raw in raw_values(url):
        values |= {m[len(PREFIX) :] for m in SEALED.findall(raw)}
        if raw.startswith(MAGIC):
            artifacts.add(raw[len(MAGIC) :])
    return values, artifacts


def opens(key: str, token: bytes) -> bool:
    try:
        Fernet(key.encode()).decrypt(token)
    except InvalidToken:
        return False
    return True


# ---------------------------------------------------------------- what the store says


def view(store: Store, task_id: str) -> dict[str, Any]:
    """Every kept version (rebuilt and verified), the head, the layout and the events."""
    infos = store.checkpoints(task_id)
    return {
        "head": store.load(task_id).state,
        "versions": {i.version: store.checkpoint(task_id, i.version).state for i in infos},
        "layout": [(i.version, i.snapshot) for i in infos],
        "events": [e.model_dump(mode="json") for e in store.events(task_id)],
    }


def plaintexts(agent: Agent, store: Store, task_id: str) -> dict[int, str | None]:
    """Each kept version's token, parsed with the state class (so unsealed)."""
    out = {}
    for info in store.checkpoints(task_id):
        state = agent.parse_state(store.checkpoint(task_id, info.version).state, task_id=task_id)
        assert isinstance(state, VaultState)
        out[info.version] = state.api_token
    return out


def tokens_of(value: Any) -> set[str]:
    """Every sealed string anywhere in a JSON value."""
    if isinstance(value, str):
        return {value} if is_sealed(value) else set()
    if isinstance(value, list):
        return set().union(*map(tokens_of, value)) if value else set()
    if isinstance(value, dict):
        return set().union(*map(tokens_of, value.values())) if value else set()
    return set()


def artifacts(store: Store) -> dict[str, bytes]:
    return {ref: read_artifact(store, ref) for ref in store.artifact_refs()}


def build_direct(store: Store, task_id: str, versions: int) -> None:
    """Commit ``versions`` versions straight to the store, the token changing every fifth."""
    previous: dict[str, Any] = {}
    log = [f"line {i} " + "y" * 40 for i in range(20)]
    for v in range(1, versions + 1):
        state = VaultState(
            task_id=task_id,
            version=v,
            api_token=f"tok-{task_id}-{v // 5}",
            count=v,
            note="n" * (v % 7),
            facts={"log": log[: 10 + v % 10]},
        ).to_json()
        step = Event(
            task_id=task_id,
            version=v,
            actor="runtime",
            action={"kind": "step"},
            patch=make_patch(previous, state),
        )
        store.commit(task_id, v - 1, state, step)
        previous = state


def tokens_by_version(store: Store, task_id: str) -> dict[int, str | None]:
    out = {}
    for info in store.checkpoints(task_id):
        state = VaultState.model_validate(store.checkpoint(task_id, info.version).state)
        out[info.version] = state.api_token
    return out


def keys_holding(store: Store, task_id: str, *keys: str) -> set[str]:
    """Which of ``keys`` open the task's sealed values (each must open with one)."""
    found = set()
    for token in tokens_of(view(store, task_id)):
        openers = [k for k in keys if opens(k, token[len(PREFIX) :].encode())]
        assert len(openers) == 1, f"{task_id}: a value opens with {len(openers)} keys"
        found.add(openers[0])
    return found
