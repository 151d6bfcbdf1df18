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
from datetime import datetime
from enum import Enum
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from typing_extensions import Self

from skillstate._validation import first_error
from skillstate.errors import StateError
from skillstate.state.migrate import check_migrations
from skillstate.state.secrets import MASK, mask, seal, sensitive_fields, unseal

__all__ = [
    "PROTECTED_FIELDS",
    "AgentState",
    "Cancelling",
    "Compensation",
    "Decision",
    "Driver",
    "ErrorEntry",
    "ErrorKind",
    "Evidence",
    "FailedAttempt",
    "Fingerprint",
    "Intent",
    "Received",
    "StepRecord",
    "TaskStatus",
    "ToolApproval",
    "UsageTotals",
    "UserInput",
    "UserMessage",
    "Wait",
]


class TaskStatus(str, Enum):
    """Lifecycle of a task. Only the runtime moves a task between these."""

    CREATED = "created"
    RUNNING = "running"
    WAITING_USER = "waiting_user"
    WAITING_APPROVAL = "waiting_approval"
    """A call the policy chose needs a person's approval first (the card's
    ``pending_approval``); ``approve`` or ``reject`` sets it running again."""
    WAITING = "waiting"
    """Waiting for a time or a signal (the card's ``wait`` says which)."""
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    """Stopped between two steps by a person (``skillstate cancel``); the reason and who
    asked are in the event that cancelled it. Terminal, like ``completed`` and ``failed``."""

    @property
    def is_terminal(self) -> bool:
        return self in (TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED)


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class Fingerprint(_Record):
    """What a step relied on or changed in the world, as a digest that can be re-checked.

    On resume the runtime recomputes each fingerprint (see
    :mod:`skillstate.state.fingerprint`); a step whose world changed is stale.
    """

    kind: str
    """How to recompute it: ``file`` (sha256 of the file) or a registered kind."""
    target: str
    """What it is about: a path, a URL, a row id."""
    digest: str
    """The digest when the step ran (``absent`` for a missing file)."""


class ToolApproval(_Record):
    """One call of a gated tool (``gated(tool, approval=...)``) that a person is asked
    about, or approved, for one step (:mod:`skillstate.control.tool_approvals`)."""

    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    """The arguments the skill called the tool with (as JSON), sealed where the
    redaction policy would mask them: what a later call must match to run."""
    edits: dict[str, Any] = Field(default_factory=dict)
    """Arguments a person changed when approving (validated, sealed likewise): they
    replace those of the same name in the matching call."""


class Intent(_Record):
    """An effect the runtime committed to run, recorded before it runs.

    While a task has a pending intent, a resumed runtime finishes that action (after
    asking the skill's probe whether it already happened) instead of deciding anew.
    """

    step_id: str
    skill: str
    params: dict[str, Any] = Field(default_factory=dict)
    target: str
    """The state-machine step the action enters."""
    reason: str = ""
    key: str
    """The idempotency key handed to the skill (see :func:`skillstate.engine.effects.effect_key`):
    the same for every attempt, resume and re-decision of this logical step."""
    tool: ToolApproval | None = None
    """In a pending approval: the gated tool call the skill's run stopped at (the
    approval is for that call, not for the whole skill)."""
    approved_tools: tuple[ToolApproval, ...] = ()
    """Gated tool calls people approved for this step: when it runs again, a call that
    matches one runs without asking."""


class Compensation(_Record):
    """An effect that reached the world and must be undone before the task goes on.

    A compensating rollback (``skillstate rollback --compensate``) queues one per
    effect it crosses, newest first; the runtime runs each skill's ``rollback``
    hook and commits after each one, so a crash resumes the queue where it stopped.
    """

    key: str
    """The idempotency key the effect ran under."""
    skill: str
    params: dict[str, Any] = Field(default_factory=dict)
    version: int
    """The version that settled the effect."""


class UserInput(_Record):
    """A reply from the user, numbered in the order the task received them."""

    index: int
    """0 for the task's first reply, 1 for the next...: ``run(inputs=[...])`` is
    idempotent per index (a driver re-running after a crash does not repeat one)."""
    text: str


class FailedAttempt(_Record):
    """A decision that was refused or failed since the task last made progress.

    The view shows these in one line, so the next decision knows what was already
    tried and why it did not work; the detailed errors stay in the error log.
    """

    action: str
    """The action as a short signature: ``append_entry {"n": 6}``, ``finish``."""
    reason: str
    times: int = 1
    """How many decisions in a row (since the last progress) ended this way."""


