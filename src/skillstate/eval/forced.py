"""Teacher-forced decision accuracy: each variant's prompt at every decision of the
reference run, one answer from the model, scored against the reference.

The reference trajectory is the oracle's run of the task under the variant: the
runtime runs it for real, with the variant's own policy wrapped in a
:class:`ForcingPolicy`. At decision ``k`` the runtime renders the view exactly as in a
live run whose first ``k - 1`` decisions were the reference's (the history variant
gets that transcript, the state variant that card, the baselines their window or
summary), the variant's policy builds its messages from it (the same
:class:`~skillstate.engine.policy.ModelPolicy` code as end to end, so the prompt is
the one the live run would send) and asks the model under test. Its answer is
scored; then the reference decision is committed instead, whatever the model said,
and the run goes on to ``k + 1``. Aggregation is in :mod:`skillstate.eval.forced_metrics`.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import BaseModel, ValidationError

from skillstate.engine.actions import Action, CallSkill, Finish
from skillstate.engine.policy import ModelPolicy
from skillstate.errors import DecisionFailed, SkillstateError, UsageError
from skillstate.eval.results import ForcedDecision
from skillstate.eval.runner import (
    PolicyWrap,
    ProviderFactory,
    _execute,
    _measure,
    oracle_factory,
)
from skillstate.eval.tasks import Environment, TaskSpec
from skillstate.eval.variants import Variant
from skillstate.llm.base import Completion, Message, Provider, count_messages
from skillstate.state.view import View

__all__ = [
    "ForcedRun",
    "ForcingPolicy",
    "Verdict",
    "parse_decisions",
    "run_forced_task",
    "score",
]


def parse_decisions(text: str) -> Callable[[int], bool]:
    """``--decisions 1-10,15,20,40-60,80-``: which decision indices the model is asked at.

    Sizing a run to the hardware: a history prompt near the end of its window costs
    a small CPU model a minute, so a run can sample ``k`` instead of asking at every
    one. Ranges are inclusive; ``N-`` is open-ended.
    """
    spans: list[tuple[int, int | None]] = []
    for part in (p.strip() for p in text.split(",")):
        low, dash, high = part.partition("-")
        try:
            start = int(low)
            end = (int(high) if high else None) if dash else start
        except ValueError:
            raise UsageError(f"--decisions: {part!r} is not N, N-M or N-") from None
        if start < 1 or (end is not None and end < start):
            raise UsageError(f"--decisions: {part!r} is not a range of decisions from 1")
        spans.append((start, end))

    def ask(k: int) -> bool:
        return any(start <= k and (end is None or k <= end) for start, end in spans)

    return ask


class _Recorder:
    """Passes calls through, noting the size of each decision prompt (one with a schema)."""

    def __init__(self, inner: Provider) -> None:
        self.inner = inner
        self.name = inner.name
        self.sizes: list[int] = []

    def complete(
        self,
        messages: Sequence[Message],
        *,
        schema: dict[str, Any] | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        if schema is not None:  # a baseline's own call (a summary) is not the decision prompt
            self.sizes.append(count_messages(messages))
        return self.inner.complete(messages, schema=schema, max_tokens=max_tokens)


class Verdict(NamedTuple):
    """How one answer compares with the reference decision."""

    skill_ok: bool
    params_ok: bool


def _normal(model: type[BaseModel] | None, params: dict[str, Any]) -> Any:
    if model is None:
        return params
    try:
        return model.model_validate(params).model_dump(mode="json")
    except ValidationError:
        return params


def score(action: Action, reference: Action, params: dict[str, type[BaseModel]]) -> Verdict:
    """Same kind and skill as ``reference``; and the same params once both are validated
    by the skill's params model (so a default spelled out equals one left out)."""
    if action.kind != reference.kind:
        return Verdict(False, False)
    if not isinstance(reference, CallSkill):
        return Verdict(True, True)  # finish (or another kind): no parameters to compare
    if not isinstance(action, CallSkill) or action.skill != reference.skill:
        return Verdict(False, False)
    model = params.get(reference.skill)
    same = _normal(model, action.params) == _normal(model, reference.params)
    return Verdict(True, same)


def _label(action: Action) -> str:
    return action.skill if isinstance(action, CallSkill) else action.kind


