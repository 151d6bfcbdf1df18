"""Task families: one module per kind of task, each a :class:`~skillstate.eval.tasks.Family`.

A :class:`~skillstate.eval.tasks.TaskSpec` names its family by string (specs are
plain data), so the harness looks the builder up here: a built-in name, or
``module:attr`` for a family of the user's own. Built-ins are imported on first
use, so loading one suite does not import every family.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from pathlib import Path

from skillstate.engine.actions import CallSkill
from skillstate.errors import UsageError
from skillstate.eval.tasks import Environment, Family, TaskSpec
from skillstate.skills.registry import SkillRegistry

__all__ = ["BUILTIN", "build_environment", "get_family"]

BUILTIN: dict[str, str] = {
    "records": "skillstate.eval.families.records:RecordsFamily",
    "ticket": "skillstate.eval.families.ticket:TicketFamily",
    "orders": "skillstate.eval.families.orders:OrdersFamily",
    "fix_syntax": "skillstate.eval.families.fix_syntax:FixSyntaxFamily",
    "sales": "skillstate.eval.families.sales:SalesFamily",
    "channels": "skillstate.eval.families.channels:ChannelsFamily",
}
"""Built-in family name -> ``module:class``."""

_loaded: dict[str, Family] = {}


def get_family(name: str) -> Family:
    """The family called ``name`` (built-in or ``module:attr``); a :class:`UsageError` otherwise."""
    if name in _loaded:
        return _loaded[name]
    ref = BUILTIN.get(name, name)
    module_name, _, attr = ref.partition(":")
    if not attr:
        raise UsageError(
            f"unknown task family {name!r}; built-in: {', '.join(BUILTIN)} (or module:attr)"
        )
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"cannot load task family {name!r} from {ref}: {exc}") from None
    family: Family = target() if isinstance(target, type) else target
    _loaded[name] = family
    return family


def build_environment(spec: TaskSpec, root: Path, *, fresh: bool = True) -> Environment:
    """Build ``spec``'s environment in ``root``, limited to the tools and skills it lists
    (``fresh=False``: reopen the one built there before, see :class:`Family`).

    A task that names a tool or skill its family lacks, or whose reference plan
    needs one it does not allow, is refused: the suite file is wrong, and running
    it would only measure that.
    """
    family = get_family(spec.family)
    if fresh:
        env = family.build(spec, root)
    elif "fresh" in inspect.signature(family.build).parameters:
        env = family.build(spec, root, fresh=False)
    else:
        raise UsageError(
            f"task family {spec.family!r} cannot reopen an environment (its build takes "
            "no fresh=): killed recovery runs need it"
        )
    offered, skills = env.offered_tools, env.skills
    if spec.tools:
        unknown = set(spec.tools) - set(env.tools)
        if unknown:
            raise UsageError(f"task {spec.id!r}: unknown tool(s) {', '.join(sorted(unknown))}")
        offered = frozenset(spec.tools)
        needed = {a.skill.removeprefix("tool_") for a in env.plan_tools if isinstance(a, CallSkill)}
        missing = needed - offered - {"remember"}
        if missing:
            raise UsageError(
                f"task {spec.id!r}: its plan needs tool(s) {', '.join(sorted(missing))}"
            )
    if spec.skills:
        names = {s.name for s in skills}
        unknown = set(spec.skills) - names
        if unknown:
            raise UsageError(f"task {spec.id!r}: unknown skill(s) {', '.join(sorted(unknown))}")
        needed = {a.skill for a in env.plan_skills if isinstance(a, CallSkill)}
        missing = needed - set(spec.skills)
        if missing:
            raise UsageError(
                f"task {spec.id!r}: its plan needs skill(s) {', '.join(sorted(missing))}"
            )
        skills = SkillRegistry([s for s in skills if s.name in spec.skills])
    return dataclasses.replace(env, offered_tools=offered, skills=skills)
