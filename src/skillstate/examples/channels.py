"""Fan-out: one child task per customer channel, joined into one report.

The parent (``agent``) is given a list of channels (``support``, ``sales``,
``billing``...). Its first decision is one ``Map``: a child task per channel, each an
ordinary skillstate task of ``channel_agent`` with its own card, checkpoints and
audit. A child reads its channel's messages (``read_channel``) and counts the
issues (``count_issues``), each step checked by a strict ``verify`` that recounts
from the raw messages; its final card is its output, a :class:`ChannelReport`. When
every child has ended, the parent's join skill ``write_report`` reads the children's
outputs (:func:`skillstate.fanout.joined`) and writes one markdown report, once
(:func:`skillstate.effects.files.write_once` keyed by the step), and its ``verify``
reads the file back and checks it against those outputs.

The messages are generated, seeded by the channel's name, so the example runs
offline and every run sees the same data. They carry the traps of real support
data: spam, duplicates of earlier messages, and a machine-guessed ``issue_guess``
beside the real ``issue``. Each of those, counted, makes another issue the top one.

Run it::

    skillstate run skillstate.examples.channels:agent \\
        --set 'channels=[support, sales, billing]' --set report_path=report.md
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, field_validator

from skillstate import (
    Agent,
    AgentState,
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
from skillstate.effects import files
from skillstate.engine.actions import CHILD_KEY, Action, Fail, Map, Spawn
from skillstate.fanout import Child, joined

ISSUES = (
    "login",
    "refund",
    "late_delivery",
    "damaged_item",
    "billing_error",
    "app_crash",
    "invoice_copy",
    "password_reset",
)
"""The issue labels a message may carry."""
RULES = (
    "Spam messages (spam: true) and duplicates (duplicate_of set) never count.",
    "A message's issue is its `issue` field; `issue_guess` is a machine guess and never counts.",
)

# ---------------------------------------------------------------- data


def channel_messages(channel: str, seed: int = 0) -> list[dict[str, Any]]:
    """The channel's messages: a deterministic draw from ``(seed, channel)``.

    One issue leads by one message (``top``); the runner-up (``decoy``) gets three
    spam messages, two duplicates and two wrong ``issue_guess`` labels, so counting
    spam, duplicates or guesses each make the decoy the top issue. 16 to 24
    messages, under 4,000 characters of JSON: what a raw tool's result shows whole.
    """
    rng = random.Random(f"channels:{seed}:{channel}")
    top, decoy, *others = rng.sample(ISSUES, 4)
    lead = rng.randint(4, 6)
    counts = {top: lead, decoy: lead - 1} | {o: rng.randint(2, lead - 2) for o in others}
    real = [issue for issue, n in counts.items() for _ in range(n)]
    rng.shuffle(real)
    messages = [_message(channel, i, issue) for i, issue in enumerate(real)]
    for m in [m for m in messages if m["issue"] == others[0]][:2]:
        m["issue_guess"] = decoy
    originals = [m for m in messages if m["issue"] == decoy][:2]
    n = len(messages)
    extra = [_message(channel, n + i, decoy, spam=True) for i in range(3)]
    for i, original in enumerate(originals):
        extra.append(dict(original, id=f"m{n + 3 + i:02d}", duplicate_of=original["id"]))
    for m in extra:
        messages.insert(rng.randrange(len(messages) + 1), m)
    return messages


_TEXTS = {
    "login": "Cannot log in.",
    "refund": "No refund yet.",
    "late_delivery": "Parcel not here.",
    "damaged_item": "Item arrived broken.",
    "billing_error": "Charged twice.",
    "app_crash": "App crashes.",
    "invoice_copy": "Need my invoice.",
    "password_reset": "Reset link broken.",
}


def _message(channel: str, i: int, issue: str, *, spam: bool = False) -> dict[str, Any]:
    return {
        "id": f"m{i:02d}",
        "channel": channel,
        "issue": issue,
        "issue_guess": issue,
        "spam": spam,
        "duplicate_of": None,
        "text": "FREE GIFT CARD!" if spam else _TEXTS[issue],
    }


def count_issues(messages: list[dict[str, Any]]) -> dict[str, int]:
    """Issue counts of the messages that count (no spam, no duplicates), by label."""
    counts: dict[str, int] = {}
    for m in messages:
        if not m.get("spam") and not m.get("duplicate_of"):
            counts[m["issue"]] = counts.get(m["issue"], 0) + 1
    return dict(sorted(counts.items()))


def top_of(counts: dict[str, int]) -> str:
    """The issue with the most messages (ties: the first by name)."""
    return min(counts, key=lambda issue: (-counts[issue], issue))


# ---------------------------------------------------------------- the child


class ChannelReport(BaseModel):
    """What a channel's child task hands its parent (its card's fields of these names)."""

    channel: str
    issues: dict[str, int]
    top_issue: str
    counted: int = Field(ge=1, description="Messages that count (no spam, no duplicates).")


class ChannelState(AgentState):
    """One channel's analysis."""

    channel: str = Field(default="", pattern=r"^$|" + CHILD_KEY)
    messages_ref: str | None = None
    """Artifact ref of the raw messages (the card keeps only the ref)."""
    received: int | None = None
    issues: dict[str, int] = Field(default_factory=dict)
    top_issue: str | None = None
    counted: int | None = None


