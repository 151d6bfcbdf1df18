"""Patch markers: how an agent declares that its tasks may be carried across a change.

A task is pinned to the definition it started under (:mod:`skillstate.definitions`).
When the code changes under it, the agent says which changes its running tasks may
cross, Temporal-style, one named marker per change::

    agent = Agent(
        ...,
        patches=[
            patched("rename-fetch", renamed={"fetch": "download"}),
            patched("fetch-v2", skills=["download"]),
        ],
    )

* ``renamed``: old skill name -> new one. A task carried across it has the old name
  replaced wherever it still points to the future (its plan, the effect in flight, a
  call waiting for approval, queued compensations, the active skill, the "already
  tried" list); its history (step records, events) keeps the name it ran under.
* ``skills``: skills (by their new names) whose contract changed (version, params
  schema, step, outputs, effects) in a way a running task may cross.
* ``removed``: skills removed on purpose (a task whose card still needs one is
  refused all the same: an effect in flight, a plan that names it).
* ``steps``: old machine step -> new one (the card's ``current_step``, its plan and
  the targets of its intents follow).
* ``machine``: steps, transitions or final steps removed on purpose.

A marker with nothing but its id, ``patched("fetch")``, names a skill: the change
to skill ``fetch`` (its contract, or its removal) may be crossed; a task whose card
still needs a removed skill (its plan, an effect in flight) is refused all the same.
A rename is better said with ``renamed=`` (the plan then follows), or with the
skill's own ``aliases=("fetch",)``: each alias is the marker
``patched("alias:fetch", renamed={"fetch": NAME})``.

A state schema change needs no marker: the state class's migrations carry it.

Skill code that must tell the two kinds of task apart asks :func:`is_patched`:
``False`` for a task that was carried across the patch (it started before the
change), ``True`` for one that started with it, as Temporal's ``workflow.patched()``
is false for executions that started before the patch.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from skillstate.errors import UsageError

if TYPE_CHECKING:
    from skillstate.state.model import AgentState

__all__ = ["Patch", "alias_patches", "is_patched", "patch_problems", "patched"]

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$")


@dataclass(frozen=True)
class Patch:
    """One declared change a running task may be carried across (see :func:`patched`)."""

    id: str
    """A stable name, recorded on every task carried across it (``carried_patches``)."""
    renamed: Mapping[str, str] = field(default_factory=dict)
    """Old skill name -> new skill name."""
    skills: tuple[str, ...] = ()
    """Skills (current names) whose contract changed compatibly."""
    removed: tuple[str, ...] = ()
    """Skills removed on purpose."""
    steps: Mapping[str, str] = field(default_factory=dict)
    """Old machine step -> new machine step."""
    machine: bool = False
    """Steps, transitions or final steps removed on purpose."""
    note: str = ""
    """Why, for the audit event."""

    @property
    def marks(self) -> tuple[str, ...]:
        """The skill a bare marker names (``patched("fetch")``: ``("fetch",)``): a change
        to it or its removal is crossed. Empty for a marker that declares anything."""
        declared = self.renamed or self.skills or self.removed or self.steps or self.machine
        return () if declared else (self.id,)


def patched(
    id: str,
    *,
    renamed: Mapping[str, str] | None = None,
    skills: Iterable[str] = (),
    removed: Iterable[str] = (),
    steps: Mapping[str, str] | None = None,
    machine: bool = False,
    note: str = "",
) -> Patch:
    """Declare a change running tasks may be carried across (``Agent(patches=[...])``).

    ``id`` names it for good: a task carried across it records the id, and skill code
    asks :func:`is_patched` with it. A marker that declares nothing else names a skill
    by its id: ``patched("fetch")`` lets tasks cross a change to (or the removal of)
    skill ``fetch``.
    """
    if not isinstance(id, str) or not _ID.match(id):
        raise UsageError(
            f"patched({id!r}): an id is 1-100 letters, digits, '_', '.', ':' or '-', "
            "starting with a letter or digit"
        )
    return Patch(
        id=id,
        renamed=dict(renamed or {}),
        skills=_names(id, "skills", skills),
        removed=_names(id, "removed", removed),
        steps=dict(steps or {}),
        machine=bool(machine),
        note=note,
    )


def _names(patch: str, what: str, names: Iterable[str]) -> tuple[str, ...]:
    if isinstance(names, str):  # skills="fetch" would be five one-letter skills
        raise UsageError(f"patched({patch!r}, {what}=...) takes a list of names, not a string")
    return tuple(names)


def patch_problems(
    patches: Sequence[Patch], skills: Iterable[str], steps: Iterable[str]
) -> list[str]:
    """What is wrong with an agent's ``patches`` (checked when the agent is built)."""
    known, machine = set(skills), set(steps)
    problems: list[str] = []
    seen: set[str] = set()
    for patch in patches:
        if not isinstance(patch, Patch):
            problems.append(f"patches hold {type(patch).__name__}, not patched(...)")
            continue
        label = f"patch {patch.id!r}"
        if patch.id in seen:
            problems.append(f"{label} is declared twice")
        seen.add(patch.id)
        for old, new in patch.renamed.items():
            if new not in known:
                problems.append(f"{label} renames {old!r} to {new!r}, which is not a skill")
            if old in known:
                problems.append(f"{label} renames {old!r}, which is still a skill")
        problems += [
            f"{label} names skill {n!r}, which is not a skill"
            for n in patch.skills
            if n not in known
        ]
        problems += [
            f"{label} removes skill {n!r}, which is still a skill"
            for n in patch.removed
            if n in known
        ]
        for old, new in patch.steps.items():
            if new not in machine:
                problems.append(f"{label} renames step {old!r} to {new!r}, which is not a step")
            if old in machine:
                problems.append(f"{label} renames step {old!r}, which is still a step")
    return problems


def alias_patches(skills: Iterable[Any]) -> list[Patch]:
    """The rename markers a registry's skills declare with ``aliases``."""
    return [
        Patch(id=f"alias:{old}", renamed={old: skill.name}, note=f"alias of {skill.name!r}")
        for skill in skills
        for old in getattr(skill, "aliases", ())
    ]


def is_patched(state: AgentState, patch_id: str) -> bool:
    """Whether ``state``'s task runs with patch ``patch_id`` from its start.

    ``False`` when the task was carried across it (it started under the definition
    before the change, and its earlier steps ran the old way), ``True`` otherwise:
    started with it, as Temporal's ``workflow.patched()`` answers. Ask it in skill
    code that must treat the two kinds of task differently::

        if not is_patched(state, "fetch-v2"):
            url = legacy_url(state)   # the facts of a task started under v1
    """
    carried: Any = getattr(state, "carried_patches", ())
    return patch_id not in carried
