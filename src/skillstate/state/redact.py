"""Redaction: replace known secret values by ``"***"`` wherever text leaves the process.

Sealing (:mod:`skillstate.state.secrets`) protects the sensitive *fields* of the card.
A skill still uses the plaintext, and it can travel from there into a tool call's
arguments, a tool's raw output, an error message or a verify reason, all of which
end up in events, artifacts and logs. A :class:`Redactor` built from the state's
secret values scrubs those before they are written::

    redactor = Redactor(secret_values(state))
    if redactor:                       # nothing sensitive: skip all the work
        event = redactor.event(event)
        raw = redactor.bytes(raw)

Matching is by exact value, so values shorter than :data:`MIN_SECRET` characters are
not redacted: replacing every ``"on"`` or ``"42"`` would mangle the log and hide
nothing (a value that short is not a secret worth the name).
"""

from __future__ import annotations

import builtins
import json
import re
from collections.abc import Iterable
from typing import Any, TypeVar

from skillstate.events import Event
from skillstate.state.secrets import MASK

__all__ = ["MIN_SECRET", "Redactor"]

MIN_SECRET = 4
"""Values shorter than this are not redacted (see the module docstring)."""

J = TypeVar("J")


def _variants(secret: str) -> set[str]:
    """The secret as it appears raw and inside JSON text (escaped, ASCII-escaped)."""
    return {
        secret,
        json.dumps(secret, ensure_ascii=False)[1:-1],
        json.dumps(secret, ensure_ascii=True)[1:-1],
    }


class Redactor:
    """Replaces every occurrence of the given secrets by ``"***"``.

    Longer secrets are matched first, so a secret that contains another is
    replaced whole rather than leaving its remainder behind.
    """

    def __init__(self, secrets: Iterable[str]) -> None:
        forms = {v for s in secrets if len(s) >= MIN_SECRET for v in _variants(s)}
        ordered = sorted(forms, key=lambda s: (-len(s), s))
        self._secrets: tuple[str, ...] = tuple(ordered)
        self._text: re.Pattern[str] | None = None
        self._bytes: re.Pattern[bytes] | None = None
        if ordered:
            # One alternation scans the input once, whatever the number of secrets.
            self._text = re.compile("|".join(re.escape(s) for s in ordered))
            raw = sorted({s.encode("utf-8") for s in ordered}, key=lambda b: (-len(b), b))
            self._bytes = re.compile(b"|".join(re.escape(b) for b in raw))

    def __bool__(self) -> bool:
        return self._text is not None

    def __repr__(self) -> str:
        # Never the values themselves: a repr is exactly what ends up in a log.
        return f"Redactor({len(self._secrets)} forms)"

    def text(self, s: str) -> str:
        """``s`` with every secret replaced by ``"***"``."""
        if self._text is None:
            return s
        return self._text.sub(MASK, s)

    def bytes(self, b: builtins.bytes) -> builtins.bytes:
        """Raw bytes (a tool's output artifact) with every secret's UTF-8 form replaced."""
        if self._bytes is None:
            return b
        return self._bytes.sub(MASK.encode("ascii"), b)

    def json(self, value: J) -> J:
        """A deep copy of a JSON-like value with every string (dict keys too) redacted."""
        if self._text is None:
            return value
        return self._json(value)  # type: ignore[no-any-return]

    def _json(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {
                (self.text(k) if isinstance(k, str) else k): self._json(v) for k, v in value.items()
            }
        if isinstance(value, list):
            return [self._json(v) for v in value]
        if isinstance(value, tuple):
            return tuple(self._json(v) for v in value)
        if hasattr(value, "model_dump"):
            return self._json(value.model_dump(mode="json"))
        return value

    def event(self, e: Event) -> Event:
        """``e`` with its action, tool calls, error, verdict, transition and patch redacted."""
        if self._text is None:
            return e
        update: dict[str, Any] = {
            "action": self._json(e.action),
            "tool_calls": tuple(
                call.model_copy(
                    update={"args": self._json(call.args), "summary": self.text(call.summary)}
                )
                for call in e.tool_calls
            ),
            "error": self.text(e.error) if e.error is not None else None,
            "patch": self._json(e.patch),
        }
        if e.verdict is not None:
            update["verdict"] = e.verdict.model_copy(update={"reason": self.text(e.verdict.reason)})
        if e.skill_transition is not None:
            update["skill_transition"] = e.skill_transition.model_copy(
                update={"reason": self.text(e.skill_transition.reason)}
            )
        # model_copy skips validation: every value above keeps its validated type.
        return e.model_copy(update=update)
