"""The seeds' recovery protocol (issue 16, point 3): SIGKILL at random instants, provider
faults resumed from, and bad steps recovered through rollback and retry.

Reproduced before: recovery runs were only clean stops at 25/50/75% inside one process;
an injected timeout or 429 ended the task as a failure; an effect that happened and
then failed could not be injected, so the rollback-recovery rate was not measured.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skillstate.errors import UsageError
from skillstate.eval.bad_steps import InjectedBadStep, inject_bad_steps
from skillstate.eval.families import build_environment
from skillstate.eval.faults import faulty_factory
from skillstate.eval.forced import parse_decisions, run_forced_task
from skillstate.eval.metrics import summarize
from skillstate.eval.runner import oracle_factory, run_task
from skillstate.eval.suites import load_suite
from skillstate.eval.tasks import TaskSpec
from skillstate.eval.variants import VARIANTS
from skillstate.store.sqlite import SQLiteStore
from tests.test_cli import run_cli


@pytest.fixture(scope="module")
def medium() -> TaskSpec:
    return next(s for s in load_suite("long", 0) if s.group == "medium")


@pytest.fixture(scope="module")
def long_task() -> TaskSpec:
    """A long records task (21 records): long enough that two kills land before it ends.

    A kill lands at a drawn version in the first two thirds of the task; the parent
    must wake up and kill before the child runs the rest. On a medium task the rest
    after the second kill can be a few oracle steps, and on a busy CI machine the
    child once ran them before the parent woke: the kill missed. Here the rest is
    dozens of steps.
    """
    return next(s for s in load_suite("long", 0) if s.id == "records-010")


@pytest.fixture(scope="module")
def short() -> TaskSpec:
    return min(load_suite("long", 0), key=lambda s: s.max_steps)


class TestKilledRuns:
    def test_sigkilled_twice_the_task_still_ends_right_with_every_effect_once(
        self, long_task: TaskSpec, tmp_path: Path
    ) -> None:
        """Two SIGKILLs land (the parent waits for the child's commits before each); the
        resumed processes finish the task; the ledger holds every line exactly once."""
        result = run_task(long_task, VARIANTS["skillstate"], seed=0, workdir=tmp_path, kills=2)
        assert result.success, result.failure
        killed = [r for r in result.recovery if r.kind == "kill"]
        assert len(killed) == 1
        report = killed[0]
        assert report.kills == 2, "both kills must land before the task ends"
        assert report.resumes >= 2
        assert report.success
        assert report.duplicated_effects == 0
        # Three child processes ran it (two killed, the last to the end), each a new one.
        root = next(tmp_path.glob("*/killed"))
        assert sorted(p.name for p in root.glob("job-*.json")) == [
            f"job-{i}.json" for i in range(3)
        ]
        summary = summarize([result])["skillstate"]
        assert summary["kill_runs"] == 1
        assert summary["kills"] == 2
        assert summary["kill_recovery_rate"]["mean"] == 1.0

    def test_provider_faults_in_a_killed_run_are_resumed_from_as_long_as_it_progresses(
        self, tmp_path: Path
    ) -> None:
        """A child ended by a timeout or 429 is replaced; only faults in a row without
        progress count toward giving up (a total count failed long tasks before)."""
        from skillstate.eval.interrupt import run_killed
        from skillstate.eval.models import ModelSpec
        from skillstate.eval.runner import _measure

        task = next(s for s in load_suite("long", 0) if s.group == "long")
        run, _ = run_killed(
            task, VARIANTS["skillstate"], seed=0, root=tmp_path / "k",
            model=ModelSpec(inject_faults=0.3), context_window=None, max_repairs=1,
            max_invalid=3, kills=1,
        )  # fmt: skip
        measured = _measure(task, VARIANTS["skillstate"], 0, run)
        run.store.close()
        assert run.faults > 5, "the test needs more faults than FAULTS_IN_A_ROW in all"
        assert measured.success, measured.failure

    def test_a_reopened_environment_keeps_its_files(self, short: TaskSpec, tmp_path: Path) -> None:
        """`fresh=False` reopens: a line already in the ledger stays (a resumed run needs it)."""
        env = build_environment(short, tmp_path)
        env.tools["append_ledger"](line="rec-000 1.00")
        again = build_environment(short, tmp_path, fresh=False)
        assert (tmp_path / "ledger.txt").read_text(encoding="utf-8") == "rec-000 1.00\n"
        assert again.plan_skills == env.plan_skills


class TestProviderFaults:
    def test_a_fault_is_an_interruption_the_run_resumes_from(
        self, short: TaskSpec, tmp_path: Path
    ) -> None:
        """A third of the calls time out or are rate-limited: the run resumes each time
        (as a worker does) and still succeeds; the faults are counted."""
        result = run_task(
            short,
            VARIANTS["skillstate"],
            seed=0,
            workdir=tmp_path,
            recovery=False,
            factory=faulty_factory(oracle_factory, 0.3),
        )
        assert result.success, result.failure
        assert result.faults > 0
        assert summarize([result])["skillstate"]["faults_per_run"]["mean"] == result.faults


class TestBadSteps:
    def test_an_effect_that_failed_after_it_happened_raises_after_the_call(
        self, short: TaskSpec, tmp_path: Path
    ) -> None:
        env = inject_bad_steps(build_environment(short, tmp_path), 1.0, "k")
        with pytest.raises(InjectedBadStep, match="did its effect, then failed"):
            env.tools["append_ledger"](line="rec-000 1.00")
        assert (tmp_path / "ledger.txt").read_text(encoding="utf-8") == "rec-000 1.00\n"
        assert env.tools["get_record"](i=1)["index"] == 1  # not an effect tool: untouched

    def test_skills_recover_through_rollback_raw_tools_write_twice(
        self, medium: TaskSpec, tmp_path: Path
    ) -> None:
        """Effects that fail after they happened: with a third of them failing, the skill's
        rollback undoes each line and its retry writes it once; a raw tool has no
        rollback, so when its effect fails every time each retry writes the line again."""
        skill = run_task(
            medium, VARIANTS["skillstate"], seed=0, workdir=tmp_path, recovery=False,
            bad_steps=0.3,
        )  # fmt: skip
        tools = run_task(
            medium, VARIANTS["state"], seed=0, workdir=tmp_path, recovery=False, bad_steps=1.0
        )
        assert skill.bad_steps > 0
        assert skill.success, skill.failure
        assert skill.checks["ledger_each_once"]
        # ...and the injection did hit a ledger append that the rollback then undid.
        store = SQLiteStore(next(tmp_path.glob("*-skillstate-0/run")) / "state.db")
        hit = [
            c
            for e in store.events("task")
            for c in e.tool_calls
            if c.tool == "append_ledger" and "InjectedBadStep" in c.summary
        ]
        store.close()
        assert hit, "no append was injected: the test would not exercise the rollback"
        assert tools.bad_steps > 0
        assert not tools.success
        assert not tools.checks["ledger_each_once"]
        summary = summarize([skill, tools])
        assert summary["skillstate"]["rollback_recovery_rate"]["mean"] == 1.0
        assert summary["state"]["rollback_recovery_rate"]["mean"] == 0.0
        assert summary["state"]["rollback_runs"] == 1

    def test_a_rate_outside_zero_one_is_refused(self, short: TaskSpec, tmp_path: Path) -> None:
        with pytest.raises(UsageError, match="between 0 and 1"):
            inject_bad_steps(build_environment(short, tmp_path), 2.0, "k")


class TestSampledDecisions:
    def test_only_the_sampled_decisions_are_asked(self, short: TaskSpec, tmp_path: Path) -> None:
        """`--decisions 1-2,4-`: k = 3 follows the reference unasked; the run still succeeds."""
        run = run_forced_task(
            short, VARIANTS["skillstate"], seed=0, workdir=tmp_path, ask=parse_decisions("1-2,4-")
        )
        assert run.reference_ok
        ks = [d.k for d in run.decisions]
        assert 3 not in ks
        assert ks[:2] == [1, 2]
        assert ks[2:] == list(range(4, 4 + len(ks) - 2))

    @pytest.mark.parametrize("text", ["0", "a-b", "5-3", "1,,2"])
    def test_a_bad_spec_is_one_line_and_exit_2(self, text: str, tmp_path: Path) -> None:
        code, out, err = run_cli(
            tmp_path, "eval", "--mode", "forced", "--tasks", "1", "--variants", "skillstate",
            "--seeds", "1", "--decisions", text, "--out", str(tmp_path / "o"),
        )  # fmt: skip
        assert code == 2
        assert "--decisions" in err
        assert "Traceback" not in out + err


def test_the_command_reports_kills_faults_and_rollback(tmp_path: Path) -> None:
    """`eval --kills 1 --inject-bad-steps 0.3 --inject-faults 0.1`: one report with every
    recovery measure, and the settings in the JSON."""
    out = tmp_path / "out"
    code, stdout, err = run_cli(
        tmp_path, "eval", "--suite", "long", "--groups", "medium", "--tasks", "1",
        "--variants", "skillstate", "--seeds", "1", "--kills", "1",
        "--inject-bad-steps", "0.3", "--inject-faults", "0.1", "--out", str(out),
    )  # fmt: skip
    assert code == 0, stdout + err
    text = (out / "report.md").read_text(encoding="utf-8")
    assert "Killed recovery" in text
    assert "Rollback recovery" in text
    data = json.loads((out / "report.json").read_text(encoding="utf-8"))
    (task,) = data["tasks"]
    assert task["success"], task["failure"]
    kinds = sorted(r["kind"] for r in task["recovery"])
    assert kinds == ["kill", "stop", "stop", "stop"]
    assert task["bad_steps"] > 0


def test_a_kill_job_carries_the_model_spec_to_the_child(tmp_path: Path) -> None:
    """A child rebuilds exactly the parent's model: the job file round-trips its spec."""
    from skillstate.eval.interrupt import KillJob
    from skillstate.eval.models import ModelSpec

    job = KillJob(
        spec={"id": "t"}, variant={"name": "skillstate"}, seed=2, root=str(tmp_path),
        model=ModelSpec("openai:acme/tiny", "http://127.0.0.1:9/v1", 0.1),
        context_window=4096, max_repairs=1, max_invalid=3, bad_steps=None, child=1,
    )  # fmt: skip
    job.write(tmp_path / "job.json")
    assert KillJob.read(tmp_path / "job.json") == job
