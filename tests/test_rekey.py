"""Key rotation end to end: ``rekey`` moves every stored secret under the new key.

A task whose card has a ``Sensitive[str]`` field that changes over its versions (so
snapshots *and* delta patches carry tokens) and whose tool outputs are artifacts
sealed at rest is built under key A. Then ``SKILLSTATE_KEY=B,A`` and a rekey; then
``SKILLSTATE_KEY=B`` alone: every kept checkpoint loads, a fork from an old version
and a rollback to one (then a run) work, every artifact opens, and no value in the
raw store (every row, value or file, decompressed) opens with A any more.

Also: a second rekey changes nothing; ``kill -9`` of a rekey at a random instant
after it has shown progress leaves every task loadable and all-old or all-new, and
a second run completes it; without a key the command exits 2 with one line.
Stores: SQLite, files, PostgreSQL and Redis.
"""

from __future__ import annotations

import os
import random
import re
import select
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skillstate import Agent, Runtime
from skillstate.cli import _main
from skillstate.engine.doctor import diagnose
from skillstate.engine.lease import default_worker
from skillstate.engine.rekey import rekey_artifacts, rekey_task
from skillstate.engine.rewind import fork_task, rollback_task
from skillstate.errors import LeaseHeld, SecretKeyMissing
from skillstate.events import Event
from skillstate.state.diff import make_patch
from skillstate.state.secrets import PREFIX, generate_key, is_sealed
from skillstate.store import open_store
from skillstate.store.base import Store
from skillstate.store.memory import MemoryStore
from skillstate.store.sealing import read_artifact, write_artifact
from tests.contract.backends import URLS, drop_postgres_schemas, drop_redis_data
from tests.rekey_support import (
    STEPS,
    artifacts,
    build_direct,
    keys_holding,
    opens,
    plaintexts,
    sealed_in,
    tokens_by_version,
    tokens_of,
    vault_agent,
    view,
)

BACKENDS = [
    "sqlite",
    "files",
    pytest.param("postgres", marks=pytest.mark.services),
    pytest.param("redis", marks=pytest.mark.services),
]


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield URLS[request.param](tmp_path)
    drop_redis_data()
    drop_postgres_schemas()


def use_keys(monkeypatch: pytest.MonkeyPatch, *keys: str) -> None:
    monkeypatch.setenv("SKILLSTATE_KEY", ",".join(keys))


# ---------------------------------------------------------------- the rotation, end to end


def build_under_a(agent: Agent, store: Store) -> None:
    runtime = Runtime(agent, store)
    for task_id in ("t1", "t2"):
        runtime.start(task_id, api_token="tok-0")
        assert runtime.run(task_id).stopped == "completed"
    infos = store.checkpoints("t1")
    events = {e.version: e for e in store.events("t1")}
    # Both kinds of record carry tokens: a snapshot, and a delta that set the field.
    assert any(i.snapshot and i.version > 1 for i in infos)
    assert any(
        not i.snapshot and any(op["path"] == "/api_token" for op in events[i.version].patch)
        for i in infos
    )


