"""The commit phase: one state built from a draft, its event, one compare-and-set.

The draft's state already holds the step's validated writes; the commit adds
the version and the usage without validating the card again, masks secrets,
diffs against the raw stored head (which may predate a schema migration: that
is what the store replays patches over) and writes state, delta and event in one
atomic compare-and-set. A verified step's memory writes go into the card's outbox
in that same commit and to their scopes right after it (:mod:`skillstate.memory.runtime`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from skillstate._json import dumps
from skillstate.audit import who
from skillstate.control.strategy import seen_by
from skillstate.engine import trace
from skillstate.engine.agent import Agent
from skillstate.engine.draft import Draft
from skillstate.engine.pins import Pins
from skillstate.errors import StateCorrupted, StateError
from skillstate.events import Actor, Event, TokenUsage, utcnow
from skillstate.memory.runtime import TaskMemory
from skillstate.shared.runtime import TaskShared
from skillstate.state.diff import Differ, JsonDocument, Patch
from skillstate.state.model import CARD_VERSION, AgentState, UsageTotals
from skillstate.state.redact import Redactor
from skillstate.state.secrets import secret_values, sensitive_fields
from skillstate.store.base import Store

if TYPE_CHECKING:
    from skillstate.engine.results import StepReport
    from skillstate.state.view import View

__all__ = ["Committer"]


class Committer:
    """Commits drafts of one agent's tasks to one store, keeping each head's raw document."""

    def __init__(
        self,
        agent: Agent[Any],
        store: Store,
        observer: Callable[[StepReport[Any]], None] | None = None,
        *,
        fence: Callable[[str], int | None] = lambda task_id: None,
    ) -> None:
        self.agent = agent
        self.store = store
        self.observer = observer
        self._fence = fence
        """The lease generation commits of a task carry (``None``: no lease held)."""
        # The raw stored document of the head each task was last loaded or committed
        # at. Patches are made against it, not against the parsed state: after a
        # schema migration the two differ, and a store replays patches over raw docs.
        self._raw: dict[str, dict[str, Any]] = {}
        self._differs: dict[str, Differ] = {}
        # Per task: a state and the stored document that is exactly its serialization,
        # so a commit from that state re-serializes only the fields the step changed.
        self._heads: dict[str, tuple[AgentState, dict[str, Any]] | None] = {}
        self.pins = Pins(agent, self)
        """The check of each task's pinned definition (:mod:`skillstate.engine.pins`)."""
        self.memory = TaskMemory(agent, store, self, fence=fence)
        """Cross-task memory: the outbox flush and the recall (:mod:`skillstate.memory`)."""
        self.shared = TaskShared(agent, store, self, fence=fence)
        """Shared records: snapshots, and writes settled once (:mod:`skillstate.shared`)."""

    def head(self, task_id: str, *, trust: bool = False) -> AgentState:
        """The head a write starts from: loaded, then checked against the definition the
        task is pinned to (re-pinned when a declared patch carries the change, else
        :class:`~skillstate.errors.DefinitionChanged`). Memory writes a crash left in its
        outbox are written to their scopes first (once), and the head is the one after.

        ``trust``: the state this committer last loaded or wrote for the task, when it
        has one, instead of reading and validating the stored head again. Only for a
        caller that holds the task's lease (no fenced writer can have moved it) and
        that, should someone else have written anyway, gets the compare-and-set's
        ``StaleState`` and reads again (the run loop does).
        """
        known = self._heads.get(task_id) if trust else None
        state = self.pins.guard(known[0] if known is not None else self.load(task_id))
        if state.shared_pending:  # written, or the step undone; before the memory flush
            state = self.shared.flush(state, resumed=True) or self.load(task_id)
        if state.memory_outbox:
            state = self.memory.flush(state, resumed=True)
        return state

    def load(self, task_id: str) -> AgentState:
        """The head state, validated (and migrated) into the agent's state class."""
        checkpoint = self.store.load(task_id)
        raw = checkpoint.state
        state: AgentState = self.agent.parse_state(raw, task_id=task_id)
        cached = self._raw.get(task_id)
        if cached is None or cached.get("version") != checkpoint.version:
            # A version is written once (compare-and-set), so a cached document of the same
            # version is the head's: keeping it keeps the differ's texts valid.
            self._raw[task_id] = cached = raw
        # The stored document is this state's own serialization unless loading it
        # migrated something: then the next commit writes the card whole.
        cls = type(state)
        current = (
            raw.get("card_version") == CARD_VERSION
            and raw.get("schema_version") == cls.SCHEMA_VERSION
        )
        self._heads[task_id] = (state, cached) if current else None
        return state

    def redactor(self, *states: AgentState | None, extra: Iterable[str] = ()) -> Redactor:
        """What masks secrets in what leaves the process: the agent's redaction policy,
        plus the exact plaintext of ``states``' sensitive fields and of ``extra`` (a
        step's secret params)."""
        values: list[str] = list(extra)
        for state in states:
            if state is not None:
                values += secret_values(state)
        return self.agent.redaction.redactor(values)

    def commit(
        self,
        before: AgentState | None,
        draft: Draft,
        action: dict[str, Any],
        actor: Actor,
        *,
        view: View[Any] | None = None,
        started: datetime | None = None,
    ) -> tuple[AgentState, Event]:
        """Write ``draft`` as the version after ``before`` (``None``: create the task)."""
        expected = before.version if before is not None else 0
        after = draft.after
        if view is not None and action.get("kind") != "invalid":
            # Messages sent to the task (control.inbox) are shown to one decision.
            after = seen_by(after, view.state.messages)
            # Raw evidence is shown to one decision: its commit clears it, unless that
            # decision loaded evidence itself (a refused load clears it too).
            loaded = action.get("kind") == "load_evidence" and draft.failed is None
            if after.peek is not None and not loaded:
                after = after.replace(peek=None)
        changes: dict[str, Any] = {"version": expected + 1}
        if draft.usage is not None:
            changes["usage"] = _add_usage(after.usage, draft.usage)
        final = after.replace(**changes)
        if final.definition is not None and final.definition != getattr(before, "definition", None):
            self.pins.record(final.definition)  # a task pinned anew: its manifest, stored once
        redactor = self.redactor(before, final, extra=draft.secrets)
        if draft.remembered:  # into the outbox, in this step's own compare-and-set
            final = self.memory.outboxed(final, draft, redactor)
        if draft.shared:  # pending, tagged with this version, in the same compare-and-set
            final = self.shared.pending(final, draft, redactor)
        final, document, patch, stored, checked = self._serialize(before, final, redactor)
        event = Event(
            task_id=final.task_id,
            version=final.version,
            actor=actor,
            action=action,
            step_id=draft.step_id,
            skill=draft.skill.name if draft.skill else None,
            skill_version=draft.skill.version if draft.skill else None,
            verdict=draft.verdict,
            attempts=draft.attempts,
            tool_calls=draft.tool_calls,
            skill_transition=draft.transition,
            error=draft.error,
            patch=patch,
            view_tokens=_view_tokens(view, draft.usage),
            candidates=view.candidates if view is not None and view.candidates else None,
            **_view_budget(view),
            usage=draft.usage,
            started_at=started or utcnow(),
            **who(actor, draft.identity),
        )
        event = redactor.event(event, patch_clean=checked)
        tracer = trace.current()
        with tracer.span("skillstate.commit", {"skillstate.version": final.version}) as span:
            begun = time.perf_counter()
            self.store.commit(
                final.task_id, expected, stored, event, fence=self._fence(final.task_id)
            )
            if tracer.enabled:
                # The event's patch is the redacted one the store keeps: no secret in it.
                span.event("skillstate.state.diff", {"skillstate.patch": dumps(event.patch)})
                tracer.record("skillstate.commit.duration", time.perf_counter() - begun)
        self._raw[final.task_id] = document
        self._heads[final.task_id] = (final, document)
        if self.observer is not None and before is not None:
            from skillstate.engine.results import StepReport

            self.observer(StepReport(before=before, after=final, event=event, view=view))
        head: AgentState | None = final
        if draft.shared:  # to the record (CAS on the version seen), or the step undone
            head = self.shared.flush(final, resumed=False, before=before)
        if draft.remembered and head is not None:  # now to the memory records
            self.memory.flush(head, resumed=False)
        return final, event

    def _serialize(
        self, before: AgentState | None, final: AgentState, redactor: Redactor
    ) -> tuple[AgentState, dict[str, Any], Patch, JsonDocument, bool]:
        """``final`` as stored (masked), its document, the patch from ``before``'s
        stored document, the document with its text, and whether the patch was
        already found clean.

        When ``before`` is the state of the last document this committer loaded or
        wrote, only the fields the step replaced are serialized (a field the step
        did not touch is the same object in both states) and only the patch is
        masked: the rest of the document was masked when it was written. Otherwise,
        or when the patch holds something to mask, the whole card is.
        """
        task_id = final.task_id
        base: dict[str, Any] = {}
        if before is not None:
            raw = self._raw.get(task_id)
            base = raw if raw is not None and raw.get("version") == before.version else {}
            base = base or before.to_json()
        differ = self._differs.setdefault(task_id, Differ())
        head = self._heads.get(task_id) if before is not None else None
        if head is not None and head[0] is before and head[1] is base:
            names = type(final).model_fields
            hidden = sensitive_fields(type(final))
            changed = frozenset(
                name
                for name in names
                if getattr(final, name) is not getattr(before, name) or name in hidden
            )
            part = final.to_json(changed - _REUSED)
            if "completed_steps" in changed:
                part["completed_steps"] = _records(before, final, base)
            document = {name: part[name] if name in changed else base[name] for name in names}
            patch, stored = differ.diff(base, document, changed=changed)
            if redactor.json(patch) is patch:
                return final, document, patch, stored, True
        document = final.to_json()
        # A secret copied into a plain field (an error message, a summary), a token a
        # tool returned, a phone number a user typed: masked in the state itself
        # (sensitive fields are sealed, not masked), so memory and store never disagree.
        cleaned = redactor.json(document)
        if cleaned is not document:
            try:
                final = self.agent.parse_state(cleaned, task_id=task_id)
            except StateCorrupted as exc:
                raise StateError(
                    f"the redaction policy masks field {exc.field!r} of task "
                    f"{task_id!r} and the masked card is not valid; declare the field "
                    "Sensitive[...] (sealed, not masked) or exempt it in the agent's "
                    "RedactionPolicy"
                ) from exc
            document = final.to_json()
        patch, stored = differ.diff(base, document)
        return final, document, patch, stored, False


