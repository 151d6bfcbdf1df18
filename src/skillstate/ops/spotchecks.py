"""Human spot-checks of verified steps (seed 004 §6.3): which steps are sampled.

A :class:`SpotChecks` rule marks a fraction ``rate`` of the verified steps of the
skills it names (all skills when it names none) for a person to review. It is declared
on the agent (``Agent(spot_checks=SpotChecks(rate=0.05))``) or, for every agent, in the
project's configuration::

    [tool.skillstate.spot_checks]
    rate = 0.05
    skills = ["refund"]   # optional: only these skills' steps
    seed = 7              # optional: a different, equally fair, sample

**A mark is computed when it is read, never written.** Step ``S`` of task ``T`` is
marked when ``sha256(seed:T:S)``, read as a number in [0, 1), is below ``rate``: a pure
function of the rule and the step's identity. So the runtime's commit path does nothing
new (no extra write, no extra field, no slower step: the marking costs the step
nothing), a resumed or replayed task has the same step ids and therefore the same
marks, and raising the rate only adds marks (a step below 0.05 is below 0.10 too). A
mark written into the step's event would cost every step a field for the sake of one in
twenty, and the queue would have to read the events anyway to show the step. The price
of reading it: a change of the rule re-marks past steps, which is what an operator who
changes it wants; verdicts already given stay recorded (:mod:`skillstate.ops.review`).

A verified step is an event with a ``step_id``, a ``skill`` and a passing ``verdict``;
when a rollback ran a step id again, its latest event is the one reviewed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skillstate.errors import TaskNotFound, UsageError
from skillstate.events import Event
from skillstate.store.base import Store, is_reserved

__all__ = [
    "CONFIG_KEY",
    "SampledStep",
    "SpotChecks",
    "config_rule",
    "is_marked",
    "rule_resolver",
    "sample_point",
    "sampled_steps",
    "scope_of",
    "spot_check_problems",
]

CONFIG_KEY = "spot_checks"
"""The table of ``[tool.skillstate]`` (or ``.skillstate.toml``) a project's rule is in."""
_SCALE = float(1 << 64)
DEFAULT_SCOPE = "default"


