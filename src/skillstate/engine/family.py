"""What rollback, fork and cancel of a parent task do to its child tasks (fan-out).

A child is an ordinary task with its own card, checkpoints and audit; the parent's
card lists it (``children``, one :class:`~skillstate.state.model.ChildRecord` each).
Going back in the parent cannot take a child back out of the world: it runs, or it
has ended with results. So each operation says what it does to them:

* **cancel** of a parent cascades. The commit that takes the parent's cancel also
  posts a cancel to the inbox of every unfinished child (its record ``pending``, its
  head not terminal) and lists them in its event (``children``: id -> inbox number).
  Each child stops at its next step boundary, as any cancelled task does, and its own
  children in turn.
* **rollback** of a parent to a version before a spawn whose children exist is
  refused (:class:`~skillstate.errors.ChildrenCrossed`, nothing written) unless the
  caller chooses: ``detach`` (their records stay on the new head marked ``detached``:
  the join no longer waits for them; they keep running, or keep their results) or
  ``cascade`` (the unfinished ones are sent a cancel first, then detached).
* **fork** of a parent: the fork starts with no live children. The children belong to
  the source task (their cards link to it); records still ``pending`` at the fork
  point are marked ``detached`` on the fork, and a fork taken while waiting for them
  starts ``running``. Joined records (completed, failed, cancelled) are kept: they are
  data the fork's decisions may use.

A child's own rollback, fork and cancel work as for any task; a cancelled child is
terminal, so its parent's join sees ``cancelled``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from skillstate.errors import ChildrenCrossed, StateCorrupted, TaskNotFound
from skillstate.state.model import AgentState, TaskStatus
from skillstate.store.base import Store

__all__ = [
    "CHILDREN_CHOICES",
    "ChildrenChoice",
    "RollbackChildren",
    "cancel_children",
    "forked_children",
    "post_cancels",
    "rollback_children",
    "unfinished",
]

ChildrenChoice = Literal["refuse", "detach", "cascade"]
"""What a rollback does to the children of the versions it goes back over."""
CHILDREN_CHOICES: tuple[ChildrenChoice, ...] = ("refuse", "detach", "cascade")

_ENDED = frozenset(s.value for s in TaskStatus if s.is_terminal)
_CANCEL = "cancel"  # skillstate.control.inbox.CANCEL (not imported: inbox imports this module)


def unfinished(store: Store, task_ids: Iterable[str]) -> list[str]:
    """The tasks among ``task_ids`` that exist and have not ended (their heads as stored)."""
    found = []
    for task_id in task_ids:
        status = _status(store, task_id)
        if status is not None and status not in _ENDED:
            found.append(task_id)
    return found


def _status(store: Store, task_id: str) -> str | None:
    """A task's stored status; ``None`` when it does not exist (a spawn recorded but
    not created yet); a head that does not read counts as unfinished."""
    try:
        status = store.load(task_id, verify=False).state.get("status")
    except TaskNotFound:
        return None
    except StateCorrupted:
        return "unreadable"
    return str(status)


def post_cancels(
    store: Store,
    task_ids: Sequence[str],
    *,
    parent_id: str,
    reason: str,
    actor: str,
    compensate: bool = False,
) -> dict[str, int]:
    """Post a cancel to each child's inbox (it takes it at its next step boundary);
    each one's inbox number. A child that ended meanwhile ignores it."""
    why = f"parent {parent_id} cancelled" + (f": {reason}" if reason else "")
    body = {"reason": why[:1_000], "actor": actor, "compensate": compensate}
    return {task_id: store.post(task_id, _CANCEL, body) for task_id in task_ids}


def cancel_children(
    store: Store, state: AgentState, *, reason: str, actor: str, compensate: bool
) -> dict[str, int]:
    """The cascade of a parent's cancel: a cancel posted to each unfinished child."""
    pending = [c.task_id for c in state.children if c.status == "pending"]
    return post_cancels(
        store,
        unfinished(store, pending),
        parent_id=state.task_id,
        reason=reason,
        actor=actor,
        compensate=compensate,
    )


