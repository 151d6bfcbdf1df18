"""The join: the run loop's hook on a ``waiting_children`` parent (:class:`Children`).

Called before anything is decided for a parent that waits (like
:class:`~skillstate.control.waits.Waits` for a wait), by whoever drives it: the
runtime that spawned, a resumed run after a crash, a worker woken by a child's end.

1. Each ``pending`` child that does not exist yet is created (create-if-absent: a
   crash between the spawn's commit and the creations loses and doubles nothing).
2. While any child has not ended, the parent keeps waiting (``False``).
3. Once every one has, ONE commit (the runtime's, fenced by the parent's lease, a
   compare-and-set on its version) fills each record (status, summary, outputs
   validated against the kind's declared model) and sets the parent ``running``; its
   event's action is ``{"kind": "join", "children": {id: status}}``. A second
   driver's join loses the compare-and-set: the join happens exactly once.

A child that failed (or whose outputs do not validate) is a ``failed`` record with
its error: data for the parent's next decision, never an exception.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from skillstate._validation import first_error
from skillstate.engine.draft import Draft
from skillstate.errors import ChildConflict, LeaseHeld, StaleState, TaskNotFound
from skillstate.events import Actor, Event
from skillstate.fanout import hooks
from skillstate.fanout.spec import child_agent, child_ref, child_spec
from skillstate.state.model import AgentState, ChildRecord, ChildStatus, ParentLink, TaskStatus
from skillstate.state.secrets import sensitive_fields
from skillstate.store.base import Store

if TYPE_CHECKING:
    from skillstate.engine.agent import Agent
    from skillstate.engine.runtime import Runtime

__all__ = ["Children", "joined", "outputs_of", "summary_of"]

Commit = Callable[[AgentState, Draft, dict[str, Any], Actor], tuple[AgentState, Event]]

_ENDED: Mapping[TaskStatus, ChildStatus] = {
    TaskStatus.COMPLETED: "completed",
    TaskStatus.FAILED: "failed",
    TaskStatus.CANCELLED: "cancelled",
}
SUMMARY_CHARS = 300
"""A child's summary in its parent's card is one line, at most this long."""


def joined(state: AgentState, name: str | None = None) -> tuple[ChildRecord, ...]:
    """The children of ``state`` that have been joined (kind ``name``, or every kind),
    oldest first; a key spawned again (a retry) counts once, by its latest child.
    Children a rollback or fork detached are not joined: the parent let them go."""
    latest: dict[tuple[str, str], ChildRecord] = {}
    for record in state.children:
        if record.status in ("pending", "detached"):
            continue
        if name is None or record.name == name:
            latest.pop((record.name, record.key), None)
            latest[(record.name, record.key)] = record
    return tuple(latest.values())


@dataclass
class Children:
    """Creates a parent's missing children and joins them once they have all ended."""

    agent: Agent[Any]
    store: Store
    commit: Commit
    spawner: Runtime[Any] | None = None
    """The parent's runtime: its options are the children's (created with a Runtime)."""
    _runtimes: dict[str, Runtime[Any]] = field(default_factory=dict, repr=False)

    def settle(self, state: AgentState) -> bool:
        """Create missing children; join if all ended (one commit). True when it
        committed (the loop reloads and goes on), False while the parent must wait."""
        pending = [r for r in state.children if r.status == "pending"]
        heads = {r.task_id: self.ensure(state, r) for r in pending}
        if any(head is None or head.status not in _ENDED for head in heads.values()):
            return False
        hooks.fire("join", state.task_id)
        records = tuple(
            self._ended(r, heads[r.task_id]) if r.status == "pending" else r for r in state.children
        )
        after = state.replace(status=TaskStatus.RUNNING, children=records, no_progress=0, tried=())
        ended = {r.task_id: r.status for r in records if r.task_id in heads}
        self.commit(state, Draft(after=after), {"kind": "join", "children": ended}, "runtime")
        return True

    def ensure(self, parent: AgentState, record: ChildRecord) -> AgentState | None:
        """The child's head, created first if it does not exist (``None``: another
        worker is creating it right now). A task under that id with another parent
        link is :class:`ChildConflict`."""
        agent = child_agent(self.agent, record.name)
        try:
            head = self._head(agent, record)
        except TaskNotFound:
            hooks.fire("create", record.task_id)
            # Created meanwhile by another driver of this parent: read it.
            with contextlib.suppress(StaleState, LeaseHeld):
                self._create(agent, parent, record)
            try:
                head = self._head(agent, record)
            except TaskNotFound:
                return None
        link = head.parent
        if link is None or link.task_id != parent.task_id or link.version != record.version:
            owner = link.task_id if link is not None else "no parent"
            raise ChildConflict(
                f"task {record.task_id!r} exists with another parent ({owner}): "
                f"child {record.key!r} of {parent.task_id!r} cannot be joined"
            )
        return head

    def _head(self, agent: Agent[Any], record: ChildRecord) -> AgentState:
        head: AgentState = agent.parse_state(
            self.store.load(record.task_id).state, task_id=record.task_id
        )
        return head

    def _create(self, agent: Agent[Any], parent: AgentState, record: ChildRecord) -> None:
        depth = (parent.parent.depth if parent.parent is not None else 0) + 1
        link = ParentLink(
            task_id=parent.task_id,
            version=record.version,
            name=record.name,
            key=record.key,
            depth=depth,
        )
        fields: dict[str, Any] = dict(record.fields or {})
        if record.goal is not None:
            fields["goal"] = record.goal
        fields["parent"] = link.model_dump(mode="json")
        fields["agent"] = child_ref(self.agent, record.name)
        self._runtime(record.name, agent).start(record.task_id, **fields)

    def _runtime(self, name: str, agent: Agent[Any]) -> Runtime[Any]:
        found = self._runtimes.get(name)
        if found is None:
            from skillstate.fanout.inline import child_runtime

            found = child_runtime(self.spawner, agent, self.store)
            self._runtimes[name] = found
        return found

    def _ended(self, record: ChildRecord, head: AgentState | None) -> ChildRecord:
        assert head is not None  # settle joins only once every head is read
        status = _ENDED[head.status]
        changes: dict[str, Any] = {
            "status": status,
            "summary": summary_of(head),
            "fields": None,  # the child exists: its own card holds them now
        }
        if status == "failed":
            changes["error"] = changes["summary"] or "failed"
        elif status == "cancelled":
            changes["error"] = changes["summary"] or "cancelled"
        else:
            model = child_spec(self.agent.children[record.name]).outputs
            try:
                changes["outputs"] = outputs_of(child_agent(self.agent, record.name), head, model)
            except ValidationError as exc:
                changes["status"] = "failed"
                changes["error"] = (
                    f"outputs do not validate against {model.__name__ if model else 'model'}: "
                    f"{first_error(exc, 'outputs')}"
                )
        return record.model_copy(update=changes)