def test_rotation_end_to_end(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    key_a, key_b = generate_key(), generate_key()
    agent = vault_agent()
    use_keys(monkeypatch, key_a)
    store = open_store(url)
    try:
        build_under_a(agent, store)
        expected = {t: plaintexts(agent, store, t) for t in ("t1", "t2")}
        expected_artifacts = artifacts(store)
        assert len(expected_artifacts) >= STEPS
        values, sealed_artifacts = sealed_in(url)
        assert values
        assert all(opens(key_a, t) for t in values)
        assert sealed_artifacts
        assert all(opens(key_a, t) for t in sealed_artifacts)

        use_keys(monkeypatch, key_b, key_a)
        results = [rekey_task(store, t) for t in ("t1", "t2")]
        assert all(r.values > 0 and r.bodies > 0 for r in results)
        # Every sealed artifact: all but the agent's definition manifest (stored plain:
        # it holds names, versions and schema digests, no secret).
        assert rekey_artifacts(store) == len(expected_artifacts) - 1 == len(sealed_artifacts)
        assert store.lease("t1") is None  # the rekey's lease is released

        # A second rekey finds nothing left, and changes nothing.
        before = {t: view(store, t) for t in ("t1", "t2")}
        raw_before = artifacts(store)
        again = [rekey_task(store, t) for t in before]
        assert [(r.values, r.bodies) for r in again] == [(0, 0), (0, 0)]
        assert rekey_artifacts(store) == 0
        assert {t: view(store, t) for t in before} == before
        assert {r: store.get_artifact(r) for r in raw_before} == {
            r: store.get_artifact(r) for r in store.artifact_refs()
        }
    finally:
        store.close()

    # The old key goes: everything opens with B alone, nothing in the store opens with A.
    use_keys(monkeypatch, key_b)
    values, sealed_artifacts = sealed_in(url)
    assert values
    assert sealed_artifacts
    assert not any(opens(key_a, t) for t in values | sealed_artifacts)
    assert all(opens(key_b, t) for t in values | sealed_artifacts)
    store = open_store(url)
    try:
        for task_id, tokens in expected.items():
            assert plaintexts(agent, store, task_id) == tokens
            assert diagnose(store, task_id, agent).healthy
        assert artifacts(store) == expected_artifacts

        fork_task(store, agent, "t1", 2, "t1-fork", effects="keep")
        assert Runtime(agent, store).run("t1-fork").stopped == "completed"

        head = store.load("t1").version
        assert rollback_task(store, "t1", 2, effects="keep") == head + 1
        result = Runtime(agent, store).run("t1")
        assert result.stopped == "completed"
        assert result.state.api_token == f"tok-{STEPS // 2}"  # type: ignore[attr-defined]
    finally:
        store.close()


def test_a_value_no_key_opens_refuses_the_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sealed under a key that is not given: one line naming the task, nothing written."""
    key_a, key_b, key_c = generate_key(), generate_key(), generate_key()
    agent = vault_agent()
    use_keys(monkeypatch, key_a)
    store = open_store(URLS["sqlite"](tmp_path))
    try:
        build_under_a(agent, store)
        before = view(store, "t1")
        use_keys(monkeypatch, key_c, key_b)  # A is missing
        with pytest.raises(SecretKeyMissing) as info:
            rekey_task(store, "t1")
        assert "'t1'" in str(info.value)
        assert "\n" not in str(info.value)
        assert view(store, "t1") == before
        with pytest.raises(SecretKeyMissing, match="artifact sha256:"):
            rekey_artifacts(store)
    finally:
        store.close()


def test_values_under_the_first_key_stay_byte_identical(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task partly re-sealed already (new commits after the rotation) keeps those
    tokens as they are; only the old ones change."""
    key_a, key_b = generate_key(), generate_key()
    agent = vault_agent()
    use_keys(monkeypatch, key_a)
    store = open_store(URLS["sqlite"](tmp_path))
    try:
        runtime = Runtime(agent, store)
        runtime.start("t1", api_token="tok-0")
        assert runtime.run("t1", max_steps=3).stopped == "max_steps"
        use_keys(monkeypatch, key_b, key_a)
        Runtime(agent, store).run("t1")
        old_state = view(store, "t1")
        under_b = {t for t in tokens_of(old_state) if opens(key_b, t[len(PREFIX) :].encode())}
        assert under_b
        rekey_task(store, "t1")
        new_state = view(store, "t1")
        assert under_b <= tokens_of(new_state)
        assert all(opens(key_b, t[len(PREFIX) :].encode()) for t in tokens_of(new_state))
    finally:
        store.close()


# ---------------------------------------------------------------- the command


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = _main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_without_a_key_exits_2_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("SKILLSTATE_KEY", raising=False)
    url = URLS["sqlite"](tmp_path)
    code, out, err = cli(capsys, "rekey", "--all", "--store", url)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("error: rekey needs SKILLSTATE_KEY")
    assert not (tmp_path / "state.db").exists()  # the store was not even opened


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "name the tasks to re-seal"),
        (("t1", "--all"), "not both"),
        (("missing",), "no task 'missing'"),
    ],
)
def test_cli_bad_input_exits_2(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: tuple[str, ...],
    message: str,
) -> None:
    use_keys(monkeypatch, generate_key())
    code, _, err = cli(capsys, "rekey", *args, "--store", URLS["sqlite"](tmp_path))
    assert code == 2
    assert message in err
    assert err.count("\n") == 1


def test_cli_rekeys_and_reports_per_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    key_a, key_b = generate_key(), generate_key()
    url = URLS["sqlite"](tmp_path)
    use_keys(monkeypatch, key_a)
    store = open_store(url)
    try:
        build_under_a(vault_agent(), store)
    finally:
        store.close()
    use_keys(monkeypatch, key_b, key_a)
    code, out, err = cli(capsys, "rekey", "--all", "--artifacts", "--store", url)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert [line.split(":")[0] for line in lines] == ["task t1", "task t2", "artifacts"]
    assert all(re.search(r": [1-9]\d* (value\(s\)|re-sealed)", line) for line in lines)
    code, out, _ = cli(capsys, "rekey", "t1", "t2", "--artifacts", "--store", url)
    assert code == 0
    assert out.splitlines() == [
        "task t1: 0 value(s) re-sealed (0 stored bodies rewritten)",
        "task t2: 0 value(s) re-sealed (0 stored bodies rewritten)",
        "artifacts: 0 re-sealed",
    ]


