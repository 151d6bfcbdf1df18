"""Generalising a finished task's values: what becomes a parameter, a reference or a literal.

A value the task was *given* (an initial card field, a ``--set`` field, a user's
reply, a value quoted in the goal) is task-specific: where it reappears (in a param of
the plan, the goal, the constraints) it becomes a named parameter, ``{{email}}``. A
param value the card held when the step ran becomes a reference to where it was
(``$state.facts.user_id``); one the task read out of a longer text (a tool's output
kept in ``facts``) becomes ``$from.facts.find_user``. Anything else stays literal: a
constant of the skill, or a value the model chose.

Secrets never get through: a sealed or masked value, or one the agent's redaction
policy masks, becomes a *secret* parameter (required, no default, never its value),
and free text goes through the redactor before anything is matched in it.

Short values are weak evidence: a value shorter than :data:`MIN_TEXT` characters is
never substituted inside free text ("5" in "5 retries"), and one shorter than
:data:`MIN_SEARCH` is never looked for in the card.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from skillstate.skills.handles import HANDLE
from skillstate.state.protect import secret_leaves
from skillstate.state.redact import Redactor
from skillstate.state.secrets import MASK, is_sealed
from skillstate.templates.hint import FROM, LITERAL, STATE
from skillstate.templates.model import PLACEHOLDER, Parameter, ParamType

__all__ = ["MIN_SEARCH", "MIN_TEXT", "Generaliser", "json_type"]

MIN_TEXT = 3
"""Characters a value needs to be replaced inside free text."""
MIN_SEARCH = 2
"""Characters a value needs to be looked for in the card."""
SEARCH_DEPTH = 3
"""Levels of a card field's mappings searched for a value (``facts.order.id``)."""


def json_type(value: Any) -> ParamType:
    """The JSON type name of ``value`` (what a parameter declares)."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return "string"


def _text(value: Any) -> str | None:
    """The text a scalar value is written as in free text (``None``: not a scalar)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (str, int, float)):
        return value if isinstance(value, str) else json.dumps(value)
    return None


def _identifier(name: str) -> str:
    cleaned = re.sub(r"\W", "_", name).strip("_") or "value"
    return f"p_{cleaned}" if cleaned[0].isdigit() else cleaned


