"""Run one task under one variant, and measure it.

Each run gets a fresh directory (the family builds its environment there) and a
fresh SQLite store, goes through the real :class:`~skillstate.engine.runtime.Runtime`
with the variant's model policy, and is then judged by the family's checks on the
environment and the final state, never by the model's prose. Token figures come
from the events: what each policy actually sent.

Recovery: the same task is run again, stopped after 25%, 50% and 75% of its
reference plan, and resumed by a *new* runtime and a new policy over the same
store, as after a crash; the checks then say whether it still succeeded and
whether an effect was repeated.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skillstate.engine.actions import Action, CallSkill
from skillstate.engine.history import step_records
from skillstate.engine.policy import ModelPolicy, Policy
from skillstate.engine.replay import Expectations, attribute
from skillstate.engine.runtime import Runtime
from skillstate.errors import ContextOverflow, ProviderError, SkillstateError
from skillstate.eval.bad_steps import inject_bad_steps
from skillstate.eval.children import attach_children
from skillstate.eval.families import build_environment
from skillstate.eval.results import RecoveryResult, TaskResult
from skillstate.eval.tasks import Environment, TaskSpec
from skillstate.eval.variants import Variant, build_agent
from skillstate.events import Event
from skillstate.llm.base import Completion, Message, Provider, count_messages
from skillstate.store.base import Store
from skillstate.store.sqlite import SQLiteStore

if TYPE_CHECKING:
    from skillstate.eval.cassettes_run import RunRecorder
    from skillstate.eval.models import ModelSpec

__all__ = [
    "ContextOverflow",
    "LimitedProvider",
    "OracleProvider",
    "PolicyWrap",
    "ProviderFactory",
    "run_task",
]

RECOVERY_POINTS = (0.25, 0.5, 0.75)
FAULTS_IN_A_ROW = 5
"""Provider errors in a row, with no progress between them, after which a run fails."""
TASK_ID = "task"
EXPECTED = "expected.json"


class LimitedProvider:
    """Refuses prompts longer than ``window`` tokens, as the model itself would."""

    def __init__(self, inner: Provider, window: int) -> None:
        self.inner = inner
        self.window = window
        self.name = inner.name

    def complete(
        self,
        messages: Sequence[Message],
        *,
        schema: dict[str, Any] | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        size = count_messages(messages)
        if size + (max_tokens or 0) > self.window:
            raise ContextOverflow(
                f"prompt of {size:,} tokens (+{max_tokens or 0} for the reply) exceeds the "
                f"{self.window:,}-token context window"
            )
        return self.inner.complete(messages, schema=schema, max_tokens=max_tokens)


class OracleProvider:
    """A "model" that follows the task's reference plan.

    Its position in the plan is read from the store (decisions committed so far that
    did not fail), so a resumed run goes on where the interrupted one stopped and a
    step that failed is tried again. Its replies go
    through the real policies: the prompts are built and counted as they would be
    sent, which is what makes its token figures real.
    """

    def __init__(self, plan: Sequence[Action], store: Store, task_id: str) -> None:
        self.plan = list(plan)
        self.store = store
        self.task_id = task_id
        self.name = "oracle"

    def complete(
        self,
        messages: Sequence[Message],
        *,
        schema: dict[str, Any] | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        from skillstate.llm.base import Usage
        from skillstate.llm.tokens import count_tokens

        if schema is None:
            # Not a decision: a baseline's own call (the summary of the summary variant).
            text = "(oracle summary: the oracle reads its plan, not this text)"
        else:
            # A decision that failed (a skill refused after its retries) is decided
            # again, as a model that saw the error would: only what went through counts.
            done = sum(
                1
                for e in self.store.events(self.task_id)
                if e.actor == "policy"
                and e.action.get("kind") not in {None, "invalid"}
                and e.error is None
            )
            text = self.plan[min(done, len(self.plan) - 1)].model_dump_json()
        usage = Usage(count_messages(messages), count_tokens(text), estimated=True)
        return Completion(text=text, usage=usage, model="oracle")


ProviderFactory = Callable[[TaskSpec, Variant, Environment, Store], Provider]
"""Builds the provider of one run (the oracle needs the plan and the store)."""
PolicyWrap = Callable[[ModelPolicy, Environment], Policy[Any]]
"""Builds the policy a run uses around the variant's own (see forced mode)."""


def oracle_factory(spec: TaskSpec, variant: Variant, env: Environment, store: Store) -> Provider:
    plan = env.plan_skills if variant.actions == "skills" else env.plan_tools
    return OracleProvider(plan, store, TASK_ID)


