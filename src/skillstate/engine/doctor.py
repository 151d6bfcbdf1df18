"""``skillstate doctor``: is every kept checkpoint of a task loadable and consistent?

Three independent sources must agree: the snapshots, the deltas (each event's
patch) and the head, which every backend stores whole. Walking the kept
versions in order, each one must rebuild from its chain, validate against the
agent's state class (after migrations), and equal the previous kept version
with its own patch applied, which is how a broken delta, a hand-edited
snapshot or a head out of step with its chain shows up.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from skillstate.engine.agent import Agent
from skillstate.errors import SchemaTooNew, SecretKeyMissing, StateCorrupted, StateError
from skillstate.state.diff import apply_patch
from skillstate.store.base import Store

__all__ = ["DoctorReport", "Finding", "diagnose"]


@dataclass(frozen=True)
class Finding:
    """One problem, at one version (``None``: the task as a whole)."""

    version: int | None
    message: str


@dataclass
class DoctorReport:
    task_id: str
    head: int | None = None
    checked: int = 0
    """Kept versions that were rebuilt and compared."""
    snapshots: int = 0
    schema_checked: bool = False
    """Whether states were validated against the agent's class (needs the agent)."""
    findings: list[Finding] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return not self.findings


def diagnose(store: Store, task_id: str, agent: Agent | None) -> DoctorReport:
    """Check every kept version of ``task_id``; never writes."""
    report = DoctorReport(task_id, schema_checked=agent is not None)
    try:
        report.head = store.load(task_id).version
    except StateCorrupted as exc:
        report.findings.append(Finding(None, f"head: {exc}"))
    infos = store.checkpoints(task_id)
    try:
        patches = {e.version: e.patch for e in store.events(task_id)}
    except StateCorrupted as exc:
        report.findings.append(Finding(None, f"events: {exc}"))
        patches = {}
    if report.head is not None and (not infos or infos[-1].version != report.head):
        report.findings.append(Finding(report.head, "the head has no checkpoint row"))
    previous: tuple[int, dict[str, Any]] | None = None
    for info in infos:
        report.checked += 1
        report.snapshots += info.snapshot
        try:
            document = store.checkpoint(task_id, info.version).state
        except StateCorrupted as exc:
            report.findings.append(Finding(info.version, str(exc)))
            previous = None
            continue
        patch = patches.get(info.version)
        if previous is not None and previous[0] == info.version - 1 and patch:
            try:
                replayed = apply_patch(previous[1], patch)
            except StateError as exc:
                report.findings.append(Finding(info.version, f"its delta does not apply: {exc}"))
            else:
                if replayed != document:
                    where = "the head" if info.version == report.head else "the stored version"
                    report.findings.append(
                        Finding(info.version, f"replaying its delta does not give {where}")
                    )
        if agent is not None:
            try:
                agent.parse_state(document)
            except (StateCorrupted, SchemaTooNew, SecretKeyMissing) as exc:
                report.findings.append(Finding(info.version, str(exc)))
        previous = (info.version, document)
    if agent is not None and report.head is not None:
        report.findings += _card_findings(store, task_id, agent, report.head)
    return report


def _card_findings(store: Store, task_id: str, agent: Agent, head: int) -> list[Finding]:
    """What is wrong with the head *as a card* of this agent (a hand edit may have done it)."""
    from skillstate.engine.edits import card_problems

    try:
        state = agent.parse_state(store.load(task_id).state, task_id=task_id)
    except (StateCorrupted, SchemaTooNew, SecretKeyMissing):
        return []  # already reported above
    found = [Finding(head, problem) for problem in card_problems(agent, state)]
    broken = agent.broken_invariant(state)
    if broken is not None:
        found.append(Finding(head, f"invariant {broken}"))
    return found
