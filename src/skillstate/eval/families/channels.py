"""The ``channels`` family: per-channel analysis fanned out, joined into one report.

The task: N customer channels (``support``, ``sales``, ``billing``...), each a file
``channels/<name>.json`` of noisy messages. For every channel, count the messages
by issue and name its top issue; then write one report, ``report.md``: a section
per channel and an overall one (the channels' counts added up). The messages are
those of :mod:`skillstate.examples.channels` (seeded by the task's seed and the
channel's name) with their traps: spam, duplicates and a machine-guessed
``issue_guess``, each of which, counted, makes another issue the top one.

How each variant does it (see :mod:`skillstate.eval.children`):

* ``skills`` / ``skillstate``: the parent fans out, one ``Map`` with a child task per
  channel (the example's ``channel_agent`` skills: ``read_messages``,
  ``count_channel_issues``, each verified by a recount), then its join skill
  ``write_report`` writes the report from the children's outputs, once.
* ``history`` / ``state`` (raw tools): no fan-out. One task reads the channels one
  after another (``tool_read_channel``), keeps its counts with ``remember`` and
  writes the report with ``tool_write_report``: the whole job in one transcript.

The final checks read ``report.md`` only (each channel's top issue and counts, and the
overall section, against counts made here from the files), plus two exactly-once
checks: the report was written once (``writes.log``), and each channel had exactly
one completed child task when the parent fanned out.
"""

from __future__ import annotations

import json
import math
import random
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from skillstate.effects import files
from skillstate.engine.actions import Action, CallSkill, Finish, Map
from skillstate.eval.tasks import CheckResult, ChildTask, Environment, TaskSpec, group_of
from skillstate.examples.channels import (
    RULES,
    ChannelReport,
    ChannelsState,
    ChannelState,
    channel_machine,
    channel_messages,
    channel_skills,
    machine,
    parse_report,
    render_report,
    report_skills,
)
from skillstate.state.model import AgentState

__all__ = ["CHANNEL_NAMES", "ChannelsFamily", "make_spec", "truth_of"]

CHANNEL_NAMES = (
    "support",
    "sales",
    "billing",
    "returns",
    "shipping",
    "social",
    "email",
    "chat",
    "phone",
    "reviews",
    "forum",
    "partners",
    "retail",
    "wholesale",
)
REPORT = "report.md"
WRITES = "writes.log"
"""One line per write of the report that happened (a retried raw write adds one)."""
CHILD_PLAN: tuple[Action, ...] = (
    CallSkill(skill="read_messages", reason="fetch the channel's messages"),
    CallSkill(skill="count_channel_issues", reason="count the issues that count"),
    Finish(summary="channel counted", reason="the counts are verified"),
)


def make_spec(task_id: str, *, seed: int, n: int, suite: str = "fanout") -> TaskSpec:
    """A task over ``n`` channels drawn from ``seed``; its length group is that of the
    sequential plan (two decisions per channel, the report, finish)."""
    if not 1 <= n <= len(CHANNEL_NAMES):
        raise ValueError(f"a channels task has 1 to {len(CHANNEL_NAMES)} channels")
    channels = random.Random(seed).sample(CHANNEL_NAMES, n)
    sequential = 2 * n + 2
    return TaskSpec(
        id=task_id,
        suite=suite,
        family="channels",
        goal=(
            f"Analyse the customer messages of each channel ({', '.join(channels)}) and write "
            f"one report, {REPORT}. For each channel, count its messages by issue and name its "
            "top issue (the most messages; a tie goes to the first by name). Overall, add "
            "the channels' counts up and name the top issue. The report is markdown: one "
            "section per channel in the order given, then one named overall, each exactly "
            "'## <name>', 'top issue: <issue>', 'issues: <issue>=<count>, ...' (issues "
            "sorted by name) on three lines."
        ),
        constraints=(*RULES, f"Write {REPORT} once."),
        max_steps=math.ceil(sequential * 1.5) + 5,
        group=group_of(sequential),
        params={"seed": seed, "channels": channels},
    )


def truth_of(root: Path, channels: list[str]) -> dict[str, Counter[str]]:
    """Each channel's issue counts, recounted from its file (the checks' ground truth)."""
    out: dict[str, Counter[str]] = {}
    for channel in channels:
        data = json.loads((root / "channels" / f"{channel}.json").read_text(encoding="utf-8"))
        out[channel] = Counter(
            m["issue"] for m in data if m["spam"] is False and m["duplicate_of"] is None
        )
    return out


