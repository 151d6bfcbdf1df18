"""Exactly-once effects across ``kill -9``: the ledger demo, killed mid-run, again and again.

Each round starts ``skillstate demo ledger`` (then ``skillstate resume``) in a
subprocess and SIGKILLs it, but never blindly: the test watches the store (and
the ledger file) from its own process and picks the kill instant from what it
sees, so a slow interpreter start-up on a busy machine only makes the rounds
longer, never makes the kills land before the task exists. Rounds take turns:

* ``random``: once the head version has moved 1-4 versions (drawn) past the round's
  starting version (the subprocess is running and has committed), wait a random
  0-0.3 s, then kill. These spread over everything: the pause between a resumed
  process's first commit and its first decision, before an intent, inside a commit,
  around the append, after an outcome.
* ``intent``: kill as soon as the head shows a ``pending_effect`` committed by this
  round's process (the intent is in, its outcome is not): the probe will find the
  effect not done and the resumed process must run it.
* ``append``: kill as soon as the ledger file grows while the head still shows the
  pending intent (the effect is done, its outcome is not committed): the probe must
  find the line and the resumed process must not append it again.

After every kill the head is read again: a head that still has a
``pending_effect`` is a kill that landed with an effect in flight. After
``KILLS`` kills the task is resumed to the end and the test asserts what this
is meant to show: enough kills landed, enough of them with an effect in flight,
every such effect was settled by a later process (one ``effect_resumed`` event
each), the probe answered both ways (done and not done), the final state equals
an uninterrupted run's, and the ledger holds every entry exactly once, in order.

The seed is printed; rerun with ``SKILLSTATE_CRASH_SEED=<seed>`` to replay a run's
schedule (the instants still depend on the machine's timing).
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

from skillstate.errors import TaskNotFound
from skillstate.store import open_store
from skillstate.store.base import Checkpoint, Store
from tests.contract.backends import drop_postgres_schemas, postgres_url_for

KILLS = 30
"""Kills per backend. Every round is one kill (~1 s on an idle 2-core machine, most of it
interpreter and CLI start-up), so 30 keep a backend near a minute, reference run included,
while giving each kind of kill (random, at the intent, after the append) 7-15 tries."""
MIN_IN_FLIGHT = 10
"""Kills that must land with an effect in flight. The 15 targeted rounds land there
nearly always (the window is at least STEP_DELAY wide; the test polls every POLL s),
the random ones more than half the time: 10 leaves room for a busy machine's misses."""
STEPS = 250
"""Ledger entries. A round lets the task advance at most ~8 steps (up to 4 versions, then
0.3 s, at >= 50 ms a step), so 30 rounds use under 170 of them even on a fast machine
(about 60 in practice): the task must not finish before the kills are done."""
STEP_DELAY = 0.04
"""Seconds each append takes, split around the write: the window a targeted kill aims at."""
RANDOM_PROGRESS = (1, 4)
"""How many versions past its start a ``random`` round waits for (drawn). A resumed
process settles a pending effect at once, then pauses ~0.5 s before its first decision:
1 aims into that pause, more into the step loop (two versions a step)."""
RANDOM_EXTRA = 0.3
"""Largest random wait, after the store shows that progress, before a ``random`` kill."""
POLL = 0.002
"""Seconds between two looks at the store while waiting for the kill instant."""
PROGRESS_DEADLINE = 120.0
"""How long a round may take to show progress or the aimed-at state (start-up under load)."""
TEST_DEADLINE = 900.0
"""The whole victim phase of one backend; generous, but never hang."""
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


def _ledger_args(task: str, ledger: Path, url: str) -> list[str]:
    return [
        *CLI,
        "demo",
        "ledger",
        "--task-id",
        task,
        "--steps",
        str(STEPS),
        "--step-delay",
        str(STEP_DELAY),
        "--ledger",
        str(ledger),
        "--store",
        url,
        "--max-steps",
        "1000",
        "-q",
    ]


