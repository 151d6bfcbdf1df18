"""Measuring templates: a family's tasks run with and without a template distilled from
an earlier task of the same family (``benchmarks/templates.py`` is the command).

1. The *source* task (the first of :func:`family_tasks`) is run to completion by
   ``source`` (the oracle by default: it only has to finish; who finished it does not
   matter to the template) and distilled.
2. Each later task of the family (other seeds and params) is run twice by the model
   under test, through the evaluation harness (:func:`skillstate.eval.runner.run_task`):
   without a hint, and with the template instantiated from the task's own initial
   fields (its ``template`` hint on the first card). Both arms go through
   :class:`TemplatedFamily`, so the agent, its name and its prompts differ only by the
   hint. The goal and constraints stay the task's own: only the hint is measured.

Per run: success (the family's checks), decisions, prompt and completion tokens. The
oracle follows its reference plan whatever the prompt says, so with it both arms take
the same decisions by construction: it checks the harness and shows what the hint
costs in prompt tokens, never what a template changes.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from skillstate.engine.actions import Finish
from skillstate.engine.policy import ScriptedPolicy
from skillstate.errors import UsageError
from skillstate.eval.families import build_environment, get_family
from skillstate.eval.runner import ProviderFactory, oracle_factory, run_task
from skillstate.eval.suites import load_suite
from skillstate.eval.tasks import Environment, TaskSpec
from skillstate.eval.variants import Variant, build_agent
from skillstate.store.sqlite import SQLiteStore
from skillstate.templates.distiller import distill
from skillstate.templates.model import Template
from skillstate.templates.start import check_template, instantiate, params_from_text

__all__ = ["FAMILIES", "Arm", "TemplatedFamily", "family_tasks", "measure_family"]

WRAPPER = "skillstate.templates.measure:TemplatedFamily"
HINT = "template_hint"


class TemplatedFamily:
    """A family that builds another family's task (``params.inner``) and puts a template
    hint (``params.template_hint``, if any) on its first card."""

    name = "templated"

    def build(self, spec: TaskSpec, root: Path, *, fresh: bool = True) -> Environment:
        params = dict(spec.params)
        inner = str(params.pop("inner"))
        hint = params.pop(HINT, None)
        env = get_family(inner).build(
            spec.model_copy(update={"family": inner, "params": params}), root, fresh=fresh
        )
        if hint is not None:
            env.initial = {**env.initial, "template": hint}
        return env


def _orders(spec: TaskSpec, n: int) -> TaskSpec:
    people = [("Ana Lima", "ana.lima"), ("Ravi Nair", "ravi.nair"), ("Mei Chen", "mei.chen")]
    name, local = people[n % len(people)]
    params = dict(spec.params)
    email = f"{local}@example.com"
    month = f"2025-{(int(str(params['month'])[5:]) + n - 1) % 12 + 1:02d}"
    goal = spec.goal.replace(str(params["email"]), email).replace(str(params["month"]), month)
    constraints = tuple(c.replace(str(params["month"]), month) for c in spec.constraints)
    params.update(seed=int(params["seed"]) + n, email=email, name=name, month=month)
    return spec.model_copy(update={"params": params, "goal": goal, "constraints": constraints})


def _ticket(spec: TaskSpec, n: int) -> TaskSpec:
    params = dict(spec.params)
    ticket = f"T-{int(str(params['ticket_id'])[2:]) + 11 * n}"
    goal = spec.goal.replace(str(params["ticket_id"]), ticket)
    params.update(seed=int(params["seed"]) + n, ticket_id=ticket)
    return spec.model_copy(update={"params": params, "goal": goal})


def _seed_only(spec: TaskSpec, n: int) -> TaskSpec:
    params = dict(spec.params)
    if "seed" in params:
        params["seed"] = int(params["seed"]) + n
    return spec.model_copy(update={"params": params})


FAMILIES: dict[str, Callable[[TaskSpec, int], TaskSpec]] = {
    "orders": _orders,
    "ticket": _ticket,
    "sales": _seed_only,
    "fix_syntax": _seed_only,
}
"""How the seeds families vary a task (``records`` takes the ``long`` suite's tasks)."""


def family_tasks(family: str, count: int) -> list[TaskSpec]:
    """``count`` tasks of ``family``, the source first: other seeds and params each."""
    if family == "records":
        specs = load_suite("long", 0, count=count)
    elif family in FAMILIES:
        (base,) = [s for s in load_suite("seeds") if s.family == family][:1]
        specs = [FAMILIES[family](base, n) for n in range(count)]
    else:
        raise UsageError(
            f"unknown family {family!r}; choose one of: records, {', '.join(FAMILIES)}"
        )
    return [
        s.model_copy(update={"id": f"{s.id}-{n}" if family != "records" else s.id})
        for n, s in enumerate(specs)
    ]


def _wrapped(spec: TaskSpec, hint: Mapping[str, Any] | None) -> TaskSpec:
    params = {**spec.params, "inner": spec.family, **({HINT: dict(hint)} if hint else {})}
    return spec.model_copy(update={"family": WRAPPER, "params": params})


def _typed(template: Template, name: str, text: str) -> Any:
    """A value read out of a goal, as its parameter's type (a number stays a number)."""
    if template.parameters[name].type == "string":
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


@dataclass
class Arm:
    """One run of one task with or without the template."""

    task: str
    variant: str
    seed: int
    arm: str
    """``without`` or ``with``."""
    success: bool
    decisions: int
    prompt_tokens: int
    completion_tokens: int
    model_calls: int
    failure: str | None = None
    notes: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _agent(spec: TaskSpec, variant: Variant, root: Path) -> Any:
    env = build_environment(spec, root)
    return build_agent(spec, env, variant, ScriptedPolicy(lambda view: Finish())), env


def source_template(
    spec: TaskSpec, variant: Variant, workdir: Path, source: ProviderFactory = oracle_factory
) -> Template:
    """Run ``spec`` to completion with ``source`` and distill it."""
    result = run_task(spec, variant, seed=0, factory=source, workdir=workdir, recovery=False)
    if not result.success:
        raise UsageError(
            f"the source task {spec.id} did not complete under {variant.name} "
            f"({result.failure}): there is nothing to distill"
        )
    # run_task's layout: <workdir>/<task>-<variant>-<seed>/run/state.db
    store = SQLiteStore(workdir / f"{spec.id}-{variant.name}-0" / "run" / "state.db")
    try:
        agent, _ = _agent(spec, variant, workdir / "source-agent")
        inner = str(spec.params.get("inner", spec.family))
        return distill(store, "task", agent, name=f"{inner}-{variant.name}-from-{spec.id}")
    finally:
        store.close()


def measure_family(
    family: str,
    variant: Variant,
    factory: ProviderFactory,
    *,
    tasks: int,
    seeds: list[int],
    source: ProviderFactory = oracle_factory,
    workdir: Path | None = None,
    context_window: int | None = None,
    on_run: Callable[[Arm], None] | None = None,
) -> tuple[Template, list[Arm]]:
    """The template of the family's first task, and every later task's runs with and
    without it under ``factory`` (see the module docstring)."""
    base = Path(workdir or tempfile.mkdtemp(prefix="skillstate-templates-"))
    specs = family_tasks(family, tasks + 1)
    template = source_template(_wrapped(specs[0], None), variant, base / "source", source)
    arms: list[Arm] = []
    for spec in specs[1:]:
        plain = _wrapped(spec, None)
        agent, env = _agent(plain, variant, base / "agents" / spec.id)
        notes = check_template(template, agent)
        values = {n: env.initial[n] for n in template.parameters if n in env.initial}
        # A value the source quoted in its goal: read from this task's goal.
        from_goal = params_from_text(template.goal, spec.goal) or {}
        values.update({n: _typed(template, n, v) for n, v in from_goal.items() if n not in values})
        fields = instantiate(template, values)
        if fields.get("goal") != spec.goal:
            notes.append("the instantiated goal differs from the task's (the run uses the task's)")
        for seed in seeds:
            for arm, run_spec in (("without", plain), ("with", _wrapped(spec, fields["template"]))):
                result = run_task(
                    run_spec,
                    variant,
                    seed=seed,
                    factory=factory,
                    workdir=base / arm,
                    context_window=context_window,
                    recovery=False,
                )
                measured = Arm(
                    task=spec.id,
                    variant=variant.name,
                    seed=seed,
                    arm=arm,
                    success=result.success,
                    decisions=result.steps,
                    prompt_tokens=result.prompt_tokens_total,
                    completion_tokens=result.completion_tokens,
                    model_calls=result.model_calls,
                    failure=result.failure,
                    notes=list(notes),
                )
                arms.append(measured)
                if on_run is not None:
                    on_run(measured)
    return template, arms
