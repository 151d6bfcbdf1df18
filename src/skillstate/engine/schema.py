"""The response schema of one decision: what a model may reply, bounded for grammars.

Built from the state a decision is made in (:func:`decision_schema`): one branch per
skill that applies now, plus the other actions offered; every string and array
bounded so a grammar-constrained small model cannot run on forever, and the reply
budget (:func:`reply_budget`) sized to the longest reply the schema allows. The
action models themselves and the validation of a reply are in
:mod:`skillstate.engine.actions`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from pydantic import BaseModel

__all__ = [
    "MAX_ITEMS",
    "MAX_WAIT_SECONDS",
    "REASON_CHARS",
    "REPLY_TOKENS_MAX",
    "REPLY_TOKENS_MIN",
    "SHORT_REF",
    "TEXT_CHARS",
    "decision_schema",
    "reply_budget",
]

MAX_WAIT_SECONDS = 366 * 24 * 3600.0
"""The longest wait or signal timeout a decision may set (a year and a day)."""


def decision_schema(
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
) -> dict[str, Any]:
    """The response schema of one decision, built from the state it is made in.

    One branch per skill whose ``when`` holds now (``params`` maps each to its
    params model), so a model cannot even name a skill that does not apply, plus
    ``ask_user`` (unless ``can_ask`` is false: nobody would answer) and ``finish``.
    ``next_step`` is limited to the steps the machine allows from here, and not
    offered at all for the skills in ``stepped`` (those that declare the step they
    enter: a model that spelled one out kept a summarizing skill in its old step).
    ``wait_until`` (in seconds) is offered when ``can_wait``, ``wait_for`` when the
    agent declares ``signals`` (one of their names), ``load_evidence`` when the card
    has ``evidence`` refs (one of them, as the view shows it), ``spawn`` and ``map``
    when the agent declares ``children`` (one of their kinds). Each
    skill's own ``$defs`` are hoisted under a prefix so the branches can live in
    one document.

    Built once per distinct set of inputs and shared by every decision that has
    them (a 128-skill agent spent milliseconds per decision rebuilding it): read
    the result, never modify it.
    """
    schema = _decision_schema(
        tuple(params.items()),
        tuple(next_steps),
        can_ask,
        can_revise,
        frozenset(stepped),
        can_wait=can_wait,
        signals=tuple(signals),
        children=tuple(children),
    )
    return _with_load(schema, tuple(evidence)) if evidence else schema


SHORT_REF = 19
"""The part of a ref a view shows, and a model may name it by (``sha256:`` and 12 hex)."""

_LOADS: dict[tuple[int, tuple[str, ...]], tuple[dict[str, Any], dict[str, Any]]] = {}


def _with_load(schema: dict[str, Any], refs: tuple[str, ...]) -> dict[str, Any]:
    """``schema`` plus a ``load_evidence`` branch for ``refs``.

    Added to the shared schema rather than built into it: the refs change at every
    step that adds evidence, and the skills' branches need not be rebuilt for that.
    """
    key = (id(schema), refs)
    known = _LOADS.get(key)
    if known is not None and known[0] is schema:
        return known[1]
    shown = list(dict.fromkeys(ref[:SHORT_REF] for ref in refs))
    branch = _branch(
        {"kind": {"const": "load_evidence"}, "ref": {"enum": shown}}, required=("kind", "ref")
    )
    composed = {**schema, "anyOf": [*schema["anyOf"], branch]}
    if len(_LOADS) >= 256:
        _LOADS.clear()
    _LOADS[key] = (schema, composed)  # holding the schema keeps its id unique
    # Its reply budget is the larger of the two: no need to walk every branch again.
    budget = max(reply_budget(schema), _reply_budget({"anyOf": [branch]}))
    if len(_BUDGETS) >= 256:
        _BUDGETS.clear()
    _BUDGETS[id(composed)] = (composed, budget)
    return composed


@functools.lru_cache(maxsize=4096)
def _params_schema(name: str, model: type[BaseModel]) -> str:
    """The bounded params schema of skill ``name``, as JSON text, built once per skill:
    with a skill retriever each decision offers another set of skills, so the cache of
    whole decision schemas below rarely hits, and pydantic's schema costs ~0.5 ms each."""
    return json.dumps(_bounded(model.model_json_schema(ref_template=f"#/$defs/{name}__{{model}}")))


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
    children: tuple[str, ...] = (),
) -> dict[str, Any]:
    steps: dict[str, Any] = {"anyOf": [{"enum": list(next_steps)}, {"type": "null"}]}
    if not next_steps:
        steps = {"type": "null"}
    defs: dict[str, Any] = {}
    branches: list[dict[str, Any]] = []
    for name, model in params:
        schema = json.loads(_params_schema(name, model))  # a copy: it is changed below
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
    if children:
        branches += _spawn_branches(children)
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


def _spawn_branches(children: tuple[str, ...]) -> list[dict[str, Any]]:
    """``spawn`` (one child) and ``map`` (one child per item) of a declared kind."""
    kind = {"enum": list(children)}
    key = {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,48}$", "maxLength": 48}
    fields = {"type": "object", "additionalProperties": {"anyOf": _SCALAR}}
    goal = {"anyOf": [{"type": "string", "maxLength": TEXT_CHARS}, {"type": "null"}]}
    items = {"type": "array", "items": fields, "minItems": 1, "maxItems": MAX_ITEMS}
    name = {"anyOf": [{"type": "string", "maxLength": 48}, {"type": "null"}]}
    return [
        _branch(
            {"kind": {"const": "spawn"}, "child": kind, "key": key, "set": fields, "goal": goal},
            required=("kind", "child", "key"),
        ),
        _branch(
            {"kind": {"const": "map"}, "child": kind, "over": items, "key": name},
            required=("kind", "child", "over"),
        ),
    ]


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
