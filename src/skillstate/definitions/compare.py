"""What changed between the definition a task is pinned to and the agent's, and what carries it.

Every difference is a :class:`Change`. Each is carried by something, or refused:

* **compatible** changes cannot break a running task and carry themselves: a skill
  added, a step or transition added, a step made final, another initial step, the
  state class renamed (the card is validated against the new class on every load
  all the same);
* a **migration**: a ``SCHEMA_VERSION`` raised with the state class's migrations
  covering every version in between;
* a **patch** the agent declares (:func:`~skillstate.definitions.patches.patched`): a
  skill renamed, removed or changed, a step renamed, the machine's removals.

Anything else (a skill removed or renamed without a word, a skill's version, params,
step, outputs or effects changed, a step or transition or final step removed, a
schema change without a migration) refuses the task until someone declares it or
accepts it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from skillstate.definitions.patches import Patch
from skillstate.state.migrate import migrations
from skillstate.state.model import AgentState

__all__ = ["COMPATIBLE", "MIGRATION", "Change", "ChangeKind", "Comparison", "compare"]

COMPATIBLE = "compatible"
"""What carries a change that cannot break a running task (:attr:`Change.carried_by`)."""
MIGRATION = "migration"
"""What carries a ``SCHEMA_VERSION`` raised with migrations for every version between."""

ChangeKind = Literal[
    "unknown",
    "skill_added",
    "skill_removed",
    "skill_renamed",
    "skill_changed",
    "step_added",
    "step_removed",
    "step_renamed",
    "transition_added",
    "transition_removed",
    "final_added",
    "final_removed",
    "initial",
    "state_class",
    "schema",
]
"""What a :class:`Change` is about (``unknown``: the pinned manifest cannot be read)."""

_SHOWN = 8
"""Refused changes a one-line refusal names before "and N more"."""


@dataclass(frozen=True)
class Change:
    """One difference between two manifests."""

    kind: ChangeKind
    subject: str
    """The skill, step, ``a -> b`` transition or state class it is about."""
    text: str
    """One phrase: ``skill 'fetch' version 1 -> 2``."""
    carried_by: str | None = None
    """A patch id, :data:`COMPATIBLE` or :data:`MIGRATION`; ``None``: nothing carries it."""


@dataclass(frozen=True)
class Comparison:
    """Every change from a pinned manifest to the agent's, and how each is carried."""

    changes: tuple[Change, ...]
    renamed: Mapping[str, str] = field(default_factory=dict)
    """Skill renames that apply to this task (old -> new)."""
    steps: Mapping[str, str] = field(default_factory=dict)
    """Step renames that apply to this task (old -> new)."""
    old_skills: frozenset[str] = frozenset()
    """The skills of the pinned manifest (a plan entry naming one is a skill's)."""

    @property
    def refused(self) -> tuple[Change, ...]:
        """The changes nothing carries."""
        return tuple(c for c in self.changes if c.carried_by is None)

    @property
    def patches(self) -> tuple[str, ...]:
        """The ids of the patches that carry a change, in the order first used."""
        found = (c.carried_by for c in self.changes)
        ids = [p for p in found if p is not None and p not in (COMPATIBLE, MIGRATION)]
        return tuple(dict.fromkeys(ids))

    def texts(self) -> list[str]:
        """Every change as a phrase, with what carries it (for the audit event)."""
        return [f"{c.text} [{c.carried_by or 'accepted'}]" for c in self.changes]

    def describe(self) -> str:
        """The refused changes in one line, a removal next to the additions that may be
        its new name."""
        refused = self.refused
        phrases = [c.text for c in refused[:_SHOWN]]
        removed = [c.subject for c in refused if c.kind == "skill_removed"]
        added = [c.subject for c in self.changes if c.kind == "skill_added"]
        if removed and added:
            guess = f"patched('rename-{removed[0]}', renamed={{{removed[0]!r}: {added[0]!r}}})"
            phrases += [f"skill {name!r} added" for name in added[:3]]
            phrases[-1] += f" (a rename? declare {guess})"
        if len(refused) > _SHOWN:
            phrases.append(f"and {len(refused) - _SHOWN} more")
        return ", ".join(phrases)