@dataclass
class _Run:
    env: Environment
    store: SQLiteStore
    root: Path
    failure: str | None = None
    stopped: str = ""
    faults: int = 0
    """Provider errors the run met and was resumed from."""
    extra: dict[str, Any] = field(default_factory=dict)


def make_runtime(
    spec: TaskSpec,
    variant: Variant,
    env: Environment,
    store: Store,
    factory: ProviderFactory,
    *,
    budget: int,
    context_window: int | None,
    max_repairs: int,
    max_invalid: int | None = None,
    wrap: PolicyWrap | None = None,
    worker: str | None = None,
) -> Runtime[Any]:
    """The runtime of one run of ``spec`` under ``variant``: a fresh provider and policy."""
    provider = factory(spec, variant, env, store)
    if context_window is not None:
        provider = LimitedProvider(provider, context_window)
    own = variant.policy(provider, max_repairs=max_repairs)
    policy: Policy[Any] = own if wrap is None else wrap(own, env)
    agent = build_agent(spec, env, variant, policy)
    # A fan-out family's child kinds, built for this variant (skills variants only).
    agent = attach_children(agent, env, variant, provider, max_repairs=max_repairs)
    return Runtime(agent, store, max_steps=budget, max_invalid=max_invalid, worker=worker)


def failure_of(stopped: str, state: Any, max_invalid: int | None) -> str | None:
    """Why a run that stopped this way failed (``None``: it completed)."""
    if stopped == "max_steps":
        return "step budget"
    if stopped == "budget":
        return f"stopped: {max_invalid} invalid decisions in a row"
    if stopped == "waiting_user":
        return "asked the user (no user in the evaluation)"
    if stopped == "waiting_approval":
        return "waits for an approval (no person in the evaluation)"
    if stopped == "waiting":
        return "waits for a time or a signal (the evaluation delivers none)"
    if stopped == "waiting_children":
        return "waits for child tasks that did not end"
    if stopped == "stalled":
        return str(state.errors[-1].message)  # the stall guard's reason
    if stopped == "failed":
        return "the policy gave up"
    return None


def decisions_made(store: Store) -> int:
    """Decisions the task has taken so far (what its step budget counts)."""
    return sum(1 for e in store.events(TASK_ID) if e.actor == "policy")


def _execute(
    spec: TaskSpec,
    variant: Variant,
    factory: ProviderFactory,
    root: Path,
    *,
    seed: int,
    context_window: int | None,
    max_repairs: int,
    max_invalid: int | None = None,
    stop_after: int | None = None,
    wrap: PolicyWrap | None = None,
    bad_steps: float | None = None,
    recorder: RunRecorder | None = None,
) -> _Run:
    """Build the environment, run the task (optionally stopping and resuming).

    ``wrap`` replaces the variant's policy by one built around it (forced mode).
    A provider error (a timeout, a 429) is an interruption, as it is for a worker:
    the task is resumed from the store by a new runtime, up to
    :data:`FAULTS_IN_A_ROW` times without progress. ``bad_steps`` makes that share
    of effect calls fail after their effect (:func:`inject_bad_steps`). ``recorder``
    records the run's tool calls and model replies (:mod:`skillstate.eval.cassettes`).
    """
    # Fresh every time: a rerun into the same --out must not resume an old task.
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    env = build_environment(spec, root / "env")
    if bad_steps:
        env = inject_bad_steps(env, bad_steps, f"{spec.id}:{variant.name}:{seed}")
    if recorder is not None:
        env, factory = recorder.attach(env, factory)
    store = SQLiteStore(root / "state.db")
    run = _Run(env=env, store=store, root=root)
    # Beside the store, so `skillstate replay --expect` attributes as the report did.
    (root / EXPECTED).write_text(
        json.dumps(expectations(env, variant).as_json(), indent=1), encoding="utf-8"
    )

    def runtime(budget: int) -> Runtime[Any]:
        return make_runtime(
            spec,
            variant,
            env,
            store,
            factory,
            budget=max(budget, 1),
            context_window=context_window,
            max_repairs=max_repairs,
            max_invalid=max_invalid,
            wrap=wrap,
        )

    budget = stop_after or spec.max_steps
    in_a_row, last = 0, -1
    try:
        rt = runtime(budget)
        rt.start(TASK_ID, **dict(env.initial))
        while True:
            try:
                result = rt.run(TASK_ID)
            except ContextOverflow:
                raise
            except ProviderError:
                run.faults += 1
                version = store.load(TASK_ID).version
                in_a_row = in_a_row + 1 if version == last else 1
                last = version
                if in_a_row > FAULTS_IN_A_ROW:
                    raise
            else:
                # An interruption stops the children too (they run with the parent's budget):
                # their parent then waits for them, and is resumed like any stop.
                stopped_early = result.stopped in {"max_steps", "waiting_children"}
                if not (stop_after and budget == stop_after and stopped_early):
                    break
                budget = spec.max_steps  # the interruption is over: resume to the end
            left = budget - decisions_made(store)
            if left < 1:
                run.stopped, run.failure = "max_steps", "step budget"
                return run
            # A new runtime, policy and provider resume from the store, as after a
            # crash (or as a worker does after a provider error's backoff).
            rt = runtime(left)
        run.stopped = result.stopped
        run.failure = failure_of(result.stopped, result.state, max_invalid)
    except ContextOverflow as exc:
        run.failure = f"context overflow: {exc}"
    except SkillstateError as exc:
        run.failure = f"{type(exc).__name__}: {exc}"
    return run


