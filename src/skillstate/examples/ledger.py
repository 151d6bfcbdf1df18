"""Exactly-once effects across crashes: every step appends one line to a ledger file.

The ``append_entry`` skill changes the outside world, so it is declared with
``effects=True``. The runtime then commits an *intent* (the step id and its
idempotency key) before the skill runs, and the outcome after ``verify``. If the
process is killed anywhere in between, ``skillstate resume`` finds the intent,
asks the skill's ``probe`` whether the line is already in the file, and either
records the outcome it finds or appends the line once: never zero times, never
twice. ``verify`` reads the file itself: the line for this key must be there
exactly once.

Effects cannot be taken back by rolling the card back: ``skillstate rollback <task>
--to V`` refuses while lines written after V are in the file, unless told to
``--keep-effects`` (re-done entries are then found by their keys, not appended
again) or to ``--compensate``: the skill's ``rollback`` hook removes the line of
each crossed entry, newest first, and the re-done entries are appended once.

Run it: ``skillstate demo ledger --steps 20 --step-delay 0.1 --ledger /tmp/ledger.txt``,
kill it at any moment, then ``skillstate resume <task>``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from pydantic import BaseModel, Field

from skillstate import (
    Agent,
    AgentState,
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


class LedgerState(AgentState):
    """How many entries the task must write, where, and how many are confirmed."""

    ledger: str = ""
    """Path of the ledger file (the outside world)."""
    target: int = Field(default=10, ge=0)
    step_delay: float = Field(default=0.0, ge=0)
    """Seconds each append takes (split around the write, so kills land on both sides)."""
    appended: int = 0
    """Entries confirmed by verify."""


class Entry(BaseModel):
    n: int = Field(ge=1, description="The entry number (appended + 1).")


machine = StateMachine(
    {"init": ["appending", "done"], "appending": ["appending", "done"], "done": []},
    initial="init",
)
skills = SkillRegistry()


def _line(key: str, n: int) -> str:
    return f"{key} entry {n}"


def _count(path: str, line: str) -> int:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return 0
    return sum(1 for row in text.splitlines() if row == line)


def append_line(path: str, line: str) -> str:
    """The effect: one ``write`` of one whole line on an ``O_APPEND`` descriptor, fsynced."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return f"appended {line!r}"


@skills.skill(outputs=["appended"], tools=["append_line"], step="appending", effects=True)
def append_entry(state: LedgerState, params: Entry, ctx: SkillContext) -> Outcome:
    """Append entry ``n`` to the ledger file."""
    assert ctx.idempotency_key is not None
    time.sleep(state.step_delay / 2)
    ctx.call("append_line", path=state.ledger, line=_line(ctx.idempotency_key, params.n))
    time.sleep(state.step_delay / 2)
    return _outcome(params.n)


def _outcome(n: int) -> Outcome:
    # run and probe return the same outcome, so a resumed step commits the same state.
    return Outcome(writes={"appended": n}, summary=f"entry {n} is in the ledger")


@append_entry.prober
def _already_appended(state: LedgerState, params: Entry, ctx: SkillContext) -> Outcome | None:
    assert ctx.idempotency_key is not None
    line = _line(ctx.idempotency_key, params.n)
    return _outcome(params.n) if _count(state.ledger, line) else None


@append_entry.verifier
def _line_is_there_once(state: LedgerState, outcome: Outcome) -> Verdict:
    n = state.appended
    key_lines = [
        row
        for row in _read_lines(state.ledger)
        if row.endswith(f" entry {n}") and row.startswith(f"{state.task_id}:")
    ]
    if len(key_lines) != 1:
        return Verdict.failed(f"entry {n} is in the ledger {len(key_lines)} times, not once")
    return Verdict.passed()


@append_entry.rollbacker
def _remove_line(state: LedgerState, outcome: Outcome | None, ctx: SkillContext) -> None:
    """Undo: drop this key's line, if it is there (safe to repeat after a crash)."""
    assert ctx.idempotency_key is not None
    remove_lines(state.ledger, prefix=f"{ctx.idempotency_key} ")


def remove_lines(path: str, *, prefix: str) -> int:
    """Rewrite the ledger without the lines starting with ``prefix``, atomically."""
    lines = _read_lines(path)
    kept = [row for row in lines if not row.startswith(prefix)]
    if len(kept) == len(lines):
        return 0
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write("".join(row + "\n" for row in kept))
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)  # the file is either the old or the new one, never half
    return len(lines) - len(kept)


@append_entry.precondition
def _more_to_write(state: LedgerState) -> bool:
    return state.appended < state.target


def _read_lines(path: str) -> list[str]:
    try:
        return Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []


def decide(view: View) -> Action:
    state = view.state
    assert isinstance(state, LedgerState)
    if state.appended < state.target:
        n = state.appended + 1
        return CallSkill(skill="append_entry", params={"n": n}, reason=f"entry {n} is next")
    return Finish(summary=f"{state.appended} entries written", reason="ledger complete")


agent = Agent(
    name="ledger",
    description="Exactly-once effects: one ledger line per step, across kill -9 and resume.",
    state_type=LedgerState,
    machine=machine,
    skills=skills,
    policy=ScriptedPolicy(decide),
    tools={"append_line": append_line},
    goal="Append every entry to the ledger exactly once.",
    constraints=("Never write an entry twice.", "Never skip an entry."),
)
