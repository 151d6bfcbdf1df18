"""Exactly-once effects across crashes: every step appends one line to a ledger file.

The ``append_entry`` skill changes the outside world, so it is declared with
``effects=True``. The runtime then commits an *intent* (the step id and its
idempotency key) before the skill runs, and the outcome after ``verify``. If the
process is killed anywhere in between, ``skillstate resume`` finds the intent,
asks the skill's ``probe`` whether the line is already in the file, and either
records the outcome it finds or appends the line once: never zero times, never
twice. Each line is ``<key>\\t<entry N>``, appended under a file lock by
:func:`skillstate.effects.files.append_once`, so even two workers racing the same
key write it once. ``verify`` reads the file itself and is strict: the task's
entries read 1, 2, ..., n with no gap and no repeat, and n is at most the target.

Effects cannot be taken back by rolling the card back: ``skillstate rollback <task>
--to V`` refuses while lines written after V are in the file, unless told to
``--keep-effects`` (re-done entries are then found by their keys, not appended
again) or to ``--compensate``: the skill's ``rollback`` hook appends a retraction
of each crossed entry, newest first (a ledger is never rewritten), and the re-done
entries are appended once.

Run it: ``skillstate demo ledger --steps 20 --step-delay 0.1 --ledger /tmp/ledger.txt``,
kill it at any moment, then ``skillstate resume <task>``.
"""

from __future__ import annotations

import time
from collections import Counter

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
from skillstate.effects import files
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


def append_line(path: str, line: str, key: str) -> str:
    """The effect: one keyed record, appended unless the key is already there.

    The check and the append happen under one ``flock`` (``skillstate.effects.files``),
    so two workers racing the same key write it once.
    """
    done = files.append_once(path, line, key)
    return f"appended {line!r}" if done else f"{line!r} was already there"


@skills.skill(outputs=["appended"], tools=["append_line"], step="appending", effects=True)
def append_entry(state: LedgerState, params: Entry, ctx: SkillContext) -> Outcome:
    """Append entry ``n`` to the ledger file."""
    assert ctx.idempotency_key is not None
    time.sleep(state.step_delay / 2)
    ctx.call("append_line", path=state.ledger, line=f"entry {params.n}", key=ctx.idempotency_key)
    time.sleep(state.step_delay / 2)
    return _outcome(params.n)


def _outcome(n: int) -> Outcome:
    # run and probe return the same outcome, so a resumed step commits the same state.
    return Outcome(writes={"appended": n}, summary=f"entry {n} is in the ledger")


@append_entry.prober
def _already_appended(state: LedgerState, params: Entry, ctx: SkillContext) -> Outcome | None:
    assert ctx.idempotency_key is not None
    return _outcome(params.n) if files.appended(state.ledger, ctx.idempotency_key) else None


@append_entry.verifier
def _exactly_the_next_entry(state: LedgerState, outcome: Outcome) -> Verdict:
    """The task's own entries run without a gap or a repeat up to n, and n is the last.

    Entries before the task's first own one belong to the task it was forked from
    (any key); entries after n may be there too: a rollback that kept its effects
    leaves them, and the re-done steps find them by their keys.

    One read of the file and one pass over it (counts in a dict, not ``list.count``
    per entry): a step at entry 2,000 costs what reading 2,000 lines costs, not
    2,000 x 2,000 comparisons.
    """
    n = state.appended
    if n > state.target:
        return Verdict.failed(f"entry {n} is past the target of {state.target}", permanent=True)
    entries = _all_entries(state.ledger)
    prefix = f"{state.task_id}:"
    own = [number for key, number in entries if key.startswith(prefix)]
    counts = Counter(own)
    repeated = min((x for x, times in counts.items() if times > 1), default=None)
    if repeated is not None:
        return Verdict.failed(f"entry {repeated} is in the ledger more than once")
    if n not in counts:
        return Verdict.failed(f"entry {n} is not in the ledger")
    first = min(own)
    # Numbers below the task's first own entry may be any task's (it was forked).
    every = {number for _, number in entries} if first > 1 else set()
    missing = next((x for x in range(1, n + 1) if x not in (counts if x >= first else every)), 0)
    if missing:
        return Verdict.failed(f"entry {missing} is missing: entries must not be skipped")
    if own[: n - first + 1] != list(range(first, n + 1)):
        return Verdict.failed(f"entries {first}..{n} are not in order")
    return Verdict.passed()


@append_entry.rollbacker
def _retract_line(state: LedgerState, outcome: Outcome | None, ctx: SkillContext) -> None:
    """Undo: append a retraction of this key's line (safe to repeat after a crash)."""
    assert ctx.idempotency_key is not None
    files.retract(state.ledger, ctx.idempotency_key, "compensated" if ctx.compensating else "")


@append_entry.precondition
def _more_to_write(state: LedgerState) -> bool:
    return state.appended < state.target


def entry_numbers(state: LedgerState) -> list[int]:
    """The task's own entry numbers as the ledger has them (retracted ones left out)."""
    prefix = f"{state.task_id}:"
    return [number for key, number in _all_entries(state.ledger) if key.startswith(prefix)]


def _all_entries(path: str) -> list[tuple[str, int]]:
    out = []
    for key, line in files.entries(path):
        if line.startswith("entry "):
            number = line.removeprefix("entry ")
            # ASCII digits, and not thousands of them: a line edited by hand reads as
            # -1 (no entry of this task), never as a ValueError from int().
            fits = number.isascii() and number.isdigit() and len(number) <= 18
            out.append((key, int(number) if fits else -1))
    return out


def decide(view: View[LedgerState]) -> Action:
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