def summary_of(head: AgentState) -> str:
    """One line on how a child ended: its failure, else its last step's summary or reason."""
    text = ""
    if head.status is TaskStatus.FAILED and head.errors:
        text = head.errors[-1].message
    elif head.completed_steps and head.completed_steps[-1].summary:
        text = head.completed_steps[-1].summary
    elif head.last_decision is not None:
        text = head.last_decision.reason
    line = " ".join(text.split())
    return line if len(line) <= SUMMARY_CHARS else line[: SUMMARY_CHARS - 1] + "…"


def outputs_of(
    agent: Agent[Any], head: AgentState, model: type[BaseModel] | None
) -> dict[str, Any]:
    """A completed child's outputs: its own fields (a skill kind's: the skill's
    outputs; never a ``Sensitive`` one), validated against ``model`` when declared
    (raises ``ValidationError``)."""
    hidden = sensitive_fields(type(head))
    names = [n for n in type(head).custom_fields() if n not in hidden]
    skill_outputs = getattr(agent, "_skill_outputs", None)
    if model is None and skill_outputs is not None:
        names = [n for n in names if n in skill_outputs]
    data = {name: getattr(head, name) for name in names}
    if model is None:
        return head.model_dump(mode="json", include=set(names))
    return model.model_validate(data).model_dump(mode="json")