def compare(
    old: Mapping[str, Any] | None,
    new: Mapping[str, Any],
    patches: Sequence[Patch],
    state_type: type[AgentState],
) -> Comparison:
    """The changes from manifest ``old`` (``None``: it cannot be read) to ``new``."""
    if old is None:
        unknown = Change(
            "unknown",
            "definition",
            "the definition it was pinned to is not in this store (what changed cannot be named)",
        )
        return Comparison((unknown,))
    skills, renamed = _skills(_map(old, "skills"), _map(new, "skills"), patches)
    machine, steps = _machine(_map(old, "machine"), _map(new, "machine"), patches)
    state = _state(_map(old, "state"), _map(new, "state"), state_type)
    return Comparison(
        tuple(skills + machine + state),
        renamed=renamed,
        steps=steps,
        old_skills=frozenset(_map(old, "skills")),
    )


def _map(data: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key)
    return dict(value) if isinstance(value, Mapping) else {}


# ---------------------------------------------------------------------- skills


def _skills(
    old: dict[str, Any], new: dict[str, Any], patches: Sequence[Patch]
) -> tuple[list[Change], dict[str, str]]:
    renamed: dict[str, str] = {}
    by: dict[str, str] = {}
    for patch in patches:
        for before, after in patch.renamed.items():
            if before in old and before not in new and after in new and before not in renamed:
                renamed[before], by[before] = after, patch.id
    removed = _first(patches, lambda p: (*p.removed, *p.marks))
    declared = _first(patches, lambda p: (*p.skills, *p.marks))
    changes: list[Change] = []
    for name in sorted(old):
        if name in new:
            changes += _contract(name, name, old[name], new[name], declared)
        elif name in renamed:
            target = renamed[name]
            text = f"skill {name!r} renamed {target!r}"
            changes.append(Change("skill_renamed", name, text, by[name]))
            changes += _contract(target, name, old[name], new[target], declared)
        else:
            changes.append(
                Change("skill_removed", name, f"skill {name!r} removed", removed.get(name))
            )
    targets = set(renamed.values())
    for name in sorted(set(new) - set(old) - targets):
        changes.append(Change("skill_added", name, f"skill {name!r} added", COMPATIBLE))
    return changes, renamed


def _contract(name: str, was: str, old: Any, new: Any, declared: dict[str, str]) -> list[Change]:
    """A skill's contract changes, as one change (its differences in one phrase)."""
    if not isinstance(old, Mapping) or not isinstance(new, Mapping):
        differences = [] if old == new else ["changed"]
    else:
        differences = [
            _difference(key, old.get(key), new.get(key))
            for key in sorted(set(old) | set(new))
            if old.get(key) != new.get(key)
        ]
    if not differences:
        return []
    label = f"skill {name!r}" if name == was else f"skill {name!r} (was {was!r})"
    return [Change("skill_changed", name, f"{label} {', '.join(differences)}", declared.get(name))]


def _difference(key: str, old: Any, new: Any) -> str:
    if key == "version":
        return f"version {old} -> {new}"
    if key == "params":
        return "params changed"
    if key == "step":
        return f"step {old!r} -> {new!r}"
    if key == "effects":
        return "now has effects" if new else "no longer has effects"
    if key == "outputs" and isinstance(old, list) and isinstance(new, list):
        gone = [o for o in old if o not in new]
        more = [o for o in new if o not in old]
        parts = [f"-{o}" for o in gone] + [f"+{o}" for o in more]
        return f"outputs {' '.join(parts)}"
    return f"{key} changed"


def _first(patches: Sequence[Patch], names: Any) -> dict[str, str]:
    """Name -> the id of the first patch whose ``names(patch)`` lists it."""
    found: dict[str, str] = {}
    for patch in patches:
        for name in names(patch):
            found.setdefault(name, patch.id)
    return found


# ---------------------------------------------------------------------- machine


