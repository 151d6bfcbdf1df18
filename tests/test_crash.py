"""Exactly-once effects across ``kill -9``: the ledger demo, killed at random instants.

Each round starts ``skillstate demo ledger`` (then ``skillstate resume``) in a
subprocess and SIGKILLs it after a random delay, so kills land everywhere: while
Python starts, before an intent is committed, between the intent and the append,
between the append and the outcome commit, inside a commit. After at least 30
kills the task is resumed to the end; its final state must equal an
uninterrupted run's, and the ledger must hold every entry exactly once.

The seed is printed; rerun with ``SKILLSTATE_CRASH_SEED=<seed>`` to replay a run's
kill schedule.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from skillstate.store import open_store
from tests.contract.backends import drop_postgres_schemas, postgres_url_for

KILLS = 30
STEPS = 400  # enough that 30 kills land before the end even on a fast, idle machine
STEP_DELAY = 0.04
CLI = [sys.executable, "-m", "skillstate"]

UrlFor = Callable[[Path], str]
STORES: dict[str, UrlFor] = {
    "sqlite": lambda tmp: f"sqlite:///{tmp / 'state.db'}",
    "postgres": postgres_url_for,
}


@pytest.fixture(autouse=True)
def _drop_schemas() -> Iterator[None]:
    yield
    drop_postgres_schemas()


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("SKILLSTATE_STORE", None)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _ledger_args(task: str, ledger: Path, url: str, *, delay: float) -> list[str]:
    return [
        *CLI,
        "demo",
        "ledger",
        "--task-id",
        task,
        "--steps",
        str(STEPS),
        "--step-delay",
        str(delay),
        "--ledger",
        str(ledger),
        "--store",
        url,
        "--max-steps",
        "1000",
        "-q",
    ]


def _final(url: str, task: str) -> tuple[dict[str, Any], list[str]]:
    store = open_store(url)
    try:
        state = store.load(task).state
        kinds = [str(e.action.get("kind")) for e in store.events(task)]
    finally:
        store.close()
    return state, kinds


def _normalized(state: dict[str, Any], task: str, ledger: Path) -> str:
    # Two runs differ only in their task id and ledger path; everything else,
    # version included, must be equal. The prompt-token total counts the views,
    # which name the task, so it differs with the id's length: compare the rest.
    state = {**state, "usage": {**state["usage"], "prompt": None}}
    text = json.dumps(state, sort_keys=True, ensure_ascii=False)
    return text.replace(str(ledger), "<ledger>").replace(task, "<task>")


@pytest.mark.parametrize("backend", sorted(STORES))
def test_kill_nine_and_resume_neither_loses_nor_repeats(backend: str, tmp_path: Path) -> None:
    """≥ 30 SIGKILLs at random instants; resume; same final state, every entry once."""
    url = STORES[backend](tmp_path)
    seed = int(os.environ.get("SKILLSTATE_CRASH_SEED", time.time_ns() % 1_000_000))
    print(f"crash test seed: {seed} ({backend})")
    rng = random.Random(seed)

    # The reference: the same demo, never interrupted.
    ref_ledger = tmp_path / "reference.txt"
    done = subprocess.run(
        _ledger_args("ref", ref_ledger, url, delay=STEP_DELAY),
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    ref_state, _ = _final(url, "ref")

    # The victim: killed again and again.
    ledger = tmp_path / "ledger.txt"
    start = _ledger_args("victim", ledger, url, delay=STEP_DELAY)
    resume = [*CLI, "resume", "victim", "--store", url, "--max-steps", "1000", "-q"]
    kills = 0
    rounds = 0
    while kills < KILLS:
        rounds += 1
        assert rounds < KILLS * 4, "the task finished before enough kills landed"
        first = rounds == 1 or not _exists(url)
        proc = subprocess.Popen(
            start if first else resume,
            env=_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        time.sleep(rng.uniform(0.3, 1.5))  # start-up takes ~0.5 s: most kills land mid-run
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        _, err = proc.communicate(timeout=60)
        if proc.returncode not in (0, -signal.SIGKILL):
            pytest.fail(f"round {rounds} exited {proc.returncode}: {err.decode()[-500:]}")
        if proc.returncode == 0 and _final(url, "victim")[0]["status"] == "completed":
            break
    finished = subprocess.run(
        resume, env=_env(), capture_output=True, text=True, timeout=120, check=False
    )
    assert finished.returncode == 0, finished.stderr
    assert kills >= KILLS, f"only {kills} kills landed (raise STEPS)"

    state, kinds, probed = _final_with_probes(url, "victim")
    assert state["status"] == "completed"
    assert _normalized(state, "victim", ledger) == _normalized(ref_state, "ref", ref_ledger)

    expected = [line.replace("ref:", "victim:") for line in ref_ledger.read_text().splitlines()]
    assert len(expected) == STEPS
    assert ledger.read_text().splitlines() == expected  # every entry, once, in order
    print(
        f"{backend}: {kills} kills in {rounds} rounds; "
        f"{kinds.count('effect_resumed')} effects settled after a crash, "
        f"{probed} of them found already done by the probe"
    )


def _final_with_probes(url: str, task: str) -> tuple[dict[str, Any], list[str], int]:
    store = open_store(url)
    try:
        events = store.events(task)
    finally:
        store.close()
    state, kinds = _final(url, task)
    return state, kinds, sum(1 for e in events if e.action.get("found_by_probe"))


def _exists(url: str) -> bool:
    store = open_store(url)
    try:
        return "victim" in store.tasks()
    finally:
        store.close()
