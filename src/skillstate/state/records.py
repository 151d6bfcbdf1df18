"""The records a state card is made of: step records, evidence, errors, intents, waits.

Each is a small frozen pydantic model (unknown keys refused) that the card
(:class:`~skillstate.state.model.AgentState`) holds in its fields; they are
re-exported from :mod:`skillstate.state.model`, where most code imports them.
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

__all__ = [
    "BudgetWarning",
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
    WAITING_CHILDREN = "waiting_children"
    """Waiting for the child tasks it spawned to end (the card's ``children``,
    :mod:`skillstate.fanout`); the join moves it on, once, when the last one has."""

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
    """The values the step's writes replaced (dotted path -> old value; a sensitive
    field's sealed), kept only for steps that can go stale (they have fingerprints, or
    depend on a step that has: :mod:`skillstate.state.depends`): a stale step's writes
    are put back to these. ``None`` also marks a step that can never go stale."""
    reads: tuple[str, ...] | None = None
    """For a step that can go stale (it keeps ``undo``): what its skill declared it
    ``reads`` (``None``: declared nothing, so it depends on every step before it that
    can go stale). Not recorded (and not stored) for other steps."""
    writes: tuple[str, ...] | None = None
    """For a step that can go stale: the dotted paths it wrote (``None``: not recorded,
    or unknown for a record from before card version 6). A later step that reads one
    of them goes stale with this one."""

    @model_serializer(mode="wrap")
    def _compact(self, handler: SerializerFunctionWrapHandler) -> Any:
        # Most steps can never go stale: their records carry no paths at all, so a
        # task that fingerprints nothing pays nothing for transitive staleness.
        data = handler(self)
        if isinstance(data, dict):
            for name in ("reads", "writes"):
                if data.get(name, 0) is None:
                    del data[name]
        return data


class Rejected(_Record):
    """A skill call whose outcome was judged wrong, remembered until what it read changes.

    Unlike :class:`FailedAttempt` (cleared by any progress), it stays through unrelated
    steps: the view shows it to each decision that is offered the skill, and an
    identical call after a permanent rejection is refused without running
    (:mod:`skillstate.engine.rejections`). It goes once a value it depended on changes.
    """

    skill: str
    shown: str
    """The call as a short signature, secrets masked (``render {"title": "Q3"}``)."""
    params: str
    """A digest of the call's params (salted with the task id, never the values): what
    an identical call is recognised by."""
    reason: str
    step_id: str
    permanent: bool = False
    """The verify said retrying cannot help (``Verdict.failed(..., permanent=True)``) or
    a person rejected the call: an identical call is refused, not run again."""
    reads: tuple[str, ...] | None = None
    """What it depended on: the skill's declared ``reads`` (``None``: every typed field
    and fact of the card)."""
    depends: str
    """A digest of the values of :attr:`reads` when it was rejected; the entry holds
    while the card still gives the same digest."""


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


class SkillInstructions(_Record):
    """Instructions a model-facing skill (a ``SKILL.md`` file) loaded into the card: the
    views of the decisions that follow show them (:mod:`skillstate.library.markdown`)."""

    skill: str
    """The skill that loaded them."""
    digest: str
    """``sha256:...`` of the file's instructions when they were loaded."""
    text: str
    """The instructions, cut to a bound (the whole text is in the artifact ``ref``)."""
    ref: str | None = None
    """Content address of the whole instructions when ``text`` was cut."""
    uses: tuple[str, ...] = ()
    """The skills its ``allowed-tools`` names: offered to the model while loaded."""


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
    "shared_conflict",
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


class BudgetWarning(_Record):
    """A budget the task came near: recorded once per dimension, before the stop at
    the limit (:mod:`skillstate.ops.budgets`; issue 29)."""

    dimension: Literal["tokens", "calls", "cost"]
    used: float
    limit: float
    """The limit (``--max-*`` or the agent's ``Budget``) it was measured against."""
    warn_at: float
    """The share of ``limit`` at which it warned."""


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


class ParentLink(_Record):
    """A child task's link to the task that spawned it (:mod:`skillstate.fanout`)."""

    task_id: str
    """The parent task."""
    version: int
    """The parent's version that recorded the spawn."""
    name: str
    """The child kind, as the parent's agent declares it (``Agent(children={name: ...})``)."""
    key: str
    """This child's key among the siblings of one spawn."""
    depth: int = 1
    """How deep in the tree: 1 for a child of a root task."""


ChildStatus = Literal["pending", "completed", "failed", "cancelled", "detached"]
"""How a child stands in its parent's card: ``pending`` until the join reads its end."""


class ChildRecord(_Record):
    """One child task a task spawned and, after the join, how it ended."""

    task_id: str
    name: str
    """The child kind (``Agent(children={name: ...})``)."""
    key: str
    version: int
    """The parent's version that spawned it."""
    status: ChildStatus = "pending"
    summary: str = ""
    """The child's last decision or failure, one line (filled at the join)."""
    outputs: dict[str, Any] | None = None
    """The child's outputs, validated against the kind's declared model at the join."""
    error: str | None = None
    """Why a child counts as failed (its own failure, or outputs that did not validate)."""
    fields: dict[str, Any] | None = None
    """The fields the spawn sets on the child's card, kept until the join so that a
    child a crash left uncreated is created the same (:mod:`skillstate.fanout`)."""
    goal: str | None = None
    """The goal the spawn gives the child (``None``: its agent's own)."""


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
