"""The fan-out example (skillstate.examples.channels, docs/fanout.md "eval" section):
one child task per channel, each completed once, one joined report; bad input refused."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from skillstate.engine.runtime import Runtime
from skillstate.examples.channels import (
    ChannelsState,
    ChannelState,
    _recounted,
    agent,
    channel_agent,
    channel_messages,
    check_report,
    count_issues,
    parse_report,
    top_of,
)
from skillstate.skills.skill import Outcome
from skillstate.state.model import TaskStatus
from skillstate.store.sqlite import SQLiteStore
from tests.eval_support import cli

DOC = Path(__file__).resolve().parents[1] / "docs" / "fanout.md"
CHANNELS = ["support", "sales", "billing", "returns"]


def _doc_commands(prefix: str) -> list[list[str]]:
    """The doc's eval section's bash commands starting with ``prefix``, as argv lists."""
    section = DOC.read_text(encoding="utf-8").split("## Evaluation", 1)[1].split("\n## ", 1)[0]
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", section, re.DOTALL):
        for raw in block.replace("\\\n", " ").splitlines():
            line = raw.split("  #", 1)[0].strip()
            if line.startswith(prefix):
                commands.append(shlex.split(line))
    return commands


def _run(tmp_path: Path, channels: list[str]) -> tuple[ChannelsState, SQLiteStore]:
    store = SQLiteStore(tmp_path / "state.db")
    runtime = Runtime(agent, store, max_steps=10)
    report = tmp_path / "report.md"
    runtime.start("parent", channels=channels, report_path=str(report))
    result = runtime.run("parent")
    assert result.stopped == "completed", (result.stopped, result.state.errors)
    assert isinstance(result.state, ChannelsState)
    return result.state, store


def test_the_parent_fans_out_once_per_channel_and_joins_one_report(tmp_path: Path) -> None:
    """Four children, each completed exactly once with its verified counts; one report."""
    state, store = _run(tmp_path, CHANNELS)
    assert [c.key for c in state.children] == CHANNELS
    assert {c.status for c in state.children} == {"completed"}
    children = sorted(t for t in store.tasks() if t.startswith("parent."))
    assert len(children) == len(CHANNELS)
    for record in state.children:
        head = store.load(record.task_id).state
        assert head["status"] == TaskStatus.COMPLETED
        assert head["parent"]["task_id"] == "parent"
        finishes = [e for e in store.events(record.task_id) if e.action.get("kind") == "finish"]
        assert len(finishes) == 1
        truth = count_issues(channel_messages(record.key))
        assert record.outputs == {
            "channel": record.key,
            "issues": truth,
            "top_issue": top_of(truth),
            "counted": sum(truth.values()),
        }
    joins = [e for e in store.events("parent") if e.action.get("kind") == "join"]
    assert len(joins) == 1
    sections = parse_report((tmp_path / "report.md").read_text(encoding="utf-8"))
    assert list(sections) == [*CHANNELS, "overall"]
    total: dict[str, int] = {}
    for channel in CHANNELS:
        truth = count_issues(channel_messages(channel))
        assert sections[channel] == (top_of(truth), truth)
        for issue, n in truth.items():
            total[issue] = total.get(issue, 0) + n
    assert sections["overall"] == (top_of(total), dict(sorted(total.items())))
    assert state.overall_top == top_of(total)
    assert state.report_written
    keys = (tmp_path / "report.md.keys").read_text(encoding="utf-8")
    assert keys.count("\tdone ") == 1  # the report was written once


def test_each_trap_makes_another_issue_the_top_one() -> None:
    """Counting spam, duplicates or the guessed label changes the answer, for 50 seeds
    and every channel name the suite draws from; the true top issue has no tie."""
    from collections import Counter

    from skillstate.eval.families.channels import CHANNEL_NAMES

    for seed in range(50):
        for channel in CHANNEL_NAMES:
            messages = channel_messages(channel, seed)
            truth = count_issues(messages)
            top = top_of(truth)
            assert sorted(truth.values())[-2] < truth[top]
            naive = {
                "spam": Counter(m["issue"] for m in messages if not m["duplicate_of"]),
                "duplicates": Counter(m["issue"] for m in messages if not m["spam"]),
                "guesses": Counter(
                    m["issue_guess"] for m in messages if not m["spam"] and not m["duplicate_of"]
                ),
            }
            for trap, counts in naive.items():
                assert top_of(dict(counts)) != top, (seed, channel, trap)


def test_verifies_refuse_a_wrong_count_and_a_report_that_differs(tmp_path: Path) -> None:
    """The child's recount and the join's read-back catch what a sloppy skill would do."""
    messages = channel_messages("support")
    naive: dict[str, int] = {}
    for m in messages:  # spam and duplicates counted: the trap
        naive[m["issue"]] = naive.get(m["issue"], 0) + 1
    sloppy = ChannelState(
        task_id="c",
        channel="support",
        issues=naive,
        top_issue=top_of(naive),
        counted=sum(naive.values()),
    )
    verdict = _recounted(sloppy, Outcome(value=messages))
    assert not verdict.ok
    assert "messages count" in verdict.reason
    state, _ = _run(tmp_path, ["support", "sales"])
    report = tmp_path / "report.md"
    assert check_report(state, report).ok
    text = report.read_text(encoding="utf-8")
    report.write_text(text.replace("## sales", "## salez"), encoding="utf-8")
    verdict = check_report(state, report)
    assert not verdict.ok
    assert "sales" in verdict.reason


def test_a_failed_child_is_spawned_again_once_then_the_task_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child whose tool fails ends ``failed``; the parent (not crashed) spawns its
    channel again under a new id; a second failure fails the parent, naming it."""
    from skillstate.fanout import hooks

    joins: list[str] = []
    monkeypatch.setitem(hooks.HOOKS, "join", [joins.append])

    def flaky(channel: str) -> list[dict[str, Any]]:
        # "sales" is down until the first join, or for good with fail_always.
        if channel == "sales" and (not joins or fail_always):
            raise ConnectionError("helpdesk API down")
        return channel_messages(channel)

    monkeypatch.setitem(channel_agent.tools, "read_channel", flaky)
    fail_always = False
    state, store = _run(tmp_path / "once", ["support", "sales"])
    assert [(c.key, c.status) for c in state.children] == [
        ("support", "completed"),
        ("sales", "failed"),
        ("sales", "completed"),
    ]
    assert "helpdesk API down" in (state.children[1].error or "")
    assert state.children[1].task_id != state.children[2].task_id
    assert state.report_written
    store.close()

    fail_always = True
    store = SQLiteStore(tmp_path / "state.db")
    runtime = Runtime(agent, store, max_steps=10)
    runtime.start("p2", channels=["support", "sales"], report_path=str(tmp_path / "r2.md"))
    result = runtime.run("p2")
    assert result.stopped == "failed"
    assert "sales (failed" in result.state.errors[-1].message
    assert not (tmp_path / "r2.md").exists()


def test_the_docs_command_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The ``skillstate run`` command of docs/fanout.md completes and writes the report."""
    commands = _doc_commands("skillstate run")
    assert commands, "docs/fanout.md has no skillstate run command in its eval section"
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path)
        for argv in commands:
            code, out, err = cli(capsys, *argv[1:])
            assert code == 0, out + err
            assert "completed" in out
    report = next(tmp_path.glob("*.md"))
    assert "## overall" in report.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("[]", "give at least one channel"),
        ("[support, support]", "a channel is named twice"),
        ("['sales team']", "is not a name"),
    ],
)
def test_bad_channels_are_one_line_and_exit_2(
    value: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An empty, repeated or unusable channel list: one line, exit 2, no task written."""
    db = tmp_path / "state.db"
    args: list[Any] = ["run", "skillstate.examples.channels:agent", "--store", f"sqlite:///{db}"]
    code, out, err = cli(capsys, *args, "--set", f"channels={value}")
    assert code == 2, out + err
    lines = [line for line in (out + err).splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert message in lines[0]
    assert not db.exists() or SQLiteStore(db).tasks() == []
