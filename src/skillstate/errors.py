"""The exceptions skillstate raises.

User mistakes, runtime faults and control-flow signals are separate branches so
that callers (and the CLI's exit codes) can tell them apart::

    SkillstateError
    ├── UsageError                  bad input from the caller: exit code 2
    │   ├── TaskNotFound            no task with that id in the store
    │   ├── InvalidStoreURL         a store URL no backend understands
    │   ├── AgentImportError        MODULE:ATTR does not name an Agent
    │   └── MissingExtra            an optional dependency is not installed
    ├── StoreError                  a backend failed; driver errors are wrapped here
    │   ├── StaleState              compare-and-set lost: someone committed first (exit 3)
    │   └── ArtifactNotFound        no artifact under that ref
    ├── StateError                  the state itself refuses a change
    │   ├── IllegalTransition       a step the state machine does not allow
    │   └── OutputNotDeclared       a skill wrote a key outside its ``outputs``
    ├── ActionRejected              a decided action cannot run (unknown skill, ``when`` false,
    │                               invalid params); recorded in the error log
    └── ToolNotAllowed              a skill called a tool it did not declare

Lower-level errors (sqlite3, pydantic, jsonpatch) are translated at the boundary
with ``raise ... from exc`` so the original stays attached for debugging.
"""

from __future__ import annotations

from collections.abc import Iterable


class SkillstateError(Exception):
    """Base class of every error skillstate raises on purpose."""


class UsageError(SkillstateError, ValueError):
    """The caller asked for something that cannot work as given."""


class TaskNotFound(UsageError, LookupError):
    """No task with this id exists in the store."""

    def __init__(self, task_id: str) -> None:
        super().__init__(f"no task {task_id!r} in the store")
        self.task_id = task_id


class InvalidStoreURL(UsageError):
    """A store URL that no backend accepts."""


class AgentImportError(UsageError):
    """``MODULE:ATTR`` did not lead to an :class:`~skillstate.Agent`."""


class MissingExtra(UsageError, ImportError):
    """An optional dependency is needed; the message names the extra to install."""


class StoreError(SkillstateError):
    """A storage backend failed."""


class StaleState(StoreError):
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


class ActionRejected(SkillstateError):
    """The policy decided an action that cannot run in the current state."""


class ToolNotAllowed(SkillstateError, PermissionError):
    """A skill called a tool it did not declare in ``tools=[...]``."""

    def __init__(self, skill: str, tool: str, allowed: Iterable[str]) -> None:
        self.skill = skill
        self.tool = tool
        super().__init__(
            f"skill {skill!r} may not call tool {tool!r}; "
            f"declared tools: {', '.join(sorted(allowed)) or 'none'}"
        )
