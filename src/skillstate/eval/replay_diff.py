"""Comparing a replay's steps with its recording's: what a step did, and the first
step that differs (see :mod:`skillstate.eval.replay`)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from skillstate.events import Event

__all__ = [
    "Divergence",
    "Stop",
    "call_text",
    "first_difference",
    "outcome",
    "shown",
    "with_tool_mismatch",
]

_VOLATILE = ("/usage", "/version", "/definition")
"""Card paths a step's outcome is compared without: counters of what the model calls
cost (a reworded skill description changes them, not what the step did), the
version, and the hash of the agent's definition (which any skill change changes)."""
_SHOWN = 160
"""Characters of a value shown in a divergence's detail."""
_LISTED = 3
"""Differing state paths named in a divergence's detail."""


def shown(value: Any, limit: int = _SHOWN) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=repr)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def call_text(tool: str, args: Mapping[str, Any]) -> str:
    """``tool(name="value", ...)``: values as JSON, so a trailing space still shows."""
    inner = ", ".join(
        f"{k}={_clip(json.dumps(v, ensure_ascii=False, default=repr), 40)}" for k, v in args.items()
    )
    return _clip(f"{tool}({inner})", 160)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


ASPECTS = ("actor", "action", "verdict", "state", "error", "tool calls", "attempts")
"""What a step's outcome is made of, in the order a divergence names them."""


@dataclass(frozen=True)
class Divergence:
    """The first step of a replay whose outcome is not the recorded one."""

    step: int
    """1-based index of the step (the event; its version), in the recording's order."""
    decision: int | None
    """1-based index of the decision the step belongs to (``None``: before any)."""
    label: str
    """The step as ``skillstate replay`` names it (``call_skill:process_record``)."""
    aspects: tuple[str, ...]
    """What differs: action, verdict, state, error, tool calls, attempts, actor,
    tool call, model request, missing step, extra step, stop, setup."""
    recorded: str
    replayed: str

    def as_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "decision": self.decision,
            "label": self.label,
            "aspects": list(self.aspects),
            "recorded": self.recorded,
            "replayed": self.replayed,
        }


@dataclass
class Stop:
    """How the replay's run ended, when it did not end on its own."""

    aspect: str
    detail: str


def outcome(event: Event, roots: Sequence[str] = ()) -> dict[str, Any]:
    """What a step did, as compared between a recording and its replay.

    ``roots`` are the environments' directories: a path into either reads ``<env>``.
    """
    verdict = event.verdict
    document = {
        "actor": event.actor,
        "action": event.action,
        "verdict": None if verdict is None else {"ok": verdict.ok, "reason": verdict.reason},
        "error": event.error,
        "attempts": event.attempts,
        "tool calls": [
            {"tool": c.tool, "args": c.args, "ok": c.ok, "summary": c.summary}
            for c in event.tool_calls
        ],
        "state": [_untraced(op) for op in event.patch if not _volatile(str(op.get("path", "")))],
    }
    text = json.dumps(document, sort_keys=True, ensure_ascii=False, default=repr)
    for root in roots:
        text = text.replace(json.dumps(root)[1:-1], "<env>")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def _untraced(value: Any) -> Any:
    """``value`` with each error entry's traceback ref blanked: the traceback names the
    frames that raised (a replayed tool's wrapper among them), not what the step did."""
    if isinstance(value, list):
        return [_untraced(item) for item in value]
    if not isinstance(value, dict):
        return value
    cleaned = {key: _untraced(item) for key, item in value.items()}
    if "trace" in cleaned and "message" in cleaned and cleaned["trace"] is not None:
        cleaned["trace"] = "<trace>"
    return cleaned


def _volatile(path: str) -> bool:
    return any(path == p or path.startswith(p + "/") for p in _VOLATILE)


def first_difference(
    recorded: Sequence[Event],
    replayed: Sequence[Event],
    roots: Sequence[str] = (),
    stop: Stop | None = None,
) -> Divergence | None:
    """The first step whose outcome differs (``stop``: how the replay was cut short)."""
    decision = 0
    for index, was in enumerate(recorded):
        if was.actor == "policy":
            decision += 1
        if index >= len(replayed):
            if stop is not None:
                return Divergence(
                    step=index + 1,
                    decision=decision or None,
                    label=was.label,
                    aspects=(stop.aspect,),
                    recorded=_step_text(outcome(was, roots)),
                    replayed=stop.detail,
                )
            return Divergence(
                step=index + 1,
                decision=decision or None,
                label=was.label,
                aspects=("missing step",),
                recorded=_step_text(outcome(was, roots)),
                replayed=f"the replay stopped after {len(replayed)} steps",
            )
        old, new = outcome(was, roots), outcome(replayed[index], roots)
        if old != new:
            now = replayed[index]
            return Divergence(
                step=index + 1,
                decision=decision or (1 if now.actor == "policy" else None),
                label=was.label if was.label == now.label else f"{was.label} → {now.label}",
                aspects=tuple(k for k in ASPECTS if old[k] != new[k]),
                recorded=_difference_text(old, new, recorded=True),
                replayed=_difference_text(old, new, recorded=False),
            )
    if len(replayed) > len(recorded):
        extra = replayed[len(recorded)]
        return Divergence(
            step=len(recorded) + 1,
            decision=_decisions(replayed[: len(recorded) + 1]) or None,
            label=extra.label,
            aspects=("extra step",),
            recorded=f"the recording stopped after {len(recorded)} steps",
            replayed=_step_text(outcome(extra, roots)),
        )
    if stop is not None:
        return Divergence(
            step=len(recorded) + 1,
            decision=(decision + 1) if stop.aspect == "model request" else (decision or None),
            label="(after the last recorded step)",
            aspects=(stop.aspect,),
            recorded=f"the recording stopped after {len(recorded)} steps",
            replayed=stop.detail,
        )
    return None


