"""The exceptions skillstate raises.

User mistakes, runtime faults and control-flow signals are separate branches so
that callers (and the CLI's exit codes) can tell them apart::

    SkillstateError
    ├── UsageError                  bad input from the caller: exit code 2
    │   ├── TaskNotFound            no task with that id in the store
    │   ├── ScheduleNotFound        no schedule with that name in the store
    │   ├── StoreNotFound           a reading command found no store at its URL
    │   ├── InvalidStoreURL         a store URL no backend understands
    │   ├── AgentImportError        MODULE:ATTR does not name an Agent
    │   │   └── AgentNotAllowed     a stored agent reference the operator did not allow
    │   ├── MissingExtra            an optional dependency is not installed
    │   ├── SecretKeyMissing        a sensitive field needs SKILLSTATE_KEY (or the key is wrong)
    │   ├── EffectsCrossed          a rollback or fork would cross effects that reached the world
    │   ├── ChildrenCrossed         a rollback would drop child tasks that exist (fan-out)
    │   ├── MessageRefused          a task cannot take this message or cancel (ended, rejects)
    │   ├── InvariantBroken         a hand edit would break one of the agent's invariants
    │   ├── BaselineMismatch        an eval baseline from another suite, model, variant
    │   │                           set or task list (``eval --compare``)
    │   ├── TemplateMismatch        a template's plan uses skills the agent does not have
    │   └── ArchiveRefused          an export file that is damaged, truncated or not one
    ├── StoreError                  a backend failed; driver errors are wrapped here
    │   ├── Conflict                another writer or worker got there first (exit 3)
    │   │   ├── StaleState          compare-and-set lost: someone committed first
    │   │   ├── LeaseHeld           another live worker holds the task
    │   │   ├── LeaseLost           this worker's lease was taken over (fencing token stale)
    │   │   ├── ApprovalNotPending  approve/reject of a task with no pending approval (decided)
    │   │   ├── ChildConflict       a child task's id is taken by a task with another parent
    │   │   └── TaskExists          a restore (import, copy) met a task with that id
    │   ├── StoreUnavailable        the database or server cannot be reached (exit 7)
    │   ├── StateCorrupted          a stored record does not load or validate (exit 5)
    │   └── ArtifactNotFound        no artifact under that ref
    ├── StateError                  the state itself refuses a change
    │   ├── IllegalTransition       a step the state machine does not allow
    │   ├── OutputNotDeclared       a skill wrote a key outside its ``outputs``
    │   ├── MemoryNotDeclared       a skill remembered into a scope outside its ``remembers``
    │   ├── SharedNotDeclared       a skill wrote a shared record outside its ``shares``
    │   ├── SchemaTooNew            a stored state is newer than this code knows (exit 5)
    │   └── DefinitionChanged       a task is pinned to another definition of its agent,
    │                               and nothing declared carries the change (exit 8)
    ├── ActionRejected              a decided action cannot run (unknown skill, ``when`` false,
    │                               invalid params); recorded in the error log
    │   └── DecisionFailed          a model's replies stayed invalid after every repair
    ├── ProviderError               a model call failed (network, server, missing model)
    ├── ExtractionFailed            a model's extraction replies stayed invalid after every repair
    ├── CompensationFailed          undoing an effect (a skill's rollback hook) failed
    ├── ToolNotAllowed              a skill called a tool it did not declare
    ├── FingerprintUnavailable      a skill fingerprinted a resource that cannot be read
    └── RegressionDetected          an eval gate failed: a metric moved past its
                                    ``--fail-under`` delta, or a replay differs (exit 9)

    BaseException
    └── ToolApprovalNeeded          a skill called a gated tool with arguments nobody approved:
                                    a control-flow signal that stops the run (not an error)

Lower-level errors (sqlite3, pydantic, jsonpatch) are translated at the boundary
with ``raise ... from exc`` so the original stays attached for debugging.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime


class SkillstateError(Exception):
    """Base class of every error skillstate raises on purpose."""


class UsageError(SkillstateError, ValueError):
    """The caller asked for something that cannot work as given."""


class TaskNotFound(UsageError, LookupError):
    """No task with this id exists in the store.

    ``store`` is the store's URL (password masked), when the raiser knows it: the
    message then names it (``no task 'x' in sqlite:///.skillstate/state.db``).
    """

    def __init__(self, task_id: str, store: str | None = None, *, hint: str = "") -> None:
        where = f"no task {task_id!r} in {store or 'the store'}"
        super().__init__(f"{where}: {hint}" if hint else where)
        self.task_id = task_id
        self.store = store


class ScheduleNotFound(UsageError, LookupError):
    """No schedule with this name is registered in the store (``schedule --remove``)."""

    def __init__(self, name: str, store: str | None = None) -> None:
        super().__init__(
            f"no schedule {name!r} in {store or 'the store'} (skillstate schedule --list)"
        )
        self.name = name
        self.store = store


class StoreNotFound(UsageError, LookupError):
    """A command that only reads found no store at its URL (and created none).

    Writing commands create the store; reading ones (``show``, ``tasks``, ...) open
    it with ``open_store(url, create=False)``, which raises this instead.
    """

    def __init__(self, url: str, detail: str | None = None) -> None:
        why = f" ({detail})" if detail else ""
        super().__init__(f"no store at {url}{why}; it is created by the first run")
        self.url = url


class InvalidStoreURL(UsageError):
    """A store URL that no backend accepts."""


class AgentImportError(UsageError):
    """``MODULE:ATTR`` did not lead to an :class:`~skillstate.Agent`."""


class AgentNotAllowed(AgentImportError):
    """A task's stored ``agent`` reference is not one the operator allowed.

    Refused before anything is imported: importing a module runs its code, and the
    reference is data anyone who can write the store can change.
    """


class MissingExtra(UsageError, ImportError):
    """An optional dependency is needed; the message names the extra to install."""


class SecretKeyMissing(UsageError):
    """A sensitive field cannot be stored or read: ``SKILLSTATE_KEY`` is unset or wrong."""


class EffectsCrossed(UsageError):
    """A rollback or fork would cross effects that already reached the world.

    Nothing was written. Choose ``compensate`` (undo them with each skill's
    ``rollback`` hook, newest first) or ``keep`` (leave them; a re-done step finds
    its effect by its key instead of repeating it).
    """

    def __init__(self, message: str, effects: Iterable[object] = ()) -> None:
        super().__init__(message)
        self.effects = tuple(effects)


class ChildrenCrossed(UsageError):
    """A rollback would go back before a spawn whose child tasks exist.

    Nothing was written. Choose ``detach`` (the parent forgets them; they keep running
    or keep their results) or ``cascade`` (cancel the unfinished ones, then detach).
    """

    def __init__(self, message: str, children: Iterable[str] = ()) -> None:
        super().__init__(message)
        self.children = tuple(children)


class MessageRefused(UsageError):
    """A message (``send``) or a cancel that a task cannot take; nothing was posted.

    The task has ended, its agent rejects messages (``Agent(messages="reject")``), or
    the message itself is unfit for the store (an unknown kind, too large, not JSON).
    """


class InvariantBroken(UsageError):
    """A change would leave the task in a state one of the agent's invariants forbids."""


class BaselineMismatch(UsageError):
    """``eval --compare``: the baseline report measured something else (another suite,
    model, variant set, seeds or task list), so its numbers are not comparable.

    Nothing was compared; ``--allow-mismatch`` compares the common variants anyway,
    with the differences printed and written into the report.
    """


class TemplateMismatch(UsageError):
    """``run --template``: the template's plan names skills this agent does not have (it
    was distilled from another agent, or the skills were removed or renamed since)."""


class ArchiveRefused(UsageError):
    """``skillstate import``: the file is not a whole, unchanged export this version
    reads (corrupted, truncated, another format or a newer one). Nothing was written."""


class StoreError(SkillstateError):
    """A storage backend failed."""


class Conflict(StoreError):
    """Another writer or worker got there first. Nothing was written; retry later."""


class ChildConflict(Conflict):
    """A child's id (``PARENT.VERSION.KEY``) is already a task that another parent (or
    none) spawned: the spawn cannot be joined (:mod:`skillstate.fanout`)."""


class TaskExists(Conflict):
    """A restore (``import``, ``copy``) found a task with that id already in the store.

    Nothing was written; restore under another id, or overwrite it on purpose."""


class StaleState(Conflict):
    """A commit was based on an old version: another writer got there first.

    Nothing was written. Reload the task and decide again.
    """

    def __init__(self, task_id: str, expected: int, actual: int) -> None:
        super().__init__(
            f"task {task_id!r} is at version {actual}, not {expected}: "
            "another writer committed first; nothing was written"
        )
        self.task_id = task_id
        self.expected = expected
        self.actual = actual


class LeaseHeld(Conflict):
    """Another worker holds a live lease on the task."""

    def __init__(self, task_id: str, holder: str, expires_at: datetime) -> None:
        super().__init__(
            f"task {task_id!r} is held by worker {holder!r} until "
            f"{expires_at.isoformat(timespec='seconds')}"
        )
        self.task_id = task_id
        self.holder = holder
        self.expires_at = expires_at


class LeaseLost(Conflict):
    """A commit carried a fencing token that is no longer the task's lease generation.

    Another worker took the task over (this one's lease expired while it was stuck);
    nothing was written. An effect this worker ran meanwhile is found by the new
    holder's probe, by its key, not run again.
    """

    def __init__(self, task_id: str, fence: int, current: int | None) -> None:
        now = f"generation {current}" if current is not None else "no lease"
        super().__init__(
            f"task {task_id!r} was taken over by another worker (this worker held lease "
            f"generation {fence}, the task now has {now}); nothing was written"
        )
        self.task_id = task_id
        self.fence = fence
        self.current = current


class ApprovalNotPending(Conflict):
    """``approve`` or ``reject`` found no pending approval: another person decided it
    first (the message names who and at which version), or the task never asked.

    Nothing was written. A conflict: two approvers racing get one approval, and one
    effect; the second gets this.
    """

    def __init__(self, task_id: str, detail: str) -> None:
        super().__init__(f"task {task_id!r} has no pending approval ({detail})")
        self.task_id = task_id
        self.detail = detail


class StoreUnavailable(StoreError):
    """The store's database or server cannot be reached (down, refused, bad credentials)."""


class StateCorrupted(StoreError):
    """A stored state, delta or event cannot be read back as what was committed.

    The task stops: nothing is overwritten. ``skillstate doctor ID`` checks the chain.
    """

    def __init__(
        self, task_id: str, version: int | None, reason: str, *, field: str | None = None
    ) -> None:
        at = f" version {version}" if version is not None else ""
        where = f" field {field!r}:" if field else ""
        super().__init__(f"task {task_id!r}{at} is corrupted:{where} {reason}")
        self.task_id = task_id
        self.version = version
        self.field = field
        self.reason = reason


class ArtifactNotFound(StoreError, LookupError):
    """No artifact is stored under this ref."""


class StateError(SkillstateError):
    """The state refuses a change."""


class IllegalTransition(StateError):
    """The state machine has no edge ``source -> target``."""

    def __init__(self, source: str, target: str, allowed: Iterable[str]) -> None:
        self.source = source
        self.target = target
        self.allowed = tuple(sorted(allowed))
        allowed_text = ", ".join(self.allowed) if self.allowed else "none (terminal step)"
        super().__init__(
            f"illegal transition {source} -> {target}; allowed from {source}: {allowed_text}"
        )


class OutputNotDeclared(StateError):
    """A skill tried to write state keys it did not declare in ``outputs``."""

    def __init__(self, skill: str, keys: Iterable[str], declared: Iterable[str]) -> None:
        self.skill = skill
        self.keys = tuple(sorted(keys))
        self.declared = tuple(sorted(declared))
        super().__init__(
            f"skill {skill!r} wrote {', '.join(self.keys)} outside its declared outputs "
            f"({', '.join(self.declared) or 'none'})"
        )


class MemoryNotDeclared(StateError):
    """A skill called ``ctx.remember`` for a memory scope it did not declare in
    ``remembers`` (or named none while declaring several)."""

    def __init__(self, skill: str, scope: str | None, declared: Iterable[str]) -> None:
        self.skill = skill
        self.scope = scope
        self.declared = tuple(declared)
        what = f"into memory scope {scope!r}" if scope else "without naming a memory scope"
        super().__init__(
            f"skill {skill!r} remembered {what}; it declares remembers="
            f"({', '.join(self.declared) or 'none'})"
        )


class SharedNotDeclared(StateError):
    """A skill wrote a shared record it does not list in ``shares``, or read one the
    agent does not declare (:mod:`skillstate.shared`)."""

    def __init__(self, skill: str, name: str, shares: Iterable[str], *, writing: bool) -> None:
        self.skill = skill
        self.name = name
        self.shares = tuple(shares)
        what = (
            f"wrote shared record {name!r}, which it does not declare"
            if writing
            else f"read shared record {name!r}, which the agent does not declare"
        )
        super().__init__(
            f"skill {skill!r} {what}; it declares shares=({', '.join(self.shares) or 'none'})"
        )


class SchemaTooNew(StateError):
    """A stored state was written by a newer schema than this code knows."""

    def __init__(self, task_id: str, found: int, known: int) -> None:
        super().__init__(
            f"task {task_id!r} has schema version {found}, newer than {known}, the newest "
            "this code knows; upgrade the agent's code instead of loading it"
        )
        self.task_id = task_id
        self.found = found
        self.known = known


class DefinitionChanged(StateError):
    """A task is pinned to a definition of its agent that differs from this one.

    The message names what changed (``skill 'fetch' removed, skill 'download' added``)
    and nothing was written. Declare how running tasks cross the change in the agent
    (``Agent(patches=[patched(...)])``, a state migration), resume with the code the
    task started under, or accept the change (``accept_definition=True``,
    ``--accept-definition``). ``blocked``: the card needs something this definition
    lacks (its current step, the skill of its effect in flight): no declaration or
    accept carries it, a person repairs the card first (``skillstate set``).
    """

    def __init__(
        self,
        task_id: str,
        message: str,
        *,
        pinned: str | None,
        current: str,
        changes: Iterable[str] = (),
        blocked: bool = False,
    ) -> None:
        super().__init__(message)
        self.task_id = task_id
        self.pinned = pinned
        """The ref (``sha256:...``) of the definition the task is pinned to."""
        self.current = current
        """The ref of this agent's definition."""
        self.changes = tuple(changes)
        """The refused changes, one phrase each."""
        self.blocked = blocked


class ActionRejected(SkillstateError):
    """The policy decided an action that cannot run in the current state."""


class DecisionFailed(ActionRejected):
    """The model never produced a valid action within ``max_repairs`` repairs.

    Carries what the attempts cost, so the runtime can account for them.
    """

    def __init__(self, message: str, *, usage: object, calls: int, repairs: int) -> None:
        super().__init__(message)
        self.usage = usage
        self.calls = calls
        self.repairs = repairs


class ProviderError(SkillstateError):
    """A model call failed: the server, the network, or the model file."""


class ContextOverflow(ProviderError):
    """The prompt (plus room for the reply) does not fit the model's context window."""


# How servers and llama.cpp word a prompt that does not fit (OpenAI's error code,
# vLLM's and llama.cpp's messages); matched case-insensitively.
_OVERFLOW_HINTS = (
    "context_length_exceeded",
    "maximum context length",
    "exceed context window",
    "exceeds the context",
    "context window",
)


def is_context_overflow(text: str) -> bool:
    """Whether a provider's error message says the prompt did not fit."""
    lowered = text.lower()
    return any(hint in lowered for hint in _OVERFLOW_HINTS)


class ExtractionFailed(SkillstateError):
    """``skillstate extract``: no reply of the model was an extraction (not JSON, or not of
    the schema), after every repair; nothing was written."""


class CompensationFailed(SkillstateError):
    """A skill's ``rollback`` hook raised while undoing an effect.

    The effect stays queued in the card (``compensations``): fix the cause and
    resume to try again, or clear it by hand once the world is put right.
    """


class ToolNotAllowed(SkillstateError, PermissionError):
    """A skill called a tool it did not declare in ``tools=[...]``."""

    def __init__(self, skill: str, tool: str, allowed: Iterable[str]) -> None:
        self.skill = skill
        self.tool = tool
        super().__init__(
            f"skill {skill!r} may not call tool {tool!r}; "
            f"declared tools: {', '.join(sorted(allowed)) or 'none'}"
        )


class FingerprintUnavailable(SkillstateError):
    """``ctx.fingerprint(target, kind=...)`` could not read the resource (a database or
    server down, a permission denied): a step cannot record that it relied on
    something it could not see. Raised inside the skill's run, so the attempt fails
    (``skill_error``) and is retried like any other."""

    def __init__(self, kind: str, target: str, cause: str) -> None:
        self.kind = kind
        self.target = target
        super().__init__(f"cannot fingerprint {kind} {target!r}: {cause}")


class RegressionDetected(SkillstateError):
    """An evaluation gate failed (exit 9): a metric of ``eval --compare`` moved past its
    ``--fail-under`` delta, or a run of ``eval --replay`` differs from its recording.

    The message is the one-line summary; ``breaches`` holds one phrase per breach.
    The report (with the table of what moved) is written before this is raised.
    """

    def __init__(self, message: str, breaches: Iterable[str] = ()) -> None:
        super().__init__(message)
        self.breaches = tuple(breaches)


class ToolApprovalNeeded(BaseException):
    """A skill's run called a gated tool with arguments no person approved for this step.

    Not an error but a control-flow signal, like ``GeneratorExit``: the runtime catches
    it, drops the attempt (nothing is written back, nothing verified) and commits the
    call as the task's pending approval (:mod:`skillstate.control.tool_approvals`).
    It derives from ``BaseException`` on purpose: a skill that wraps its tool calls in
    ``except Exception`` (to turn a failure into an outcome) must not swallow it, or the
    run would carry on as though the call had failed, or had run, and verify could pass
    on a payment that never happened. The message holds no argument (one may be secret).
    """

    def __init__(self, skill: str, tool: str, arguments: dict[str, object]) -> None:
        self.skill = skill
        self.tool = tool
        self.arguments = arguments
        """The call's arguments as JSON values (plaintext: sealed before they are kept).
        Not ``args``: that is the exception's own tuple of constructor arguments."""
        self.calls: tuple[object, ...] = ()
        """The tool calls the attempt made before this one (they ran), for the event."""
        super().__init__(
            f"skill {skill!r} called gated tool {tool!r}: a person approves the call first"
        )