channel_machine = StateMachine(
    {"init": ["reading"], "reading": ["counting"], "counting": ["done"], "done": []}
)
channel_skills = SkillRegistry()


def read_channel(channel: str, seed: int = 0) -> list[dict[str, Any]]:
    """The channel's messages (an offline stand-in for the helpdesk's API)."""
    return channel_messages(channel, seed)


@channel_skills.skill(
    step="reading",
    outputs=["messages_ref", "received"],
    tools=["read_channel"],
    when=lambda s: s.messages_ref is None,
)
def read_messages(state: ChannelState, params: NoParams, ctx: SkillContext) -> Outcome:
    """Fetch the channel's messages; keep them as an artifact."""
    messages = ctx.call("read_channel", channel=state.channel)
    return Outcome(
        writes={"messages_ref": ctx.calls[-1].ref, "received": len(messages)},
        summary=f"{len(messages)} messages from {state.channel}",
        evidence=[ctx.evidence(f"{len(messages)} messages in {state.channel}")],
        value=messages,
    )


@read_messages.verifier
def _all_of_this_channel(state: ChannelState, outcome: Outcome) -> Verdict:
    messages = outcome.value or []
    if not messages or state.received != len(messages) or not state.messages_ref:
        return Verdict.failed("no messages, or their count or ref is missing")
    strangers = [m["id"] for m in messages if m.get("channel") != state.channel]
    if strangers:
        return Verdict.failed(f"messages of another channel: {', '.join(strangers[:3])}")
    if len({m["id"] for m in messages}) != len(messages):
        return Verdict.failed("two messages share an id")
    return Verdict.passed()


@channel_skills.skill(
    step="counting",
    outputs=["issues", "top_issue", "counted"],
    when=lambda s: s.messages_ref is not None and s.top_issue is None,
)
def count_channel_issues(state: ChannelState, params: NoParams, ctx: SkillContext) -> Outcome:
    """Count the issues of the messages that count, and name the top one."""
    assert state.messages_ref is not None
    messages = ctx.artifact_json(state.messages_ref)
    counts = count_issues(messages)
    top = top_of(counts)
    return Outcome(
        writes={"issues": counts, "top_issue": top, "counted": sum(counts.values())},
        summary=f"{state.channel}: top issue {top} ({counts[top]} of {sum(counts.values())})",
        value=messages,
    )


@count_channel_issues.verifier
def _recounted(state: ChannelState, outcome: Outcome) -> Verdict:
    """A second count, message by message, by another route than the skill's."""
    messages = outcome.value or []
    kept = [m for m in messages if m["spam"] is False and m["duplicate_of"] is None]
    if state.counted != len(kept) or sum(state.issues.values()) != len(kept):
        return Verdict.failed(f"{len(kept)} messages count, the card says {state.counted}")
    for issue in {m["issue"] for m in kept} | set(state.issues):
        n = len([m for m in kept if m["issue"] == issue])
        if state.issues.get(issue) != n:
            return Verdict.failed(f"{issue}: {n} messages, the card says {state.issues.get(issue)}")
    best = max(state.issues.values())
    if state.top_issue is None or state.issues.get(state.top_issue) != best:
        return Verdict.failed(f"{state.top_issue} is not the issue with the most messages")
    return Verdict.passed()