def run_task(
    spec: TaskSpec,
    variant: Variant,
    *,
    seed: int,
    factory: ProviderFactory = oracle_factory,
    workdir: Path | None = None,
    context_window: int | None = None,
    max_repairs: int = 2,
    max_invalid: int | None = 3,
    recovery: bool = True,
    kills: int = 0,
    model: ModelSpec | None = None,
    bad_steps: float | None = None,
    record: bool = True,
) -> TaskResult:
    """Run ``spec`` under ``variant`` and measure it (plus recovery runs).

    Recovery runs (of a task the run succeeded at): stopped cleanly at 25/50/75% of
    the plan and resumed, and, with ``kills``, one run whose process is SIGKILLed
    that many times at random instants (:mod:`skillstate.eval.interrupt`; its child
    processes rebuild the model from ``model``, the oracle by default).
    ``bad_steps`` injects effects that fail after they happened
    (:mod:`skillstate.eval.bad_steps`), in every run of the task. With ``record``,
    the main run's tool calls and model replies are kept beside its store, for
    ``eval --replay`` (:mod:`skillstate.eval.cassettes`).
    """
    base = Path(workdir or tempfile.mkdtemp(prefix="skillstate-eval-"))
    where = base / f"{spec.id}-{variant.name}-{seed}"
    started = time.perf_counter()
    recorder = None
    if record:
        from skillstate.eval.cassettes_run import RunRecorder

        recorder = RunRecorder(
            where / "run",
            spec,
            variant,
            seed,
            context_window=context_window,
            max_repairs=max_repairs,
            max_invalid=max_invalid,
            bad_steps=bad_steps,
        )
    run = _execute(
        spec,
        variant,
        factory,
        where / "run",
        seed=seed,
        context_window=context_window,
        max_repairs=max_repairs,
        max_invalid=max_invalid,
        bad_steps=bad_steps,
        recorder=recorder,
    )
    if recorder is not None:
        recorder.save(stopped=run.stopped, failure=run.failure)
    result = _measure(spec, variant, seed, run)
    if recovery and result.success:
        # Stops are counted in the parent's decisions (what its step budget counts),
        # whatever its children take.
        plan_len = len(run.env.plan_skills if variant.actions == "skills" else run.env.plan_tools)
        for point in RECOVERY_POINTS:
            stop = max(1, math.floor(plan_len * point))
            again = _execute(
                spec,
                variant,
                factory,
                where / f"recover-{int(point * 100)}",
                seed=seed,
                context_window=context_window,
                max_repairs=max_repairs,
                max_invalid=max_invalid,
                stop_after=stop,
                bad_steps=bad_steps,
            )
            measured = _measure(spec, variant, seed, again)
            result.recovery.append(RecoveryResult(point, measured.success, _duplicated(measured)))
            again.store.close()
    if recovery and result.success and kills:
        from skillstate.eval.interrupt import run_killed
        from skillstate.eval.models import ModelSpec

        killed, report = run_killed(
            spec,
            variant,
            seed=seed,
            root=where / "killed",
            model=model or ModelSpec(),
            context_window=context_window,
            max_repairs=max_repairs,
            max_invalid=max_invalid,
            kills=kills,
            bad_steps=bad_steps,
        )
        measured = _measure(spec, variant, seed, killed)
        report.success, report.duplicated_effects = measured.success, _duplicated(measured)
        result.recovery.append(report)
        killed.store.close()
    run.store.close()
    result.duration_s = round(time.perf_counter() - started, 3)
    return result


