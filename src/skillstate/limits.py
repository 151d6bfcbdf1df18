"""Bounds on what enters a card: sizes, nesting, and text that cannot be stored.

Everything in a card is shown to the next decision, hashed, diffed and stored at
every step, so one oversized or malformed value makes every later step pay for it,
or fail: outside testers bricked a task with a model reply carrying a 1.2-million-
character parameter (every later view and resume failed in the tokenizer), and
fuzzed replies with a lone surrogate failed in the store. So values are checked
where they come in, and an oversized one is refused with a clear reason (a
decision with oversized params is an invalid decision; a skill writing one fails
its attempt; a reply is refused before anything is written). Raw material
belongs in artifacts: ``ctx.call`` stores each tool output whole there, and the
card keeps a summary and the ref.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_LIMITS", "Limits", "problem"]


@dataclass(frozen=True)
class Limits:
    """Per agent (``Agent(limits=Limits(...))``); the defaults fit a prompt."""

    reply_chars: int = 20_000
    """A user's reply (``reply``, ``--input``)."""
    param_chars: int = 20_000
    """A decision's params, as compact JSON."""
    value_chars: int = 100_000
    """One value a skill writes into the card, as compact JSON."""
    model_reply_chars: int = 100_000
    """A model's raw reply, before it is parsed (longer ones are invalid decisions)."""
    depth: int = 32
    """Nesting of lists and objects in params, written values and hand edits."""


DEFAULT_LIMITS = Limits()


def problem(value: Any, *, chars: int, depth: int) -> str | None:
    """What makes ``value`` unfit for a card (too long, too deep, unstorable), or None."""
    found = _walk(value, depth)
    if found is not None:
        return found
    try:
        size = len(json.dumps(value, ensure_ascii=False, allow_nan=False, default=str))
    except ValueError:
        return "it holds a number JSON cannot store (infinity or NaN)"
    except RecursionError:
        return f"it is nested more than {depth} levels deep"
    if size > chars:
        return f"it is {size:,} characters long (the limit is {chars:,})"
    return None


def _walk(value: Any, limit: int) -> str | None:
    """Depth, lone surrogates and non-finite floats, without recursion."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, str):
            if _has_surrogate(node):
                return "it holds text that is not valid Unicode (a lone surrogate)"
        elif isinstance(node, float):
            if not math.isfinite(node):
                return "it holds a number JSON cannot store (infinity or NaN)"
        elif isinstance(node, dict):
            if level >= limit:
                return f"it is nested more than {limit} levels deep"
            for key, item in node.items():
                if isinstance(key, str) and _has_surrogate(key):
                    return "it holds text that is not valid Unicode (a lone surrogate)"
                stack.append((item, level + 1))
        elif isinstance(node, list | tuple):
            if level >= limit:
                return f"it is nested more than {limit} levels deep"
            stack.extend((item, level + 1) for item in node)
    return None


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False
