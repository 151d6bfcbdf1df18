"""Effects that reach the world: their keys, and which of them a version knows about.

**Keys.** An effectful step runs under an idempotency key made from the *logical*
step, not from the version: ``<task>:<position>-<skill>-<params digest>``, where
the position is the number of steps the task had completed when it decided. A
retry, a resume after a crash, a re-decision after a failed verify and a re-run
after a rollback that kept its effects all land on the same position with the
same skill and params, hence the same key, so the skill's probe (or a server that
remembers keys) sees the effect that already happened instead of a new one. The
old key contained the version, which only grows: every re-done step got a fresh
key and its effect ran again. A key whose effect was compensated (undone) is
never reused: its generation is counted in the card and appended (``~1``).

**Ledger of effects.** The event log says which effects reached the world: each
settled intent's event carries the key, the skill, the params and whether the
effect is ``done``, ``unverified`` (it may have happened, verify never passed)
or ``compensated``. :func:`known_effects` walks a version's ancestry (following
rollbacks to the version they restored) to list the effects that state knows
about; a rollback or fork *crosses* the effects the head knows and the target
version does not.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from skillstate.events import Event
from skillstate.state.model import AgentState

__all__ = [
    "EFFECT_KINDS",
    "EffectRecord",
    "base_key",
    "crossed_effects",
    "current_key",
    "describe",
    "effect_key",
    "known_effects",
]

EFFECT_KINDS = frozenset({"effect", "effect_resumed"})
"""Action kinds of the events that settle an intent."""

Status = Literal["done", "unverified", "compensated"]


def effect_key(state: AgentState, skill: str, params: Mapping[str, Any]) -> str:
    """The idempotency key of calling ``skill`` with ``params`` as the next step of ``state``."""
    text = json.dumps(params, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]
    base = f"{state.task_id}:{state.step_count + 1}-{skill}-{digest}"
    generation = state.effect_generations.get(base, 0)
    return f"{base}~{generation}" if generation else base


def base_key(key: str) -> str:
    """``key`` without its generation suffix (what the generation count is kept under)."""
    return key.split("~", 1)[0]


def current_key(state: AgentState, key: str) -> str:
    """``key``, or its next generation if it was compensated since it was recorded.

    An intent restored by a compensating rollback still carries the key its
    effect ran under; running it again under that key would meet the undone
    effect's remembered result.
    """
    base, _, suffix = key.partition("~")
    recorded = int(suffix) if suffix.isdigit() else 0
    generation = state.effect_generations.get(base, 0)
    return f"{base}~{generation}" if generation > recorded else key


@dataclass(frozen=True)
class EffectRecord:
    """One settled effect, as the event log tells it."""

    key: str
    skill: str
    params: dict[str, Any]
    version: int
    """The version that settled it."""
    status: Status


def _record(event: Event) -> EffectRecord | None:
    action = event.action
    if action.get("kind") not in EFFECT_KINDS or not action.get("key"):
        return None
    recorded = action.get("outcome")
    status: Status
    if recorded in ("done", "unverified", "compensated"):
        status = recorded
    else:
        # Events written before outcomes were recorded: the verdict tells.
        ok = event.verdict is not None and event.verdict.ok
        status = "done" if ok else "unverified"
    params = action.get("params")
    return EffectRecord(
        key=str(action["key"]),
        skill=str(action.get("skill") or event.skill or "?"),
        params=dict(params) if isinstance(params, Mapping) else {},
        version=event.version,
        status=status,
    )


def known_effects(events: Sequence[Event], version: int) -> dict[str, EffectRecord]:
    """The effects in the world that the state at ``version`` knows about, by key.

    Walks back from ``version``: a rollback event continues at the version it
    restored (what happened in between is not this state's past); a fork's first
    version stops the walk (the source task's effects are under its own keys).
    Compensated effects are left out.
    """
    by_version = {e.version: e for e in events}
    known: dict[str, EffectRecord] = {}
    compensated: set[str] = set()
    current = version
    while current >= 1:
        event = by_version.get(current)
        if event is None:
            current -= 1
            continue
        kind = event.action.get("kind")
        if kind == "compensate" and event.action.get("key"):
            compensated.add(str(event.action["key"]))
        record = _record(event)
        if record is not None and record.key not in known:
            if record.status == "compensated":
                compensated.add(record.key)
            elif record.key not in compensated:
                known[record.key] = record
        if kind == "rollback" and isinstance(event.action.get("to_version"), int):
            current = min(int(event.action["to_version"]), current - 1)
        elif kind == "fork":
            break
        else:
            current -= 1
    return known


def crossed_effects(events: Sequence[Event], head: int, target: int) -> list[EffectRecord]:
    """Effects the head knows and version ``target`` does not, newest first."""
    at_target = known_effects(events, target)
    crossed = [r for k, r in known_effects(events, head).items() if k not in at_target]
    return sorted(crossed, key=lambda r: r.version, reverse=True)


def describe(records: Sequence[EffectRecord], limit: int = 5) -> str:
    """``append_entry L:6-append_entry-3f2a9c1b (v12), ...`` for a one-line message."""
    shown = [
        f"{r.skill} {r.key} (v{r.version}" + (", unverified)" if r.status != "done" else ")")
        for r in records[:limit]
    ]
    more = len(records) - limit
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")