def decide_channel(view: View[ChannelState]) -> Action:
    """Read, count, finish."""
    for name in view.state.pending_steps:
        if name in view.skills:
            return CallSkill(skill=name, reason="next in plan")
    state = view.state
    assert isinstance(state, ChannelState)
    return Finish(summary=f"{state.channel}: top issue {state.top_issue}", reason="counted")


channel_agent = Agent(
    name="channel",
    description="Count the issues of one customer channel's messages.",
    state_type=ChannelState,
    machine=channel_machine,
    skills=channel_skills,
    policy=ScriptedPolicy(decide_channel),
    tools={"read_channel": read_channel},
    goal="Count the issues of the channel's messages and name the top one.",
    constraints=RULES,
    plan=("read_messages", "count_channel_issues"),
    ref="skillstate.examples.channels:channel_agent",
)

# ---------------------------------------------------------------- the report


def render_report(reports: list[ChannelReport]) -> str:
    """The report: one section per channel, then the overall counts."""
    overall: dict[str, int] = {}
    lines = ["# Channel report", "", f"channels: {len(reports)}", ""]
    for r in reports:
        for issue, n in r.issues.items():
            overall[issue] = overall.get(issue, 0) + n
        lines += [f"## {r.channel}", f"top issue: {r.top_issue}", f"issues: {_pairs(r.issues)}", ""]
    overall = dict(sorted(overall.items()))
    lines += ["## overall", f"top issue: {top_of(overall)}", f"issues: {_pairs(overall)}"]
    return "\n".join(lines) + "\n"


def _pairs(counts: dict[str, int]) -> str:
    return ", ".join(f"{issue}={n}" for issue, n in counts.items())


_SECTION = re.compile(r"^## (?P<name>\S+)\ntop issue: (?P<top>\S+)\nissues: (?P<issues>.*)$", re.M)


def parse_report(text: str) -> dict[str, tuple[str, dict[str, int]]]:
    """Each section of a report as ``name -> (top issue, counts)``; a section named
    twice is kept twice under ``name#2`` so a check can see it."""
    out: dict[str, tuple[str, dict[str, int]]] = {}
    for match in _SECTION.finditer(text):
        counts: dict[str, int] = {}
        for pair in match["issues"].split(","):
            issue, _, n = pair.strip().partition("=")
            if issue and n.strip().isdigit():
                counts[issue] = int(n)
        name = match["name"]
        while name in out:
            name += "#2"
        out[name] = (match["top"], counts)
    return out


# ---------------------------------------------------------------- the parent