def with_tool_mismatch(
    found: Divergence | None,
    recorded: Sequence[Event],
    step: int,
    detail: str,
    roots: Sequence[str] = (),
) -> Divergence:
    """``found`` (the first differing step by the events) with the replay's first tool
    call that the recording does not have, made during step ``step``: whichever came
    first; when both are the same step, its aspects start with ``tool call``."""
    if found is not None and found.step < step:
        return found
    if found is not None and found.step == step:
        return Divergence(
            step=step,
            decision=found.decision,
            label=found.label,
            aspects=("tool call", *(a for a in found.aspects if a != "tool call")),
            recorded=found.recorded,
            replayed=f"{detail}; {found.replayed}" if found.replayed else detail,
        )
    was = recorded[step - 1] if step <= len(recorded) else None
    return Divergence(
        step=step,
        decision=_decisions(recorded[:step]) or None,
        label=was.label if was is not None else "(after the last recorded step)",
        aspects=("tool call",),
        recorded=_step_text(outcome(was, roots)) if was is not None else "no such step",
        replayed=detail,
    )


def _decisions(events: Sequence[Event]) -> int:
    return sum(1 for e in events if e.actor == "policy")


def _step_text(step: Mapping[str, Any]) -> str:
    action = step["action"]
    kind = action.get("kind", "?")
    params = action.get("params")
    what = f"{step['actor']} {kind}" + (f" {action['skill']}" if action.get("skill") else "")
    if params:
        what += f" {shown(params, 60)}"
    if step["verdict"] is not None:
        ok = step["verdict"]["ok"]
        what += (
            ", verdict ok" if ok else f", verdict failed: {shown(step['verdict']['reason'], 60)}"
        )
    if step["error"]:
        what += f", error: {shown(step['error'], 60)}"
    return what


def _difference_text(old: Mapping[str, Any], new: Mapping[str, Any], *, recorded: bool) -> str:
    """One side of a differing step, aspect by aspect (``recorded``: the recording's)."""
    mine, theirs = (old, new) if recorded else (new, old)
    parts: list[str] = []
    for aspect in ASPECTS:
        if old[aspect] == new[aspect]:
            continue
        if aspect == "state":
            parts.append("state " + _state_text(mine["state"], theirs["state"]))
        elif aspect == "verdict":
            parts.append(f"verdict {shown(_verdict_text(mine['verdict']))}")
        elif aspect == "tool calls":
            parts.append("tool calls " + _tools_text(mine["tool calls"], theirs["tool calls"]))
        else:
            parts.append(f"{aspect} {shown(mine[aspect])}")
    return "; ".join(parts)


def _state_text(mine: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> str:
    """The patch operations only this side has (at most a few). Where the other side
    has the same operation on the same path with another object, only the keys that
    differ are named: ``/completed_steps/-.summary = ...``."""
    ours, other = _only(mine, theirs), _only(theirs, mine)
    if not ours:
        return "(no change the other side lacks)" if other else "(the same changes)"
    parts: list[str] = []
    for op in ours:
        twin = next(
            (o for o in other if o.get("op") == op.get("op") and o.get("path") == op.get("path")),
            None,
        )
        value, theirs_value = op.get("value"), (twin or {}).get("value")
        if isinstance(value, dict) and isinstance(theirs_value, dict):
            keys = [k for k in value if value.get(k) != theirs_value.get(k)]
            parts += [f"{op.get('path')}.{k} = {shown(value.get(k), 80)}" for k in keys]
        else:
            shown_value = f" = {shown(value, 80)}" if "value" in op else ""
            parts.append(f"{op.get('op')} {op.get('path')}{shown_value}")
    text = ", ".join(parts[:_LISTED])
    return text + (f" and {len(parts) - _LISTED} more" if len(parts) > _LISTED else "")


def _only(mine: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The operations of ``mine`` that ``theirs`` lacks (as a multiset), in order."""

    def key(op: Mapping[str, Any]) -> str:
        return json.dumps(op, sort_keys=True, ensure_ascii=False, default=repr)

    spare = Counter(key(op) for op in theirs)
    found: list[dict[str, Any]] = []
    for op in mine:
        if spare[key(op)] > 0:
            spare[key(op)] -= 1
        else:
            found.append(op)
    return found


def _verdict_text(verdict: Mapping[str, Any] | None) -> str:
    if verdict is None:
        return "none"
    return "ok" if verdict["ok"] else f"failed: {verdict['reason']}"


def _tools_text(mine: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> str:
    for number, call in enumerate(mine, start=1):
        other = theirs[number - 1] if number <= len(theirs) else None
        if call != other:
            status = "ok" if call["ok"] else "failed"
            what = call_text(call["tool"], call["args"])
            return f"#{number} {what} {status}: {shown(call['summary'], 60)}"
    return f"{len(mine)} call(s), the same as the other side's first ones"
