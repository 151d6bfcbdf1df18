"""The variants of seed 004 §4.4 and the context baselines, and how each builds an agent.

========== ============================== =======================================
variant    context                        actions
========== ============================== =======================================
history    full history                   raw tools, no skill library
state      state view                     raw tools
skills     full history                   the family's verified skill library
skillstate state view                     the family's verified skill library
window     last N messages of the history raw tools
summary    model-written summary every K  raw tools
           decisions + the messages since
hybrid     last N messages + state view   raw tools
========== ============================== =======================================

Same model, tasks, tools and seeds; only these two axes differ (the baselines are
in :mod:`skillstate.eval.baselines`; N and K are set by :func:`parse_variants`). *Raw tools* means
each tool is offered as it is: a thin ``tool_<name>`` action with the tool's own
parameters that calls it and records its result (in ``facts[<name>]``, the full
output as evidence), plus ``remember(key, value)`` for the model's own notes.
These wrappers check only that the call went through and its result was
recorded: domain checks are exactly what the raw-tools variants do without.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from skillstate.engine.agent import Agent
from skillstate.engine.policy import HistoryPolicy, ModelPolicy, Policy, StatePolicy, WindowPolicy
from skillstate.errors import UsageError
from skillstate.eval.baselines import HybridPolicy, SummaryPolicy
from skillstate.eval.tasks import Environment, TaskSpec
from skillstate.llm.base import Provider
from skillstate.skills.registry import SkillRegistry
from skillstate.skills.skill import Outcome, Skill, SkillContext, Verdict
from skillstate.state.machine import StateMachine
from skillstate.state.model import AgentState
from skillstate.state.view import VALUE_CHARS

__all__ = [
    "BASELINES",
    "DEFAULT_SUMMARY_EVERY",
    "DEFAULT_WINDOW",
    "MAIN_VARIANTS",
    "VARIANTS",
    "Variant",
    "build_agent",
    "parse_variants",
    "tool_skills",
]

DEFAULT_WINDOW = 8
"""Raw messages the ``window`` and ``hybrid`` baselines keep."""
DEFAULT_SUMMARY_EVERY = 10
"""Decisions between two summaries of the ``summary`` baseline."""

RESULT_CHARS = 4000
"""How much of a raw tool result goes into the state (the rest stays in the artifact)."""


Context = Literal["state", "history", "window", "summary", "hybrid"]


@dataclass(frozen=True)
class Variant:
    name: str
    context: Context
    actions: Literal["tools", "skills"]
    window: int = DEFAULT_WINDOW
    """Raw messages kept by the ``window`` and ``hybrid`` contexts."""
    every: int = DEFAULT_SUMMARY_EVERY
    """Decisions between two summaries of the ``summary`` context."""
    bind: bool = True
    """Skill params declared bound to the state are filled by the runtime
    (:mod:`skillstate.skills.binding`); ``False`` leaves them to the model (``--no-bind``)."""

    def policy(self, provider: Provider, *, max_repairs: int = 2) -> ModelPolicy:
        if self.context == "state":
            return StatePolicy(provider, max_repairs=max_repairs)
        if self.context == "window":
            return WindowPolicy(provider, self.window, max_repairs=max_repairs)
        if self.context == "hybrid":
            return HybridPolicy(provider, self.window, max_repairs=max_repairs)
        if self.context == "summary":
            return SummaryPolicy(provider, self.every, max_repairs=max_repairs)
        return HistoryPolicy(provider, max_repairs=max_repairs)


VARIANTS: dict[str, Variant] = {
    "history": Variant("history", "history", "tools"),
    "state": Variant("state", "state", "tools"),
    "skills": Variant("skills", "history", "skills"),
    "skillstate": Variant("skillstate", "state", "skills"),
    "window": Variant("window", "window", "tools"),
    "summary": Variant("summary", "summary", "tools"),
    "hybrid": Variant("hybrid", "hybrid", "tools"),
}


MAIN_VARIANTS: tuple[str, ...] = ("history", "state", "skills", "skillstate")
"""The four variants of the experiment (the default of ``--variants``)."""
BASELINES: tuple[str, ...] = ("window", "summary", "hybrid")
"""The context baselines (:mod:`skillstate.eval.baselines`), run when asked for."""


def parse_variants(
    text: str,
    *,
    window: int = DEFAULT_WINDOW,
    every: int = DEFAULT_SUMMARY_EVERY,
    bind: bool = True,
) -> list[Variant]:
    """The variants named in ``text`` (comma-separated), the baselines set to N and K,
    params bound from the state unless ``bind`` is false."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown or not names:
        raise UsageError(
            f"unknown variant(s) {', '.join(unknown) or '(none)'}; choose from: "
            + ", ".join(VARIANTS)
        )
    if window < 1 or every < 1:
        raise UsageError("--window and --summary-every must be >= 1")
    return [replace(VARIANTS[n], window=window, every=every, bind=bind) for n in names]


