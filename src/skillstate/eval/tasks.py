"""Tasks as data, and the family interface that turns one into a runnable agent.

A :class:`TaskSpec` is plain data (it round-trips through JSON): a goal, constraints
stated once at the start, a length group, a step budget, the parameters its family
needs to build an environment, and what to check at the end. A *family* (one
module per kind of task) builds, for a spec and a fresh temp directory:

* the environment (files, a CSV, a SQLite database),
* the tools (functions over that environment),
* the state class and the skill library (for the ``skills`` variants),
* the reference plans the oracle follows, one per action mode,
* the final checks (on the environment and the final state, never on prose) and
  the facts expected after each plan step (to attribute a failure to a step).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from skillstate.engine.actions import Action
from skillstate.skills.registry import SkillRegistry
from skillstate.state.machine import StateMachine
from skillstate.state.model import AgentState

__all__ = [
    "GROUPS",
    "CheckResult",
    "ChildTask",
    "Environment",
    "Family",
    "Group",
    "TaskSpec",
    "group_of",
]

Group = Literal["short", "medium", "long"]
GROUPS: tuple[Group, ...] = ("short", "medium", "long")


def group_of(steps: int) -> Group:
    """The length group of a task whose reference plan takes ``steps`` decisions."""
    if steps <= 8:
        return "short"
    if steps <= 20:
        return "medium"
    return "long"


class TaskSpec(BaseModel):
    """One task of a suite, as data."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    suite: str
    family: str
    """Which family module builds it (``records``, ...)."""
    goal: str
    constraints: tuple[str, ...] = ()
    """Stated once, at the start; only the state view keeps showing them."""
    max_steps: int = Field(ge=1)
    group: Group
    params: dict[str, Any] = Field(default_factory=dict)
    """Family-specific parameters (seeded values, traps, sizes)."""
    tools: tuple[str, ...] = ()
    """The tools the task may use (the raw-tools variants' actions); empty: all the family's."""
    skills: tuple[str, ...] = ()
    """The skills the task may use (the skills variants' library); empty: all the family's."""


@dataclass(frozen=True)
class CheckResult:
    name: str
    ok: bool
    detail: str = ""


@dataclass(frozen=True)
class ChildTask:
    """One kind of child task of a fan-out family, as data the variants build agents from.

    The child runs the variant's context (state view or history) over these skills; the
    oracle follows :attr:`plan` in each child task.
    """

    state_type: type[AgentState]
    machine: StateMachine
    skills: SkillRegistry
    tools: Mapping[str, Callable[..., Any]]
    plan: Sequence[Action]
    """The oracle's actions in each child task (the same for every child of the kind)."""
    outputs: type[BaseModel] | None = None
    """What the join validates each child's outputs against."""
    goal: str = ""
    constraints: tuple[str, ...] = ()
    steps: int = 0
    """Decisions all the children of this kind take under the reference plan."""


@dataclass
class Environment:
    """Everything a family builds for one run of one task."""

    root: Path
    """The task's own temp directory (files, databases)."""
    state_type: type[AgentState]
    machine: StateMachine
    tools: Mapping[str, Callable[..., Any]]
    skills: SkillRegistry
    """The verified skill library (used by the ``skills`` and ``skillstate`` variants)."""
    plan_skills: Sequence[Action]
    """The oracle's actions when the skill library is available."""
    plan_tools: Sequence[Action]
    """The oracle's actions with raw tools only (``call_tool``-style skills)."""
    check: Callable[[AgentState], list[CheckResult]]
    """Final checks on the environment and the final state."""
    expected_facts: Sequence[Mapping[str, Any]] = field(default_factory=list)
    """Per step of ``plan_skills``: facts that must hold after it (for attribution)."""
    initial: Mapping[str, Any] = field(default_factory=dict)
    """Extra fields of the task's first state."""
    offered_tools: frozenset[str] | None = None
    """The tools the raw-tools variants are offered (``None``: all of :attr:`tools`).
    Skills keep every tool they declare: a tool list limits what the model may call
    directly, not how a skill is implemented."""
    effect_tools: frozenset[str] = frozenset()
    """Tools that change the environment (write a file, update a row). Attribution in
    the raw-tools variants compares their calls, in order, with ``plan_tools``'s: the
    first decision whose effect differs from the reference one is the first bad step."""
    children: Mapping[str, ChildTask] = field(default_factory=dict)
    """Kinds of child task the skills variants' parent may spawn (fan-out), by name:
    :mod:`skillstate.eval.children` builds each kind's agent for the run's variant."""

    @property
    def child_steps(self) -> int:
        """Decisions the children of ``plan_skills`` take in all (plan length accounting)."""
        return sum(kind.steps for kind in self.children.values())


class Family(Protocol):
    """A kind of task: builds the environment of a spec in a fresh directory.

    ``fresh=False`` reopens an environment an earlier process built in ``root``
    (same tools, plans and checks; no file rewritten): what a run resumed after a
    SIGKILL needs. A family whose ``build`` takes no ``fresh`` still runs every
    other mode; killed recovery runs refuse it.
    """

    name: str

    def build(self, spec: TaskSpec, root: Path, *, fresh: bool = True) -> Environment: ...