@dataclass
class Generaliser:
    """Collects a task's parameters and rewrites its values with them.

    ``sensitive``: the state class's ``Sensitive`` fields (their stored values are
    sealed; they are never searched, and a parameter for one is secret).
    """

    redactor: Redactor
    sensitive: frozenset[str] = frozenset()
    parameters: dict[str, Parameter] = field(default_factory=dict)
    _values: list[tuple[Any, str]] = field(default_factory=list)
    """(value, parameter name) of every non-secret parameter, longest text first."""

    # ---------------------------------------------------------------- parameters

    def add(
        self, name: str, value: Any, *, origin: str, field_name: str | None = None
    ) -> str | None:
        """Declare parameter ``name`` for ``value`` (a free name if taken); its name, or
        ``None`` when there is nothing to parametrise (an empty value)."""
        if value is None or value in ("", [], {}):
            return None
        secret = (
            (field_name in self.sensitive)
            or self._secret(value)
            or bool(secret_leaves({name: value}, self.redactor))
        )
        found = self._existing(value) if not secret else None
        if found is not None:
            return found
        name = self._free(_identifier(name))
        self.parameters[name] = Parameter(
            type=json_type(value), secret=secret, field=field_name, origin=origin
        )
        if not secret:
            self._values.append((value, name))
            self._values.sort(key=lambda pair: -len(_text(pair[0]) or ""))
        return name

    def _existing(self, value: Any) -> str | None:
        for known, name in self._values:
            if _same(known, value):
                return name
        return None

    def _free(self, name: str) -> str:
        if name not in self.parameters:
            return name
        n = 2
        while f"{name}_{n}" in self.parameters:
            n += 1
        return f"{name}_{n}"

    def _secret(self, value: Any) -> bool:
        if isinstance(value, str):
            return is_sealed(value) or MASK in value
        if isinstance(value, Mapping):
            return any(self._secret(v) for v in value.values())
        if isinstance(value, (list, tuple)):
            return any(self._secret(v) for v in value)
        return False

    def secret_param(self, key: str, origin: str) -> str:
        """The secret parameter for a param named ``key`` (one per name: the same secret
        is most likely passed again under the same name)."""
        name = _identifier(key)
        existing = self.parameters.get(name)
        if existing is not None and existing.secret:
            return name
        name = self._free(name)
        field_name = key if key in self.sensitive else None
        self.parameters[name] = Parameter(secret=True, field=field_name, origin=origin)
        return name

    # ---------------------------------------------------------------- free text

    def text(self, value: str) -> str:
        """``value`` redacted, with every parameter's value in it replaced by ``{{name}}``."""
        clean = self.redactor.text(value).replace("{{", "{ {")  # no accidental placeholder
        for known, name in self._values:
            shown = _text(known)
            if shown is None or len(shown) < MIN_TEXT:
                continue
            pattern = re.compile(rf"(?<![\w.@-]){re.escape(shown)}(?![\w@-]|\.\w)")
            clean = pattern.sub("{{" + name + "}}", clean)
        return clean

    def quoted(self, value: Any, text: str) -> bool:
        """Whether ``value`` is quoted in ``text`` (long enough to count as evidence)."""
        shown = _text(value)
        if shown is None or len(shown) < MIN_TEXT:
            return False
        return re.search(rf"(?<![\w.@-]){re.escape(shown)}(?![\w@-]|\.\w)", text) is not None

    # ---------------------------------------------------------------- params

    def params(
        self,
        skill: str,
        params: Mapping[str, Any],
        before: Mapping[str, Any],
        bound: Mapping[str, str],
    ) -> dict[str, Any]:
        """A step's params generalised: ``bound`` maps a param to its ``FromState`` path;
        ``before`` is the card (as stored) when the step ran."""
        secrets = {path for path, _ in secret_leaves(dict(params), self.redactor)}
        out: dict[str, Any] = {}
        for key, value in params.items():
            if key in bound:
                out[key] = STATE + bound[key]
            else:
                out[key] = self._leaf(skill, (key,), value, before, secrets)
        return out

    def _leaf(
        self,
        skill: str,
        path: tuple[str | int, ...],
        value: Any,
        before: Mapping[str, Any],
        secrets: set[tuple[str | int, ...]],
    ) -> Any:
        key = str(next((p for p in reversed(path) if isinstance(p, str)), "value"))
        where = f"{skill}.{'.'.join(str(p) for p in path)}"
        if path in secrets or self._secret(value):
            return "{{" + self.secret_param(key, f"secret param {where}") + "}}"
        if isinstance(value, str) and HANDLE.fullmatch(value):
            return value  # a handle names a Sensitive field of the card, not its value
        known = self._existing(value)
        if known is not None:
            return "{{" + known + "}}"
        found = _find(before, value, self.sensitive)
        if found is not None:
            return STATE + found
        if isinstance(value, Mapping):
            return {k: self._leaf(skill, (*path, k), v, before, secrets) for k, v in value.items()}
        if isinstance(value, list):
            return [self._leaf(skill, (*path, i), v, before, secrets) for i, v in enumerate(value)]
        if isinstance(value, str):
            rewritten = self.text(value)
            if PLACEHOLDER.search(rewritten):
                return rewritten
        inside = _find_in_text(before, value, self.sensitive)
        if inside is not None:
            return FROM + inside
        return _literal(value)


def _literal(value: Any) -> Any:
    """``value`` as a literal param: wrapped where it would read as a reference."""
    if isinstance(value, str) and (value.startswith("$") or PLACEHOLDER.search(value)):
        return {LITERAL: value}
    return value


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON values (``True`` is not ``1``)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and a == b


def _weak(value: Any) -> bool:
    shown = _text(value)
    if shown is not None:
        return len(shown) < MIN_SEARCH
    return value is None or isinstance(value, bool) or value in ([], {})


def _leaves(doc: Mapping[str, Any], sensitive: frozenset[str]) -> Iterator[tuple[str, Any]]:
    """(dotted path, value) of the card's custom fields and facts, breadth first."""
    queue: list[tuple[str, Any, int]] = [
        (name, value, 1) for name, value in doc.items() if name not in sensitive
    ]
    while queue:
        path, value, level = queue.pop(0)
        yield path, value
        if isinstance(value, Mapping) and level < SEARCH_DEPTH:
            queue += [(f"{path}.{k}", v, level + 1) for k, v in value.items() if "." not in k]


def _find(doc: Mapping[str, Any], value: Any, sensitive: frozenset[str]) -> str | None:
    """The shortest card path holding exactly ``value``."""
    if _weak(value):
        return None
    for path, held in _leaves(doc, sensitive):
        if _same(held, value):
            return path
    return None


def _find_in_text(doc: Mapping[str, Any], value: Any, sensitive: frozenset[str]) -> str | None:
    """The card path of the first text that quotes ``value`` (a tool's output)."""
    shown = _text(value)
    if shown is None or len(shown) < MIN_SEARCH:
        return None
    pattern = re.compile(rf"(?<![\w.]){re.escape(shown)}(?![\w]|\.\d)")
    for path, held in _leaves(doc, sensitive):
        if isinstance(held, str) and pattern.search(held):
            return path
    return None