class ChannelTools:
    """The raw tools over one environment's files."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def read_channel(self, channel: str) -> list[dict[str, Any]]:
        """Read all messages of one customer channel (JSON list)."""
        path = self.root / "channels" / f"{channel}.json"
        if "/" in channel or not path.is_file():
            raise LookupError(f"no channel {channel!r}")
        data: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))
        return data

    def write_report(self, path: str, text: str, key: str | None = None) -> str:
        """Write the markdown report to report.md (replaces its content)."""
        if path != REPORT:
            raise ValueError(f"the report goes to {REPORT}, not {path!r}")
        target = self.root / REPORT
        # A call without a key is a new write: what a raw tool's retry does.
        if files.write_once(target, text.encode("utf-8"), key or uuid.uuid4().hex):
            with (self.root / WRITES).open("a", encoding="utf-8") as log:
                log.write(f"{key or '-'}\n")
            return f"wrote {REPORT}"
        return f"{REPORT} was already written"


class ChannelsFamily:
    """Builds a channels task: files, tools, parent and child skills, plans and checks."""

    name = "channels"

    def make_spec(self, task_id: str, *, seed: int, n: int, suite: str = "fanout") -> TaskSpec:
        """A task of ``n`` channels (the suite generator's entry point)."""
        return make_spec(task_id, seed=seed, n=n, suite=suite)

    def build(self, spec: TaskSpec, root: Path, *, fresh: bool = True) -> Environment:
        seed, channels = int(spec.params["seed"]), [str(c) for c in spec.params["channels"]]
        if fresh:
            (root / "channels").mkdir(parents=True, exist_ok=True)
            for channel in channels:
                data = json.dumps(channel_messages(channel, seed), indent=1)
                (root / "channels" / f"{channel}.json").write_text(data, encoding="utf-8")
        truth = truth_of(root, channels)
        reports = [_report(c, truth[c]) for c in channels]
        text = render_report(reports)
        tools = ChannelTools(root)
        done = {"report_written": True, "overall_top": parse_report(text)["overall"][0]}
        child = ChildTask(
            state_type=ChannelState,
            machine=channel_machine,
            skills=channel_skills,
            tools={"read_channel": tools.read_channel},
            plan=CHILD_PLAN,
            outputs=ChannelReport,
            goal="Count the issues of this channel's messages and name the top one.",
            constraints=RULES,
            steps=len(CHILD_PLAN) * len(channels),
        )
        return Environment(
            root=root,
            state_type=ChannelsState,
            machine=machine,
            tools={"read_channel": tools.read_channel, "write_report": tools.write_report},
            # The join skill reads the report where the tool writes it: in this directory.
            skills=report_skills(lambda path: root / path),
            plan_skills=_skills_plan(channels, done),
            plan_tools=_tools_plan(reports, text),
            check=lambda state: _checks(root, channels, truth, state),
            expected_facts=[{}, done, done],
            initial={"channels": channels, "report_path": REPORT},
            effect_tools=frozenset({"write_report"}),
            children={"channel": child},
        )


def _report(channel: str, counts: Counter[str]) -> ChannelReport:
    issues = dict(sorted(counts.items()))
    top = min(issues, key=lambda issue: (-issues[issue], issue))
    return ChannelReport(
        channel=channel, issues=issues, top_issue=top, counted=sum(issues.values())
    )


def _skills_plan(channels: list[str], done: dict[str, Any]) -> list[Action]:
    return [
        Map(
            child="channel",
            over=[{"channel": c} for c in channels],
            key="channel",
            reason="one child task per channel",
        ),
        CallSkill(skill="write_report", reason="every child ended: join them"),
        Finish(summary=f"{len(channels)} channels: top issue {done['overall_top']}"),
    ]


def _tools_plan(reports: list[ChannelReport], text: str) -> list[Action]:
    plan: list[Action] = []
    for r in reports:
        plan.append(CallSkill(skill="tool_read_channel", params={"channel": r.channel}))
        note = {"top_issue": r.top_issue, "issues": r.issues}
        plan.append(CallSkill(skill="remember", params={"key": r.channel, "value": note}))
    plan.append(CallSkill(skill="tool_write_report", params={"path": REPORT, "text": text}))
    plan.append(Finish(summary=f"{len(reports)} channels reported"))
    return plan


def _checks(
    root: Path, channels: list[str], truth: dict[str, Counter[str]], state: AgentState
) -> list[CheckResult]:
    path = root / REPORT
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    sections = parse_report(text)
    results = [CheckResult("report_exists", bool(text), "" if text else f"no {REPORT}")]
    total: Counter[str] = Counter()
    for channel in channels:
        expected = _report(channel, truth[channel])
        total.update(truth[channel])
        found = sections.get(channel)
        ok = found == (expected.top_issue, expected.issues)
        detail = "" if ok else f"expected top {expected.top_issue} {expected.issues}, got {found}"
        results.append(CheckResult(f"channel_{channel}", ok, detail))
    overall = _report("overall", total)
    found = sections.get("overall")
    ok = found == (overall.top_issue, overall.issues)
    detail = "" if ok else f"expected top {overall.top_issue} {overall.issues}, got {found}"
    results.append(CheckResult("overall", ok, detail))
    extra = sorted(set(sections) - {*channels, "overall"})
    results.append(CheckResult("no_extra_sections", not extra, ", ".join(extra)))
    log = root / WRITES
    writes = len(log.read_text(encoding="utf-8").splitlines()) if log.is_file() else 0
    results.append(CheckResult("report_written_once", writes == 1, f"{writes} writes"))
    results.append(_children_once(channels, state))
    return results


def _children_once(channels: list[str], state: AgentState) -> CheckResult:
    """Each channel was analysed by exactly one completed child (when there were children)."""
    children = getattr(state, "children", ())
    if not children:
        return CheckResult("channels_analysed_once", True, "no child tasks (one sequential task)")
    completed = Counter(c.key for c in children if c.status == "completed")
    wrong = [c for c in channels if completed[c] != 1]
    extra = sorted(set(completed) - set(channels))
    ok = not wrong and not extra
    detail = "" if ok else f"completed children per channel off for {', '.join(wrong + extra)}"
    return CheckResult("channels_analysed_once", ok, detail)
