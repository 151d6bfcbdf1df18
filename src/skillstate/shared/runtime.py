"""The runtime's side of shared records: snapshots in, verified writes out, exactly once.

**Reading.** Before each decision the records the agent declares are loaded (one read
each) and, when one moved since the card's snapshot, the snapshots are replaced in a
commit of their own (``{"kind": "shared_read"}``). A view is then a function of the
card alone (``skillstate tokens`` and a replay render what the model saw), and the
snapshot's version is the one a write is compared against.

**Writing** is a compare-and-set against that version, exactly once across a
``kill -9`` anywhere:

1. ``ctx.write_shared(...)`` only collects the write; the attempt must verify;
2. the step's commit (version V) puts it in the card's ``shared_pending``, tagged
   ``task@V``, in the step's own compare-and-set: step and write, or neither;
3. right after, the record is committed from the version the decision saw, its
   event carrying the tag; then one card commit empties ``shared_pending`` and
   points the snapshot at the version written (``{"kind": "shared_flush"}``);
4. if the record moved (another task wrote first) the write is not applied: one card
   commit **undoes the step** (the card as it was before it, the tokens spent kept,
   the snapshot refreshed, an error-log entry saying the record moved from vN to vM,
   ``{"kind": "shared_conflict"}``) and the next decision is taken on the new version;
5. a head that still has ``shared_pending`` (a crash between 2 and 3 or 4) is settled
   before anything else: the tag found in the record's events means the write landed
   (3 finishes, nothing is written twice); not found and the record still at the seen
   version, it is written now; not found and moved, 4.

A stale worker (its lease taken over) is refused before it writes the record; its
card commits are fenced anyway. A write that lost the record's compare-and-set looks
for its tag before concluding it conflicted: a worker that took the task over may
have written it in between.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from skillstate.engine.draft import Draft
from skillstate.errors import LeaseLost, StaleState
from skillstate.shared.declare import resolve_key
from skillstate.shared.record import landed, load_record, record_id, write_record
from skillstate.shared.records import SharedSnapshot, SharedWrite
from skillstate.state.model import AgentState, ErrorEntry, TaskStatus

if TYPE_CHECKING:
    from skillstate.engine.agent import Agent
    from skillstate.engine.commit import Committer
    from skillstate.state.redact import Redactor
    from skillstate.store.base import Store

__all__ = ["TaskShared"]

_DECIDING = frozenset({TaskStatus.CREATED, TaskStatus.RUNNING})
"""Statuses a decision is taken in (the only ones a snapshot refresh is committed for)."""


class TaskShared:
    """The shared records of one agent's tasks in one store: snapshots, pending writes."""

    def __init__(
        self,
        agent: Agent[Any],
        store: Store,
        committer: Committer,
        *,
        fence: Callable[[str], int | None] = lambda task_id: None,
    ) -> None:
        self.agent = agent
        self.store = store
        self._committer = committer
        self._fence = fence

    # ------------------------------------------------------------------ writing

    def pending(self, state: AgentState, draft: Draft, redactor: Redactor) -> AgentState:
        """``state`` (the step's new version) with the draft's verified write pending,
        tagged with that version, its value masked as the card masks values."""
        if draft.skill is None or draft.step_id is None:
            raise AssertionError("shared writes come from a verified skill step")
        writes = tuple(
            SharedWrite(
                name=c.name,
                key=c.key,
                base=c.base,
                value=redactor.json(c.value),
                skill=draft.skill.name,
                step=draft.step_id,
                version=state.version,
                tag=f"{state.task_id}@{state.version}",
            )
            for c in draft.shared
        )
        return state.replace(shared_pending=(*state.shared_pending, *writes))

    def flush(
        self, state: AgentState, *, resumed: bool, before: AgentState | None = None
    ) -> AgentState | None:
        """Write ``state``'s pending write to its record and commit it settled: returns
        the new head, or ``None`` when the record had moved and the step was undone.
        ``resumed``: found on a loaded head, so the record's events are asked first.
        ``before``: the card before the step, when at hand (else read from the store)."""
        write = state.shared_pending[0]
        self._check_lease(state.task_id)
        version = landed(self.store, write) if resumed else None
        if version is None:
            try:
                version = write_record(self.store, write, task=state.task_id)
            except StaleState:
                version = landed(self.store, write)  # a worker that took over wrote it?
        if version is None:
            self._undo(state, write, before)
            return None
        snapshot = SharedSnapshot(
            name=write.name, key=write.key, version=version, value=write.value, writer=write.tag
        )
        after = state.replace(
            shared_pending=state.shared_pending[1:],
            shared_snapshots=_replaced(state.shared_snapshots, snapshot),
        )
        action: dict[str, Any] = {
            "kind": "shared_flush",
            "record": record_id(write.name, write.key),
            "version": version,
        }
        if resumed:
            action["resumed"] = True
        return self._committer.commit(state, Draft(after=after), action, "runtime")[0]

    def _undo(self, state: AgentState, write: SharedWrite, before: AgentState | None) -> None:
        """The step lost the race: the card as it was before it, with the new version.
        (Its version is the one before the step's, not the head's: a note committed
        on the head since, such as a worker's ``mark``, carried the write along.)"""
        head = load_record(self.store, write.name, write.key)
        if before is None or before.version != write.version - 1:
            checkpoint = self.store.checkpoint(state.task_id, write.version - 1)
            before = self.agent.parse_state(checkpoint.state, task_id=state.task_id)
        snapshot = SharedSnapshot(
            name=write.name,
            key=write.key,
            version=head.version,
            value=head.value,
            writer=head.writer,
        )
        rid = record_id(write.name, write.key)
        message = (
            f"shared record {write.name}:{write.key} moved from v{write.base} to "
            f"v{head.version} (written by {head.writer}) while {write.skill} ran: its write "
            f"was not applied and its step was undone; decide again on v{head.version}"
        )
        entry = ErrorEntry(
            kind="shared_conflict",
            message=message,
            step_id=write.step.split("-", 1)[0],
            skill=write.skill,
        )
        after = before.replace(
            usage=state.usage,  # the tokens were spent, whatever became of the step
            shared_pending=(),
            shared_snapshots=_replaced(state.shared_snapshots, snapshot),
        ).with_error(entry)
        action = {
            "kind": "shared_conflict",
            "record": rid,
            "seen": write.base,
            "found": head.version,
            "undone": write.version,
            "skill": write.skill,
        }
        draft = Draft(after=after, error=message)
        self._committer.commit(state, draft, action, "runtime")

    def _check_lease(self, task: str) -> None:
        """Refuse to write for a task another worker took over: its new holder settles
        the pending write (it probes the record's events first)."""
        fence = self._fence(task)
        if fence is None:
            return
        lease = self.store.lease(task)
        current = lease.generation if lease is not None else None
        if current != fence:
            raise LeaseLost(task, fence, current)

    # ------------------------------------------------------------------ reading

    def refresh(self, state: AgentState) -> AgentState:
        """``state`` with its snapshots up to date: unchanged (no write) when no record
        it reads moved, else the head after a ``shared_read`` commit."""
        if state.status not in _DECIDING:
            return state
        declared = self.agent.shared
        if not declared and not state.shared_snapshots:
            return state  # an agent without shared records pays nothing
        snapshots = tuple(self.read(state))
        if snapshots == state.shared_snapshots:
            return state
        after = state.replace(shared_snapshots=snapshots)
        versions = {f"{s.name}:{s.key}": s.version for s in snapshots}
        action = {"kind": "shared_read", "records": versions}
        return self._committer.commit(state, Draft(after=after), action, "runtime")[0]

    def read(self, state: AgentState) -> list[SharedSnapshot]:
        """The snapshot of each declared record the card keys (the old one when the
        record has not moved)."""
        found: list[SharedSnapshot] = []
        for name, spec in self.agent.shared.items():
            key = resolve_key(spec.key, state)
            if key is None:
                continue  # the card field the key reads is empty: no record in this task
            head = load_record(self.store, name, key)
            old = next((s for s in state.shared_snapshots if s.name == name and s.key == key), None)
            if old is not None and old.version == head.version:
                found.append(old)
                continue
            value = head.value if head.version else spec.initial().model_dump(mode="json")
            found.append(
                SharedSnapshot(
                    name=name, key=key, version=head.version, value=value, writer=head.writer
                )
            )
        return found


def _replaced(
    snapshots: Sequence[SharedSnapshot], snapshot: SharedSnapshot
) -> tuple[SharedSnapshot, ...]:
    """``snapshots`` with ``snapshot`` in place of the one of its record (or added)."""
    same = [s.name == snapshot.name and s.key == snapshot.key for s in snapshots]
    if any(same):
        return tuple(snapshot if hit else s for s, hit in zip(snapshots, same, strict=True))
    return (*snapshots, snapshot)
