"""Helpers the eval family tests share: a scripted agent that plays a list of actions
through the real runtime, and the oracle's self-test under one variant."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from skillstate.engine.actions import Action, Finish
from skillstate.engine.agent import Agent
from skillstate.engine.policy import ScriptedPolicy
from skillstate.engine.runtime import RunResult, Runtime
from skillstate.eval.results import TaskResult
from skillstate.eval.runner import run_task
from skillstate.eval.tasks import Environment, TaskSpec
from skillstate.eval.variants import MAIN_VARIANTS, VARIANTS
from skillstate.state.view import View
from skillstate.store.base import Store
from skillstate.store.memory import MemoryStore

VARIANT_NAMES = sorted(MAIN_VARIANTS)
"""The four variants of the experiment; the baselines have their own tests."""

Tools = Mapping[str, Callable[..., Any]]


def scripted_agent(
    spec: TaskSpec,
    env: Environment,
    actions: Sequence[Action],
    *,
    tools: Tools | None = None,
    bind: bool = True,
) -> Agent:
    """An agent for ``spec`` that plays ``actions`` in order, then finishes.

    ``tools`` replace the environment's tools of the same name (a sloppy or
    crashing tool standing in for the real one).
    """
    queue = list(actions)

    def next_action(view: View) -> Action:
        return queue.pop(0) if queue else Finish(summary="plan exhausted")

    return Agent(
        name=spec.family,
        state_type=env.state_type,
        machine=env.machine,
        skills=env.skills,
        policy=ScriptedPolicy(next_action),
        tools={**env.tools, **(tools or {})},
        goal=spec.goal,
        constraints=spec.constraints,
        bind_params=bind,
    )


def run_plan(
    spec: TaskSpec,
    env: Environment,
    actions: Sequence[Action],
    *,
    tools: Tools | None = None,
    max_steps: int | None = None,
    store: Store | None = None,
    bind: bool = True,
    **initial: Any,
) -> tuple[RunResult, Runtime]:
    """Play ``actions`` as a new task on a runtime (a fresh MemoryStore unless given).

    The task starts from the environment's initial fields updated with ``initial``;
    the step budget is one step per action unless ``max_steps`` says otherwise.
    """
    runtime = Runtime(
        scripted_agent(spec, env, actions, tools=tools, bind=bind),
        MemoryStore() if store is None else store,
        max_steps=len(actions) if max_steps is None else max_steps,
    )
    runtime.start(spec.id, **{**env.initial, **initial})
    return runtime.run(spec.id), runtime


def assert_oracle_passes(spec: TaskSpec, variant_name: str, tmp_path: Path) -> TaskResult:
    """The oracle succeeds under the variant, recovers from each interruption and
    repeats no effect. Returns the result for a family's own extra assertions."""
    result = run_task(spec, VARIANTS[variant_name], seed=0, workdir=tmp_path)
    assert result.success, (result.failure, result.checks)
    assert result.first_bad_step is None
    assert result.steps == result.plan_steps
    assert [r.at for r in result.recovery] == [0.25, 0.5, 0.75]
    assert all(r.success for r in result.recovery), result.recovery
    assert all(r.duplicated_effects == 0 for r in result.recovery)
    return result


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``skillstate ARGS`` in this process: (exit code, stdout, stderr).

    The CLI's console is 200 columns wide for the call, whatever ``COLUMNS`` this process
    started with (rich reads it once, at import): the tests read cells, not the layout."""
    from rich.console import Console

    from skillstate.cli import _main

    wide = Console(width=200, highlight=False, soft_wrap=False)
    with mock.patch("skillstate._render.console", wide):
        code = _main(list(args))
    out, err = capsys.readouterr()
    return code, out, err