def test_cli_damage_exits_5(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    key_a, key_b = generate_key(), generate_key()
    url = URLS["sqlite"](tmp_path)
    use_keys(monkeypatch, key_a)
    store = open_store(url)
    try:
        build_under_a(vault_agent(), store)
    finally:
        store.close()
    with sqlite3.connect(tmp_path / "state.db") as db:
        db.execute("UPDATE tasks SET head = replace(head, '\"count\":8', '\"count\":9')")
    use_keys(monkeypatch, key_b, key_a)
    code, _, err = cli(capsys, "rekey", "t1", "--store", url)
    assert code == 5
    assert "corrupted" in err
    assert "nothing was written" in err
    assert err.count("\n") == 1


# ---------------------------------------------------------------- kill -9 mid-rekey

ENTRY = "from skillstate.cli import main; main()"
KILL_ROUNDS = 3
"""Kills per store; each round rotates to a fresh key (NEW,OLD), so no rebuild is needed."""
BIG_VERSIONS = 1200
"""The big task: its rewrite takes ~0.15 s on SQLite, ~1 s on the files store."""
KILL_SPAN = 0.25
"""Largest random wait, after the rekey has printed its first task, before the kill."""
CRASH_TASKS = ("a0", "b-big", "c0", "c1", "c2")
_RICH_ENV = ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "TERM", "COLUMNS")


