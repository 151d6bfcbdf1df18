"""Evidence on demand: a decision looks at one raw artifact (seed 003 §3.3).

The card keeps a line of summary per tool output and the ref of the raw output
(:class:`~skillstate.state.model.Evidence`). When the summary is not enough, a
``load_evidence`` decision (:class:`~skillstate.engine.actions.LoadEvidence`) names
one of those refs: its commit records the ref in the card's protected ``peek``
field, the next decision's view shows the artifact (bounded, masked with the
task's redaction policy, like the tool outputs themselves) and that decision's
commit clears it. The raw text never enters the card or an event.

Only the task's own artifacts can be loaded: a ref of the card's evidence (or a
prefix of one as the view shows it), or of a tool output in the task's event log.
Any other ref, such as another task's artifact in the same store, is refused.
"""

from __future__ import annotations

from collections.abc import Callable

from skillstate.engine.actions import LoadEvidence, offered_ref
from skillstate.engine.draft import Draft, decision
from skillstate.engine.schema import SHORT_REF
from skillstate.errors import ActionRejected, ArtifactNotFound, SkillstateError
from skillstate.state.model import AgentState
from skillstate.state.redact import Redactor
from skillstate.store.base import Store
from skillstate.store.sealing import read_artifact

__all__ = ["load_evidence", "reader", "task_ref", "whole_ref"]


def load_evidence(store: Store, state: AgentState, action: LoadEvidence, step_id: str) -> Draft:
    """The draft of a ``load_evidence`` decision: ``peek`` set to the (whole) ref.

    Raises :class:`ActionRejected` for a ref that is not the task's, or whose artifact
    is gone. Loading is not progress: the stall guard counts it like a decision that
    changed nothing (``peek`` is bookkeeping), so a policy cannot loop on it forever.
    """
    ref = task_ref(store, state, action.ref)
    try:
        read_artifact(store, ref)
    except ArtifactNotFound:
        raise ActionRejected(f"evidence {ref[:SHORT_REF]} is no longer in the store") from None
    except SkillstateError as exc:  # sealed without the key, unreadable
        raise ActionRejected(f"evidence {ref[:SHORT_REF]} cannot be read: {exc}") from None
    after = state.replace(peek=ref, last_decision=decision(action, ref[:SHORT_REF]))
    return Draft(after=after, step_id=step_id)


def whole_ref(state: AgentState, action: LoadEvidence) -> LoadEvidence:
    """``action`` naming the whole ref when it gave a shown prefix of one of the card's
    evidence refs, so the event records what was loaded (else ``action`` unchanged)."""
    found = offered_ref(action.ref, tuple(dict.fromkeys(e.ref for e in state.evidence if e.ref)))
    if found is None or found == action.ref:
        return action
    return action.model_copy(update={"ref": found})


def task_ref(store: Store, state: AgentState, ref: str) -> str:
    """``ref`` as a whole ref of this task's evidence, or :class:`ActionRejected`."""
    found = offered_ref(ref, tuple(dict.fromkeys(e.ref for e in state.evidence if e.ref)))
    if found is not None:
        return found
    # Evidence older than the card's window: the tool outputs the event log records.
    if any(call.ref == ref for event in store.events(state.task_id) for call in event.tool_calls):
        return ref
    raise ActionRejected(
        f"{ref[:80]!r} is not evidence of this task: load_evidence takes the ref of one "
        "of the card's evidence items (or of a tool output in the task's event log)"
    )


def reader(store: Store, redactor: Redactor) -> Callable[[str], str | None]:
    """What a view reads a loaded artifact with: its text, masked (``None``: unreadable)."""

    def read(ref: str) -> str | None:
        try:
            data = read_artifact(store, ref)
        except SkillstateError:
            return None  # gone or sealed: the view says it cannot show it
        # Masked as a tool's output is before it is stored (by name and by value): an
        # attached artifact was stored as given, and the task's secrets may be newer.
        return redactor.bytes(data).decode("utf-8", errors="replace")

    return read
