"""The checks an :class:`~skillstate.engine.agent.Agent` passes when it is built.

Split from :mod:`skillstate.engine.agent`: each returns one line per problem, and
the agent refuses to exist (:class:`~skillstate.errors.UsageError`) while any is
left, so a broken definition fails where it is written, not mid-run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from skillstate.control.signals import signal_problems
from skillstate.fanout import spec as fanout
from skillstate.memory.facts import template_problems
from skillstate.ops.spotchecks import spot_check_problems
from skillstate.shared.declare import shared_problems
from skillstate.skills.binding import binding_problems
from skillstate.skills.vacuous import vacuous_verify
from skillstate.state.migrate import chain_problems
from skillstate.state.secrets import sensitive_fields

if TYPE_CHECKING:
    from skillstate.engine.agent import Agent

__all__ = ["definition_problems", "library_problems"]


def definition_problems(agent: Agent[Any]) -> list[str]:
    """What is wrong with an agent's skills, tools, card and declarations (checked
    when it is built), before its patches, library and message strategy."""
    problems: list[str] = []
    for skill in agent.skills:
        if not skill.has_verify:
            problems.append(f"skill {skill.name!r} has no verify")
        problems += _vacuous(skill.name, skill.verify_function)
        if skill.effects and not skill.has_probe:
            # After a crash mid-effect only the skill can tell whether it happened.
            problems.append(f"skill {skill.name!r} declares effects but no probe")
        missing = set(skill.tools) - set(agent.tools)
        if missing:
            problems.append(
                f"skill {skill.name!r} declares unknown tools: {', '.join(sorted(missing))}"
            )
        if skill.step is not None and skill.step not in agent.machine.steps:
            problems.append(f"skill {skill.name!r} enters undeclared step {skill.step!r}")
        for output in skill.outputs:
            top = output.split(".")[0]
            if top not in agent.state_type.model_fields:
                problems.append(
                    f"skill {skill.name!r} declares output {output!r}, "
                    f"but {agent.state_type.__name__} has no field {top!r}"
                )
        problems += binding_problems(skill.name, skill.params, agent.state_type)
    hidden = sensitive_fields(agent.state_type)
    for name in agent.state_type.custom_fields():
        if name not in hidden and agent.redaction.masks_name(name):
            # Masked in the stored card, the value would be lost to the next step.
            problems.append(
                f"field {name!r} looks sensitive to the redaction policy: declare it "
                "Sensitive[...] (sealed, usable) or add it to the policy's exempt_names"
            )
    problems += _budget_problems(agent.view_budget)
    problems += _memory_problems(agent)
    problems += shared_problems(agent)
    problems += fanout.check_children(agent)
    problems += spot_check_problems(agent.spot_checks)
    problems += chain_problems(agent.state_type)
    problems += signal_problems(agent.signals, agent.machine.steps)
    return problems


def _vacuous(name: str, verify: Callable[..., Any] | None) -> list[str]:
    """Seed 004 §5.3: a verify that cannot fail is no check at all
    (:mod:`skillstate.skills.vacuous`)."""
    always = vacuous_verify(verify)
    if always is None:
        return []
    return [
        f"skill {name!r} has a verify that cannot fail (it returns {always} whatever the "
        "outcome): check the outcome or the new state"
    ]


def _memory_problems(agent: Agent[Any]) -> list[str]:
    """Memory scopes the agent reads and its skills write, checked against its card."""
    fields = agent.state_type.model_fields
    problems = template_problems("memory", agent.memory, fields)
    for skill in agent.skills:
        problems += template_problems(f"skill {skill.name!r}", skill.remembers, fields)
    count = agent.memory_facts
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        problems.append(f"memory_facts must be an integer >= 1, not {count!r}")
    return problems


def _budget_problems(budget: object) -> list[str]:
    if budget == "auto" or budget is None:
        return []
    if isinstance(budget, bool) or not isinstance(budget, int):
        return [f"view_budget must be a number of tokens, 'auto' or None, not {budget!r}"]
    return [] if budget >= 1 else [f"view_budget must be >= 1 token, not {budget}"]


def library_problems(retriever: object, top_k: int) -> list[str]:
    from skillstate.library.retrieval import Retriever

    problems = []
    if not isinstance(retriever, Retriever):
        problems.append(f"retriever {retriever!r} has no index() and scores() (a Retriever)")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        problems.append(f"top_k must be an integer >= 1, not {top_k!r}")
    return problems