def _machine(
    old: dict[str, Any], new: dict[str, Any], patches: Sequence[Patch]
) -> tuple[list[Change], dict[str, str]]:
    before, after = _map(old, "transitions"), _map(new, "transitions")
    renamed: dict[str, str] = {}
    by: dict[str, str] = {}
    for patch in patches:
        for was, now in patch.steps.items():
            if was in before and was not in after and now in after and was not in renamed:
                renamed[was], by[was] = now, patch.id
    allowed = next((p.id for p in patches if p.machine), None)
    changes = _steps(before, after, renamed, by, allowed)
    changes += _edges(before, after, renamed, allowed)
    changes += _ends(old, new, renamed, set(after), allowed)
    return changes, renamed


def _steps(
    before: dict[str, Any],
    after: dict[str, Any],
    renamed: dict[str, str],
    by: dict[str, str],
    allowed: str | None,
) -> list[Change]:
    changes: list[Change] = []
    for step in before:
        if step in after:
            continue
        if step in renamed:
            text = f"machine: step {step!r} renamed {renamed[step]!r}"
            changes.append(Change("step_renamed", step, text, by[step]))
        else:
            text = f"machine: step {step!r} removed"
            changes.append(Change("step_removed", step, text, allowed))
    targets = set(renamed.values())
    for step in after:
        if step not in before and step not in targets:
            text = f"machine: step {step!r} added"
            changes.append(Change("step_added", step, text, COMPATIBLE))
    return changes


def _edges(
    before: dict[str, Any], after: dict[str, Any], renamed: dict[str, str], allowed: str | None
) -> list[Change]:
    def edges(transitions: dict[str, Any], rename: dict[str, str]) -> set[tuple[str, str]]:
        return {
            (rename.get(a, a), rename.get(str(b), str(b)))
            for a, targets in transitions.items()
            for b in (targets if isinstance(targets, list) else ())
        }

    kept = set(after)
    was, now = edges(before, renamed), edges(after, {})
    changes: list[Change] = []
    for a, b in sorted(was - now):
        if a in kept and b in kept:  # a removed step's edges went with it
            text = f"machine: transition {a!r} -> {b!r} removed"
            changes.append(Change("transition_removed", f"{a} -> {b}", text, allowed))
    for a, b in sorted(now - was):
        text = f"machine: transition {a!r} -> {b!r} added"
        changes.append(Change("transition_added", f"{a} -> {b}", text, COMPATIBLE))
    return changes


def _ends(
    old: dict[str, Any],
    new: dict[str, Any],
    renamed: dict[str, str],
    kept: set[str],
    allowed: str | None,
) -> list[Change]:
    """Final steps removed (refused unless declared) or added, and the initial step."""
    changes: list[Change] = []
    old_final = {renamed.get(s, s) for s in old.get("final") or ()}
    new_final = set(new.get("final") or ())
    for step in sorted(old_final - new_final):
        if step in kept:
            text = f"machine: step {step!r} no longer final"
            changes.append(Change("final_removed", step, text, allowed))
    for step in sorted(new_final - old_final):
        text = f"machine: step {step!r} now final"
        changes.append(Change("final_added", step, text, COMPATIBLE))
    first, then = old.get("initial"), new.get("initial")
    if renamed.get(str(first), first) != then:
        text = f"machine: initial step {first!r} -> {then!r}"
        changes.append(Change("initial", str(then), text, COMPATIBLE))
    return changes


# ---------------------------------------------------------------------- state


def _state(old: dict[str, Any], new: dict[str, Any], state_type: type[AgentState]) -> list[Change]:
    changes: list[Change] = []
    if old.get("class") != new.get("class"):
        text = f"state class {old.get('class')} -> {new.get('class')}"
        changes.append(Change("state_class", str(new.get("class")), text, COMPATIBLE))
    was, now = old.get("schema_version"), new.get("schema_version")
    if was != now:
        chain = migrations(state_type)
        carried = (
            isinstance(was, int)
            and isinstance(now, int)
            and was < now
            and all(v in chain for v in range(was, now))
        )
        how = MIGRATION if carried else None
        text = f"state schema {was} -> {now}" + ("" if carried else " with no migration")
        changes.append(Change("schema", str(now), text, how))
    return changes
