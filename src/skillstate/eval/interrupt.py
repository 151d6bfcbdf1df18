"""Recovery under real interruptions: the agent's process SIGKILLed at random instants.

A killed run executes the task in a child process (``python -m
skillstate.eval.interrupt JOB``) and kills it with SIGKILL, ``kills`` times, each
time at a random instant: the parent watches the store from its own process,
waits until the head has moved a drawn number of versions past where the child
started (so a slow start-up under load only makes the run longer, never makes a
kill land before the child did anything), then waits a random fraction of a
second more and kills. A kill therefore lands anywhere: between two decisions,
inside a model call, after an effect's intent and before its outcome, inside a
commit. A new child reopens the environment (``build(..., fresh=False)``) and the
store and resumes the task, as a restarted worker would; a provider error in a
child (an injected timeout or 429) ends it the same way and is resumed too. The
run is then judged like any other (final checks on the environment, effects
exactly once).

The schedule is seeded by task, variant and seed; the instants still depend on
the machine's timing, which is what makes them random.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from skillstate.errors import ContextOverflow, ProviderError, SkillstateError, TaskNotFound
from skillstate.eval.bad_steps import inject_bad_steps
from skillstate.eval.families import build_environment
from skillstate.eval.models import ModelSpec, model_factory
from skillstate.eval.results import RecoveryResult
from skillstate.eval.runner import (
    EXPECTED,
    FAULTS_IN_A_ROW,
    TASK_ID,
    _Run,
    decisions_made,
    expectations,
    failure_of,
    make_runtime,
)
from skillstate.eval.tasks import TaskSpec
from skillstate.eval.variants import Variant
from skillstate.store.sqlite import SQLiteStore

__all__ = ["DEFAULT_KILLS", "KillJob", "run_killed"]

DEFAULT_KILLS = 3
"""SIGKILLs per killed run (``--kills``)."""
POLL = 0.005
"""Seconds between two looks at the store while waiting for the kill instant."""
EXTRA = 0.05
"""Largest random wait after the store showed the drawn progress, before the kill."""
DEADLINE = 1800.0
"""How long one child may go without the progress a kill waits for, or without
ending when it runs to the end (a real model on a busy CPU is slow; never hang)."""
PROVIDER_FAULT = 3
"""A child's exit code after a provider error: the parent resumes the task."""


@dataclass(frozen=True)
class KillJob:
    """What a child process needs to run (or resume) one task: plain data, as JSON."""

    spec: dict[str, Any]
    variant: dict[str, Any]
    seed: int
    root: str
    model: ModelSpec
    context_window: int | None
    max_repairs: int
    max_invalid: int | None
    bad_steps: float | None
    child: int
    """Which child this is (0, 1, ...): varies the injected faults' draws."""

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)), encoding="utf-8")

    @classmethod
    def read(cls, path: Path) -> KillJob:
        data = json.loads(path.read_text(encoding="utf-8"))
        data["model"] = ModelSpec(**data["model"])
        return cls(**data)