class ForcingPolicy:
    """Asks the variant's policy for decision ``k``, scores it, then plays the reference's."""

    def __init__(
        self,
        inner: ModelPolicy,
        plan: Sequence[Action],
        *,
        spec: TaskSpec,
        variant: str,
        seed: int,
        ask: Callable[[int], bool] | None = None,
    ) -> None:
        self.inner = inner
        self.plan = list(plan)
        self.recorder = _Recorder(inner.provider)
        inner.provider = self.recorder  # every call of the inner policy goes through it
        self.decisions: list[ForcedDecision] = []
        self._spec, self._variant, self._seed = spec, variant, seed
        self._ask = ask
        self._k = 0

    def decide(self, view: View[Any]) -> Action:
        self._k += 1
        k = self._k
        # Past the plan (never in a reference run that succeeds): finish.
        reference = self.plan[k - 1] if k <= len(self.plan) else Finish(summary="plan exhausted")
        if self._ask is not None and not self._ask(k):
            return reference  # not a sampled decision: the reference goes on, unasked
        self.recorder.sizes.clear()
        record = ForcedDecision(
            task_id=self._spec.id,
            suite=self._spec.suite,
            group=self._spec.group,
            variant=self._variant,
            seed=self._seed,
            k=k,
            expected=_label(reference),
        )
        try:
            decided = self.inner.decide(view)
        except DecisionFailed as exc:
            record.error = str(exc)
        except SkillstateError as exc:  # a context overflow, a provider error
            record.error = f"{type(exc).__name__}: {exc}"
        else:
            verdict = score(decided.action, reference, dict(view.params))
            record.valid = True
            record.got = _label(decided.action)
            record.skill_ok, record.params_ok = verdict.skill_ok, verdict.params_ok
        record.prompt_tokens = self.recorder.sizes[0] if self.recorder.sizes else None
        self.decisions.append(record)
        return reference


@dataclass
class ForcedRun:
    """The teacher-forced decisions of one task under one variant and seed."""

    task_id: str
    suite: str
    group: str
    variant: str
    seed: int
    reference_ok: bool
    """The reference run itself succeeded (if not, the harness or the plan is wrong)."""
    reference_failure: str | None = None
    decisions: list[ForcedDecision] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "suite": self.suite,
            "group": self.group,
            "variant": self.variant,
            "seed": self.seed,
            "reference_ok": self.reference_ok,
            "reference_failure": self.reference_failure,
            "decisions": [d.as_json() for d in self.decisions],
        }


def run_forced_task(
    spec: TaskSpec,
    variant: Variant,
    *,
    seed: int,
    factory: ProviderFactory = oracle_factory,
    workdir: Path | None = None,
    context_window: int | None = None,
    max_repairs: int = 2,
    ask: Callable[[int], bool] | None = None,
) -> ForcedRun:
    """Teacher-force the model of ``factory`` along the reference run of ``spec``.

    ``factory`` builds the model under test exactly as in end-to-end mode (the default,
    the oracle, answers from the reference: every score is then 1.0). A prompt over
    ``context_window`` is scored invalid (``ContextOverflow``) and the run goes on.
    ``ask`` samples the decisions: the model is asked at decision ``k`` only when
    ``ask(k)`` (``--decisions``); the others follow the reference without a call.
    """
    base = Path(workdir or tempfile.mkdtemp(prefix="skillstate-forced-"))
    forcing: list[ForcingPolicy] = []

    def wrap(policy: ModelPolicy, env: Environment) -> ForcingPolicy:
        plan = env.plan_skills if variant.actions == "skills" else env.plan_tools
        made = ForcingPolicy(policy, plan, spec=spec, variant=variant.name, seed=seed, ask=ask)
        forcing.append(made)
        return made

    wrapper: PolicyWrap = wrap
    run = _execute(
        spec,
        variant,
        factory,
        base / f"{spec.id}-{variant.name}-{seed}" / "forced",
        seed=seed,
        context_window=context_window,
        max_repairs=max_repairs,
        max_invalid=None,
        wrap=wrapper,
    )
    try:
        reference = _measure(spec, variant, seed, run)
    finally:
        run.store.close()
    return ForcedRun(
        task_id=spec.id,
        suite=spec.suite,
        group=spec.group,
        variant=variant.name,
        seed=seed,
        reference_ok=reference.success,
        reference_failure=reference.failure,
        decisions=[d for policy in forcing for d in policy.decisions],
    )
