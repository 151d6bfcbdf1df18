"""The commit phase: one state built from a draft, its event, one compare-and-set.

The draft's state already holds the step's validated writes; the commit adds
the version and the usage without validating the card again, masks secrets,
diffs against the raw stored head (which may predate a schema migration: that
is what the store replays patches over) and writes state, delta and event in one
atomic compare-and-set.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from skillstate.engine.agent import Agent
from skillstate.engine.draft import Draft
from skillstate.errors import StateCorrupted, StateError
from skillstate.events import Actor, Event, TokenUsage, utcnow
from skillstate.state.diff import Differ
from skillstate.state.model import AgentState, UsageTotals
from skillstate.state.redact import Redactor
from skillstate.state.secrets import secret_values
from skillstate.store.base import Store

if TYPE_CHECKING:
    from skillstate.engine.runtime import StepReport
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

    def load(self, task_id: str) -> AgentState:
        """The head state, validated (and migrated) into the agent's state class."""
        checkpoint = self.store.load(task_id)
        state: AgentState = self.agent.parse_state(checkpoint.state, task_id=task_id)
        cached = self._raw.get(task_id)
        if cached is None or cached.get("version") != checkpoint.version:
            # A version is written once (compare-and-set), so a cached document of the same
            # version is the head's: keeping it keeps the differ's texts valid.
            self._raw[task_id] = checkpoint.state
        return state

    def redactor(self, *states: AgentState | None) -> Redactor:
        """What masks secrets in what leaves the process: the agent's redaction policy,
        plus the exact plaintext of ``states``' sensitive fields."""
        values: list[str] = []
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
        changes: dict[str, Any] = {"version": expected + 1}
        if draft.usage is not None:
            changes["usage"] = _add_usage(after.usage, draft.usage)
        final = after.replace(**changes)
        document = final.to_json()
        redactor = self.redactor(before, final)
        # A secret copied into a plain field (an error message, a summary), a token a
        # tool returned, a phone number a user typed: masked in the state itself
        # (sensitive fields are sealed, not masked), so memory and store never disagree.
        cleaned = redactor.json(document)
        if cleaned is not document:
            try:
                final = self.agent.parse_state(cleaned, task_id=final.task_id)
            except StateCorrupted as exc:
                raise StateError(
                    f"the redaction policy masks field {exc.field!r} of task "
                    f"{final.task_id!r} and the masked card is not valid; declare the field "
                    "Sensitive[...] (sealed, not masked) or exempt it in the agent's "
                    "RedactionPolicy"
                ) from exc
            document = final.to_json()
        base: dict[str, Any] = {}
        if before is not None:
            raw = self._raw.get(before.task_id)
            base = raw if raw is not None and raw.get("version") == expected else before.to_json()
        patch, stored = self._differs.setdefault(final.task_id, Differ()).diff(base, document)
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
            view_tokens=view.tokens if view else None,
            usage=draft.usage,
            started_at=started or utcnow(),
        )
        event = redactor.event(event)
        self.store.commit(final.task_id, expected, stored, event, fence=self._fence(final.task_id))
        self._raw[final.task_id] = document
        if self.observer is not None and before is not None:
            from skillstate.engine.runtime import StepReport

            self.observer(StepReport(before=before, after=final, event=event, view=view))
        return final, event


def _add_usage(totals: UsageTotals, usage: TokenUsage) -> UsageTotals:
    return UsageTotals(
        calls=totals.calls + usage.calls,
        prompt=totals.prompt + usage.prompt,
        completion=totals.completion + usage.completion,
        cached=totals.cached + usage.cached,
        repairs=totals.repairs + usage.repairs,
        cost=totals.cost + (usage.cost or 0.0),
    )
