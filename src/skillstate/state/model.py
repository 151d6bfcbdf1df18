"""The state card: everything a decision needs, and nothing it has already consumed.

A task is driven by one :class:`AgentState`. It is immutable: every change makes a
validated copy (:meth:`AgentState.evolve`, :meth:`AgentState.with_writes`), which is
what lets the runtime diff two versions, commit them atomically and roll back.

Users extend the card by subclassing with typed fields::

    class TicketState(AgentState):
        ticket_type: str | None = None
        priority: Literal["P1", "P2", "P3"] | None = None

The card holds no timestamps on purpose: two runs that take the same decisions end
in byte-identical states, so "resume gives the same result" is a plain equality.
Timestamps live in the events.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from math import isfinite
from typing import Any, ClassVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from typing_extensions import Self

from skillstate._validation import first_error
from skillstate.errors import StateError
from skillstate.memory.facts import Recalled, Remembered
from skillstate.shared.records import SharedSnapshot, SharedWrite
from skillstate.state.card_fields import ATOMIC, assignable, plain_fields
from skillstate.state.migrate import check_migrations
from skillstate.state.records import (
    BudgetWarning,
    Cancelling,
    ChildRecord,
    ChildStatus,
    Compensation,
    Decision,
    Driver,
    ErrorEntry,
    ErrorKind,
    Evidence,
    FailedAttempt,
    Fingerprint,
    Intent,
    ParentLink,
    Received,
    Rejected,
    SkillInstructions,
    StepRecord,
    TaskStatus,
    ToolApproval,
    UsageTotals,
    UserInput,
    UserMessage,
    Wait,
)
from skillstate.state.secrets import MASK, mask, seal, sensitive_fields, unseal
from skillstate.templates.hint import TemplateHint

__all__ = [
    "PROTECTED_FIELDS",
    "AgentState",
    "Cancelling",
    "ChildRecord",
    "ChildStatus",
    "Compensation",
    "Decision",
    "Driver",
    "ErrorEntry",
    "ErrorKind",
    "Evidence",
    "FailedAttempt",
    "Fingerprint",
    "Intent",
    "ParentLink",
    "Received",
    "Rejected",
    "SkillInstructions",
    "StepRecord",
    "TaskStatus",
    "ToolApproval",
    "UsageTotals",
    "UserInput",
    "UserMessage",
    "Wait",
]


CARD_VERSION = 9
"""The base card's own format. 2 added ``steps_taken``, ``tried``, ``no_progress``,
``compensations``, ``effect_generations``, ``StepRecord.undo`` and
``ErrorEntry.permanent``; 3 turned the one-slot ``inbox`` into ``inputs`` (a queue of
numbered replies) and ``inputs_received``; 4 added ``replies_ahead``; 5 (long-running
control, issue 25) added ``wait``, ``signals``, ``pending_approval``, ``messages``,
``inbox_seen`` and ``cancelling``; 6 (definitions that evolve, issue 26) added
the fields listed in :func:`skillstate.state.migrate._base_5_to_6`; 7 (learning from
finished work, issue 27) those in :func:`skillstate.state.migrate._base_6_to_7`; 8
(fan-out, issue 28) those in :func:`skillstate.state.migrate._base_7_to_8`; 9
(operations, issue 29) those in :func:`skillstate.state.migrate._base_8_to_9`."""

#: Fields only the runtime writes. A skill that declares one of these in
#: ``outputs`` is refused at definition time.
PROTECTED_FIELDS = frozenset(
    {
        "task_id",
        "status",
        "goal",
        "constraints",
        "current_step",
        "completed_steps",
        "steps_taken",
        "errors",
        "last_decision",
        "active_skill",
        "question",
        "inputs",
        "inputs_received",
        "replies_ahead",
        "pending_approval",
        "wait",
        "signals",
        "messages",
        "inbox_seen",
        "cancelling",
        "pending_effect",
        "compensations",
        "effect_generations",
        "tried",
        "peek",  # evidence on demand (issue 26)
        "rejected",  # rejected approaches (issue 26)
        "unchecked_steps",  # transitive staleness (issue 26)
        "recalled",  # cross-task memory (issue 27)
        "recalled_from",
        "memory_outbox",
        "shared_snapshots",  # shared records (issue 28)
        "shared_pending",
        "no_progress",
        "usage",
        "budget_warnings",  # budgets (issue 29)
        "driver",
        "agent",
        "definition",
        "carried_patches",
        "template",  # templates from finished tasks (issue 27)
        "parent",  # fan-out (issue 28)
        "children",
        "version",
        "schema_version",
        "card_version",
    }
)


class AgentState(BaseModel):
    """The explicit execution state of one task (the "state card")."""

    # hide_input_in_errors: a validation error must never echo a value (it may be a
    # secret, or a whole document) into a log line.
    # allow_inf_nan=False: a card must be storable as JSON, which has no infinity.
    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        validate_default=True,
        hide_input_in_errors=True,
        allow_inf_nan=False,
    )

    SCHEMA_VERSION: ClassVar[int] = 1
    """Bump in a subclass when its fields change incompatibly (migrations key on it)."""
    MAX_EVIDENCE: ClassVar[int] = 20
    """Evidence is a bounded buffer: the oldest summaries go first (the refs stay valid)."""
    MAX_ERRORS: ClassVar[int] = 50
    """The error log keeps this many entries in state; events keep all of them."""
    MAX_REJECTED: ClassVar[int] = 8
    """``rejected`` keeps this many calls; the oldest goes first."""
    MAX_STEPS: ClassVar[int] = 20
    """``completed_steps`` keeps the most recent records, this many; ``steps_taken``
    counts all of them and the event log keeps every one (``View.step(id)`` finds an
    older one). Bounded so a step costs the same at step 10 and at step 10,000."""

    task_id: str = Field(min_length=1)
    status: TaskStatus = TaskStatus.CREATED
    goal: str = ""
    constraints: tuple[str, ...] = ()
    """Hard rules stated once; every prompt view shows all of them."""
    current_step: str = "init"
    completed_steps: tuple[StepRecord, ...] = ()
    """The most recent steps (:attr:`MAX_STEPS` of them), oldest first. Steps with
    fingerprints are the last to leave, so a resume can still re-check them."""
    steps_taken: int = 0
    """Steps completed over the task's life. Never decreases (a stale step leaves
    ``completed_steps`` but still counts), so it numbers logical steps: effect keys
    use it as the step's position."""
    pending_steps: tuple[str, ...] = ()
    """The remaining plan; its first entry with the name of a completed skill (or else of
    its step) is removed, so a plan may name the same skill more than once."""
    facts: dict[str, Any] = Field(default_factory=dict)
    """Key results that later decisions need (small values, not raw tool output)."""
    evidence: tuple[Evidence, ...] = ()
    peek: str | None = None
    """The ref of the evidence a ``load_evidence`` decision asked to see raw: the next
    decision's view shows the artifact (bounded, masked), never the card; that
    decision's commit clears it (evidence on demand, issue 26)."""
    skill_instructions: tuple[SkillInstructions, ...] = ()
    template: TemplateHint | None = None
    """The plan of the template this task started from (``run --template``): a hint the
    view shows, next entry first; each completed step takes the first remaining entry
    of its skill off (:mod:`skillstate.templates`)."""
    """Instructions loaded by model-facing skills (``SKILL.md``), the latest last: the
    view shows them to every decision while they are here (skill library, issue 26)."""
    errors: tuple[ErrorEntry, ...] = ()
    last_decision: Decision | None = None
    active_skill: str | None = None
    question: str | None = None
    """The open question while ``status == waiting_user``."""
    inputs: tuple[UserInput, ...] = ()
    """Replies not yet used, oldest first. They stay until a decision that works (a
    skill that passes verify, a question, a finish) consumes them: a reply a failing
    skill could not use is still there for the next decision."""
    inputs_received: int = 0
    """Replies the task has received in all (the next one gets this index)."""
    replies_ahead: tuple[str, ...] = ()
    """Replies given before the task asked (``skillstate submit --input``): each time
    the task waits for the user, the runtime answers with the first one, as
    ``run(inputs=...)`` does. Kept in the card (never shown to a model) so that any
    worker can hand them out: a queue message carries no state."""
    wait: Wait | None = None
    """What the task waits for while ``status == waiting`` (a time or a signal)."""
    signals: dict[str, Received] = Field(default_factory=dict)
    """The latest signal of each name a wait consumed: its inbox number and its payload
    (validated against the schema the agent declares, ``Agent(signals=...)``)."""
    pending_approval: Intent | None = None
    """A call that waits for a person's approval while ``status == waiting_approval``
    (:mod:`skillstate.control.approvals`): what an approval turns into ``pending_effect``."""
    messages: tuple[UserMessage, ...] = ()
    """Messages sent while the task ran that no decision has seen yet, oldest first: the
    next decision's view shows them (urgent ones first) and its commit takes them off
    the card; the event that took each from the inbox keeps it."""
    inbox_seen: int = 0
    """The number of the last inbox message the runtime took (its store inbox is
    append-only): the commit that takes messages moves it, so each is taken once."""
    cancelling: Cancelling | None = None
    """A cancel waiting for its compensations to finish (``cancel --compensate``)."""
    pending_effect: Intent | None = None
    """An effect recorded but not yet confirmed (see :class:`Intent`)."""
    compensations: tuple[Compensation, ...] = ()
    """Effects a compensating rollback still has to undo, next first; the runtime
    runs them before it decides anything else."""
    effect_generations: dict[str, int] = Field(default_factory=dict)
    """How often each effect key was compensated. A compensated key is never reused:
    the next run of that logical step gets ``<key>~<generation>``, so a server that
    remembers idempotency keys does not answer it with the undone effect's result."""
    tried: tuple[FailedAttempt, ...] = ()
    """Refused or failed decisions since the last progress (what the view's "already
    tried" line shows); cleared by a step that makes progress or by a reply."""
    rejected: tuple[Rejected, ...] = ()
    """Skill calls judged wrong (a failed verify, a person's rejection), newest last,
    :attr:`MAX_REJECTED` of them: they survive unrelated progress and go when a value
    they depended on changes (:mod:`skillstate.engine.rejections`)."""
    unchecked_steps: int = 0
    """Steps that could go stale but left the card's window (more than
    :attr:`MAX_STEPS` of them could): their fingerprints are no longer re-checked.
    Raise ``MAX_STEPS`` on the state class if this grows for your tasks."""
    recalled: tuple[Recalled, ...] = ()
    """Facts of other tasks from the cross-task memory the agent reads
    (``Agent(memory=[...])``), the most recent first, with their provenance: what the
    views show, so a view is a function of the card (:mod:`skillstate.memory`). The
    runtime replaces them before a decision when the memory changed."""
    recalled_from: dict[str, int] = Field(default_factory=dict)
    """The version of each memory scope's record :attr:`recalled` was read at."""
    parent: ParentLink | None = None
    """The task that spawned this one (:mod:`skillstate.fanout`); ``None`` for a root."""
    children: tuple[ChildRecord, ...] = ()
    """The child tasks this task spawned, oldest first, and how each ended once joined."""
    memory_outbox: tuple[Remembered, ...] = ()
    """Memory writes of a verified step, committed with it and written to their scopes
    right after; non-empty on a head only if a crash came in between (the runtime
    flushes it before anything else, exactly once)."""
    shared_snapshots: tuple[SharedSnapshot, ...] = ()
    """The shared records the agent declares (``Agent(shared=...)``) as this task's views
    show them, each with the version read: what a write is compared against
    (:mod:`skillstate.shared`). Refreshed before a decision when a record moved."""
    shared_pending: tuple[SharedWrite, ...] = ()
    """A verified step's write to a shared record, committed with the step and written
    right after; non-empty on a head only if a crash came in between (the runtime
    settles it first, exactly once)."""
    no_progress: int = 0
    """Decisions in a row that changed nothing but bookkeeping (the stall guard's count)."""
    usage: UsageTotals = Field(default_factory=UsageTotals)
    """Model calls, tokens and cost so far (budgets are checked against these)."""
    budget_warnings: tuple[BudgetWarning, ...] = ()
    """Budgets the task came near (one per dimension, recorded once): what the budget
    alert and the inspector show before the stop at the limit (:mod:`skillstate.ops.budgets`)."""
    driver: Driver | None = None
    """The model deciding this task (``None``: the agent's own policy)."""
    agent: str | None = None
    """``module:attr`` of the agent driving this task, so ``resume`` can find it."""
    definition: str | None = None
    """The definition this task is pinned to: ``sha256:<hex>`` of its agent's manifest
    (machine, skills, state schema; :mod:`skillstate.definitions`), stored as an
    artifact under that ref. A step under another definition is refused unless the
    agent declares how to carry the change; ``None`` on a card older than pins (its
    next commit pins it)."""
    carried_patches: tuple[str, ...] = ()
    """The patches (``patched(...)`` ids) this task was carried across: it started
    before them (:func:`skillstate.definitions.is_patched` is false for these)."""
    version: int = 0
    """Bumped by every commit; the store's compare-and-set keys on it."""
    schema_version: int = Field(default=-1, validate_default=True)
    card_version: int = CARD_VERSION
    """The version of these base fields (``schema_version`` is the subclass's): stored
    cards of an older one are migrated on load (:mod:`skillstate.state.migrate`)."""

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        # A duplicate or out-of-range @migration fails when the class is defined,
        # not when the first old task loads.
        check_migrations(cls)

    def model_post_init(self, context: Any, /) -> None:
        # A default of -1 means "this class's current schema"; stored states keep theirs.
        if self.schema_version == -1:
            object.__setattr__(self, "schema_version", type(self).SCHEMA_VERSION)

    # ------------------------------------------------------------------ queries

    @property
    def inbox(self) -> str | None:
        """The latest reply not yet used (``None`` when there is none)."""
        return self.inputs[-1].text if self.inputs else None

    @property
    def step_count(self) -> int:
        """How many steps the task has completed (``steps_taken``)."""
        return self.steps_taken

    def has_step(self, step_id: str) -> bool:
        return any(record.id == step_id for record in self.completed_steps)

    @classmethod
    def custom_fields(cls) -> tuple[str, ...]:
        """Fields a subclass added to the base card, in declaration order."""
        return tuple(name for name in cls.model_fields if name not in AgentState.model_fields)

    # ------------------------------------------------------------------ changes

    def evolve(self, **changes: Any) -> AgentState:
        """A validated copy with ``changes`` applied to top-level fields."""
        data = self.model_dump(mode="python")
        data.update(changes)
        return self._validated(data)

    def replace(self, **changes: Any) -> Self:
        """A copy with runtime-owned fields replaced, *without* validation.

        For the runtime's bookkeeping only (step records, errors, status, counters),
        whose values it builds from typed records itself: re-validating the whole
        card for each of them is what made a step cost more as the task grew. User
        data goes through :meth:`with_writes`, which validates.
        """
        return self.model_copy(update=changes)

    def with_writes(self, writes: Mapping[str, Any]) -> AgentState:
        """A validated copy with dotted-path ``writes`` applied (``facts.total`` or a field).

        Only the fields written are validated, on a copy of this (already valid) card:
        the cost of a step does not depend on how much the card holds. A class with
        model validators of its own is validated whole instead, since they may check
        fields against each other.
        """
        if not writes:
            return self
        fields = type(self).model_fields
        grouped: dict[str, Any] = {}
        for path, value in writes.items():
            top, _, rest = path.partition(".")
            if top not in fields:
                raise StateError(f"invalid state: {top}: no such field")
            if not rest:
                grouped[top] = value if type(value) in ATOMIC else copy.deepcopy(value)
                continue
            if top not in grouped:
                grouped[top] = self.model_dump(mode="python", include={top}).get(top)
            holder = {top: grouped[top]}
            _set_path(holder, path, copy.deepcopy(value))
            grouped[top] = holder[top]
        if not assignable(type(self)):
            data = self.model_dump(mode="python")
            data.update(grouped)
            return self._validated(data)
        updated = self.model_copy()
        validator = type(self).__pydantic_validator__
        plain = plain_fields(type(self))
        for name, value in grouped.items():
            kind = plain.get(name)
            if kind is not None and type(value) is kind and (kind is not float or isfinite(value)):
                # A plain int/str/bool/float field given exactly its type: pydantic
                # would return the value unchanged, so it is set without the call.
                updated.__dict__[name] = value
                updated.__pydantic_fields_set__.add(name)
                continue
            try:
                validator.validate_assignment(updated, name, value)
            except ValidationError as exc:
                raise StateError(f"invalid state: {first_error(exc, 'state')}") from exc
        return updated

    def with_step(self, record: StepRecord) -> Self:
        """Append ``record`` unless a step with its id is already recorded (idempotent).

        The window keeps :attr:`MAX_STEPS` records: the oldest that can never go stale
        leaves first, then the oldest that can only go stale through another step,
        fingerprinted steps last (:func:`_window`).
        """
        if self.has_step(record.id):
            return self
        # One plan entry per step: a plan may name the same skill twice.
        pending = list(self.pending_steps)
        for label in (record.skill, record.step):
            if label in pending:
                pending.remove(label)
                break
        kept, unchecked = _window((*self.completed_steps, record), type(self).MAX_STEPS)
        changes: dict[str, Any] = {}
        if self.template is not None and record.action == "call_skill":
            changes["template"] = self.template.after(record.skill)
        if unchecked:
            changes["unchecked_steps"] = self.unchecked_steps + unchecked
        return self.replace(
            completed_steps=kept,
            steps_taken=self.steps_taken + 1,
            pending_steps=tuple(pending),
            **changes,
        )

    def with_evidence(self, items: Iterable[Evidence]) -> Self:
        # Records built by a skill may be dicts; the card only ever holds Evidence.
        items = tuple(i if isinstance(i, Evidence) else Evidence.model_validate(i) for i in items)
        if not items:
            return self
        merged = (*self.evidence, *items)
        return self.replace(evidence=merged[-type(self).MAX_EVIDENCE :])

    def with_error(self, entry: ErrorEntry) -> Self:
        merged = (*self.errors, entry)
        return self.replace(errors=merged[-type(self).MAX_ERRORS :])

    def _validated(self, data: dict[str, Any]) -> AgentState:
        try:
            return type(self).model_validate(data)
        except ValidationError as exc:
            raise StateError(f"invalid state: {first_error(exc, 'state')}") from exc

    def to_json(self, fields: Iterable[str] | None = None) -> dict[str, Any]:
        """The state as plain JSON types (what stores persist and patches diff).

        Sensitive fields come out sealed (``enc:v1:...``), or this raises
        ``SecretKeyMissing``: the stored form never holds them in the clear.
        ``fields`` limits it to those top-level fields (what a commit re-serializes).
        """
        data = self.model_dump(mode="json", include=None if fields is None else set(fields))
        if sensitive_fields(type(self)):  # a card without any pays nothing
            return seal(type(self), data)
        return data

    def to_view_json(self) -> dict[str, Any]:
        """The state as JSON for people and models: sensitive values shown as ``***``."""
        return mask(type(self), self.model_dump(mode="json"))

    # ------------------------------------------------------------------ sealing

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> Self:
        """Validate, decrypting sealed sensitive values of a stored document first.

        Done here rather than only in the validator below so a missing or wrong key
        raises ``SecretKeyMissing`` itself: pydantic would turn it into a
        ``ValidationError`` (it is a ``ValueError``).
        """
        if isinstance(obj, Mapping) and sensitive_fields(cls):
            obj = unseal(cls, obj)
        return super().model_validate(obj, *args, **kwargs)

    @model_validator(mode="before")
    @classmethod
    def _unseal_sensitive(cls, data: Any) -> Any:
        # Every other way in (the constructor, model_validate_json) decrypts too, so
        # a ciphertext can never pass for the plaintext a skill would then use.
        if isinstance(data, Mapping) and sensitive_fields(cls):
            return unseal(cls, data)
        return data

    def __repr_args__(self) -> Iterable[tuple[str | None, Any]]:
        # repr() and str() of a card end up in logs and tracebacks: mask there too.
        hidden = sensitive_fields(type(self))
        for name, value in super().__repr_args__():
            yield name, (MASK if name in hidden and value is not None else value)


