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

__all__ = ["DoctorReport", "Finding", "audit_gaps", "diagnose"]


@dataclass(frozen=True)
class Finding:
    """One problem, at one version (``None``: the task as a whole)."""

    version: int | None
    message: str
    sealed: bool = False
    """Not damage: the version holds sealed values and no key to check them was set."""


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
        """No damage found (versions that need a key to be checked are not damage)."""
        return not self.damage

    @property
    def damage(self) -> list[Finding]:
        return [f for f in self.findings if not f.sealed]

    @property
    def sealed(self) -> list[Finding]:
        return [f for f in self.findings if f.sealed]


def diagnose(store: Store, task_id: str, agent: Agent[Any] | None) -> DoctorReport:
    """Check every kept version of ``task_id`` and its audit log; never writes."""
    report = DoctorReport(task_id, schema_checked=agent is not None)
    try:
        report.head = store.load(task_id).version
    except StateCorrupted as exc:
        report.findings.append(Finding(None, f"head: {exc}"))
    infos = store.checkpoints(task_id)
    try:
        events = store.events(task_id)
    except StateCorrupted as exc:
        report.findings.append(Finding(None, f"events: {exc}"))
        events = []
    else:
        report.findings += _audit_findings([e.version for e in events], report.head)
    patches = {e.version: e.patch for e in events}
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
        if previous is not None and previous[0] == info.version - 1:
            report.findings += _replay_findings(
                previous[1], patches.get(info.version), document, info.version, report.head
            )
        if agent is not None:
            report.findings += _schema_findings(agent, document, info.version)
        previous = (info.version, document)
    if agent is not None and report.head is not None:
        report.findings += _card_findings(store, task_id, agent, report.head)
    try:
        store.lease(task_id)
    except StateCorrupted as exc:
        report.findings.append(
            Finding(None, f"lease: {exc.reason} (skillstate unlock {task_id} --force clears it)")
        )
    return report


def _replay_findings(
    before: dict[str, Any],
    patch: list[dict[str, Any]] | None,
    document: dict[str, Any],
    version: int,
    head: int | None,
) -> list[Finding]:
    """Does the version's event patch take the version before it to this one?"""
    if not patch:
        return []
    try:
        replayed = apply_patch(before, patch)
    except StateError as exc:
        return [Finding(version, f"its delta does not apply: {exc}")]
    if replayed != document:
        where = "the head" if version == head else "the stored version"
        return [Finding(version, f"replaying its delta does not give {where}")]
    return []


def _schema_findings(agent: Agent[Any], document: dict[str, Any], version: int) -> list[Finding]:
    try:
        agent.parse_state(document)
    except SecretKeyMissing:
        return [Finding(version, "sealed, key needed to check it", sealed=True)]
    except (StateCorrupted, SchemaTooNew) as exc:
        return [Finding(version, str(exc))]
    return []


def audit_gaps(versions: list[int], head: int | None) -> list[str]:
    """What is wrong with a task's event versions: each of 1..head exactly once, in order."""
    problems: list[str] = []
    top = head if head is not None else (max(versions) if versions else 0)
    present = set(versions)
    missing = [v for v in range(1, top + 1) if v not in present]
    if missing:
        shown = ", ".join(map(str, missing[:10])) + (" ..." if len(missing) > 10 else "")
        problems.append(f"the audit log has no event for version(s) {shown}")
    repeated = sorted({v for v in versions if versions.count(v) > 1})
    if repeated:
        problems.append(f"the audit log has more than one event for version(s) {repeated}")
    beyond = [v for v in versions if v > top]
    if beyond:
        problems.append(f"the audit log has events past the head: {beyond[:10]}")
    return problems


def _audit_findings(versions: list[int], head: int | None) -> list[Finding]:
    return [Finding(None, problem) for problem in audit_gaps(versions, head)]


def _card_findings(store: Store, task_id: str, agent: Agent[Any], head: int) -> list[Finding]:
    """What is wrong with the head *as a card* of this agent (a hand edit may have done it)."""
    from skillstate.engine.edits import card_problems

    try:
        state = agent.parse_state(store.load(task_id).state, task_id=task_id)
    except (StateCorrupted, SchemaTooNew, SecretKeyMissing):
        return []  # already reported above (or needs the key)
    found = [Finding(head, problem) for problem in card_problems(agent, state)]
    broken = agent.broken_invariant(state)
    if broken is not None:
        found.append(Finding(head, f"invariant {broken}"))
    return found
