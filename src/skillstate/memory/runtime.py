"""The runtime's side of cross-task memory: verified writes out, other tasks' facts in.

**Writing** is exactly-once in effect across a ``kill -9`` anywhere:

1. a skill's ``ctx.remember(...)`` only collects the write; the attempt's verify (and
   the agent's invariants) must pass for it to be kept (:mod:`skillstate.engine.act`);
2. the step's commit puts the verified writes in the card's outbox
   (``memory_outbox``), masked like the rest of the card, in the same compare-and-set
   as the step itself: the step and its writes are committed together or not at all;
3. right after that commit, each scope's record gets the writes
   (:func:`~skillstate.memory.record.remember`), then one more commit empties the
   outbox (``{"kind": "memory_flush"}``, naming the record versions written);
4. a head that still has an outbox (a crash between 2 and 3, or inside 3) is flushed
   before anything else is written to the task: a scope the events show written
   already (:func:`~skillstate.memory.record.applied`) is not written again.

**Reading** keeps views deterministic and replayable: before each decision the
scopes the agent reads (``Agent(memory=[...])``) are loaded, and when the facts a
view would show changed (a write, a ``forget``, an expiry) the card's ``recalled``
snapshot is replaced in a commit of its own (``{"kind": "memory_read"}``) before the
decision. A view is then a function of the card alone: ``skillstate tokens`` and a
replay render exactly what the model saw.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from skillstate.engine.draft import Draft
from skillstate.errors import LeaseLost
from skillstate.limits import Limits, problem
from skillstate.memory import record
from skillstate.memory.facts import MemoryWrite, Recalled, Remembered, resolve_scope
from skillstate.state.model import AgentState, TaskStatus

if TYPE_CHECKING:
    from skillstate.engine.agent import Agent
    from skillstate.engine.commit import Committer
    from skillstate.state.redact import Redactor
    from skillstate.store.base import Store

__all__ = ["VALUE_CHARS", "TaskMemory", "bound_scopes", "write_problem"]

VALUE_CHARS = 2000
"""The largest value a fact may hold, as JSON text: memory is for small facts (an id, a
preference, a result); keep raw output in an artifact and remember its ref."""

_DECIDING = frozenset({TaskStatus.CREATED, TaskStatus.RUNNING})
"""Statuses a decision is taken in (the only ones a recall is committed for)."""


def bound_scopes(templates: Iterable[str], state: AgentState) -> dict[str, str | None]:
    """Each scope template resolved for the card ``state`` (``None``: it names no scope
    in this task, its placeholder's field being empty)."""
    return {t: resolve_scope(t, state) for t in templates}


def write_problem(writes: Sequence[MemoryWrite], limits: Limits) -> str | None:
    """What is wrong with a step's memory writes (a value too big or not JSON), if anything."""
    for write in writes:
        found = problem(write.value, chars=VALUE_CHARS, depth=limits.depth)
        if found is None and len(json.dumps(write.value, ensure_ascii=False)) > VALUE_CHARS:
            found = f"it is over {VALUE_CHARS} characters as JSON"
        if found is not None:
            return (
                f"memory {write.scope} {write.key!r} refused: {found}; remember a summary "
                "or an artifact ref (ctx.attach) instead"
            )
    return None


class TaskMemory:
    """The memory of one agent's tasks in one store: the outbox, its flush, the recall."""

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
        """The lease generation the runtime holds each task under (``None``: no lease)."""
        self._known: dict[str, record.Memory] = {}
        """The last version of each scope read here: parsed again only when it moved."""

    # ------------------------------------------------------------------ writing

    def outboxed(self, state: AgentState, draft: Draft, redactor: Redactor) -> AgentState:
        """``state`` (the step's new version) with the draft's verified writes in its
        outbox. A value under a key the redaction policy masks by name (``api_token``)
        is masked here, as it would be under that key in the card."""
        if draft.skill is None or draft.step_id is None:
            raise AssertionError("memory writes come from a verified skill step")
        entries = [
            Remembered(
                scope=w.scope,
                key=w.key,
                value=redactor.json({w.key: w.value})[w.key],
                version=state.version,
                skill=draft.skill.name,
                step=draft.step_id,
                ttl=w.ttl,
                artifact=w.artifact,
            )
            for w in _last_per_key(draft.remembered)
        ]
        return state.replace(memory_outbox=(*state.memory_outbox, *entries))

    def flush(self, state: AgentState, *, resumed: bool) -> AgentState:
        """Write the card's outbox to the memory records, then commit it empty; returns
        the new head. ``resumed``: the outbox was found on a loaded head (a crash, or a
        failed flush), so each write is first looked for in its record's events."""
        task = state.task_id
        self._check_lease(task)
        redactor = self._committer.redactor(state)
        written: dict[str, int | None] = {}
        for (scope, version), entries in _groups(state.memory_outbox).items():
            if resumed and record.applied(self.store, scope, task, version):
                written[scope] = None  # it reached the record before the crash
                continue
            written[scope] = record.remember(
                self.store, scope, entries, task=task, redactor=redactor, cache=self._known
            )
        action: dict[str, Any] = {"kind": "memory_flush", "scopes": written}
        if resumed:
            action["resumed"] = True
        draft = Draft(after=state.replace(memory_outbox=()))
        return self._committer.commit(state, draft, action, "runtime")[0]

    def _check_lease(self, task: str) -> None:
        """Refuse to write for a task another worker took over: its new holder flushes the
        outbox (checking the events), where this worker could write back a value a third
        task replaced in between (its writes are not checked against the events)."""
        fence = self._fence(task)
        if fence is None:
            return
        lease = self.store.lease(task)
        current = lease.generation if lease is not None else None
        if current != fence:
            raise LeaseLost(task, fence, current)

    # ------------------------------------------------------------------ reading

    def refresh(self, state: AgentState) -> AgentState:
        """``state`` with the facts its next view shows up to date: unchanged (no write)
        when they are, else the head after a ``memory_read`` commit replacing them."""
        if state.status not in _DECIDING:
            return state  # no decision comes next: nothing to show it to
        scopes = [s for s in bound_scopes(self.agent.memory, state).values() if s is not None]
        if not scopes and not state.recalled:
            return state  # an agent without memory pays nothing
        recalled, versions = self.recall(scopes, exclude=state.task_id)
        if recalled == state.recalled:
            return state
        after = state.replace(recalled=recalled, recalled_from=versions)
        action = {"kind": "memory_read", "scopes": versions, "facts": len(recalled)}
        return self._committer.commit(state, Draft(after=after), action, "runtime")[0]

    def recall(
        self, scopes: Sequence[str], *, exclude: str
    ) -> tuple[tuple[Recalled, ...], dict[str, int]]:
        """The live facts of ``scopes`` not written by task ``exclude``, the most recently
        written first, at most ``agent.memory_facts``; and the record versions read."""
        at = record.now()
        found: list[tuple[Any, str]] = []
        versions: dict[str, int] = {}
        for scope in dict.fromkeys(scopes):
            memory = record.load_memory(self.store, scope, known=self._known.get(scope))
            self._known[scope] = memory
            versions[scope] = memory.version
            found += [(f, scope) for f in memory.live(at) if f.task != exclude]
        found.sort(key=lambda p: (p[0].written_at, p[1], p[0].key), reverse=True)
        limit = self.agent.memory_facts
        return tuple(f.recalled(scope) for f, scope in found[:limit]), versions


def _last_per_key(writes: Iterable[MemoryWrite]) -> list[MemoryWrite]:
    """One write per scope and key, the last one made (a skill may change its mind)."""
    last: dict[tuple[str, str], MemoryWrite] = {}
    for write in writes:
        last.pop((write.scope, write.key), None)
        last[(write.scope, write.key)] = write
    return list(last.values())


def _groups(entries: Iterable[Remembered]) -> Mapping[tuple[str, int], list[Remembered]]:
    """The outbox by scope and version: one record commit each."""
    groups: dict[tuple[str, int], list[Remembered]] = {}
    for entry in entries:
        groups.setdefault((entry.scope, entry.version), []).append(entry)
    return groups