def _duplicated(result: TaskResult) -> int:
    """Failed exactly-once checks (a ledger line written twice, say)."""
    return sum(1 for name, ok in result.checks.items() if not ok and "once" in name)


def _measure(spec: TaskSpec, variant: Variant, seed: int, run: _Run) -> TaskResult:
    env, store = run.env, run.store
    plan = env.plan_skills if variant.actions == "skills" else env.plan_tools
    result = TaskResult(
        task_id=spec.id,
        suite=spec.suite,
        group=spec.group,
        variant=variant.name,
        seed=seed,
        success=False,
        failure=run.failure,
        plan_steps=len(plan) + (env.child_steps if variant.actions == "skills" else 0),
    )
    try:
        head = store.load(TASK_ID)
    except SkillstateError:
        result.failure = result.failure or "the task was never created"
        return result
    state = build_agent(spec, env, variant, _NoPolicy()).parse_state(head.state)
    events = store.events(TASK_ID)
    # A task that fans out pays for its children's decisions too (ids TASK_ID.V.KEY).
    family = [
        events,
        *(store.events(t) for t in sorted(store.tasks()) if t.startswith(TASK_ID + ".")),
    ]
    # In the order they were taken (a child's decisions between its parent's).
    decisions = sorted(
        (e for es in family for e in es if e.actor == "policy"), key=lambda e: e.started_at
    )
    result.steps = len(decisions)
    result.prompt_tokens = [e.usage.prompt for e in decisions if e.usage]
    result.completion_tokens = sum(e.usage.completion for e in decisions if e.usage)
    result.model_calls = sum(e.usage.calls for e in decisions if e.usage)
    result.repairs = sum(e.usage.repairs for e in decisions if e.usage)
    # An effect's attempts are in the runtime's event that settles it (the decision's
    # own event is the intent): count every attempted skill step, whoever recorded it.
    attempted = [
        e for es in family for e in es if e.actor in {"policy", "runtime"} and e.attempts > 0
    ]
    result.retries = sum(e.attempts - 1 for e in attempted)
    result.step_seconds = round(
        sum((e.finished_at - e.started_at).total_seconds() for e in decisions), 6
    )
    result.bad_steps = sum(1 for e in attempted if _had_a_failed_attempt(e))
    result.faults = run.faults
    checks = env.check(state)
    result.checks = {c.name: c.ok for c in checks}
    failed = [c for c in checks if not c.ok]
    result.success = run.failure is None and not failed
    if result.failure is None and failed:
        result.failure = f"check {failed[0].name} failed: {failed[0].detail}".strip()
    # The card keeps only the latest steps; the event log has every one.
    committed = sum(
        1 for es in family for r in step_records(es) if r.action in {"call_skill", "finish", "map"}
    )
    result.step_completion = min(1.0, committed / result.plan_steps) if plan else 0.0
    result.intermediate_validity = sum(1 for c in checks if c.ok) / len(checks) if checks else 0.0
    found = attribute(store, TASK_ID, expectations(env, variant), failure=result.failure)
    if found is not None:
        result.first_bad_step = found.decision
        result.first_bad_reason = found.reason
    result.replay = (
        f"skillstate replay {TASK_ID} --store sqlite:///{run.root / 'state.db'} "
        f"--expect {run.root / EXPECTED}"
    )
    return result


def _had_a_failed_attempt(event: Event) -> bool:
    """A skill ran and some attempt of it failed (retried or not)."""
    if event.skill is None or event.attempts < 1:
        return False  # refused before it ran: nothing to roll back
    refused = event.verdict is not None and not event.verdict.ok
    return event.attempts > 1 or refused or event.error is not None


def expectations(env: Environment, variant: Variant) -> Expectations:
    """What the run of ``variant`` is expected to do, for attribution (see replay)."""
    if variant.actions == "skills":
        return Expectations(facts=list(env.expected_facts))
    skills = frozenset(f"tool_{name}" for name in env.effect_tools)
    effects = [
        (a.skill, dict(a.params))
        for a in env.plan_tools
        if isinstance(a, CallSkill) and a.skill in skills
    ]
    return Expectations(effects=effects, effect_skills=skills)


class _NoPolicy:
    """Stands in for a policy where an agent is only used to parse states."""

    def decide(self, view: Any) -> Action:
        raise RuntimeError("not used")


def task_json(result: TaskResult) -> str:
    return json.dumps(result.as_json(), ensure_ascii=False)
