"""The actions a policy may decide: call a skill, ask the user, finish, fail.

They are pydantic models in one discriminated union, so an LLM policy can be
given :func:`action_json_schema` as its response format and its output parsed
with :func:`parse_action`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from skillstate._validation import first_error
from skillstate.errors import ActionRejected

__all__ = [
    "Action",
    "AskUser",
    "CallSkill",
    "Fail",
    "Finish",
    "action_json_schema",
    "parse_action",
]


class _Action(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    reason: str = ""
    """Why this action; recorded as the state's ``last_decision``."""


class CallSkill(_Action):
    """Run a skill with params. The step moves to ``next_step`` or the skill's own step."""

    kind: Literal["call_skill"] = "call_skill"
    skill: str
    params: dict[str, Any] = Field(default_factory=dict)
    next_step: str | None = None


class AskUser(_Action):
    """Pause the task with a question; a reply continues it."""

    kind: Literal["ask_user"] = "ask_user"
    question: str = Field(min_length=1)
    next_step: str | None = None


class Finish(_Action):
    """The goal is met: complete the task (entering the machine's final step)."""

    kind: Literal["finish"] = "finish"
    summary: str = ""
    next_step: str | None = None


class Fail(_Action):
    """Give up: the task ends ``failed`` with the reason in its error log."""

    kind: Literal["fail"] = "fail"


Action = Annotated[CallSkill | AskUser | Finish | Fail, Field(discriminator="kind")]

_ADAPTER: TypeAdapter[Action] = TypeAdapter(Action)


def parse_action(data: Any) -> Action:
    """Validate a dict (or JSON text) into an :data:`Action`; raises ``ActionRejected``."""
    try:
        if isinstance(data, str | bytes):
            return _ADAPTER.validate_json(data)
        return _ADAPTER.validate_python(data)
    except ValidationError as exc:
        raise ActionRejected(f"invalid action: {first_error(exc, 'action')}") from exc


def action_json_schema() -> dict[str, Any]:
    """JSON Schema of every action (for structured model output)."""
    return _ADAPTER.json_schema()
