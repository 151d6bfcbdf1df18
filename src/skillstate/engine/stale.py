"""Stale steps: a completed step whose world changed since it was verified, and
every later step that used what it wrote.

A step that recorded fingerprints (``ctx.fingerprint(path)``) was trusted because
its verify passed against that world. When a fingerprint no longer matches (on
resume, right before a skill declared with ``recheck=True`` runs, and right before
a ``Finish`` commits), the step is stale. So is every later step that read
something a stale step wrote, transitively (the rules are in
:mod:`skillstate.state.depends`: prefix-aware paths, a skill without declared
``reads`` depends on everything before it). Each stale step leaves
``completed_steps``, goes back to ``pending_steps`` (in the order they ran, which
is their dependency order), gets a ``stale_step`` entry in the error log saying
why, and **its writes are put back** to the values they replaced (kept in the step
record's ``undo``), newest first. Leaving them would let a task finish "completed"
on a result the world no longer holds: the writes would still satisfy the ``when``
of the skills after it and the check before ``Finish``.

Only the card's window of step records (``AgentState.MAX_STEPS``) is re-checked;
steps that can go stale are kept in it longest, and those that had to leave are
counted in ``AgentState.unchecked_steps``.
"""

from __future__ import annotations

from skillstate.engine.draft import Draft
from skillstate.errors import SkillstateError
from skillstate.state.depends import dependents, open_undo
from skillstate.state.fingerprint import current_digest, same
from skillstate.state.model import AgentState, ErrorEntry, StepRecord

__all__ = ["changed_steps", "stale_steps"]


def changed_steps(state: AgentState) -> dict[str, str]:
    """The completed steps whose fingerprint no longer matches: step id -> what changed."""
    changed: dict[str, str] = {}
    for record in state.completed_steps:
        for fp in record.fingerprints:
            now = current_digest(fp.kind, fp.target)
            if not same(fp.digest, now):
                changed[record.id] = (
                    f"{fp.kind} {fp.target} changed since step {record.id} "
                    f"({_short(fp.digest)} -> {_short(now)})"
                )
                break
    return changed


def stale_steps(state: AgentState) -> tuple[Draft, list[StepRecord]] | None:
    """A draft that marks ``state``'s stale steps (changed ones and their dependents)
    and undoes their writes, and those steps; ``None`` when every fingerprint matches."""
    changed = changed_steps(state)
    if not changed:
        return None
    found = dependents(state.completed_steps, changed)
    after = state
    for record, why in found:
        undone = "its writes were undone" if record.undo is not None else _no_undo(record)
        after = after.with_error(
            ErrorEntry(
                kind="stale_step",
                message=f"{why}; the step is pending again and {undone}",
                step_id=record.id,
                skill=record.skill,
            )
        )
    stale = [record for record, _ in found]
    # Newest first, so a path two stale steps wrote ends at the value before both.
    for record in reversed(stale):
        if record.undo:
            try:
                after = after.with_writes(open_undo(after, record.undo))
            except SkillstateError as exc:  # the schema moved on, or a key is missing
                after = after.with_error(
                    ErrorEntry(
                        kind="stale_step",
                        message=f"cannot undo the writes of {record.id}: {exc}",
                        step_id=record.id,
                        skill=record.skill,
                    )
                )
    labels = [r.skill or r.step for r in stale]
    gone = {r.id for r in stale}
    kept = tuple(r for r in state.completed_steps if r.id not in gone)
    pending = (*dict.fromkeys(labels), *(p for p in state.pending_steps if p not in labels))
    after = after.replace(completed_steps=kept, pending_steps=pending)
    return Draft(after=after, error="stale steps: " + ", ".join(r.id for r in stale)), stale


def _no_undo(record: StepRecord) -> str:
    # Only a fingerprinted record from before stale steps kept an undo can get here.
    return "its writes could not be undone (the record predates the undo it would need)"


def _short(digest: str) -> str:
    return digest if len(digest) <= 19 else digest[:19] + "…"