class StepRecord(_Record):
    """One committed step of the task."""

    id: str
    """Unique within the task (``0003-record_priority``); re-applying a known id is a no-op."""
    step: str
    """The state-machine step the task was in once this step ran."""
    action: str
    """``call_skill``, ``ask_user``, ``finish``, ``fail`` or ``revise``."""
    skill: str | None = None
    """The skill that ran, for ``call_skill``."""
    summary: str = ""
    """One line a reader (or a model) can scan."""
    fingerprints: tuple[Fingerprint, ...] = ()
    """What the step relied on; re-checked on resume."""
    undo: dict[str, Any] | None = None
    """The values the step's writes replaced (dotted path -> old value), kept only for
    steps with fingerprints: a stale step's writes are put back to these."""


class Evidence(_Record):
    """A short summary of a raw artifact; the artifact itself stays in the store."""

    kind: str
    """What produced it: ``tool_output``, ``user_input``, ``file`` ..."""
    source: str
    """Which tool, file or person."""
    summary: str
    """A line or two; this is what the prompt view shows."""
    ref: str | None = None
    """Content address of the raw artifact (``sha256:...``), fetched only on demand."""


ErrorKind = Literal[
    "illegal_transition",
    "action_rejected",
    "decision_failed",
    "verify_failed",
    "verify_error",
    "skill_error",
    "tool_not_allowed",
    "output_not_declared",
    "invalid_output",
    "invariant_failed",
    "step_failed",
    "rollback_failed",
    "task_failed",
    "stale_step",
    "stalled",
    "budget",
    "compensation_failed",
    "worker_lost",
    "dead_letter",
    "approval_rejected",
    "wait_timeout",
]
"""What went wrong, as a typed tag: a policy (or mypy) can tell the kinds apart."""


class ErrorEntry(_Record):
    """One entry of the error log."""

    kind: ErrorKind
    """The attempt's failure (``verify_failed``, ``skill_error``, ``invariant_failed``,
    ``output_not_declared``, ...), the step's summary (``step_failed``), a refused
    decision (``action_rejected``, ``illegal_transition``, ``decision_failed``), or the
    runtime's note (``stalled``, ``stale_step``, ``budget``, ``compensation_failed``), or a
    worker's (``worker_lost``: the worker before it died holding the task; ``dead_letter``:
    it died too often, the task failed; ``approval_rejected``: a person refused a call
    that needed approval, with their reason; ``wait_timeout``: a signal did not come in time)."""
    message: str
    step_id: str | None = None
    skill: str | None = None
    attempt: int = 1
    """Which attempt of the step failed (1-based)."""
    max_attempts: int = 1
    """How many attempts the step was allowed."""
    permanent: bool = False
    """The verify said retrying cannot help (``Verdict.failed(..., permanent=True)``)."""
    trace: str | None = None
    """Ref of the artifact with the traceback, when a skill or its verify raised."""


class UsageTotals(_Record):
    """Model usage of the whole task, across resumes: what budgets are checked against."""

    calls: int = 0
    prompt: int = 0
    completion: int = 0
    cached: int = 0
    repairs: int = 0
    cost: float = 0.0


class Driver(_Record):
    """The model that decides a task, so ``resume`` and ``reply`` go on with it."""

    model: str
    """A provider spec: ``openai:NAME``, ``local``, ``replay:FILE``."""
    policy: str = "state"
    max_repairs: int = 2
    base_url: str | None = None


class Wait(_Record):
    """What a ``waiting`` task waits for (:mod:`skillstate.control.waits`).

    The deadline is data the decision chose (an absolute time, so a resume in another
    process agrees on it); when the wait began is in the event that committed it.
    """

    kind: Literal["until", "signal"]
    """``until``: a time (``WaitUntil``); ``signal``: a named signal (``WaitFor``)."""
    signal: str | None = None
    """The signal waited for (a name the agent declares in ``Agent(signals=...)``)."""
    deadline: datetime | None = None
    """When the wait ends (UTC): the wake-up time of ``until``, the timeout of ``signal``
    (``None``: a signal waited for without a timeout)."""
    timeout: float | None = None
    """The signal's timeout in seconds, as decided (for the timeout's message)."""
    reason: str = ""
    on_timeout: str | None = None
    """The machine step a timed-out signal wait goes to; ``None``: the task fails."""


class Received(_Record):
    """The latest signal of one name that a wait consumed (the card's ``signals``)."""

    seq: int
    """Its number in the task's inbox: a later wait consumes only a later one."""
    data: dict[str, Any] | None = None
    """Its payload as JSON, validated against the schema the agent declares
    (``View.signal(name)`` gives it typed); ``None`` if none was usable yet."""


