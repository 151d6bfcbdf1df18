"""The stall guard: a task that stops making progress stops running.

Without it a decision that keeps failing the same way (the same refused action,
the same failing verify, an exception inside a skill, a transition the machine
does not have) runs until the step budget: outside testers saw 50 error versions
and 150 skill runs for one stuck entry. The guard counts, in the card itself (so
the count survives a resume or a worker's crash), the decisions in a row that
changed nothing but bookkeeping, and what each of them tried. A task stalls when

* ``max_stalled`` decisions in a row made no progress, or
* the same decision failed the same way ``max_repeats`` times since the last
  progress.

A stalled task fails (``on_stall="fail"``, the default) or is parked for a person
(``"park"``: it waits for a reply, which clears the count), with a ``stalled``
entry in its error log either way. Progress is a change to anything a decision
is about: the typed fields, the facts, the goal and constraints, the current
step, the plan, the status. Step records, evidence (and the raw evidence a
decision asked to see), errors, usage and the guard's own fields are bookkeeping.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from skillstate.engine.draft import Draft
from skillstate.errors import UsageError
from skillstate.state.model import AgentState, ErrorEntry, FailedAttempt, TaskStatus

__all__ = ["BOOKKEEPING", "Guard", "OnStall", "progressed"]

OnStall = Literal["fail", "park"]

BOOKKEEPING = frozenset(
    {
        "version",
        "schema_version",
        "card_version",
        "usage",
        "errors",
        "last_decision",
        "active_skill",
        "completed_steps",
        "steps_taken",
        "evidence",
        "peek",
        "inputs",
        "inputs_received",
        "question",
        "pending_effect",
        "pending_approval",
        "compensations",
        "effect_generations",
        "tried",
        "rejected",  # rejected approaches (issue 26): remembering one is not progress
        "unchecked_steps",  # transitive staleness (issue 26)
        "no_progress",
        "driver",
        "agent",
    }
)
"""Fields whose change is not progress (see the module docstring)."""

KEEP_TRIED = 5
"""Distinct failed decisions the card remembers since the last progress."""
REASON_CHARS = 160


def progressed(before: AgentState, after: AgentState) -> bool:
    """Whether ``after`` differs from ``before`` in anything but bookkeeping."""
    for name in type(after).model_fields:
        if name not in BOOKKEEPING and getattr(before, name, None) != getattr(after, name):
            return True
    return False


@dataclass(frozen=True)
class Guard:
    """When a run of decisions without progress stops the task (``None``: never)."""

    max_stalled: int | None = 10
    max_repeats: int | None = 3
    on_stall: OnStall = "fail"

    def __post_init__(self) -> None:
        for name in ("max_stalled", "max_repeats"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise UsageError(f"{name} must be >= 1 (or None to turn it off)")
        if self.on_stall not in ("fail", "park"):
            raise UsageError(f"on_stall must be 'fail' or 'park', not {self.on_stall!r}")

    def account(self, before: AgentState, draft: Draft, action: str) -> str | None:
        """Count ``draft`` (the decision ``action`` taken in ``before``) into its state.

        Updates the draft's ``no_progress`` and ``tried``; returns why the task is
        stuck when it is, else ``None``.
        """
        after = draft.after
        if draft.failed is None and progressed(before, after):
            if after.no_progress or after.tried:
                draft.after = after.replace(no_progress=0, tried=())
            return None
        reason = draft.failed or "it succeeded but changed nothing"
        reason = reason if len(reason) <= REASON_CHARS else reason[: REASON_CHARS - 1] + "…"
        tried = list(before.tried)
        match = next((t for t in tried if t.action == action and t.reason == reason), None)
        if match is not None:
            tried.remove(match)
            entry = match.model_copy(update={"times": match.times + 1})
        else:
            entry = FailedAttempt(action=action, reason=reason)
        tried = [*tried, entry][-KEEP_TRIED:]
        count = before.no_progress + 1
        draft.after = after.replace(no_progress=count, tried=tuple(tried))
        if self.max_repeats is not None and entry.times >= self.max_repeats:
            return f"the same decision failed {entry.times} times: {action}: {reason}"
        if self.max_stalled is not None and count >= self.max_stalled:
            return f"no progress in {count} decisions in a row (last: {action}: {reason})"
        return None

    def stop(self, draft: Draft, reason: str) -> None:
        """Turn ``draft`` into the stalled task's last commit (failed, or parked)."""
        if self.on_stall == "park":
            message = f"stalled: {reason}; parked for a person (reply to go on)"
            after = draft.after.replace(
                status=TaskStatus.WAITING_USER,
                question=f"The task is stuck ({reason}). How should it go on?",
            )
        else:
            message = f"stalled: {reason}"
            after = draft.after.replace(status=TaskStatus.FAILED)
        draft.after = after.with_error(
            ErrorEntry(kind="stalled", message=message, step_id=draft.step_id)
        )
        draft.error = message