@dataclass(frozen=True)
class SpotChecks:
    """Mark ``rate`` of the verified steps of ``skills`` (none named: every skill) for review."""

    rate: float
    """The fraction of verified steps marked, 0 to 1."""
    skills: tuple[str, ...] = ()
    """Only these skills' steps (empty: every skill's)."""
    seed: int = 0
    """Chooses which steps: another seed draws another sample at the same rate."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "skills", tuple(self.skills))
        problems = spot_check_problems(self)
        if problems:
            raise UsageError("invalid spot checks: " + "; ".join(problems))

    def marks(self, task_id: str, step_id: str, skill: str | None) -> bool:
        """Whether this rule marks step ``step_id`` (of ``skill``) of ``task_id``."""
        if self.skills and skill not in self.skills:
            return False
        return sample_point(self.seed, task_id, step_id) < self.rate

    def describe(self) -> str:
        """One line: ``5% of refund, close (seed 7)``."""
        which = ", ".join(self.skills) if self.skills else "every skill"
        return f"{self.rate:.4g} of {which}'s verified steps (seed {self.seed})"


def spot_check_problems(rule: object) -> list[str]:
    """What is wrong with a rule (an agent's ``spot_checks``); empty when it is sound."""
    if rule is None:
        return []
    if not isinstance(rule, SpotChecks):
        return [f"spot_checks must be a SpotChecks rule, not {type(rule).__name__}"]
    problems = []
    rate = rule.rate
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= 1:
        problems.append(f"spot_checks rate must be a number from 0 to 1, not {rate!r}")
    if not all(isinstance(s, str) and s for s in rule.skills):
        problems.append("spot_checks skills must be skill names")
    if isinstance(rule.seed, bool) or not isinstance(rule.seed, int):
        problems.append(f"spot_checks seed must be an integer, not {rule.seed!r}")
    return problems


def sample_point(seed: int, task_id: str, step_id: str) -> float:
    """Where step ``step_id`` of ``task_id`` falls in [0, 1) under ``seed``: a hash, so
    every process, resume and replay computes the same point."""
    digest = hashlib.sha256(f"{seed}:{task_id}:{step_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / _SCALE


def is_marked(rule: SpotChecks | None, event: Event) -> bool:
    """Whether ``event`` is a verified step ``rule`` marks."""
    if rule is None or not _verified(event):
        return False
    return rule.marks(event.task_id, str(event.step_id), event.skill)


def _verified(event: Event) -> bool:
    return bool(event.step_id and event.skill and event.verdict is not None and event.verdict.ok)


def config_rule(cwd: str | Path | None = None) -> SpotChecks | None:
    """The project's ``[tool.skillstate.spot_checks]`` rule, if it declares one."""
    import os

    from skillstate.config import _project_file

    found = _project_file(Path(cwd or os.getcwd()))
    if found is None or CONFIG_KEY not in found[1]:
        return None
    path, table = found
    raw = table[CONFIG_KEY]
    where = f"{CONFIG_KEY} in {path}"
    if not isinstance(raw, dict):
        raise UsageError(f"{where} must be a table (rate, skills, seed)")
    unknown = sorted(set(raw) - {"rate", "skills", "seed"})
    if unknown:
        raise UsageError(
            f"unknown setting(s) {', '.join(unknown)} in {where} (known: rate, skills, seed)"
        )
    skills = raw.get("skills", ())
    if isinstance(skills, str) or not isinstance(skills, list | tuple):
        raise UsageError(f"skills in {where} must be a list of skill names")
    try:
        return SpotChecks(rate=raw.get("rate", 0), skills=tuple(skills), seed=raw.get("seed", 0))
    except UsageError as exc:
        raise UsageError(f"{where}: {exc}") from None


@dataclass(frozen=True)
class SampledStep:
    """One verified step a rule marked, as its event recorded it."""

    task_id: str
    step_id: str
    skill: str
    version: int
    """The version the step committed."""
    scope: str
    """The review record its verdicts go to (:func:`scope_of`)."""
    event: Event = field(repr=False)

    @property
    def params(self) -> dict[str, Any]:
        found = self.event.action.get("params")
        return found if isinstance(found, dict) else {}

    @property
    def evidence_refs(self) -> list[str]:
        """Artifact refs the step produced: its tool calls' raw results and the evidence
        its patch added."""
        refs = [c.ref for c in self.event.tool_calls if c.ref]
        for op in self.event.patch:
            value = op.get("value")
            if str(op.get("path", "")).startswith("/evidence") and isinstance(value, dict):
                ref = value.get("ref")
                if isinstance(ref, str) and ref:
                    refs.append(ref)
        return list(dict.fromkeys(refs))


def scope_of(card: dict[str, Any]) -> str:
    """The review scope of a task (:mod:`skillstate.ops.review`): the agent reference its
    card names, ``default`` for a card without one."""
    ref = card.get("agent")
    return ref if isinstance(ref, str) and ref and "\x00" not in ref else DEFAULT_SCOPE


RuleFor = Callable[[str, dict[str, Any]], "SpotChecks | None"]
"""The rule of a task, given its id and its card (the agent's, else the project's)."""


def rule_resolver(explicit: Iterable[str] = (), *, fallback: SpotChecks | None = None) -> RuleFor:
    """Each task's rule: its agent's ``spot_checks`` when the agent its card names may be
    imported (one of ``explicit``, ``--agent``, or on the configured allow-list, checked
    before any import as ``resume`` checks it), else ``fallback`` (the project's rule).
    Each agent is imported once."""
    from skillstate.config import allowed_agents, load_config

    allowed = allowed_agents(load_config()) | set(explicit)
    rules: dict[str, SpotChecks | None] = {}

    def rule_for(task_id: str, card: dict[str, Any]) -> SpotChecks | None:
        ref = card.get("agent")
        if not isinstance(ref, str) or not ref:
            return fallback
        if ref not in rules:
            rules[ref] = _agent_rule(ref, allowed)
        found = rules[ref]
        return found if found is not None else fallback

    return rule_for


def _agent_rule(ref: str, allowed: frozenset[str]) -> SpotChecks | None:
    from skillstate.engine.agent import load_agent
    from skillstate.errors import SkillstateError
    from skillstate.fanout.spec import CHILD_REF

    if ref.partition(CHILD_REF)[0] not in allowed:
        return None
    try:
        rule = load_agent(ref, search_cwd=True).spot_checks
    except SkillstateError:  # not importable here: the project's rule applies
        return None
    return rule


def sampled_steps(
    store: Store, rule_for: RuleFor, *, tasks: Iterable[str] | None = None
) -> list[SampledStep]:
    """Every marked verified step of ``tasks`` (default: every task in the store), in task
    then step order. Reads each task's card and events once; writes nothing."""
    found: list[SampledStep] = []
    for task_id in sorted(tasks if tasks is not None else store.tasks()):
        if is_reserved(task_id):
            continue
        try:
            card = store.load(task_id, verify=False).state
        except TaskNotFound:  # deleted between the listing and the read
            continue
        rule = rule_for(task_id, card)
        if rule is None or rule.rate == 0:
            continue
        found += _marked_steps(task_id, scope_of(card), rule, store.events(task_id))
    return found


def _marked_steps(
    task_id: str, scope: str, rule: SpotChecks, events: Sequence[Event]
) -> list[SampledStep]:
    latest: dict[str, Event] = {}
    for event in events:
        if _verified(event):
            latest[str(event.step_id)] = event  # a step run again after a rollback: its last
    return [
        SampledStep(task_id, step_id, str(e.skill), e.version, scope, e)
        for step_id, e in sorted(latest.items(), key=lambda item: item[1].version)
        if rule.marks(task_id, step_id, e.skill)
    ]
