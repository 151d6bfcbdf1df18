"""The actions a policy may decide: call a skill, ask the user, wait, finish, fail.

They are pydantic models in one discriminated union, so an LLM policy can be
given :func:`action_json_schema` as its response format and its output parsed
with :func:`parse_action`.
"""

from __future__ import annotations

import functools
import json
import math
import sys
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from skillstate._validation import first_error
from skillstate.errors import ActionRejected
from skillstate.limits import DEFAULT_LIMITS, INT_DIGITS, problem
from skillstate.skills.handles import HANDLE

__all__ = [
    "Action",
    "AskUser",
    "CallSkill",
    "Fail",
    "Finish",
    "Revise",
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


MAX_WAIT_SECONDS = 366 * 24 * 3600.0
"""The longest wait or signal timeout a decision may set (a year and a day)."""


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


Action = Annotated[
    CallSkill | AskUser | WaitUntil | WaitFor | Finish | Fail | Revise,
    Field(discriminator="kind"),
]
"""One decision: call a skill, ask the user, wait, finish or fail (discriminated by ``kind``)."""

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


def decision_schema(
    params: Mapping[str, type[BaseModel]],
    next_steps: Sequence[str],
    *,
    can_ask: bool = True,
    can_revise: bool = False,
    stepped: Collection[str] = (),
    can_wait: bool = False,
    signals: Sequence[str] = (),
) -> dict[str, Any]:
    """The response schema of one decision, built from the state it is made in.

    One branch per skill whose ``when`` holds now (``params`` maps each to its
    params model), so a model cannot even name a skill that does not apply, plus
    ``ask_user`` (unless ``can_ask`` is false: nobody would answer) and ``finish``.
    ``next_step`` is limited to the steps the machine allows from here, and not
    offered at all for the skills in ``stepped`` (those that declare the step they
    enter: a model that spelled one out kept a summarizing skill in its old step).
    ``wait_until`` (in seconds) is offered when ``can_wait``, ``wait_for`` when the
    agent declares ``signals`` (one of their names). Each
    skill's own ``$defs`` are hoisted under a prefix so the branches can live in
    one document.

    Built once per distinct set of inputs and shared by every decision that has
    them (a 128-skill agent spent milliseconds per decision rebuilding it): read
    the result, never modify it.
    """
    return _decision_schema(
        tuple(params.items()),
        tuple(next_steps),
        can_ask,
        can_revise,
        frozenset(stepped),
        can_wait=can_wait,
        signals=tuple(signals),
    )


@functools.lru_cache(maxsize=256)
def _decision_schema(
    params: tuple[tuple[str, type[BaseModel]], ...],
    next_steps: tuple[str, ...],
    can_ask: bool,
    can_revise: bool,
    stepped: frozenset[str] = frozenset(),
    *,
    can_wait: bool = False,
    signals: tuple[str, ...] = (),
) -> dict[str, Any]:
    steps: dict[str, Any] = {"anyOf": [{"enum": list(next_steps)}, {"type": "null"}]}
    if not next_steps:
        steps = {"type": "null"}
    defs: dict[str, Any] = {}
    branches: list[dict[str, Any]] = []
    for name, model in params:
        schema = _bounded(model.model_json_schema(ref_template=f"#/$defs/{name}__{{model}}"))
        for key, value in schema.pop("$defs", {}).items():
            defs[f"{name}__{key}"] = value
        schema.pop("title", None)
        branches.append(
            _branch(
                {
                    "kind": {"const": "call_skill"},
                    "skill": {"const": name},
                    "params": schema,
                    "next_step": {"type": "null"} if name in stepped else steps,
                },
                required=("kind", "skill", "params"),
            )
        )
    if can_ask:
        branches.append(
            _branch(
                {
                    "kind": {"const": "ask_user"},
                    "question": {"type": "string", "minLength": 1, "maxLength": TEXT_CHARS},
                    "next_step": steps,
                },
                required=("kind", "question"),
            )
        )
    if can_wait:
        seconds = {"type": "number", "minimum": 0, "maximum": MAX_WAIT_SECONDS}
        branches.append(
            _branch(
                {"kind": {"const": "wait_until"}, "seconds": seconds},
                required=("kind", "seconds"),
            )
        )
    if signals:
        timeout = {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_WAIT_SECONDS}
        branches.append(
            _branch(
                {
                    "kind": {"const": "wait_for"},
                    "signal": {"enum": list(signals)},
                    "timeout": {"anyOf": [timeout, {"type": "null"}]},
                },
                required=("kind", "signal"),
            )
        )
    branches.append(
        _branch(
            {
                "kind": {"const": "finish"},
                "summary": {"type": "string", "maxLength": TEXT_CHARS},
                "next_step": steps,
            },
            required=("kind",),
        )
    )
    if can_revise:
        text = {"type": "string", "minLength": 1, "maxLength": TEXT_CHARS}
        branches.append(
            _branch(
                {
                    "kind": {"const": "revise"},
                    "goal": {"anyOf": [text, {"type": "null"}]},
                    "constraints": {
                        "anyOf": [{"type": "array", "items": text, "maxItems": MAX_ITEMS},
                                  {"type": "null"}]
                    },
                    "drop_pending": {"type": "array", "items": text, "maxItems": MAX_ITEMS},
                },
                required=("kind",),
            )
        )  # fmt: skip
    document: dict[str, Any] = {"anyOf": branches}
    if defs:
        document["$defs"] = defs
    return document


MAX_REPLY_CHARS = 100_000
"""A model reply longer than this is invalid before it is parsed (a reply budget is at
most 1,024 tokens: a legitimate reply is a few thousand characters)."""

REASON_CHARS = 200
"""Free text in an action is bounded: a small model under a grammar otherwise runs
on until ``max_tokens`` and the cut-off reply is not JSON."""
TEXT_CHARS = 500


_TEXT_LIMITS = (("reason", REASON_CHARS), ("question", TEXT_CHARS), ("summary", TEXT_CHARS))

MAX_ITEMS = 32
ENUM_RANGE = 64
"""Integer ranges up to this size are also given as an enum (see _bounded)."""
"""Arrays get ``maxItems`` for the same reason strings get ``maxLength``."""

_SCALAR: list[dict[str, Any]] = [
    {"type": "string", "maxLength": TEXT_CHARS},
    {"type": "number"},
    {"type": "boolean"},
    {"type": "null"},
]
_ANY: dict[str, Any] = {
    "anyOf": [
        *_SCALAR,
        {"type": "array", "items": {"anyOf": _SCALAR}, "maxItems": MAX_ITEMS},
        {"type": "object", "additionalProperties": {"anyOf": _SCALAR}},
    ]
}
"""What an unconstrained value (``Any``, ``{}``) becomes: any JSON value, but with
every string and array bounded. A grammar built from ``{}`` admits an endless
string, and a small model will write one."""
_SHAPE_KEYS = frozenset(
    {"type", "anyOf", "oneOf", "allOf", "$ref", "const", "enum", "not", "properties", "items"}
)


def _bounded(schema: Any) -> Any:
    """``schema`` with every string given ``maxLength`` and every array ``maxItems``
    (see REASON_CHARS), and every unconstrained value bounded likewise."""
    if not isinstance(schema, dict):
        return schema
    if not _SHAPE_KEYS & schema.keys():
        return {**{k: v for k, v in schema.items() if k in {"title", "description"}}, **_ANY}
    out = dict(schema)
    for key in ("properties", "$defs", "definitions", "patternProperties"):
        if isinstance(out.get(key), dict):
            out[key] = {name: _bounded(sub) for name, sub in out[key].items()}
    for key in ("items", "additionalProperties", "not"):
        if isinstance(out.get(key), dict):
            out[key] = _bounded(out[key])
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        if isinstance(out.get(key), list):
            out[key] = [_bounded(sub) for sub in out[key]]
    if out.get("type") == "string" and "maxLength" not in out and "enum" not in out:
        out["maxLength"] = TEXT_CHARS
    if out.get("type") == "array" and "maxItems" not in out:
        out["maxItems"] = MAX_ITEMS
    if out.get("type") == "integer" and "enum" not in out:
        # Grammar engines (llama.cpp's among them) ignore minimum/maximum; a small
        # range spelled out as an enum is enforced by every one of them.
        low = out.get("minimum", _exclusive(out.get("exclusiveMinimum"), 1))
        high = out.get("maximum", _exclusive(out.get("exclusiveMaximum"), -1))
        if isinstance(low, int) and isinstance(high, int) and 0 <= high - low < ENUM_RANGE:
            out["enum"] = list(range(low, high + 1))
    return out


def _exclusive(bound: Any, step: int) -> Any:
    return bound + step if isinstance(bound, int) else None


REPLY_TOKENS_MIN = 256
REPLY_TOKENS_MAX = 1024
_CHARS_PER_TOKEN = 2.5
"""Conservative: a small model under a grammar fills strings with odd text that
tokenizes worse than prose (Gemma 3 270M averaged ~2.8 chars per token)."""


_BUDGETS: dict[int, tuple[Mapping[str, Any], int]] = {}


def reply_budget(schema: Mapping[str, Any]) -> int:
    """Completion tokens that fit the longest reply ``schema`` allows (see
    :func:`_reply_budget`); remembered for the shared schemas of :func:`decision_schema`."""
    known = _BUDGETS.get(id(schema))
    if known is not None and known[0] is schema:
        return known[1]
    budget = _reply_budget(schema)
    if len(_BUDGETS) >= 256:
        _BUDGETS.clear()
    _BUDGETS[id(schema)] = (schema, budget)  # holding the schema keeps its id unique
    return budget


def _reply_budget(schema: Mapping[str, Any]) -> int:
    """Completion tokens that fit the longest reply ``schema`` allows.

    A grammar-constrained model may legally fill every string to its
    ``maxLength``; a smaller ``max_tokens`` cuts such a reply off mid-string and
    it is not JSON. The budget is the longest branch's strings in tokens plus
    room for the JSON around them, clamped to [256, 1024].
    """
    defs = schema.get("$defs", {})

    def chars(node: Any, depth: int = 0) -> int:
        if not isinstance(node, Mapping) or depth > 8:
            return 0
        if "$ref" in node:
            return chars(defs.get(str(node["$ref"]).rsplit("/", 1)[-1]), depth + 1)
        if "anyOf" in node:
            return max((chars(b, depth + 1) for b in node["anyOf"]), default=0)
        if node.get("type") == "string":
            return int(node.get("maxLength", TEXT_CHARS))
        if node.get("type") == "array":
            return chars(node.get("items"), depth + 1) * int(node.get("maxItems", 8))
        props = node.get("properties", {})
        return sum(chars(v, depth + 1) + 16 for v in props.values())

    tokens = 64 + chars(schema) / _CHARS_PER_TOKEN
    return int(min(REPLY_TOKENS_MAX, max(REPLY_TOKENS_MIN, tokens)))


def _branch(properties: dict[str, Any], *, required: Sequence[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"reason": {"type": "string", "maxLength": REASON_CHARS}, **properties},
        "required": ["reason", *required],
        "additionalProperties": False,
    }


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
) -> None:
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
) -> Action:
    """A model's reply as an :data:`Action`, or ``ActionRejected`` saying what is wrong.

    Checks what the schema says, whether or not the provider enforced it: JSON, one
    of the actions, a skill that applies now, params valid for that skill, a
    reachable ``next_step``. The message is written for the model: it goes back as
    the repair prompt.
    """
    data = _as_object(reply)
    if data.get("kind") == "fail":
        raise ActionRejected("'fail' is not available: call a skill, ask the user, or finish")
    action = parse_action(data)
    _check_text(action)
    _check_offered(
        action, can_ask=can_ask, can_revise=can_revise, can_wait=can_wait, signals=signals
    )
    if isinstance(action, WaitFor) and action.on_timeout is not None:
        raise ActionRejected("on_timeout is the agent's to declare: leave it out")
    if isinstance(action, CallSkill):
        _check_call(action, params)
    step = getattr(action, "next_step", None)
    if step is not None and isinstance(action, CallSkill) and action.skill in stepped:
        raise ActionRejected(
            f"skill {action.skill!r} enters its own step: leave next_step out (null)"
        )
    if step is not None and step not in next_steps:
        allowed = ", ".join(next_steps) or "none"
        raise ActionRejected(f"next_step {step!r} is not reachable from here; allowed: {allowed}")
    return action
