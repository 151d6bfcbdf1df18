"""Stale steps: a completed step whose world changed since it was verified.

A step that recorded fingerprints (``ctx.fingerprint(path)``) was trusted because
its verify passed against that world. When a fingerprint no longer matches (on
resume, or right before a skill declared with ``recheck=True`` runs), the step
is stale: it leaves ``completed_steps``, goes back to the front of
``pending_steps``, gets a ``stale_step`` entry in the error log, and **its
writes are put back** to the values they replaced (kept in the step record's
``undo``). Leaving them would let a task finish "completed" on a result the
world no longer holds: the writes would still satisfy the ``when`` of the skills
after it and the check before ``Finish``.
"""

from __future__ import annotations

from skillstate.engine.draft import Draft
from skillstate.errors import StateError
from skillstate.state.fingerprint import current_digest
from skillstate.state.model import AgentState, ErrorEntry, StepRecord

__all__ = ["stale_steps"]


def stale_steps(state: AgentState) -> tuple[Draft, list[StepRecord]] | None:
    """A draft that marks ``state``'s stale steps and undoes their writes, and those
    steps; ``None`` when every fingerprint still matches."""
    stale: list[StepRecord] = []
    after = state
    for record in state.completed_steps:
        for fp in record.fingerprints:
            now = current_digest(fp.kind, fp.target)
            if now == fp.digest:
                continue
            stale.append(record)
            after = after.with_error(
                ErrorEntry(
                    kind="stale_step",
                    message=f"{fp.kind} {fp.target} changed since step {record.id} "
                    f"({_short(fp.digest)} -> {_short(now)}); the step is pending again "
                    "and its writes were undone",
                    step_id=record.id,
                    skill=record.skill,
                )
            )
            break
    if not stale:
        return None
    # Newest first, so a path two stale steps wrote ends at the value before both.
    for record in reversed(stale):
        if record.undo:
            try:
                after = after.with_writes(record.undo)
            except StateError as exc:  # the schema moved on since the step ran
                after = after.with_error(
                    ErrorEntry(
                        kind="stale_step",
                        message=f"cannot undo the writes of {record.id}: {exc}",
                        step_id=record.id,
                        skill=record.skill,
                    )
                )
    labels = [r.skill or r.step for r in stale]
    kept = tuple(r for r in state.completed_steps if r not in stale)
    pending = (*dict.fromkeys(labels), *(p for p in state.pending_steps if p not in labels))
    after = after.replace(completed_steps=kept, pending_steps=pending)
    return Draft(after=after, error="stale steps: " + ", ".join(r.id for r in stale)), stale


def _short(digest: str) -> str:
    return digest if len(digest) <= 19 else digest[:19] + "…"