def _final(url: str, task: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    store = open_store(url)
    try:
        state = store.load(task).state
        actions = [dict(e.action) for e in store.events(task)]
    finally:
        store.close()
    return state, actions


def _normalized(state: dict[str, Any], task: str, ledger: Path) -> str:
    # Two runs differ only in their task id and ledger path; everything else,
    # version included, must be equal. The prompt-token total counts the views,
    # which name the task, so it differs with the id's length: compare the rest.
    state = {**state, "usage": {**state["usage"], "prompt": None}}
    text = json.dumps(state, sort_keys=True, ensure_ascii=False)
    return text.replace(str(ledger), "<ledger>").replace(task, "<task>")


def _head(store: Store, task: str) -> Checkpoint | None:
    try:
        return store.load(task)
    except TaskNotFound:
        return None


def _version(head: Checkpoint | None) -> int:
    return 0 if head is None else head.version


def _pending(head: Checkpoint | None) -> Any:
    return None if head is None else head.state.get("pending_effect")


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


class _Exited(Exception):
    """The subprocess ended on its own before the kill instant came."""


class _Round:
    """One subprocess, watched through the store until the instant to kill it."""

    def __init__(self, proc: subprocess.Popen[bytes], store: Store, task: str, what: str):
        self.proc = proc
        self.store = store
        self.task = task
        self.what = what
        self.deadline = time.monotonic() + PROGRESS_DEADLINE

    def look(self) -> Checkpoint | None:
        if self.proc.poll() is not None:
            raise _Exited
        if time.monotonic() > self.deadline:
            pytest.fail(
                f"{self.what}: the subprocess is alive but its kill instant was not seen "
                f"within {PROGRESS_DEADLINE:.0f} s (the head is at version "
                f"{_version(_head(self.store, self.task))})"
            )
        return _head(self.store, self.task)

    def until(self, seen: Callable[[Checkpoint | None], bool]) -> Checkpoint | None:
        while True:
            head = self.look()
            if seen(head):
                return head
            time.sleep(POLL)


def _intent_after(version: int) -> Callable[[Checkpoint | None], bool]:
    def seen(head: Checkpoint | None) -> bool:
        return _version(head) > version and _pending(head) is not None

    return seen


def _aim(rnd: _Round, mode: str, start: int, ledger: Path, rng: random.Random) -> Any:
    """Wait for this round's kill instant; return the intent aimed at (None for ``random``)."""
    if mode == "random":
        target = start + rng.randint(*RANDOM_PROGRESS)
        rnd.until(lambda head: _version(head) >= target)  # it runs and has committed
        time.sleep(rng.uniform(0, RANDOM_EXTRA))
        rnd.look()
        return None
    while True:
        # An intent committed by this process (a pending effect left by the last
        # kill is in the head at start; it is settled first, which moves the version).
        head = rnd.until(_intent_after(start))
        intent = _pending(head)
        if mode == "intent":
            return intent
        # "append": wait for the effect's line, with the intent still pending. If the
        # line was written before we looked, the outcome commit comes first: aim at the
        # next intent instead.
        lines = _lines(ledger)
        while _pending(rnd.look()) == intent:
            if _lines(ledger) > lines:
                return intent
            time.sleep(POLL)
        start = _version(head)


@pytest.mark.parametrize("backend", sorted(STORES))
def test_kill_nine_and_resume_neither_loses_nor_repeats(backend: str, tmp_path: Path) -> None:
    """30 SIGKILLs after observed progress, at least 10 with an effect in flight."""
    began = time.monotonic()
    url = STORES[backend](tmp_path)
    seed = int(os.environ.get("SKILLSTATE_CRASH_SEED", time.time_ns() % 1_000_000))
    print(f"\ncrash test seed: {seed} ({backend})")
    rng = random.Random(seed)

    # The reference: the same demo, never interrupted.
    ref_ledger = tmp_path / "reference.txt"
    done = subprocess.run(
        _ledger_args("ref", ref_ledger, url),
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    ref_state, _ = _final(url, "ref")

    # The victim: killed again and again, each time at an instant the store shows.
    ledger = tmp_path / "ledger.txt"
    start_cmd = _ledger_args("victim", ledger, url)
    resume_cmd = [*CLI, "resume", "victim", "--store", url, "--max-steps", "1000", "-q"]
    errors = tmp_path / "stderr.txt"
    modes = ("intent", "random", "append", "random")
    kills = in_flight = 0
    # Per mode: kills, kills with an effect in flight, and (when aimed) the aimed-at one.
    tally = {mode: [0, 0, 0] for mode in modes}
    rounds = 0
    deadline = began + TEST_DEADLINE
    store = open_store(url)  # the reference run created the schema: no race with the CLI
    proc: subprocess.Popen[bytes] | None = None
    try:
        while kills < KILLS:
            rounds += 1
            assert rounds <= 2 * KILLS, f"{rounds} rounds gave only {kills} kills"
            assert time.monotonic() < deadline, f"{kills} kills in {TEST_DEADLINE:.0f} s"
            before = _head(store, "victim")
            start = _version(before)
            mode = modes[(rounds - 1) % len(modes)]
            with errors.open("wb") as err:
                proc = subprocess.Popen(
                    start_cmd if before is None else resume_cmd,
                    env=_env(),
                    stdout=subprocess.DEVNULL,
                    stderr=err,
                )
            rnd = _Round(proc, store, "victim", f"round {rounds} ({mode}, from v{start})")
            try:
                intent = _aim(rnd, mode, start, ledger, rng)
            except _Exited:
                intent = None
            else:
                proc.send_signal(signal.SIGKILL)
            code = proc.wait(timeout=60)
            proc = None
            if code == -signal.SIGKILL:
                kills += 1
                pending = _pending(_head(store, "victim"))
                in_flight += pending is not None
                tally[mode][0] += 1
                tally[mode][1] += pending is not None
                tally[mode][2] += pending is not None and pending == intent
                continue
            if code != 0:
                pytest.fail(f"round {rounds} exited {code}: {errors.read_text()[-2000:]}")
            head = _head(store, "victim")
            if head is not None and head.state["status"] == "completed":
                pytest.fail(
                    f"round {rounds} ({mode}) ran the task to its end before its kill "
                    f"instant came, after {kills} kills (raise STEPS if that is too few)"
                )
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=60)
        store.close()
    figures = (
        f"{backend}: {kills} kills in {rounds} rounds, {in_flight} with an effect in flight "
        f"(random: {tally['random'][1]}/{tally['random'][0]}; aimed at the intent: "
        f"{tally['intent'][2]}/{tally['intent'][0]} caught; after the append: "
        f"{tally['append'][2]}/{tally['append'][0]} caught); "
        f"{_lines(ledger)} of {STEPS} entries written meanwhile"
    )
    print(figures)
    assert kills >= KILLS, figures
    assert in_flight >= MIN_IN_FLIGHT, (
        f"only {in_flight} of {kills} kills landed with an effect in flight "
        f"(at least {MIN_IN_FLIGHT} needed): {figures}"
    )
    finished = subprocess.run(
        resume_cmd,
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=600,
        check=False,
    )
    assert finished.returncode == 0, finished.stderr

    state, actions = _final(url, "victim")
    resumed = [a for a in actions if a.get("kind") == "effect_resumed"]
    probed = [a for a in actions if a.get("found_by_probe")]
    print(
        f"{backend}: {len(resumed)} effects settled after a crash, {len(probed)} of them "
        f"found already done by the probe; {time.monotonic() - began:.1f} s"
    )
    # Every kill came after this round's process had committed, so an effect left in
    # flight by one kill is settled by the next process, once: one event per such kill.
    assert len(resumed) == in_flight, (
        f"{in_flight} kills left an effect in flight but {len(resumed)} were settled after a crash"
    )
    assert all(a.get("kind") == "effect_resumed" for a in probed), probed
    assert probed, "no kill landed after an append: the probe never found an effect done"
    assert len(probed) < len(resumed), "the probe never found an effect still to do"

    assert state["status"] == "completed"
    assert state.get("pending_effect") is None
    assert _normalized(state, "victim", ledger) == _normalized(ref_state, "ref", ref_ledger)

    expected = [line.replace("ref:", "victim:") for line in ref_ledger.read_text().splitlines()]
    assert len(expected) == STEPS
    assert ledger.read_text().splitlines() == expected  # every entry, once, in order