def run_killed(
    spec: TaskSpec,
    variant: Variant,
    *,
    seed: int,
    root: Path,
    model: ModelSpec,
    context_window: int | None,
    max_repairs: int,
    max_invalid: int | None,
    kills: int = DEFAULT_KILLS,
    bad_steps: float | None = None,
) -> tuple[_Run, RecoveryResult]:
    """Run ``spec`` in child processes SIGKILLed ``kills`` times; the run (to measure,
    with its store open) and what the kills did."""
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    env = build_environment(spec, root / "env")  # the children reopen it
    (root / EXPECTED).write_text(
        json.dumps(expectations(env, variant).as_json(), indent=1), encoding="utf-8"
    )
    store = SQLiteStore(root / "state.db")
    run = _Run(env=env, store=store, root=root)
    plan = env.plan_skills if variant.actions == "skills" else env.plan_tools
    rng = random.Random(f"kill:{spec.id}:{variant.name}:{seed}")
    # Each step commits one or two versions (an effect's intent, then its outcome):
    # spread the kills over the first two thirds of the task's versions.
    reach = max(1, (len(plan) * 4 // 3) // (kills + 1))
    report = RecoveryResult(at=None, success=False, kind="kill")
    children = 0

    def child() -> subprocess.Popen[bytes]:
        nonlocal children
        job = KillJob(
            spec=spec.model_dump(mode="json"),
            variant=asdict(variant),
            seed=seed,
            root=str(root),
            model=model,
            context_window=context_window,
            max_repairs=max_repairs,
            max_invalid=max_invalid,
            bad_steps=bad_steps,
            child=children,
        )
        path = root / f"job-{children}.json"
        job.write(path)
        children += 1
        with (root / f"child-{children - 1}.log").open("wb") as log:  # the child keeps its copy
            return subprocess.Popen(
                [sys.executable, "-m", "skillstate.eval.interrupt", str(path)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    in_a_row, last = 0, -1
    while True:
        proc = child()
        if report.kills < kills:
            start = _version(store)
            if _await_version(store, proc, start + rng.randint(1, reach)):
                time.sleep(rng.uniform(0.0, EXTRA))  # a random instant from here on
            if proc.poll() is None:
                proc.kill()
                proc.wait()
                report.kills += 1
                report.resumes += 1
                report.in_flight += _in_flight(store)
                continue
        code = _wait(proc)
        if code == PROVIDER_FAULT:  # a timeout or 429 ended the child: resume, as a worker would
            run.faults += 1
            version = _version(store)
            in_a_row = in_a_row + 1 if version == last else 1  # progress starts the count over
            last = version
            if in_a_row <= FAULTS_IN_A_ROW:
                report.resumes += 1
                continue
            run.failure = f"provider errors: {in_a_row} in a row without progress"
            break
        break  # the child ran the task to its end (or died: judged below)
    if run.failure is None:
        run.failure, run.stopped = _outcome(root, children - 1)
    return run, report


def _version(store: SQLiteStore) -> int:
    try:
        return store.load(TASK_ID, verify=False).version
    except TaskNotFound:
        return 0


def _in_flight(store: SQLiteStore) -> int:
    """1 if the head shows an effect's intent without its outcome (a kill mid-effect)."""
    try:
        return int(store.load(TASK_ID, verify=False).state.get("pending_effect") is not None)
    except TaskNotFound:
        return 0


def _await_version(store: SQLiteStore, proc: subprocess.Popen[bytes], version: int) -> bool:
    """Wait (observing the store) until the head reaches ``version``; False if the child
    ended first."""
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        if _version(store) >= version:
            return True
        time.sleep(POLL)
    return False


def _wait(proc: subprocess.Popen[bytes]) -> int:
    try:
        return proc.wait(timeout=DEADLINE)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return -9


def _outcome(root: Path, child: int) -> tuple[str | None, str]:
    """The last child's ``(failure, stopped)``, as it wrote them."""
    path = root / f"result-{child}.json"
    if not path.exists():
        log = root / f"child-{child}.log"
        tail = log.read_text(encoding="utf-8", errors="replace")[-300:] if log.exists() else ""
        return f"the child process died without a result: {tail.strip()}", ""
    data = json.loads(path.read_text(encoding="utf-8"))
    return data.get("failure"), str(data.get("stopped", ""))


def _child(job: KillJob) -> int:
    """Run (or resume) the task of ``job`` to its end; write how it ended."""
    spec = TaskSpec.model_validate(job.spec)
    variant = Variant(**job.variant)
    root = Path(job.root)
    factory, window = model_factory(
        job.model.model,
        job.model.base_url,
        job.context_window,
        job.model.inject_faults,
        salt=f":child{job.child}",
    )
    env = build_environment(spec, root / "env", fresh=False)
    if job.bad_steps:
        key = f"{spec.id}:{variant.name}:{job.seed}:{job.child}"
        env = inject_bad_steps(env, job.bad_steps, key)
    store = SQLiteStore(root / "state.db")
    result: dict[str, Any] = {}
    try:
        try:
            store.load(TASK_ID)
            left = spec.max_steps - decisions_made(store)
            fresh = False
        except TaskNotFound:
            left, fresh = spec.max_steps, True
        if left < 1:
            result = {"stopped": "max_steps", "failure": "step budget"}
        else:
            rt = make_runtime(
                spec,
                variant,
                env,
                store,
                factory,
                budget=left,
                context_window=window,
                max_repairs=job.max_repairs,
                max_invalid=job.max_invalid,
                worker=f"eval-kill:{root.name}",  # a new child takes its own lease over
            )
            if fresh:
                rt.start(TASK_ID, **dict(env.initial))
            done = rt.run(TASK_ID)
            result = {
                "stopped": done.stopped,
                "failure": failure_of(done.stopped, done.state, job.max_invalid),
            }
    except ContextOverflow as exc:
        result = {"stopped": "error", "failure": f"context overflow: {exc}"}
    except ProviderError:
        return PROVIDER_FAULT
    except SkillstateError as exc:
        result = {"stopped": "error", "failure": f"{type(exc).__name__}: {exc}"}
    finally:
        store.close()
    (root / f"result-{job.child}.json").write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(_child(KillJob.read(Path(sys.argv[1]))))