_REUSED = frozenset({"completed_steps"})
"""Fields whose items :func:`_records` takes from the stored document when unchanged."""


def _records(before: AgentState, final: AgentState, base: dict[str, Any]) -> list[Any]:
    """``final.completed_steps`` as stored JSON, each record that ``before`` already had
    taken from ``base`` (its exact stored form) and only new ones serialized.

    The window of recent steps changes every step (one record in, the oldest out);
    serializing all of it again was a fifth of a commit. Records are frozen, so the
    same record object always has the same JSON; ``base`` is ``before``'s document.
    """
    stored = base.get("completed_steps")
    if not isinstance(stored, list) or len(stored) != len(before.completed_steps):
        return final.to_json({"completed_steps"})["completed_steps"]  # type: ignore[no-any-return]
    known = {id(r): d for r, d in zip(before.completed_steps, stored, strict=True)}
    out = []
    for record in final.completed_steps:
        data = known.get(id(record))
        out.append(data if data is not None else record.model_dump(mode="json"))
    return out


def _view_tokens(view: View[Any] | None, usage: TokenUsage | None) -> int | None:
    """The view's size for the event: counted when a model read it, else only if known."""
    if view is None:
        return None
    return view.tokens if usage is not None and usage.calls else view.counted_tokens


def _view_budget(view: View[Any] | None) -> dict[str, Any]:
    """The view's budget, overrun and loaded evidence for the event, as far as it was
    rendered (a scripted policy that reads only ``view.state`` renders nothing)."""
    if view is None:
        return {}
    out: dict[str, Any] = {"view_peek": view.shown_peek}
    if view.rendered:
        out.update(view_budget=view.budget, view_overrun=view.overrun or None)
    return out


def _add_usage(totals: UsageTotals, usage: TokenUsage) -> UsageTotals:
    return UsageTotals(
        calls=totals.calls + usage.calls,
        prompt=totals.prompt + usage.prompt,
        completion=totals.completion + usage.completion,
        cached=totals.cached + usage.cached,
        repairs=totals.repairs + usage.repairs,
        cost=totals.cost + (usage.cost or 0.0),
    )