class ChannelsState(AgentState):
    """The channels to analyse and where the report goes."""

    channels: list[str] = Field(default_factory=lambda: ["support", "sales", "billing"])
    report_path: str = "channels-report.md"
    overall_top: str | None = None
    report_written: bool = False

    @field_validator("channels")
    @classmethod
    def _some_distinct_channels(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("give at least one channel")
        if len(set(value)) != len(value):
            raise ValueError("a channel is named twice")
        bad = [c for c in value if not re.fullmatch(CHILD_KEY, c)]
        if bad:
            raise ValueError(f"channel {bad[0]!r} is not a name of letters, digits, - and _")
        return value


machine = StateMachine(
    {"init": ["reporting", "done"], "reporting": ["done"], "done": []}, initial="init"
)
skills = SkillRegistry()


def write_report_file(path: str, text: str, key: str) -> str:
    """The effect: the report's whole content, replaced atomically once per ``key``."""
    done = files.write_once(path, text.encode("utf-8"), key)
    return f"wrote {path}" if done else f"{path} was already written"


def _reports(state: ChannelsState) -> list[ChannelReport]:
    """The completed children's outputs (the join validated them), in the channels' order."""
    done = [ChannelReport.model_validate(r.outputs) for r in joined(state, "channel") if r.outputs]
    by_channel = {r.channel: r for r in done}
    return [by_channel[c] for c in state.channels if c in by_channel]


def _every_channel_reported(state: ChannelsState) -> bool:
    """The join applies once each channel has a completed child (a failed one is the
    policy's to retry or give up on first)."""
    return {r.channel for r in _reports(state)} == set(state.channels)


def _sum(reports: list[ChannelReport]) -> dict[str, int]:
    total: dict[str, int] = {}
    for r in reports:
        for issue, n in r.issues.items():
            total[issue] = total.get(issue, 0) + n
    return dict(sorted(total.items()))


def _report_outcome(state: ChannelsState) -> Outcome:
    reports = _reports(state)
    overall = top_of(_sum(reports))
    return Outcome(
        writes={"overall_top": overall, "report_written": True},
        summary=f"report of {len(reports)} channels: top issue {overall}",
    )


def check_report(state: ChannelsState, path: Path) -> Verdict:
    """The report at ``path``, read back, holds each channel's section as its child
    reported it, and the overall section is their sum (the join skill's verify)."""
    reports = _reports(state)
    missing = [c for c in state.channels if c not in {r.channel for r in reports}]
    if missing:
        return Verdict.failed(f"no completed child for {', '.join(missing)}", permanent=True)
    try:
        sections = parse_report(path.read_text(encoding="utf-8"))
    except OSError as exc:
        return Verdict.failed(f"cannot read {path.name}: {exc.strerror}")
    for r in reports:
        if sections.get(r.channel) != (r.top_issue, r.issues):
            return Verdict.failed(f"section {r.channel} differs from its child's output")
    total = _sum(reports)
    if sections.get("overall") != (top_of(total), total) or state.overall_top != top_of(total):
        return Verdict.failed("the overall section is not the sum of the channels")
    if set(sections) != {*state.channels, "overall"}:
        return Verdict.failed("the report has sections of no channel, or one twice")
    return Verdict.passed()


def report_skills(where: Callable[[str], Path] = Path) -> SkillRegistry:
    """The parent's skill library: the join ``write_report``. ``where`` turns the card's
    ``report_path`` into the file its probe and verify read (here: relative to the
    working directory, as the tool writes it; the eval family: its environment's)."""
    registry = SkillRegistry()

    @registry.skill(
        step="reporting",
        outputs=["overall_top", "report_written"],
        tools=["write_report"],
        effects=True,
        when=lambda s: not s.report_written and _every_channel_reported(s),
    )
    def write_report(state: ChannelsState, params: NoParams, ctx: SkillContext) -> Outcome:
        """Join: write one report from the children's outputs."""
        assert ctx.idempotency_key is not None
        text = render_report(_reports(state))
        ctx.call("write_report", path=state.report_path, text=text, key=ctx.idempotency_key)
        return _report_outcome(state)

    @write_report.prober
    def _written(state: ChannelsState, params: NoParams, ctx: SkillContext) -> Outcome | None:
        assert ctx.idempotency_key is not None
        done = files.written(where(state.report_path), ctx.idempotency_key)
        return _report_outcome(state) if done else None

    @write_report.verifier
    def _matches_the_children(state: ChannelsState, outcome: Outcome) -> Verdict:
        return check_report(state, where(state.report_path))

    return registry


skills = report_skills()


def decide(view: View[ChannelsState]) -> Action:
    """Fan out, join, finish. A failed child is data: its channel is spawned again once
    (a new child: the id carries the parent's version), then the task fails saying why."""
    state = view.state
    assert isinstance(state, ChannelsState)
    if not state.children:
        items = [{"channel": c} for c in state.channels]
        return Map(child="channel", over=items, key="channel", reason="one child per channel")
    failed = [c for c in joined(state, "channel") if c.status != "completed"]
    for child in failed:
        if sum(1 for c in state.children if c.key == child.key) < 2:
            again = {"channel": child.key}
            return Spawn(child="channel", key=child.key, set=again, reason=f"retry: {child.error}")
    if failed:
        names = ", ".join(f"{c.key} ({c.status}: {c.error or ''})" for c in failed)
        return Fail(reason=f"child tasks did not complete: {names}")
    if not state.report_written:
        return CallSkill(skill="write_report", reason="every child ended")
    return Finish(summary=f"{len(state.channels)} channels: top issue {state.overall_top}")


agent = Agent(
    name="channels",
    description="Analyse several customer channels in parallel and join them into one report.",
    state_type=ChannelsState,
    machine=machine,
    skills=skills,
    policy=ScriptedPolicy(decide),
    tools={"write_report": write_report_file},
    goal="Analyse every channel and write one report of their issues.",
    constraints=(*RULES, "Write the report once."),
    children={"channel": Child(channel_agent, outputs=ChannelReport)},
    ref="skillstate.examples.channels:agent",
)
