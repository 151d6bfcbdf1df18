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
import re
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_LIMITS", "INT_DIGITS", "Limits", "edit_problem", "problem"]

INT_DIGITS = 4_300
"""The longest integer a card holds, in decimal digits: CPython's default limit on
int-string conversion. A longer one could not be written as JSON or read back
(``ValueError: Exceeds the limit (4300 digits)``), so it is refused where it comes
in, whatever limit the interpreter was started with."""
_TOO_LONG_INT = 10**INT_DIGITS
_SHORT_INT_BITS = 14_000
"""Integers of at most this many bits have fewer than 4,300 digits (14,000 * log10 2 is
about 4,214): the common case needs no big-number comparison."""


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
    kind = type(value)
    if kind is str and len(value) * 6 + 2 <= chars:
        # Most written values are short text or numbers: no JSON text is needed to
        # know they fit (an escape is at most 6 characters: ``\uXXXX``).
        return _scalar(value)
    if kind is int or kind is bool or value is None:
        found = _scalar(value)
        return found if found is not None or len(str(value)) <= chars else _too_long(value, chars)
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


def _too_long(value: Any, chars: int) -> str:
    return f"it is {len(str(value)):,} characters long (the limit is {chars:,})"


def _walk(value: Any, limit: int) -> str | None:
    """Depth, lone surrogates, non-finite floats and huge integers, without recursion."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
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
        else:
            found = _scalar(node)
            if found is not None:
                return found
    return None


def _scalar(node: Any) -> str | None:
    if isinstance(node, str) and _has_surrogate(node):
        return "it holds text that is not valid Unicode (a lone surrogate)"
    if isinstance(node, float) and not math.isfinite(node):
        return "it holds a number JSON cannot store (infinity or NaN)"
    # The bit length first: only a very long integer is compared with 10**4300.
    long = isinstance(node, int) and node.bit_length() > _SHORT_INT_BITS
    if long and abs(node) >= _TOO_LONG_INT:
        return f"it holds an integer of more than {INT_DIGITS:,} digits"
    return None


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


# C0 controls but tab and line feed, DEL, C1 controls, and the bidirectional embeddings,
# overrides and isolates (U+202A-U+202E, U+2066-U+2069). A key (a field or fact name,
# a ``set`` path) may hold no control character at all: it is shown on one line.
_BIDI = "\u202a-\u202e\u2066-\u2069"
_UNSAFE_IN_TEXT = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}]")
_UNSAFE_IN_KEY = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}]")


def edit_problem(value: Any, *, depth: int = DEFAULT_LIMITS.depth) -> str | None:
    """What makes ``value`` unfit for a person's edit of a card (``set``, ``edit``, the
    web inspector), or None.

    Besides :func:`problem`'s bounds (depth, lone surrogates, NaN and infinity,
    integers over :data:`INT_DIGITS` digits), text may hold no control character but
    line feed and tab (multi-line text is fine in a value, never in a key), no DEL or
    C1 control, and no bidirectional override: an escape sequence would drive the
    terminal of whoever runs ``show`` or ``log``, and an override makes text display
    differently from what the next decision reads (``refund 40`` shown, ``refund 04``
    stored), the one thing a person checking a card must be able to trust.
    """
    found = problem(value, chars=1 << 30, depth=depth)
    if found is not None:
        return found
    stack: list[Any] = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            found = _unsafe(node, _UNSAFE_IN_TEXT, "")
        elif isinstance(node, dict):
            keys = (_unsafe(k, _UNSAFE_IN_KEY, " in a key") for k in node if isinstance(k, str))
            found = next((f for f in keys if f is not None), None)
            stack.extend(node.values())
        elif isinstance(node, list | tuple):
            stack.extend(node)
        if found is not None:
            return found
    return None


def _unsafe(text: str, pattern: re.Pattern[str], where: str) -> str | None:
    match = pattern.search(text)
    if match is None:
        return None
    code = ord(match.group())
    kind = (
        "a bidirectional control character"
        if code >= 0x202A
        else "a line break or tab"
        if chr(code) in "\n\t"
        else "a control character"
    )
    return f"it holds {kind}{where} (U+{code:04X})"
