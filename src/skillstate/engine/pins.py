"""The pin check: a task's head is loaded for a step only under the definition it is pinned to.

Every task's card names the definition it runs on (``definition``, the ``sha256:``
ref of its agent's manifest: :mod:`skillstate.definitions`). Wherever the runtime
loads a head to act on it (a run, a step, a reply, an approval, a recheck, a
compensation) it goes through :meth:`Pins.guard`:

* the same ref: go on (a string compare: the per-step cost);
* no ref (a card older than pins): pinned in memory, written by its next commit;
* another ref: the pinned manifest is read from the store (an artifact, one per
  definition) and compared with the agent's. When every change is carried (compatible,
  a migration, a declared patch), one audited commit (actor ``runtime``, kind
  ``definition``, naming the patches and every change) re-pins the task and renames
  what its card still points to; otherwise :class:`~skillstate.errors.DefinitionChanged`
  names the changes and nothing is written.

:meth:`Pins.accept` is a person's override: one commit (actor ``human``, who and why
in the event) that re-pins the task whatever changed, unless the card needs what the
definition lacks (its current step, the skill of its effect in flight).
"""

from __future__ import annotations

import contextlib
import json
from typing import TYPE_CHECKING, Any, TypeVar, cast

from skillstate.audit import Identity
from skillstate.definitions.carry import blockers, carry_card
from skillstate.definitions.compare import COMPATIBLE, MIGRATION, Comparison, compare
from skillstate.definitions.manifest import short
from skillstate.engine.draft import Draft
from skillstate.errors import ArtifactNotFound, DefinitionChanged
from skillstate.events import Actor
from skillstate.state.model import AgentState

if TYPE_CHECKING:
    from skillstate.engine.agent import Agent
    from skillstate.engine.commit import Committer

__all__ = ["Pins"]

S = TypeVar("S", bound=AgentState)

MEDIA_TYPE = "application/vnd.skillstate.definition+json"


class Pins:
    """The pin check of one agent's tasks in one committer's store."""

    def __init__(self, agent: Agent[Any], committer: Committer) -> None:
        self.agent = agent
        self._committer = committer
        self._manifests: dict[str, dict[str, Any] | None] = {}

    @property
    def ref(self) -> str:
        """The ref of the agent's definition (what its tasks are pinned to)."""
        return self.agent.definition.ref

    def guard(self, state: S) -> S:
        """``state`` if it is pinned to the agent's definition, else pinned to it (a card
        without a pin, in memory; a carried change, committed), or
        :class:`~skillstate.errors.DefinitionChanged`."""
        ref = self.agent.definition.ref
        if state.definition == ref or state.status.is_terminal:  # an ended task runs nothing
            return state
        if state.definition is None:
            # A card from before pins: pinned by its next commit, never refused.
            self.record(ref)
            return state.replace(definition=ref)
        return self._carry(state, None)

    def accept(self, task_id: str, *, actor: str | None = None, reason: str = "") -> AgentState:
        """Re-pin ``task_id`` to the agent's definition, whatever changed: one commit by
        ``actor`` (default ``$SKILLSTATE_ACTOR``, else the OS user) naming every change.
        A task already pinned to it (or not pinned yet) is left as it is."""
        state = self._committer.load(task_id)
        if state.definition is None or state.definition == self.ref:
            return state
        from skillstate.audit import current, default_actor

        stated = current()  # the command's --actor and --reason
        who = actor or (stated.by if stated is not None else default_actor())
        return self._carry(state, (who, reason or (stated.reason or "" if stated else "")))

    def compare(self, state: AgentState) -> Comparison:
        """What changed from the definition ``state`` is pinned to to the agent's."""
        old = self._manifest(state.definition) if state.definition else None
        definition = self.agent.definition
        return compare(old, definition.manifest, self.agent.patches, self.agent.state_type)

    def record(self, ref: str) -> None:
        """Store the agent's manifest (once per store) if ``ref`` is its definition's:
        a later refusal reads it to say what changed."""
        definition = self.agent.definition
        if ref != definition.ref:
            return
        store = self._committer.store
        try:
            if store in definition._stored:
                return
        except TypeError:  # a store that cannot be weakly referenced: written each time
            pass
        store.put_artifact(definition.data, media_type=MEDIA_TYPE)
        with contextlib.suppress(TypeError):
            definition._stored.add(store)

    # ------------------------------------------------------------------ internals

    def _carry(self, state: S, accepted: tuple[str, str] | None) -> S:
        definition = self.agent.definition
        comparison = self.compare(state)
        if comparison.refused and accepted is None:
            raise self._refused(state, comparison)
        carried = carry_card(state, comparison, ref=definition.ref, patches=comparison.patches)
        blocked = blockers(carried, definition.manifest, comparison)
        if blocked:
            raise DefinitionChanged(
                state.task_id,
                f"task {state.task_id!r} cannot run under this definition of agent "
                f"{self.agent.name!r} ({short(definition.ref)}): {'; '.join(blocked)}. Repair "
                "the card (skillstate set/edit), or run the code it started under; "
                "nothing was written",
                pinned=state.definition,
                current=definition.ref,
                changes=blocked,
                blocked=True,
            )
        action: dict[str, Any] = {
            "kind": "definition",
            "by": _how(comparison, accepted is not None),
            "from": state.definition,
            "to": definition.ref,
            "patches": list(comparison.patches),
            "changes": comparison.texts(),
        }
        if accepted is not None:
            action["actor"], action["reason"] = accepted
        actor: Actor = "human" if accepted is not None else "runtime"
        identity = Identity(by=accepted[0], reason=accepted[1] or None) if accepted else None
        draft = Draft(after=carried, identity=identity)
        committed = self._committer.commit(state, draft, action, actor)[0]
        return cast(S, committed)  # the committer keeps the state class

    def _refused(self, state: AgentState, comparison: Comparison) -> DefinitionChanged:
        task = state.task_id
        pinned = short(state.definition or "")
        return DefinitionChanged(
            task,
            f"task {task!r} is pinned to definition {pinned} of agent {self.agent.name!r} and "
            f"this one ({short(self.ref)}) differs: {comparison.describe()}. Declare the change "
            "(Agent(patches=[patched(...)]), a state migration), run the code the task "
            "started under, or accept it (--accept-definition; accept_definition=True); "
            "nothing was written",
            pinned=state.definition,
            current=self.ref,
            changes=[c.text for c in comparison.refused],
        )

    def _manifest(self, ref: str) -> dict[str, Any] | None:
        """The manifest stored under ``ref``; ``None`` when it is not in the store."""
        if ref not in self._manifests:
            try:
                data = json.loads(self._committer.store.get_artifact(ref))
            except (ArtifactNotFound, ValueError):
                data = None
            self._manifests[ref] = data if isinstance(data, dict) else None
        return self._manifests[ref]


def _how(comparison: Comparison, accepted: bool) -> str:
    """What carried the task: ``accept``, ``patch``, ``migration`` or ``compatible``."""
    if accepted:
        return "accept"
    if comparison.patches:
        return "patch"
    carriers = {c.carried_by for c in comparison.changes}
    return MIGRATION if MIGRATION in carriers else COMPATIBLE