# The raw-tools agents all use this machine: work, then finish.
TOOLS_MACHINE = StateMachine(
    {"init": ["working", "done"], "working": ["working", "done"], "done": []}, initial="init"
)


class Remember(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key: str = Field(max_length=64, description="A short name for the note.")
    value: Any = None


def tool_skills(tools: Mapping[str, Callable[..., Any]]) -> SkillRegistry:
    """Every tool as a thin ``tool_<name>`` skill, plus ``remember``."""
    registry = SkillRegistry()
    for name, fn in tools.items():
        registry.register(_wrap(name, fn))

    @registry.skill(outputs=["facts"], step="working")
    def remember(state: AgentState, params: Remember, ctx: SkillContext) -> Outcome:
        """Write a note into the state's facts."""
        return Outcome(
            writes={f"facts.{params.key}": params.value},
            summary=f"noted {params.key}",
            value=params.value,
        )

    @remember.verifier
    def _noted(state: AgentState, outcome: Outcome) -> Verdict:
        key = next(iter(outcome.writes)).split(".", 1)[1]
        if state.facts.get(key) != outcome.value:
            return Verdict.failed(f"fact {key!r} was not recorded")
        return Verdict.passed()

    return registry


def _wrap(name: str, fn: Callable[..., Any]) -> Skill[Any, Any]:
    params = _params_model(name, fn)

    def run(state: AgentState, args: BaseModel, ctx: SkillContext) -> Outcome:
        result = ctx.call(name, **args.model_dump())
        text = result if isinstance(result, str) else json.dumps(result, default=str)
        shown = text if len(text) <= RESULT_CHARS else text[:RESULT_CHARS] + "…"
        return Outcome(
            writes={f"facts.{name}": shown},
            summary=f"{name} returned {len(text)} chars",
            evidence=[ctx.evidence(f"{name}({_short_args(args)})")],
            value=shown,
        )

    def verify(state: AgentState, outcome: Outcome) -> Verdict:
        # No domain check here on purpose (see the module docstring): only that the
        # call returned and its result reached the state.
        if state.facts.get(name) != outcome.value:
            return Verdict.failed(f"the result of {name} was not recorded")
        return Verdict.passed()

    description = (inspect.getdoc(fn) or name).splitlines()[0]
    return Skill(
        run,
        name=f"tool_{name}",
        description=f"call the {name} tool: {description}",
        params=params,
        outputs=["facts"],
        tools=[name],
        step="working",
        verify=verify,
    )


def _params_model(name: str, fn: Callable[..., Any]) -> type[BaseModel]:
    fields: dict[str, Any] = {}
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        annotation = param.annotation if param.annotation is not param.empty else Any
        default = param.default if param.default is not param.empty else ...
        fields[param.name] = (annotation, default)
    model: type[BaseModel] = create_model(
        f"{name.title().replace('_', '')}Args", __config__=ConfigDict(extra="forbid"), **fields
    )
    return model


def _short_args(args: BaseModel) -> str:
    text = ", ".join(f"{k}={v!r}" for k, v in args.model_dump().items())
    return text if len(text) <= 80 else text[:79] + "…"


def build_agent(
    spec: TaskSpec, env: Environment, variant: Variant, policy: Policy[Any]
) -> Agent[Any]:
    """The agent that runs ``spec`` in ``env`` under ``variant``."""
    value_chars = VALUE_CHARS
    if variant.actions == "skills":
        skills, machine = env.skills, env.machine
    else:
        offered = env.offered_tools
        raw = {k: fn for k, fn in env.tools.items() if offered is None or k in offered}
        skills, machine = tool_skills(raw), TOOLS_MACHINE
        # With raw tools the state's facts hold each tool's latest output: the view
        # must show it whole (up to RESULT_CHARS) or the model could not read it.
        value_chars = RESULT_CHARS + 1
    return Agent(
        name=f"{spec.family}-{variant.name}",
        description=spec.goal,
        state_type=env.state_type,
        machine=machine,
        skills=skills,
        policy=policy,
        tools=dict(env.tools),
        goal=spec.goal,
        constraints=spec.constraints,
        can_ask=False,  # nobody answers during an evaluation
        view_value_chars=value_chars,
        # The variants compare contexts as they are (a raw-tools state holds whole tool
        # outputs): a view budget would be another axis, so it is off, not "auto".
        view_budget=None,
        bind_params=variant.bind,
    )
