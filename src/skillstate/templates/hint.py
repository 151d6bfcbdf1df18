"""The template plan a task started from, as the card keeps it and the view shows it.

A task started from a template (``skillstate run --template``) carries the template's
plan on its card as a :class:`TemplateHint`: the entries not done yet, next first,
with the template's parameters already filled in. It is a hint: the model still
decides every step. Each completed step takes the first remaining entry that names
its skill off the hint (as it does for ``pending_steps``), so the view always shows
what is left and which entry is next.

A param of an entry is a value, or a reference the view resolves against the card
at the time it is shown:

* ``"$state.PATH"``: the card's value at ``PATH`` (``facts.user_id``) when the step
  runs; the source task used the value it found there.
* ``"$from.PATH"``: a value the source task read out of the text at ``PATH`` (a
  tool's output kept in ``facts``): the model reads it there again.
* ``{"$literal": VALUE}``: ``VALUE`` itself, written so because it would otherwise
  read as a reference.

This module imports nothing of the card (the card imports it), so it is safe to use
from :mod:`skillstate.state.model`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "FROM",
    "LITERAL",
    "MAX_HINT_STEPS",
    "STATE",
    "HintStep",
    "TemplateHint",
    "hint_lines",
    "reference",
]

STATE = "$state."
"""Prefix of a reference to the card's value at a path."""
FROM = "$from."
"""Prefix of a reference to text the value is read out of."""
LITERAL = "$literal"
"""The one key of a mapping that holds a value that would read as a reference."""
MAX_HINT_STEPS = 100
"""Entries a card's hint holds at most: the card stays bounded whatever the template."""
SHOWN_CHARS = 120
"""Characters of one param value the view shows of a hint entry."""


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class HintStep(_Record):
    """One entry of a template's plan: a skill and its params, parameters filled in."""

    skill: str
    params: dict[str, Any] = Field(default_factory=dict)
    """Values, or references resolved when shown (see the module docstring)."""


class TemplateHint(_Record):
    """The plan of the template a task started from (the card's ``template`` field)."""

    name: str
    """The template's name."""
    source: str
    """The task the template was distilled from."""
    steps: tuple[HintStep, ...] = ()
    """The entries not done yet, next first."""
    total: int = 0
    """Entries the template's plan has in all (the hint may hold fewer: :data:`MAX_HINT_STEPS`)."""
    done: int = 0
    """Entries a completed step has taken off."""

    def after(self, skill: str | None) -> TemplateHint:
        """This hint with the first remaining entry of ``skill`` done (itself if none)."""
        if skill is None:
            return self
        for index, step in enumerate(self.steps):
            if step.skill == skill:
                left = (*self.steps[:index], *self.steps[index + 1 :])
                return self.model_copy(update={"steps": left, "done": self.done + 1})
        return self


def reference(value: Any) -> tuple[str, str] | None:
    """``("state" | "from", PATH)`` when ``value`` is a reference, else ``None``."""
    if isinstance(value, str):
        for kind, prefix in (("state", STATE), ("from", FROM)):
            if value.startswith(prefix) and len(value) > len(prefix):
                return kind, value[len(prefix) :]
    return None


Lookup = Callable[[str], tuple[bool, Any]]
"""Reads the card at a dotted path: ``(found, value)``; a secret reads as ``"***"``."""


def hint_lines(hint: TemplateHint, lookup: Lookup) -> tuple[str, list[str]]:
    """The header of the view's template section and one line per remaining entry."""
    left = len(hint.steps)
    beyond = max(hint.total - hint.done - left, 0)
    if not left:
        header = (
            f"Template plan (hint, from task {hint.source}): all {hint.done} hinted steps "
            "are done; the source task finished after them"
        )
        return header, []
    header = (
        f"Template plan (hint from task {hint.source}; you still decide every step; "
        f"{hint.done} of {hint.total} done):"
    )
    lines = [
        f"- {'next' if i == 0 else 'then'}: {_call(step, lookup)}"
        for i, step in enumerate(hint.steps)
    ]
    if beyond:
        lines.append(f"- (and {beyond} more entries in the template)")
    return header, lines


def _call(step: HintStep, lookup: Lookup) -> str:
    shown = ", ".join(f"{name}={_value(value, lookup)}" for name, value in step.params.items())
    return f"{step.skill}({shown})"


def _value(value: Any, lookup: Lookup) -> str:
    found = reference(value)
    if found is not None:
        kind, path = found
        if kind == "from":
            return f"(read it from {path})"
        present, current = lookup(path)
        if not present or current is None:
            return f"(from {path}, not set yet)"
        return f"{_json(current)} (from {path})"
    return _json(_nested(value, lookup))


def _nested(value: Any, lookup: Lookup) -> Any:
    """``value`` with references inside a structure shown as text (``<from PATH>``)."""
    if isinstance(value, Mapping):
        if set(value) == {LITERAL}:
            return value[LITERAL]
        return {key: _nested(item, lookup) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_nested(item, lookup) for item in value]
    found = reference(value)
    if found is None:
        return value
    kind, path = found
    present, current = lookup(path) if kind == "state" else (False, None)
    return current if present and current is not None else f"<{kind} {path}>"


def _json(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"
