"""The ``fanout`` suite (skillstate.eval.families.channels): the oracle passes the four
variants, the skills variants fan out and the raw-tools ones do not, the final checks
catch each trap and a repeated write, and a quick CLI run reports every variant."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from skillstate.engine.actions import CallSkill
from skillstate.eval.families import get_family
from skillstate.eval.families.channels import REPORT, make_spec
from skillstate.eval.suites import load_suite
from skillstate.eval.tasks import Environment, TaskSpec, group_of
from skillstate.eval.variants import RESULT_CHARS, VARIANTS
from skillstate.examples.channels import ChannelsState, render_report
from skillstate.store.sqlite import SQLiteStore
from tests.eval_support import VARIANT_NAMES, assert_oracle_passes, cli

SPEC = load_suite("fanout", 0)[0]


def _build(tmp_path: Path, spec: TaskSpec = SPEC) -> Environment:
    return get_family("channels").build(spec, tmp_path / spec.id)


def test_the_suite_is_seeded_and_grouped_by_its_sequential_plan(tmp_path: Path) -> None:
    """Three tasks, one per group; a seed gives the same tasks, another seed others."""
    specs = load_suite("fanout", 0)
    assert [s.group for s in specs] == ["short", "medium", "long"]
    assert load_suite("fanout", 0) == specs
    assert [s.params for s in load_suite("fanout", 1)] != [s.params for s in specs]
    for spec in specs:
        env = _build(tmp_path, spec)
        n = len(spec.params["channels"])
        assert spec.group == group_of(len(env.plan_tools))
        assert len(env.plan_tools) == 2 * n + 2
        assert len(env.plan_skills) == 3
        assert env.child_steps == 3 * n
        assert spec.max_steps >= len(env.plan_tools)
    with pytest.raises(ValueError, match="1 to"):
        make_spec("x", seed=0, n=0)


def test_a_channel_fits_whole_in_a_raw_tool_result(tmp_path: Path) -> None:
    """The raw-tools variants see each channel whole (no cut at RESULT_CHARS): the
    comparison is about context, not about a truncated payload."""
    for seed in range(3):
        for spec in load_suite("fanout", seed):
            env = _build(tmp_path / str(seed), spec)
            for channel in spec.params["channels"]:
                text = json.dumps(env.tools["read_channel"](channel=channel))
                assert len(text) < RESULT_CHARS, (spec.id, channel, len(text))


@pytest.mark.parametrize("variant", VARIANT_NAMES)
def test_oracle_passes_every_variant(variant: str, tmp_path: Path) -> None:
    """Success, recovery at 25/50/75% and no repeated effect; only the skills variants
    fan out (one completed child per channel), the others run one sequential task."""
    result = assert_oracle_passes(SPEC, VARIANTS[variant].name, tmp_path)
    n = len(SPEC.params["channels"])
    store = SQLiteStore(next(tmp_path.glob(f"{SPEC.id}-{variant}-0")) / "run" / "state.db")
    children = [t for t in store.tasks() if t.startswith("task.")]
    if VARIANTS[variant].actions == "skills":
        assert len(children) == n
        assert result.steps == result.plan_steps == 3 + 3 * n  # the children's decisions count
        assert result.checks["channels_analysed_once"]
    else:
        assert children == []
        assert result.steps == 2 * n + 2
    assert len(result.prompt_tokens) == result.steps
    store.close()


def test_the_checks_catch_each_trap_and_a_second_write(tmp_path: Path) -> None:
    """A report with naive counts fails its channel checks; writing twice fails once."""
    env = _build(tmp_path)
    state = ChannelsState(task_id="t", channels=list(SPEC.params["channels"]))
    assert not {c.name: c.ok for c in env.check(state)}["report_exists"]
    data = {
        c: json.loads((env.root / "channels" / f"{c}.json").read_text())
        for c in SPEC.params["channels"]
    }
    good = env.plan_tools[-2]
    assert isinstance(good, CallSkill)
    write = env.tools["write_report"]
    write(path=REPORT, text=good.params["text"])
    checks = {c.name: c for c in env.check(state)}
    assert all(c.ok for c in checks.values()), checks
    for trap in ("spam", "duplicate_of", "issue_guess"):
        from skillstate.examples.channels import ChannelReport

        reports = []
        for channel, messages in data.items():
            kept = [m for m in messages if trap == "spam" or not m["spam"]]
            kept = [m for m in kept if trap == "duplicate_of" or not m["duplicate_of"]]
            field = "issue_guess" if trap == "issue_guess" else "issue"
            counts = dict(sorted(Counter(m[field] for m in kept).items()))
            top = min(counts, key=lambda i: (-counts[i], i))
            reports.append(
                ChannelReport(channel=channel, issues=counts, top_issue=top, counted=len(kept))
            )
        write(path=REPORT, text=render_report(reports))
        checks = {c.name: c for c in env.check(state)}
        wrong = [name for name, c in checks.items() if name.startswith("channel_") and not c.ok]
        assert wrong, trap
    assert not checks["report_written_once"].ok  # four writes, each without a key
    with pytest.raises(ValueError, match="report goes to"):
        write(path="../elsewhere.md", text="x")


def test_quick_cli_run_reports_the_four_variants(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``eval --suite fanout --tasks 1 --seeds 1 --no-recovery``: every variant succeeds."""
    out = tmp_path / "out"
    code, stdout, err = cli(
        capsys,
        "eval",
        "--suite",
        "fanout",
        "--tasks",
        "1",
        "--seeds",
        "1",
        "--no-recovery",
        "--out",
        str(out),
    )
    assert code == 0, stdout + err
    data = json.loads((out / "report.json").read_text())
    assert data["suite"] == "fanout"
    assert set(data["variants"]) == set(VARIANT_NAMES)
    for name in VARIANT_NAMES:
        assert data["variants"][name]["success_rate"]["mean"] == 1.0, name
    # The children's tool calls are in the cassettes too: a replay matches every run.
    code, stdout, err = cli(capsys, "eval", "--replay", str(out), "--out", str(tmp_path / "r"))
    assert code == 0, stdout + err
    assert "4/4 run(s) same as recorded" in stdout + err


def test_a_failed_child_is_a_failed_task_not_a_crash(tmp_path: Path) -> None:
    """A child whose tool always fails ends failed; the parent's oracle plan cannot join
    a report from it, and the run is a recorded failure with the child's error."""
    import dataclasses

    from skillstate.eval import runner

    family = get_family("channels")
    real = family.build

    def broken(spec: TaskSpec, root: Path, *, fresh: bool = True) -> Environment:
        env = real(spec, root, fresh=fresh)
        kind = env.children["channel"]

        def read_channel(channel: str) -> list[dict[str, object]]:
            raise ConnectionError("helpdesk API down")

        child = dataclasses.replace(kind, tools={"read_channel": read_channel})
        return dataclasses.replace(env, children={"channel": child})

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(family, "build", broken)
        result = runner.run_task(
            SPEC, VARIANTS["skillstate"], seed=0, workdir=tmp_path, recovery=False
        )
    assert not result.success
    assert result.failure
    assert not result.checks["report_exists"]
    store = SQLiteStore(next(tmp_path.glob(f"{SPEC.id}-skillstate-0")) / "run" / "state.db")
    parent = store.load("task").state
    assert [c["status"] for c in parent["children"]] == ["failed"] * len(SPEC.params["channels"])
    assert all("helpdesk API down" in c["error"] for c in parent["children"])
    assert parent["status"] != "waiting_children"  # joined: the failures are its data
    store.close()