def _window(records: tuple[StepRecord, ...], size: int) -> tuple[tuple[StepRecord, ...], int]:
    """The last ``size`` records, and how many that could go stale had to leave.

    The oldest records that can never go stale (no ``undo``) leave first, then the
    oldest that can only go stale through another step, fingerprinted ones last: a
    resume can still re-check those (:mod:`skillstate.state.depends`).
    """
    size = max(size, 1)
    excess = len(records) - size
    if excess <= 0:
        return records, 0
    dropped: set[int] = set()
    for tier in (_never_stale, _stale_through_others, _fingerprinted):
        for index, record in enumerate(records):
            if len(dropped) == excess:
                break
            if index not in dropped and tier(record):
                dropped.add(index)
    kept = tuple(r for index, r in enumerate(records) if index not in dropped)
    unchecked = sum(1 for index in dropped if records[index].undo is not None)
    return kept, unchecked


def _never_stale(record: StepRecord) -> bool:
    return record.undo is None and not record.fingerprints


def _stale_through_others(record: StepRecord) -> bool:
    return not record.fingerprints


def _fingerprinted(record: StepRecord) -> bool:
    return True


def _set_path(data: dict[str, Any], path: str, value: Any) -> None:
    parts = path.split(".")
    target: Any = data
    for part in parts[:-1]:
        if not isinstance(target, dict):
            raise StateError(f"cannot write {path!r}: {part!r} is not a mapping")
        target = target.setdefault(part, {})
        if target is None:
            raise StateError(f"cannot write {path!r}: {part!r} is empty")
    if not isinstance(target, dict):
        raise StateError(f"cannot write {path!r}: its parent is not a mapping")
    target[parts[-1]] = value
