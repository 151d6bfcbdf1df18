"""The token chart of a task: prompt tokens per decision, state view against full history.

With the task's agent (through the operator's allow-list) the two curves are what
the demos print, :func:`~skillstate.engine.transcript.compare_prompts`: the tokens
of the state view each decision was made from, and of the whole-history transcript
a conventional agent loop would have sent at that point. Without the agent neither
can be rendered again (the views and the system prompt come from its code), so the
chart shows what the events recorded (the view size and the model's prompt tokens,
when a model decided) and says why the rest is missing.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from skillstate.engine.agent import Agent
    from skillstate.store.base import Store

__all__ = ["HISTORY_DECISIONS", "TokenCurve", "TokenPoint", "token_curve"]

HISTORY_DECISIONS = 300
"""Above this many decisions the history curve is not rebuilt: its cost grows with the
square of the task's length (every decision re-counts the whole transcript). Measured
with benchmarks/ui_pages.py on a busy 2-core machine: 1,000 decisions take 19 s, 300
about 2 s (once: the curve is cached per head version)."""
_CACHE: OrderedDict[tuple[str, str, int], TokenCurve] = OrderedDict()
_CACHE_LOCK = threading.Lock()
_CACHE_SIZE = 64


@dataclass(frozen=True)
class TokenPoint:
    """One decision's prompt sizes."""

    decision: int
    version: int
    state_view: int | None
    """Tokens of the state view the decision was made from."""
    history: int | None
    """Tokens of the full-history transcript at that point (``None``: not rebuilt)."""
    prompt: int | None
    """Prompt tokens the model was sent, as recorded (``None``: no model decided)."""


@dataclass(frozen=True)
class TokenCurve:
    points: list[TokenPoint]
    compared: bool
    """Both curves were rebuilt with the agent (else: what the events recorded)."""
    note: str | None = None

    def series(self) -> dict[str, list[tuple[float, float]]]:
        """The chart's lines: name -> (decision, tokens) points, empty lines left out."""
        lines: dict[str, list[tuple[float, float]]] = {}
        for name in ("state_view", "history", "prompt"):
            points = [
                (float(p.decision), float(v))
                for p in self.points
                if (v := getattr(p, name)) is not None
            ]
            if points:
                lines[_LABELS[name]] = points
        return lines

    def as_json(self) -> dict[str, Any]:
        return {
            "compared": self.compared,
            "note": self.note,
            "points": [vars(p) for p in self.points],
        }


_LABELS = {
    "state_view": "state view",
    "history": "full history",
    "prompt": "recorded prompt",
}


def token_curve(
    store: Store, task_id: str, agent: Agent[Any] | None, why_no_agent: str | None
) -> TokenCurve:
    """The task's token curve (cached per store, task and head version)."""
    key = (store.url, task_id, store.load(task_id, verify=False).version)
    with _CACHE_LOCK:
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return _CACHE[key]
    curve = _curve(store, task_id, agent, why_no_agent)
    with _CACHE_LOCK:
        _CACHE[key] = curve
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return curve


def _curve(
    store: Store, task_id: str, agent: Agent[Any] | None, why_no_agent: str | None
) -> TokenCurve:
    from skillstate.engine.transcript import compare_prompts

    decisions = [e for e in store.events(task_id) if e.actor == "policy"]
    recorded = [
        TokenPoint(
            i, e.version, e.view_tokens, None, e.usage.prompt if e.usage is not None else None
        )
        for i, e in enumerate(decisions, 1)
    ]
    if agent is None:
        why = f"the task's agent is not used ({why_no_agent})" if why_no_agent else "no agent"
        return TokenCurve(
            recorded,
            compared=False,
            note=f"recorded sizes only: {why}; the views and the history transcript are "
            "rendered again from the agent's code, which the operator must allow "
            "([tool.skillstate] agents or SKILLSTATE_AGENTS)",
        )
    if len(decisions) > HISTORY_DECISIONS:
        return TokenCurve(
            recorded,
            compared=False,
            note=f"recorded sizes only: {len(decisions)} decisions is more than "
            f"{HISTORY_DECISIONS}, and rebuilding the history transcript costs the square "
            f"of that (skillstate tokens {task_id} prints the per-decision table)",
        )
    compared = compare_prompts(store, task_id, agent)
    points = [
        TokenPoint(r.decision, r.version, c.state_view, c.history, r.prompt)
        for r, c in zip(recorded, compared, strict=True)
    ]
    return TokenCurve(points, compared=True)
