"""Agents for the messages and cancel tests (imported by worker subprocesses as
``tests.control_support:...``).

A *ticker* counts to its target, one ``tick`` step at a time (each taking
``delay`` seconds), and its scripted policy appends what every decision's view
showed to the JSON Lines file the card names (``log``): the version decided at, the
messages (text, urgency) in the order the view lists them, and whether the rendered
view carries each. A test in another process reads that file to learn what the
decisions saw and when.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace

from pydantic import Field

from skillstate import (
    Agent,
    AgentState,
    AskUser,
    CallSkill,
    Finish,
    NoParams,
    Outcome,
    ScriptedPolicy,
    SkillContext,
    SkillRegistry,
    StateMachine,
    Verdict,
    View,
)
from skillstate.engine.actions import Action


class TickState(AgentState):
    target: int = Field(default=5, ge=0)
    done: int = 0
    delay: float = Field(default=0.0, ge=0)
    """Seconds each tick takes."""
    ask_at: int | None = None
    """Ask the user once ``done`` reaches this (the tick count), before ticking on."""
    log: str = ""
    """The JSON Lines file every decision's view is appended to ("" for none)."""


machine = StateMachine(
    {"init": ["ticking", "done"], "ticking": ["ticking", "done"], "done": []}, initial="init"
)
skills = SkillRegistry()


@skills.skill(outputs=["done"], step="ticking")
def tick(state: TickState, params: NoParams, ctx: SkillContext) -> Outcome:
    """Count one more, slowly."""
    time.sleep(state.delay)
    return Outcome(writes={"done": state.done + 1}, summary=f"tick {state.done + 1}")


@tick.verifier
def _counted(state: TickState, outcome: Outcome) -> Verdict:
    return Verdict(ok=state.done >= 1, reason="counted")


def record(view: View[TickState]) -> None:
    """Append what this decision's view shows to the card's log file."""
    state = view.state
    if not state.log:
        return
    lines = view.text.splitlines()
    line = {
        "version": state.version,
        "done": state.done,
        "status": state.status.value,
        "messages": [
            {"seq": m.seq, "text": m.text, "urgent": m.urgent, "interrupted": m.interrupted}
            for m in view.messages
        ],
        "rendered": [m.text for m in view.messages if m.text in view.text],
        "first_line_urgent": [line for line in lines if line.startswith("URGENT message")],
        # Where the first urgent line is: right after the status line, before the plan.
        "urgent_at": next((i for i, x in enumerate(lines) if x.startswith("URGENT")), None),
        "status_at": next(i for i, x in enumerate(lines) if x.startswith("Status:")),
        "inputs": [i.text for i in state.inputs],
    }
    with open(state.log, "a", encoding="utf-8") as out:
        out.write(json.dumps(line) + "\n")


def decide(view: View[TickState]) -> Action:
    record(view)
    state = view.state
    asked = any(r.action == "ask_user" for r in state.completed_steps)
    if state.ask_at is not None and state.done >= state.ask_at and not asked:
        return AskUser(question=f"tick {state.done}: go on?", reason="a checkpoint")
    if state.done < state.target:
        return CallSkill(skill="tick", params={}, reason="count on")
    return Finish(summary=f"counted to {state.done}", reason="target reached")


ticker = Agent(
    name="ticker",
    description="Counts to a target, recording what each decision's view showed.",
    state_type=TickState,
    machine=machine,
    skills=skills,
    policy=ScriptedPolicy(decide),
)
"""Messages ``enqueue`` (the default)."""

interrupting = replace(ticker, name="interrupting", messages="interrupt")
rejecting = replace(ticker, name="rejecting", messages="reject")


stamps = SkillRegistry()


@stamps.skill(outputs=["done"], step="ticking", effects=True)
def stamp(state: TickState, params: NoParams, ctx: SkillContext) -> Outcome:
    """An effect with no rollback hook: nothing can undo it."""
    return Outcome(writes={"done": state.done + 1}, summary=f"stamp {state.done + 1}")


@stamp.verifier
def _stamped(state: TickState, outcome: Outcome) -> Verdict:
    if state.done != outcome.writes.get("done"):
        return Verdict.failed("the stamp was not counted")
    return Verdict.passed()


@stamp.prober
def _never_seen(state: TickState, params: NoParams, ctx: SkillContext) -> Outcome | None:
    return None


def _stamp_on(view: View[TickState]) -> Action:
    if view.state.done < view.state.target:
        return CallSkill(skill="stamp", params={}, reason="stamp on")
    return Finish(summary="stamped", reason="target reached")


stamper = replace(ticker, name="stamper", skills=stamps, policy=ScriptedPolicy(_stamp_on))
"""Runs effects it cannot undo (``cancel --compensate`` refuses it)."""