class UserMessage(_Record):
    """A message sent to the task while it ran (``skillstate send``), taken from its inbox.

    It stays in the card until a decision has seen it (:mod:`skillstate.control.inbox`).
    """

    seq: int
    """Its number in the task's inbox (:meth:`~skillstate.store.base.Store.post`)."""
    text: str
    actor: str = ""
    """Who sent it (``$SKILLSTATE_ACTOR`` or the OS user of ``skillstate send``)."""
    at: datetime
    """When it was sent (UTC)."""
    urgent: bool = False
    """Sent to an agent with ``messages="interrupt"``: the next decision sees it first."""
    interrupted: str | None = None
    """The open question it interrupted (the task was waiting for a reply), if any."""


class Cancelling(_Record):
    """A cancel in progress: its effects are being undone before the task is cancelled."""

    seq: int
    """The cancel's number in the task's inbox."""
    reason: str = ""
    actor: str = ""
    compensate: bool = False


class Decision(_Record):
    """The last action the policy took, and why."""

    action: str
    target: str | None = None
    """The skill called, the step entered, or ``None``."""
    reason: str = ""


CARD_VERSION = 5
"""The base card's own format. 2 added ``steps_taken``, ``tried``, ``no_progress``,
``compensations``, ``effect_generations``, ``StepRecord.undo`` and
``ErrorEntry.permanent``; 3 turned the one-slot ``inbox`` into ``inputs`` (a queue of
numbered replies) and ``inputs_received``; 4 added ``replies_ahead``; 5 (long-running
control, issue 25) added ``wait``, ``signals``, ``pending_approval``, ``messages``,
``inbox_seen`` and ``cancelling``."""

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
        "no_progress",
        "usage",
        "driver",
        "agent",
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
    no_progress: int = 0
    """Decisions in a row that changed nothing but bookkeeping (the stall guard's count)."""
    usage: UsageTotals = Field(default_factory=UsageTotals)
    """Model calls, tokens and cost so far (budgets are checked against these)."""
    driver: Driver | None = None
    """The model deciding this task (``None``: the agent's own policy)."""
    agent: str | None = None
    """``module:attr`` of the agent driving this task, so ``resume`` can find it."""
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
                grouped[top] = copy.deepcopy(value)
                continue
            if top not in grouped:
                grouped[top] = self.model_dump(mode="python", include={top}).get(top)
            holder = {top: grouped[top]}
            _set_path(holder, path, copy.deepcopy(value))
            grouped[top] = holder[top]
        if not _assignable(type(self)):
            data = self.model_dump(mode="python")
            data.update(grouped)
            return self._validated(data)
        updated = self.model_copy()
        validator = type(self).__pydantic_validator__
        for name, value in grouped.items():
            try:
                validator.validate_assignment(updated, name, value)
            except ValidationError as exc:
                raise StateError(f"invalid state: {first_error(exc, 'state')}") from exc
        return updated

    def with_step(self, record: StepRecord) -> Self:
        """Append ``record`` unless a step with its id is already recorded (idempotent).

        The window keeps :attr:`MAX_STEPS` records: the oldest without fingerprints
        leaves first.
        """
        if self.has_step(record.id):
            return self
        # One plan entry per step: a plan may name the same skill twice.
        pending = list(self.pending_steps)
        for label in (record.skill, record.step):
            if label in pending:
                pending.remove(label)
                break
        return self.replace(
            completed_steps=_window((*self.completed_steps, record), type(self).MAX_STEPS),
            steps_taken=self.steps_taken + 1,
            pending_steps=tuple(pending),
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


def _window(records: tuple[StepRecord, ...], size: int) -> tuple[StepRecord, ...]:
    """The last ``size`` records, dropping the oldest unfingerprinted ones first."""
    size = max(size, 1)
    excess = len(records) - size
    if excess <= 0:
        return records
    dropped: set[int] = set()
    for index, record in enumerate(records):
        if len(dropped) == excess:
            break
        if not record.fingerprints:
            dropped.add(index)
    kept = tuple(r for index, r in enumerate(records) if index not in dropped)
    return kept[-size:]


_ASSIGNABLE: dict[type[AgentState], bool] = {}


def _assignable(cls: type[AgentState]) -> bool:
    """Whether writes may be validated field by field: no model validators but ours."""
    found = _ASSIGNABLE.get(cls)
    if found is None:
        validators = cls.__pydantic_decorators__.model_validators
        found = set(validators) <= {"_unseal_sensitive"}
        _ASSIGNABLE[cls] = found
    return found


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
