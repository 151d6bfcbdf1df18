"""The actions a policy may decide: call a skill, ask the user, wait, finish, fail.

They are pydantic models in one discriminated union, so an LLM policy can be
given :func:`action_json_schema` as its response format and its output parsed
with :func:`parse_action`.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from skillstate._validation import first_error
from skillstate.engine.schema import (
    MAX_WAIT_SECONDS,
    REASON_CHARS,
    SHORT_REF,
    TEXT_CHARS,
    decision_schema,
    reply_budget,
)
from skillstate.errors import ActionRejected
from skillstate.limits import DEFAULT_LIMITS, INT_DIGITS, problem
from skillstate.skills.handles import HANDLE

__all__ = [
    "Action",
    "AskUser",
    "CallSkill",
    "Fail",
    "Finish",
    "LoadEvidence",
    "Map",
    "Revise",
    "Spawn",
    "WaitFor",
    "WaitUntil",
    "action_json_schema",
    "decision_schema",
    "parse_action",
    "reply_budget",
    "validate_decision",
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


class Revise(_Action):
    """The user changed the task: a new goal and/or constraints, and pending steps that
    no longer apply dropped. Only accepted while a user's reply is waiting to be used
    (the change must come from the user), and it uses that reply."""

    kind: Literal["revise"] = "revise"
    goal: str | None = None
    constraints: list[str] | None = None
    """The whole new list (``None``: unchanged)."""
    drop_pending: list[str] = Field(default_factory=list)
    """Entries of ``pending_steps`` the new instruction makes moot."""


REF_CHARS = 128
"""An artifact ref is ``sha256:`` and 64 hex digits; anything longer is not one."""

MAX_REPLY_CHARS = 100_000
"""A model reply longer than this is invalid before it is parsed (a reply budget is at
most 1,024 tokens: a legitimate reply is a few thousand characters)."""


class WaitUntil(_Action):
    """Pause the task until a time, then run on (:mod:`skillstate.control.waits`).

    Give ``at`` (an aware datetime) or ``seconds`` from now, not both. Nothing sleeps
    through the wait: ``run`` returns ``stopped="waiting"`` and a worker requeues the
    task for that time; whoever drives the task after it wakes it.
    """

    kind: Literal["wait_until"] = "wait_until"
    at: datetime | None = None
    """When to wake up (timezone-aware; stored in UTC)."""
    seconds: float | None = Field(default=None, ge=0, le=MAX_WAIT_SECONDS)
    """How long to wait from the decision on."""

    @model_validator(mode="after")
    def _one_time(self) -> WaitUntil:
        if (self.at is None) == (self.seconds is None):
            raise ValueError("give either at (a datetime) or seconds, not both")
        if self.at is not None and self.at.utcoffset() is None:
            raise ValueError("at must be timezone-aware (UTC: datetime.now(timezone.utc))")
        if self.seconds is not None and not math.isfinite(self.seconds):
            raise ValueError("seconds must be a finite number")
        return self


class WaitFor(_Action):
    """Pause the task until a signal the agent declares arrives (``Agent(signals=...)``).

    Its payload, validated against the declared schema, lands in the card's
    ``signals`` (the next decision sees it). With ``timeout`` (seconds) the wait ends
    then: the task goes to ``on_timeout`` (a machine step), or the signal's declared
    one, or fails with the reason. A signal delivered before the wait starts is kept
    and consumed by it.
    """

    kind: Literal["wait_for"] = "wait_for"
    signal: str = Field(min_length=1, max_length=64)
    timeout: float | None = Field(default=None, gt=0, le=MAX_WAIT_SECONDS)
    on_timeout: str | None = None
    """The machine step to go to when the timeout passes (``None``: the signal's
    declared one, else the task fails)."""


class LoadEvidence(_Action):
    """Look at one evidence item's raw artifact: the next decision's view shows it
    (bounded, masked), once; the card never holds it (seed 003 §3.3).

    ``ref`` is one of the card's evidence refs (or a prefix of one, as the view shows
    it: ``sha256:`` and 12 hex digits), or a tool output's ref in the task's event log.
    Offered to a model only while the card has evidence with refs.
    """

    kind: Literal["load_evidence"] = "load_evidence"
    ref: str = Field(min_length=1, max_length=REF_CHARS)


CHILD_KEY = r"^[A-Za-z0-9_-]{1,48}$"
"""A child's key (:data:`skillstate.fanout.spec.KEY_PATTERN`): it ends the child's id."""


class Spawn(_Action):
    """Start one child task of a kind the agent declares (``Agent(children=...)``) and
    wait for it: the task is ``waiting_children`` until the join (:mod:`skillstate.fanout`).

    ``key`` names the child among its siblings (its id is ``PARENT.VERSION.KEY``);
    ``set`` are fields of the child's card; ``goal`` replaces its agent's goal.
    Offered only to an agent that declares children.
    """

    kind: Literal["spawn"] = "spawn"
    child: str = Field(min_length=1, max_length=48)
    key: str = Field(pattern=CHILD_KEY)
    set: dict[str, Any] = Field(default_factory=dict)
    goal: str | None = Field(default=None, max_length=TEXT_CHARS)


class Map(_Action):
    """Start one child task per item of ``over`` (each item the child's fields, or a
    skill kind's params) and wait for them all. ``key`` names the item field whose
    value keys each child; ``None``: the item's index."""

    kind: Literal["map"] = "map"
    child: str = Field(min_length=1, max_length=48)
    over: list[dict[str, Any]] = Field(min_length=1)
    key: str | None = None


Action = Annotated[
    CallSkill | AskUser | WaitUntil | WaitFor | LoadEvidence | Finish | Fail | Revise | Spawn | Map,
    Field(discriminator="kind"),
]
"""One decision: call a skill, ask the user, wait, look at evidence, spawn child tasks,
finish or fail (discriminated by ``kind``)."""

_ADAPTER: TypeAdapter[Action] = TypeAdapter(Action)


def parse_action(data: Any) -> Action:
    """Validate a dict (or JSON text) into an :data:`Action`; raises ``ActionRejected``."""
    if isinstance(data, str | bytes):
        # Through the same reader and bounds as a model's reply: pydantic's JSON
        # parser would take NaN and 1e99999 (infinity), which no card can store.
        try:
            text = data if isinstance(data, str) else data.decode("utf-8")
        except UnicodeDecodeError:
            raise ActionRejected("reply is not UTF-8 text") from None
        data = _as_object(text)
    try:
        return _ADAPTER.validate_python(data)
    except ValidationError as exc:
        raise ActionRejected(f"invalid action: {first_error(exc, 'action')}") from exc


def action_json_schema() -> dict[str, Any]:
    """JSON Schema of every action (for structured model output)."""
    return _ADAPTER.json_schema()


def _parse_reply(reply: str) -> Any:
    """A model's reply text as JSON, or ``ActionRejected`` saying why not."""
    if len(reply) > MAX_REPLY_CHARS:
        raise ActionRejected(
            f"reply is {len(reply):,} characters long (at most {MAX_REPLY_CHARS:,}); "
            "reply with one short JSON object"
        )
    text = reply.strip()
    if text.startswith("```"):
        # Models like to fence JSON; the fence is not part of the answer.
        text = text.strip("`").removeprefix("json").strip()
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ActionRejected(f"reply is not JSON ({exc.msg} at char {exc.pos})") from None
    except ValueError:
        # The only other refusal of json.loads: an integer past the interpreter's
        # int-string limit (its own message names a Python setting, not the reply).
        limit = getattr(sys, "get_int_max_str_digits", lambda: 0)()  # 3.10.7+
        digits = min(INT_DIGITS, limit or INT_DIGITS)
        raise ActionRejected(
            f"reply refused: it holds an integer of more than {digits:,} digits"
        ) from None
    except RecursionError:
        raise ActionRejected("reply is nested too deeply to be an action") from None


def _as_object(reply: str | Mapping[str, Any]) -> dict[str, Any]:
    data: Any = _parse_reply(reply) if isinstance(reply, str) else dict(reply)
    if not isinstance(data, dict):
        raise ActionRejected(f"reply must be one JSON object, got {type(data).__name__}")
    found = problem(data, chars=MAX_REPLY_CHARS, depth=DEFAULT_LIMITS.depth)
    if found is not None:
        raise ActionRejected(f"reply refused: {found}")
    return data


def _check_text(action: Action) -> None:
    """Free text as long as the schema allows, whether or not the provider enforced it."""
    for name, limit in (
        ("reason", REASON_CHARS),
        ("question", TEXT_CHARS),
        ("summary", TEXT_CHARS),
    ):
        value = getattr(action, name, None)
        if isinstance(value, str) and len(value) > limit:
            raise ActionRejected(f"{name} is {len(value):,} characters long (at most {limit})")


def _check_offered(
    action: Action,
    *,
    can_ask: bool,
    can_revise: bool,
    can_wait: bool = False,
    signals: Sequence[str] = (),
    children: Sequence[str] = (),
) -> None:
    if isinstance(action, Spawn | Map) and action.child not in children:
        known = ", ".join(children) or "none (the agent declares no children)"
        raise ActionRejected(f"cannot spawn child kind {action.child!r}; kinds: {known}")
    if isinstance(action, WaitUntil) and not can_wait:
        raise ActionRejected("'wait_until' is not available: call a skill or finish")
    if isinstance(action, WaitFor) and action.signal not in signals:
        known = ", ".join(signals) or "none (the agent declares no signals)"
        raise ActionRejected(f"cannot wait for signal {action.signal!r}; signals: {known}")
    if isinstance(action, Revise) and not can_revise:
        raise ActionRejected("'revise' is only available right after the user asked for a change")
    if isinstance(action, AskUser) and not can_ask:
        raise ActionRejected(
            "'ask_user' is not available (nobody will answer): call a skill or finish"
        )


def _check_call(action: CallSkill, params: Mapping[str, type[BaseModel]]) -> None:
    model = params.get(action.skill)
    if model is None:
        known = ", ".join(params) or "none"
        raise ActionRejected(f"skill {action.skill!r} cannot be called now; callable: {known}")
    if _has_handle(action.params):
        return  # a Sensitive field's value stands in: checked once the runtime fills it
    try:
        model.model_validate(action.params)
    except ValidationError as exc:
        raise ActionRejected(
            f"invalid params for {action.skill!r}: {first_error(exc, 'params')}"
        ) from None


def _has_handle(value: Any) -> bool:
    if isinstance(value, str):
        return HANDLE.fullmatch(value) is not None
    if isinstance(value, Mapping):
        return any(_has_handle(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_handle(v) for v in value)
    return False


def offered_ref(ref: str, refs: Sequence[str]) -> str | None:
    """The one ref of ``refs`` that ``ref`` names: itself, or a prefix of at least
    :data:`SHORT_REF` characters (what a view shows); ``None`` if none or several."""
    if ref in refs:
        return ref
    if len(ref) < SHORT_REF:
        return None
    found = {r for r in refs if r.startswith(ref)}
    return found.pop() if len(found) == 1 else None


def _offered_ref(ref: str, refs: Sequence[str]) -> str:
    if not refs:
        raise ActionRejected(
            "'load_evidence' is not available: no evidence is offered to load (the card "
            "has none, or each was loaded since the last progress: act on what it showed)"
        )
    found = offered_ref(ref, refs)
    if found is None:
        shown = ", ".join(dict.fromkeys(r[:SHORT_REF] for r in refs))
        raise ActionRejected(f"no evidence with ref {ref!r}; evidence refs: {shown}")
    return found


def validate_decision(
    reply: str | Mapping[str, Any],
    params: Mapping[str, type[BaseModel]],
    next_steps: Sequence[str],
    *,
    can_ask: bool = True,
    can_revise: bool = False,
    stepped: Collection[str] = (),
    can_wait: bool = False,
    signals: Sequence[str] = (),
    evidence: Sequence[str] = (),
    children: Sequence[str] = (),
) -> Action:
    """A model's reply as an :data:`Action`, or ``ActionRejected`` saying what is wrong.

    Checks what the schema says, whether or not the provider enforced it: JSON, one
    of the actions, a skill that applies now, params valid for that skill, a
    reachable ``next_step``, a ref among the card's ``evidence`` (returned whole). The
    message is written for the model: it goes back as the repair prompt.
    """
    data = _as_object(reply)
    if data.get("kind") == "fail":
        raise ActionRejected("'fail' is not available: call a skill, ask the user, or finish")
    action = parse_action(data)
    _check_text(action)
    _check_offered(
        action,
        can_ask=can_ask,
        can_revise=can_revise,
        can_wait=can_wait,
        signals=signals,
        children=children,
    )
    if isinstance(action, WaitFor) and action.on_timeout is not None:
        raise ActionRejected("on_timeout is the agent's to declare: leave it out")
    if isinstance(action, CallSkill):
        _check_call(action, params)
    if isinstance(action, LoadEvidence):
        action = action.model_copy(update={"ref": _offered_ref(action.ref, evidence)})
    step = getattr(action, "next_step", None)
    if step is not None and isinstance(action, CallSkill) and action.skill in stepped:
        raise ActionRejected(
            f"skill {action.skill!r} enters its own step: leave next_step out (null)"
        )
    if step is not None and step not in next_steps:
        allowed = ", ".join(next_steps) or "none"
        raise ActionRejected(f"next_step {step!r} is not reachable from here; allowed: {allowed}")
    return action
