"""The evaluation harness's self-test: with the oracle, every variant succeeds.

The oracle follows each task's reference plan, but its replies go through the real
policies, so the prompts are built and counted as they would be sent: the token
figures are real even though the decisions are not a model's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skillstate.eval.runner import run_task
from skillstate.eval.suites import load_suite
from skillstate.eval.tasks import TaskSpec
from skillstate.eval.variants import VARIANTS, tool_skills
from tests.eval_support import VARIANT_NAMES
from tests.test_cli import run_cli


@pytest.fixture(scope="module")
def subset() -> list[TaskSpec]:
    """One task per length group (the CI-sized subset)."""
    specs = load_suite("long", 0)
    picked: dict[str, TaskSpec] = {}
    for spec in sorted(specs, key=lambda s: s.max_steps):
        picked.setdefault(spec.group, spec)
    assert set(picked) == {"short", "medium", "long"}
    return list(picked.values())


@pytest.mark.parametrize("variant", VARIANT_NAMES)
def test_oracle_succeeds_in_every_variant(
    variant: str, subset: list[TaskSpec], tmp_path: Path
) -> None:
    """Every task of the subset succeeds, recovers from each interruption, repeats nothing."""
    for spec in subset:
        result = run_task(spec, VARIANTS[variant], seed=0, workdir=tmp_path)
        assert result.success, (spec.id, result.failure, result.checks)
        assert result.first_bad_step is None
        assert result.steps == result.plan_steps
        assert result.step_completion == 1.0
        assert len(result.prompt_tokens) == result.steps
        assert all(t > 0 for t in result.prompt_tokens)
        assert [r.at for r in result.recovery] == [0.25, 0.5, 0.75]
        assert all(r.success for r in result.recovery), result.recovery
        assert all(r.duplicated_effects == 0 for r in result.recovery)


def test_state_prompts_stay_flat_history_grows(subset: list[TaskSpec], tmp_path: Path) -> None:
    """On the long task the state view's prompts stay flat; the transcript's grow."""
    spec = max(subset, key=lambda s: s.max_steps)
    state = run_task(spec, VARIANTS["skillstate"], seed=0, workdir=tmp_path, recovery=False)
    history = run_task(spec, VARIANTS["skills"], seed=0, workdir=tmp_path, recovery=False)
    assert state.steps == history.steps
    assert history.prompt_tokens[-1] > 3 * state.prompt_tokens[-1]
    assert state.prompt_tokens[-1] < 1.5 * state.prompt_tokens[len(state.prompt_tokens) // 2]


def test_context_overflow_is_a_recorded_failure(subset: list[TaskSpec], tmp_path: Path) -> None:
    """A prompt that outgrows the context window fails the task, not the run."""
    spec = max(subset, key=lambda s: s.max_steps)
    result = run_task(
        spec, VARIANTS["history"], seed=0, workdir=tmp_path, context_window=3000, recovery=False
    )
    assert not result.success
    assert result.failure is not None
    assert result.failure.startswith("context overflow")


def test_tool_wrappers_take_the_tools_own_parameters() -> None:
    """Raw tools are offered with their own signatures as params."""

    def get_record(i: int, verbose: bool = False) -> dict[str, int]:
        """Fetch one record."""
        return {"i": i}

    registry = tool_skills({"get_record": get_record})
    skill = registry["tool_get_record"]
    assert set(skill.params.model_fields) == {"i", "verbose"}
    assert "remember" in registry


def test_eval_command_writes_the_report(tmp_path: Path) -> None:
    """`skillstate eval` with the oracle writes report.md, report.json and both plots."""
    out = tmp_path / "out"
    code, stdout, err = run_cli(
        tmp_path, "eval", "--suite", "long", "--tasks", "2", "--seeds", "2", "--out", str(out)
    )
    assert code == 0, stdout + err
    data = json.loads((out / "report.json").read_text())
    assert data["model"] == "oracle"
    assert set(data["variants"]) == {"history", "state", "skills", "skillstate"}
    assert len(data["tasks"]) == 2 * 4 * 2
    assert all("first_bad_step" in t for t in data["tasks"])
    assert (out / "report.md").read_text().strip()
    for png in ("tokens_by_step.png", "success_by_length.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_rerun_into_the_same_directory_starts_fresh(tmp_path: Path) -> None:
    """Reusing --out must not resume (or collide with) the previous run's task."""
    spec = min(load_suite("long", 0), key=lambda s: s.max_steps)
    first = run_task(spec, VARIANTS["skillstate"], seed=0, workdir=tmp_path, recovery=False)
    again = run_task(spec, VARIANTS["skillstate"], seed=0, workdir=tmp_path, recovery=False)
    assert first.success
    assert again.success, again.failure
    assert again.steps == first.steps == first.plan_steps
