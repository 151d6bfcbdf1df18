"""Replaying a task's history: each step with the state before and after it, and
the first step that went wrong.

Built from the store alone (events and kept checkpoints), so it works for any task
in any backend, after the fact. Without expectations, the first bad step is the
first whose verify failed or that logged an error. With :class:`Expectations` (the
evaluation harness writes them beside each run) it is also the first decision
whose result diverged from what the task expected at that point: a state fact
that does not hold after it, or an effect (a raw tool call that changes the
world) that differs from the reference plan's next one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skillstate._json import get_path
from skillstate.errors import StoreError, UsageError
from skillstate.events import Event
from skillstate.store.base import Store

__all__ = ["Attribution", "Expectations", "Step", "attribute", "timeline"]


@dataclass(frozen=True)
class Step:
    version: int
    actor: str
    label: str
    verdict: str | None
    error: str | None
    changes: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    """Top-level fields that changed: ``name -> (before, after)``."""
    decision: int | None = None
    """1-based index among the policy's decisions (``None`` for other actors)."""

    def as_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "decision": self.decision,
            "actor": self.actor,
            "label": self.label,
            "verdict": self.verdict,
            "error": self.error,
            "changes": {k: {"before": b, "after": a} for k, (b, a) in self.changes.items()},
        }


@dataclass(frozen=True)
class Expectations:
    """What a task expects along the way, to tell where a failed run went wrong."""

    facts: Sequence[Mapping[str, Any]] = ()
    """Per decision (``facts[i]`` after decision ``i + 1``): dotted state paths -> values."""
    effects: Sequence[tuple[str, Mapping[str, Any]]] = ()
    """The reference plan's effect calls, in order: ``(skill, params)``."""
    effect_skills: frozenset[str] = frozenset()
    """Which skills are effects (their calls are compared with :attr:`effects`)."""

    def as_json(self) -> dict[str, Any]:
        return {
            "facts": [dict(f) for f in self.facts],
            "effects": [{"skill": s, "params": dict(p)} for s, p in self.effects],
            "effect_skills": sorted(self.effect_skills),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Expectations:
        return cls(
            facts=[dict(f) for f in data.get("facts", [])],
            effects=[(str(e["skill"]), dict(e.get("params", {}))) for e in data.get("effects", [])],
            effect_skills=frozenset(data.get("effect_skills", [])),
        )

    @classmethod
    def load(cls, path: str | Path) -> Expectations:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
            return cls.from_json(data)
        except RecursionError:
            raise UsageError(f"cannot read expectations {path}: nested too deeply") from None
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise UsageError(f"cannot read expectations {path}: {exc}") from None


@dataclass(frozen=True)
class Attribution:
    """The first bad step of a task: where, and why."""

    version: int | None
    decision: int | None
    """1-based decision index; one past the last decision when the run stopped
    before a decision could be committed (e.g. its prompt overflowed)."""
    reason: str

    def as_json(self) -> dict[str, Any]:
        return {"version": self.version, "decision": self.decision, "reason": self.reason}


def timeline(
    store: Store, task_id: str, expected: Expectations | None = None
) -> tuple[list[Step], Attribution | None]:
    """Every committed step, and the first bad one (``None``: none went wrong)."""
    return _steps(store, task_id), attribute(store, task_id, expected)


def _steps(store: Store, task_id: str) -> list[Step]:
    kept = {info.version for info in store.checkpoints(task_id)}
    previous: dict[str, Any] = {}
    steps: list[Step] = []
    decision = 0
    for event in store.events(task_id):
        after: dict[str, Any] = {}
        if event.version in kept:
            try:
                after = store.checkpoint(task_id, event.version).state
            except StoreError:
                after = {}
        changes = {
            key: (previous.get(key), after.get(key))
            for key in sorted(set(previous) | set(after))
            if previous.get(key) != after.get(key) and key != "version"
        }
        verdict = None
        if event.verdict is not None:
            verdict = "ok" if event.verdict.ok else f"failed: {event.verdict.reason}"
        index = None
        if event.actor == "policy":
            decision += 1
            index = decision
        steps.append(
            Step(event.version, event.actor, event.label, verdict, event.error, changes, index)
        )
        previous = after or previous
    return steps


def attribute(
    store: Store,
    task_id: str,
    expected: Expectations | None = None,
    *,
    failure: str | None = None,
    events: Sequence[Event] | None = None,
) -> Attribution | None:
    """The first step that went wrong, or ``None`` when none did.

    ``events`` are the task's events when the caller has read them already (the
    inspector's task page does, for its timeline): they are not read again.

    In order, for each decision: it logged an error or its verify failed (a worker's
    takeover note, ``worker_lost``, is not an error of the task's); its state
    (once its effect settled) contradicts the expected facts for that decision; it
    made an effect call other than the reference plan's next one. When nothing
    diverged but the run failed anyway (``failure`` says why: a budget, a context
    overflow, a check at the end), the last decision is named with that reason: a
    failed run always carries a first bad step.
    """
    expected = expected or Expectations()
    effects = list(expected.effects)  # consumed in order as the run makes them
    head = store.load(task_id).version if expected.facts else 0
    decision = 0
    last: tuple[int, int] | None = None
    for event in store.events(task_id) if events is None else events:
        bad = _failed(event)
        if bad and event.action.get("kind") in _NOT_BAD:
            continue
        if event.actor != "policy":
            if bad:
                return Attribution(event.version, decision or None, bad)
            continue
        decision += 1
        last = (event.version, decision)
        bad = bad or _diverged(
            store,
            task_id,
            event=event,
            decision=decision,
            expected=expected,
            effects=effects,
            head=head,
        )
        if bad:
            return Attribution(event.version, decision, bad)
    if failure is None:
        return None
    if failure.startswith("context overflow"):
        return Attribution(None, decision + 1, failure)
    if last is None:
        return Attribution(None, 1, failure)
    reason = failure
    if effects:
        skill, params = effects[0]
        reason = f"{failure} (the plan's next effect, {skill}({_short(params)}), never came)"
    return Attribution(last[0], last[1], reason)


_NOT_BAD = frozenset({"budget", "worker_lost", "reject"})
"""Notes that log an error without the task having gone wrong: the budget stop is the
run's end; ``worker_lost`` is a worker taking the task over after its previous worker
was killed (the task resumes from its last commit); ``reject`` is a person refusing a
call that needed approval (the gate worked). A ``dead_letter`` stays bad."""


def _diverged(
    store: Store,
    task_id: str,
    *,
    event: Event,
    decision: int,
    expected: Expectations,
    effects: list[tuple[str, Mapping[str, Any]]],
    head: int,
) -> str | None:
    """Why decision ``decision`` diverged from the expectations, or ``None``."""
    if decision <= len(expected.facts):
        try:
            state = _settled(store, task_id, event.version, head)
        except StoreError:  # pruned: this step's facts can no longer be read
            state = {}
        for key, value in expected.facts[decision - 1].items() if state else ():
            got = get_path(state, key)
            if _norm(got) != _norm(value):
                return f"{key} is {got!r}, expected {value!r}"
    skill = event.action.get("skill")
    if event.action.get("kind") != "call_skill" or skill not in expected.effect_skills:
        return None
    params = event.action.get("params") or {}
    if not effects:
        return f"{skill} is an effect the reference plan has no more of"
    want_skill, want_params = effects.pop(0)
    if want_skill != skill or _norm(dict(params)) != _norm(dict(want_params)):
        return (
            f"effect {skill}({_short(params)}) where the plan does "
            f"{want_skill}({_short(want_params)})"
        )
    return None


def _failed(event: Event) -> str | None:
    if event.error:
        return f"error: {event.error}"
    if event.verdict is not None and not event.verdict.ok:
        return f"verify failed: {event.verdict.reason}"
    return None


def _settled(store: Store, task_id: str, version: int, head: int) -> dict[str, Any]:
    # An effect's outcome is committed right after its intent: judge the step by it.
    doc = store.checkpoint(task_id, version).state
    if doc.get("pending_effect") and version < head:
        doc = store.checkpoint(task_id, version + 1).state
    return doc


def _norm(value: Any) -> Any:
    """Compare values as a checker would: floats to the cent, strings stripped."""
    if isinstance(value, bool):
        return value
    if isinstance(value, float):
        return round(value, 2)
    if isinstance(value, int):
        return round(float(value), 2)
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, Mapping):
        return {k: _norm(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_norm(v) for v in value]
    return value


def _short(params: Mapping[str, Any]) -> str:
    text = ", ".join(f"{k}={v!r}" for k, v in params.items())
    return text if len(text) <= 80 else text[:79] + "…"