def rekey_process(url: str, cwd: Path, *keys: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k not in _RICH_ENV}
    env |= {"SKILLSTATE_KEY": ",".join(keys), "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
    return subprocess.Popen(
        [sys.executable, "-c", ENTRY, "rekey", "--all", "--store", url],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def first_line(proc: subprocess.Popen[bytes], deadline: float = 120.0) -> bytes:
    """Block until the process prints a line (its first task done), or fail."""
    assert proc.stdout is not None
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        ready, _, _ = select.select([proc.stdout], [], [], 0.05)
        if ready:
            line = proc.stdout.readline()
            assert line, (
                f"rekey exited early: {proc.wait()} {proc.stderr.read() if proc.stderr else b''!r}"
            )
            return line
    raise AssertionError("rekey showed no progress in time")


def test_crash_kill_9_mid_rekey_leaves_each_task_whole_and_a_rerun_finishes(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed = int(os.environ.get("SKILLSTATE_CRASH_SEED", random.randrange(1 << 30)))
    print(f"SKILLSTATE_CRASH_SEED={seed}")
    rng = random.Random(seed)
    keys = [generate_key() for _ in range(KILL_ROUNDS + 1)]
    use_keys(monkeypatch, keys[0])
    store = open_store(url)
    try:
        for task_id in CRASH_TASKS:
            build_direct(store, task_id, BIG_VERSIONS if task_id == "b-big" else 12)
        expected = {t: tokens_by_version(store, t) for t in CRASH_TASKS}
    finally:
        store.close()

    live_kills = 0
    outcomes: list[tuple[str, ...]] = []
    for round_, (new, old) in enumerate(zip(keys[1:], keys, strict=False)):
        proc = rekey_process(url, tmp_path, new, old)
        try:
            assert first_line(proc).startswith(b"task a0: ")
            # The first round kills as soon as the first task is reported (inside the big
            # task's claim or rewrite); the others after a random wait (anywhere after).
            time.sleep(rng.uniform(0, KILL_SPAN) if round_ else 0)
            live_kills += proc.poll() is None
            proc.send_signal(signal.SIGKILL)  # nothing is sent to a process already reaped
        finally:
            proc.communicate()  # reaps it and closes the pipes

        # Every task loads with NEW,OLD, every kept version verifies, and each task is
        # all-old or all-new.
        use_keys(monkeypatch, new, old)
        store = open_store(url)
        try:
            held = {t: keys_holding(store, t, new, old) for t in CRASH_TASKS}
            assert all(len(k) == 1 for k in held.values()), held
            outcomes.append(tuple("new" if held[t] == {new} else "old" for t in CRASH_TASKS))
            for task_id in CRASH_TASKS:
                assert tokens_by_version(store, task_id) == expected[task_id]
        finally:
            store.close()

        # A second run finishes the job; then OLD can go.
        proc = rekey_process(url, tmp_path, new, old)
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        assert len(out.splitlines()) == len(CRASH_TASKS)
        use_keys(monkeypatch, new)
        values, _ = sealed_in(url)
        assert values
        assert not any(opens(old, t) for t in values)
        store = open_store(url)
        try:
            for task_id in CRASH_TASKS:
                assert tokens_by_version(store, task_id) == expected[task_id]
                assert keys_holding(store, task_id, new, old) == {new}
        finally:
            store.close()
        if url.startswith("file://"):
            assert not list(Path(url.partition("://")[2]).glob(".rewrite-*"))
    print("after each kill (a0, b-big, c0, c1, c2):", outcomes)
    assert live_kills >= 1  # at least one kill landed while the rekey was running


# ---------------------------------------------------------------- edge cases


def test_a_task_a_live_worker_holds_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rekey holds the task's lease like any writer: a live holder refuses it."""
    key_a, key_b = generate_key(), generate_key()
    use_keys(monkeypatch, key_a)
    store = MemoryStore()
    build_direct(store, "t", 6)
    store.claim("t", "elsewhere:1", 30)
    before = view(store, "t")
    use_keys(monkeypatch, key_b, key_a)
    with pytest.raises(LeaseHeld, match="elsewhere:1"):
        rekey_task(store, "t")
    assert view(store, "t") == before
    lease = store.lease("t")
    assert lease is not None
    assert lease.worker == "elsewhere:1"
    # A runtime of this very process holding it: refused too, its lease left alone.
    store.force_release("t")
    mine = store.claim("t", default_worker(), 30)
    with pytest.raises(LeaseHeld):
        rekey_task(store, "t")
    assert store.lease("t") == mine
    assert view(store, "t") == before


def test_sealed_values_anywhere_are_resealed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sealed string is re-sealed wherever it sits: nested in the card, in an event;
    the same old token becomes the same new token everywhere."""
    key_a, key_b = generate_key(), generate_key()
    use_keys(monkeypatch, key_a)
    store = MemoryStore()
    build_direct(store, "t", 3)
    head = store.load("t").state
    token = head["api_token"]
    assert is_sealed(token)
    nxt = {**head, "version": 4, "facts": {"copies": [token, {"deep": token}]}}
    action = {"kind": "edit", "was": token}
    store.commit("t", 3, nxt, Event(task_id="t", version=4, actor="human", action=action, patch=[]))
    plain = store.put_artifact(b"stored without a key")
    use_keys(monkeypatch, key_b, key_a)
    result = rekey_task(store, "t")
    assert result.values == 1  # one token (versions 1-3 share it), wherever it was copied
    state = view(store, "t")
    found = tokens_of(state)
    assert found
    assert all(opens(key_b, t[len(PREFIX) :].encode()) for t in found)
    new = store.load("t").state
    assert new["facts"]["copies"] == [new["api_token"], {"deep": new["api_token"]}]
    assert store.events("t")[-1].action["was"] == new["api_token"]
    assert rekey_artifacts(store) == 0  # a plaintext artifact is left as it is
    assert store.get_artifact(plain) == b"stored without a key"


def test_without_a_key_the_functions_refuse(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SKILLSTATE_KEY", raising=False)
    store = MemoryStore()
    with pytest.raises(SecretKeyMissing, match="rekey needs SKILLSTATE_KEY"):
        rekey_task(store, "t")
    with pytest.raises(SecretKeyMissing, match="rekey needs SKILLSTATE_KEY"):
        rekey_artifacts(store)


class _MovingStore(MemoryStore):
    """A store where a person's edit (no lease, no fence) lands during the first rewrite."""

    moved = False

    def rewrite(self, task_id: str, expected_version: int, fn: Any) -> int:
        if not self.moved:
            self.moved = True
            head = self.load(task_id).state
            nxt = {**head, "version": head["version"] + 1, "note": "edited"}
            edit = Event(
                task_id=task_id,
                version=nxt["version"],
                actor="human",
                action={"kind": "set"},
                patch=make_patch(head, nxt),
            )
            self.commit(task_id, head["version"], nxt, edit)
        return super().rewrite(task_id, expected_version, fn)


def test_a_head_that_moves_meanwhile_is_rekeyed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    key_a, key_b = generate_key(), generate_key()
    use_keys(monkeypatch, key_a)
    store = _MovingStore()
    build_direct(store, "t", 6)
    use_keys(monkeypatch, key_b, key_a)
    result = rekey_task(store, "t")
    assert store.moved
    assert result.bodies > 0
    assert store.load("t").version == 7
    assert all(opens(key_b, t[len(PREFIX) :].encode()) for t in tokens_of(view(store, "t")))


def test_cli_artifacts_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    key_a, key_b = generate_key(), generate_key()
    url = URLS["sqlite"](tmp_path)
    use_keys(monkeypatch, key_a)
    store = open_store(url)
    try:
        refs = [write_artifact(store, f"output {i}".encode()) for i in range(3)]
    finally:
        store.close()
    use_keys(monkeypatch, key_b, key_a)
    code, out, err = cli(capsys, "rekey", "--artifacts", "--store", url)
    assert (code, out, err) == (0, "artifacts: 3 re-sealed\n", "")
    use_keys(monkeypatch, key_b)
    store = open_store(url)
    try:
        assert [read_artifact(store, ref) for ref in refs] == [
            b"output 0",
            b"output 1",
            b"output 2",
        ]
    finally:
        store.close()
