"""Agents and helpers for the worker tests: a skill that kills its own process, a
policy whose provider fails a few times, and starting real ``skillstate worker``
processes (imported by worker subprocesses as ``tests.workers_support:...``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from skillstate import (
    Agent,
    CallSkill,
    Finish,
    Outcome,
    ScriptedPolicy,
    SkillContext,
    SkillRegistry,
    StateMachine,
    Verdict,
    View,
)
from skillstate.engine.actions import Action
from skillstate.errors import ProviderError
from skillstate.examples import ledger
from skillstate.examples.ledger import LedgerState

ROOT = Path(__file__).resolve().parent.parent

machine = StateMachine({"init": ["crashing"], "crashing": []}, initial="init")
skills = SkillRegistry()


@skills.skill(outputs=[], step="crashing")
def explode(state: LedgerState, params: object, ctx: SkillContext) -> Outcome:
    """Kill the worker running it, as a segfaulting native library would."""
    os.kill(os.getpid(), signal.SIGKILL)
    return Outcome(writes={})  # pragma: no cover - never reached


@explode.verifier
def _never(state: LedgerState, outcome: Outcome) -> Verdict:
    return Verdict.failed("the skill should have killed its worker")  # pragma: no cover


def _always_explode(view: View[LedgerState]) -> Action:
    return CallSkill(skill="explode", params={}, reason="crash the worker")


crasher = Agent(
    name="crasher",
    description="Kills its worker on every step: a task that must end as a dead letter.",
    state_type=LedgerState,
    machine=machine,
    skills=skills,
    policy=ScriptedPolicy(_always_explode),
)

FLAKY_FAILURES = {"left": 0}
"""How many more decisions the flaky provider refuses (set by a test)."""


def _flaky(view: View[LedgerState]) -> Action:
    if FLAKY_FAILURES["left"] > 0:
        FLAKY_FAILURES["left"] -= 1
        raise ProviderError("429 Too Many Requests (rate limit)")
    decision = ledger.decide(view)
    return decision if isinstance(decision, CallSkill) else Finish(summary="done")


flaky = replace(ledger.agent, name="flaky", policy=ScriptedPolicy(_flaky))


def start_worker(
    broker: str, store: str, queue: str, log: Path, *extra: str
) -> subprocess.Popen[bytes]:
    """A real ``skillstate worker`` process, its output in ``log``."""
    command = [
        sys.executable, "-m", "skillstate", "worker", "--broker", broker, "--store", store,
        "--queues", queue, "--loglevel", "INFO", *extra,
    ]  # fmt: skip
    with open(log, "ab") as out:
        return subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
