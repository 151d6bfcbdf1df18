"""Records that cross the store boundary: one :class:`Event` per committed version.

Every optional field of these records defaults to ``None``: stores leave ``None``
fields out of what they write, and reading must give the same event back.

An event is the audit line of a step: what was decided, which skill (and version)
ran, which tools it called, what verify said, and the JSON Patch from the previous
state. Events are append-only; the state card is their fold.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "Actor",
    "Candidate",
    "Event",
    "SkillTransition",
    "TokenUsage",
    "ToolCall",
    "Verdict",
    "utcnow",
]

Actor = Literal["policy", "user", "human", "runtime"]


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Verdict(_Record):
    """The result of a skill's ``verify``: only ``ok`` results are written to state."""

    ok: bool
    reason: str = ""
    permanent: bool = False
    """For a failure: retrying cannot help (the input is wrong, not the luck), so the
    runtime does not retry the step; its rollback runs at once."""

    @classmethod
    def passed(cls, reason: str = "") -> Verdict:
        return cls(ok=True, reason=reason)

    @classmethod
    def failed(cls, reason: str, *, permanent: bool = False) -> Verdict:
        return cls(ok=False, reason=reason, permanent=permanent)


class ToolCall(_Record):
    """One tool call made by a skill through its context."""

    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    ok: bool = True
    summary: str = ""
    """A short rendering of the result (or of the error)."""
    ref: str | None = None
    """Artifact ref of the full raw result; the state never holds it."""
    attempt: int = 1
    duration_ms: float = 0.0


class TokenUsage(_Record):
    """What one decision cost: the provider's usage, or offline counts (``estimated``)."""

    prompt: int = 0
    completion: int = 0
    cached: int = 0
    calls: int = 0
    """Model calls made (0: a scripted policy; the counts are what a model would see)."""
    repairs: int = 0
    """Invalid replies sent back with their error."""
    estimated: bool = False
    model: str | None = None
    cost: float | None = None
    """In the currency of the prices the runtime was given, if any."""
    duration_ms: float | None = None


class SkillTransition(_Record):
    """An explicit change of the active skill (seed 001, §8.6)."""

    from_skill: str | None = None
    to_skill: str | None = None
    reason: str = ""


class Candidate(_Record):
    """One skill a decision was offered by a skill retriever, with why (seed 004 §5.1)."""

    skill: str
    score: float
    """What the candidates were ranked by: ``relevance`` weighted by the skill's record."""
    relevance: float
    """The retriever's relevance of the skill to the decision (0: no match)."""
    success_rate: float | None = None
    """Verified successes / attempts of the skill in this store (``None``: never run)."""
    attempts: int = 0
    """The attempts ``success_rate`` is measured over."""
    pinned: bool = False
    """Offered whatever its score: the plan's next step names it, or loaded instructions do."""


class Event(_Record):
    """What one commit did. ``version`` is the version it produced."""

    task_id: str
    version: int
    actor: Actor
    action: dict[str, Any]
    """The action as JSON: ``{"kind": "call_skill", "skill": ..., "params": ...}`` etc."""
    step_id: str | None = None
    skill: str | None = None
    skill_version: str | None = None
    verdict: Verdict | None = None
    attempts: int = 0
    tool_calls: tuple[ToolCall, ...] = ()
    skill_transition: SkillTransition | None = None
    error: str | None = None
    """The error-log message this event added, if any."""
    patch: list[dict[str, Any]] = Field(default_factory=list)
    """RFC 6902 JSON Patch from version - 1 to this version."""
    view_tokens: int | None = None
    """Tokens of the prompt view the decision was made from."""
    view_budget: int | None = None
    """The token budget that view was fitted into (``None``: none, or never rendered)."""
    view_overrun: int | None = None
    """Tokens the view was still over :attr:`view_budget` with everything it may hide
    hidden (``None``: it fit); see :mod:`skillstate.state.budget`."""
    view_peek: str | None = None
    """Ref of the raw evidence the view showed this decision (an earlier
    ``load_evidence`` asked for it); the text itself is in no event."""
    usage: TokenUsage | None = None
    """Tokens (and cost) of the decision, for events a policy decided."""
    candidates: tuple[Candidate, ...] | None = None
    """The skills the decision was offered and their scores, when the agent retrieves
    its skills (``Agent(retriever=...)``); ``None`` otherwise."""
    by: str | None = None
    """Who made a person's commit (``actor`` human or user): ``--actor``,
    ``$SKILLSTATE_ACTOR``, the OS user, or the inspector token's name
    (:mod:`skillstate.audit`); ``None`` for the runtime's own, and in events written
    before identities were recorded."""
    reason: str | None = None
    """Why, as that person said it (``--reason``); ``None`` when nobody said."""
    started_at: datetime = Field(default_factory=utcnow)
    finished_at: datetime = Field(default_factory=utcnow)

    @property
    def label(self) -> str:
        """A short human name for the event: the skill, or the action kind."""
        kind = str(self.action.get("kind", "?"))
        return f"{kind}:{self.skill}" if self.skill else kind
