"""A parent that fans out one child per channel, then joins them into a report.

``channel_agent`` analyses one channel (``fail=True``: its skill's check fails and
the child task fails). ``parent`` maps its ``channels`` over ``channel`` children;
on a failed child its ``on_failure`` says what the policy does: ``retry`` spawns
the same key again once (a new child), ``fail`` fails the task, ``skip`` reports
without it. ``measure`` is a skill kind (``Child(skill)``). :data:`PROBE` counts the
children's skills running at once (the concurrency test asks it to hold each one
until ``want`` of them are inside together).
"""

from __future__ import annotations

import threading
import time

from pydantic import BaseModel

from skillstate import (
    Action,
    Agent,
    AgentState,
    AskUser,
    CallSkill,
    Child,
    Fail,
    Finish,
    Map,
    Outcome,
    ScriptedPolicy,
    SkillContext,
    SkillRegistry,
    Spawn,
    StateMachine,
    Verdict,
    View,
)
from skillstate.fanout import joined


class Probe:
    """How many children's skills run at once, and the most seen together."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.inside = 0
        self.most = 0
        self.want = 1
        self.calls: list[str] = []

    def reset(self, want: int = 1) -> None:
        with self.lock:
            self.inside = self.most = 0
            self.want = want
            self.calls = []

    def enter(self, name: str) -> None:
        with self.lock:
            self.calls.append(name)
            self.inside += 1
            self.most = max(self.most, self.inside)
            self.lock.notify_all()
            # Held until `want` run together (or a generous deadline: then `most`
            # stays below `want` and the test says so).
            deadline = time.monotonic() + 20
            while self.most < self.want and time.monotonic() < deadline:
                self.lock.wait(0.5)

    def leave(self) -> None:
        with self.lock:
            self.inside -= 1


PROBE = Probe()


class ChannelState(AgentState):
    channel: str = ""
    fail: bool = False
    ask: bool = False
    score: int | None = None
    note: str = ""


class ChannelReport(BaseModel):
    channel: str
    score: int


class NoParams(BaseModel):
    pass


channel_skills = SkillRegistry()


@channel_skills.skill(outputs=["score", "note"], max_retries=0)
def analyse(state: ChannelState, params: NoParams, ctx: SkillContext) -> Outcome:
    """Analyse one channel."""
    PROBE.enter(state.channel)
    try:
        score = -1 if state.fail else len(state.channel)
        return Outcome(writes={"score": score, "note": f"{state.channel} ok"}, summary="analysed")
    finally:
        PROBE.leave()


@analyse.verifier
def _scored(state: ChannelState, outcome: Outcome) -> Verdict:
    if state.score is None or state.score < 0:
        return Verdict.failed(f"channel {state.channel!r} could not be analysed")
    return Verdict(ok=True)


def analyse_channel(view: View[ChannelState]) -> Action:
    state = view.state
    if state.score is not None:
        return Finish(summary=f"{state.channel}: score {state.score}")
    if state.ask and state.inputs_received == 0:
        return AskUser(question=f"which period for {state.channel}?")
    if any(e.skill == "analyse" for e in state.errors):
        return Fail(reason=state.errors[-1].message[:150])
    return CallSkill(skill="analyse")


channel_agent = Agent(
    name="channel",
    state_type=ChannelState,
    machine=StateMachine({"work": ["work", "done"], "done": []}),
    skills=channel_skills,
    policy=ScriptedPolicy(analyse_channel),
)


class ParentState(AgentState):
    channels: list[str] = []  # noqa: RUF012 - pydantic copies field defaults
    bad: list[str] = []  # noqa: RUF012
    ask: list[str] = []  # noqa: RUF012
    on_failure: str = "retry"
    texts: list[str] = []  # noqa: RUF012
    delegate: str = ""
    delegated: bool = False
    report: str = ""
    measured: str = ""


class Text(BaseModel):
    text: str


parent_skills = SkillRegistry()


@parent_skills.skill(outputs=["report"])
def write_report(state: ParentState, params: NoParams, ctx: SkillContext) -> Outcome:
    """Join the channel reports into one."""
    parts = [str(r.outputs) for r in joined(state, "measure") if r.outputs is not None]
    for record in joined(state, "channel"):
        if record.status == "completed" and record.outputs is not None:
            parts.append(f"{record.outputs['channel']}={record.outputs['score']}")
        else:
            parts.append(f"{record.key}:{record.status}")
    return Outcome(writes={"report": ", ".join(parts)}, summary="report written")


@write_report.verifier
def _reported(state: ParentState, outcome: Outcome) -> Verdict:
    return Verdict(ok=bool(state.report))


@parent_skills.skill(outputs=["measured"])
def measure(state: ParentState, params: Text, ctx: SkillContext) -> Outcome:
    """Measure one text (a skill kind of child)."""
    PROBE.enter(params.text)
    try:
        return Outcome(writes={"measured": f"{params.text}:{len(params.text)}"}, summary="ok")
    finally:
        PROBE.leave()


@measure.verifier
def _measured(state: ParentState, outcome: Outcome) -> Verdict:
    return Verdict(ok=bool(state.measured))


@parent_skills.skill(outputs=["delegated"])
def delegate(state: ParentState, params: NoParams, ctx: SkillContext) -> Outcome:
    """Hand the channel in ``delegate`` to a child (ctx.spawn), committed with this step."""
    ctx.spawn("channel", key=state.delegate, set={"channel": state.delegate})
    return Outcome(writes={"delegated": True}, summary=f"delegated {state.delegate}")


@delegate.verifier
def _delegated(state: ParentState, outcome: Outcome) -> Verdict:
    return Verdict(ok=state.delegated)


def plan(view: View[ParentState]) -> Action:
    state = view.state
    if state.delegate and not state.delegated:
        return CallSkill(skill="delegate")
    if state.texts and not state.children:
        items = [{"text": t} for t in state.texts]
        return Map(child="measure", over=items, reason="one per text")
    if not state.children:
        items = [
            {"channel": c, "fail": c in state.bad, "ask": c in state.ask} for c in state.channels
        ]
        return Map(child="channel", over=items, key="channel", reason="one per channel")
    if any(r.status == "pending" for r in state.children):
        return Fail(reason="decided while children were pending")  # never: the loop waits
    failed = [r for r in joined(state, "channel") if r.status == "failed"]
    if failed and state.on_failure == "fail":
        return Fail(reason=f"channel {failed[0].key} failed: {failed[0].error}")
    if failed and state.on_failure == "retry":
        tried = {r.key for r in state.children if r.status == "failed"}
        retried = [r for r in state.children if r.key in tried and r.status != "failed"]
        if not retried:
            key = failed[0].key
            return Spawn(child="channel", key=key, set={"channel": key}, reason="retry once")
    if not state.report:
        return CallSkill(skill="write_report")
    return Finish(summary=state.report)


parent = Agent(
    name="fanout-parent",
    state_type=ParentState,
    machine=StateMachine({"work": ["work", "done"], "done": []}),
    skills=parent_skills,
    policy=ScriptedPolicy(plan),
    can_ask=False,
    children={
        "channel": Child(channel_agent, outputs=ChannelReport, description="one channel"),
        "measure": Child(measure),
    },
)