class RollbackChildren:
    """What a rollback of a parent does to the children it goes back over.

    Planned before anything is written (:func:`rollback_children` refuses there);
    :meth:`apply` posts the cascade's cancels just before the rollback commits, so a
    failed commit leaves children cancelled that the parent still lists: its join
    then reads them as ``cancelled``, a state that holds together.
    """

    def __init__(
        self,
        task_id: str,
        records: list[dict[str, Any]],
        crossed: list[str],
        cancel: list[str],
        to_version: int,
    ) -> None:
        self.task_id = task_id
        self.records = records
        """The new head's ``children``: the target's, plus the crossed ones detached."""
        self.crossed = crossed
        self.cancel = cancel
        self.to_version = to_version

    def apply(self, store: Store, *, actor: str = "human") -> dict[str, Any]:
        """Post the cascade's cancels; what the rollback's event records (empty: none)."""
        if not self.crossed:
            return {}
        cancelled = post_cancels(
            store,
            self.cancel,
            parent_id=self.task_id,
            reason=f"rolled back to version {self.to_version}",
            actor=actor,
        )
        recorded: dict[str, Any] = {"detached": list(self.crossed)}
        if cancelled:
            recorded["cancelled"] = cancelled
        return recorded


def rollback_children(
    store: Store,
    task_id: str,
    head: Mapping[str, Any],
    target: Mapping[str, Any],
    *,
    to_version: int,
    choice: ChildrenChoice,
) -> RollbackChildren:
    """Plan what a rollback from ``head`` to ``target`` (stored cards) does to children.

    The children it goes back over are those the head lists and the target does not
    (spawned after ``to_version``), not detached already, that exist in the store.
    ``refuse`` raises :class:`~skillstate.errors.ChildrenCrossed` naming them.
    """
    kept = {str(r.get("task_id")) for r in _records(target)}
    later = [
        r for r in _records(head) if r.get("task_id") not in kept and r.get("status") != "detached"
    ]
    crossed = [str(r["task_id"]) for r in later if _status(store, str(r["task_id"])) is not None]
    if crossed and choice == "refuse":
        raise ChildrenCrossed(
            f"rolling back task {task_id!r} to version {to_version} would go back before the "
            f"spawn of {len(crossed)} child task(s) that exist: {_names(crossed)}; choose "
            "--children detach (they keep running or keep their results) or --children "
            "cascade (cancel the unfinished ones, then detach)",
            crossed,
        )
    note = f"detached by rollback to version {to_version}"
    records = [dict(r) for r in _records(target)] + [
        _detached(r, note) for r in later if r["task_id"] in crossed
    ]
    cancel = unfinished(store, crossed) if choice == "cascade" else []
    return RollbackChildren(task_id, records, crossed, cancel, to_version)


def forked_children(state: AgentState) -> tuple[dict[str, Any], list[str]]:
    """The fork's changes for its children (``evolve`` keywords) and the ids detached."""
    detached = [c.task_id for c in state.children if c.status == "pending"]
    if not detached:
        return {}, []
    note = f"detached: the fork of {state.task_id} at version {state.version} does not own it"
    records = tuple(
        c.model_copy(update={"status": "detached", "error": note}) if c.task_id in detached else c
        for c in state.children
    )
    changes: dict[str, Any] = {"children": records}
    if state.status is TaskStatus.WAITING_CHILDREN:
        changes["status"] = TaskStatus.RUNNING  # nothing left to wait for
    return changes, detached


def _records(card: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    records = card.get("children") or []
    return [r for r in records if isinstance(r, Mapping) and isinstance(r.get("task_id"), str)]


def _detached(record: Mapping[str, Any], note: str) -> dict[str, Any]:
    return {**record, "status": "detached", "error": note}


def _names(task_ids: Sequence[str], shown: int = 5) -> str:
    more = f" and {len(task_ids) - shown} more" if len(task_ids) > shown else ""
    return ", ".join(task_ids[:shown]) + more
