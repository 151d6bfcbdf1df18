"""A small declarative rule language for ``applicable_when`` and ``verify`` in skill files.

A rule reads one value by a dotted path and compares it; nothing in a skill file is
ever evaluated as code. Two spellings, the same rule::

    - report.rows >= 2                          # a string: PATH OP VALUE
    - {field: report.rows, op: ge, value: 2}    # a mapping

Paths start at a root: ``state`` (the default; in ``verify`` the state *after* the
skill's writes), and in ``verify`` also ``before`` (the state the step started
from), ``outcome`` (``outcome.summary``, ``outcome.value.x``, ``outcome.writes.x``)
and ``params``. A path walks fields, dict keys and list indexes (``items.0.id``).

Operators: ``exists``, ``absent``, ``nonempty`` (no value); ``==`` ``!=`` ``>`` ``>=``
``<`` ``<=`` (``eq`` ``ne`` ``gt`` ``ge`` ``lt`` ``le``); ``in`` and ``not_in`` (a list);
``contains`` (an item, or a list of items that must all be there: in a list, a
string or a dict's keys); ``matches`` (a regular expression, searched); and the
length of a value with ``len(PATH) >= 2`` (``len_ge``, and so on for each
comparison). A rule over a missing value does not hold (except ``absent``).

A comparison or ``contains`` may take its value from another path, so a result can
be checked against its input: ``refund.amount <= $order.total`` (mapping form:
``{field: refund.amount, op: le, ref: order.total}``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence, Sized
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from skillstate._yaml import load_yaml
from skillstate.errors import UsageError

__all__ = ["Rule", "parse_rules"]

_SYMBOLS = {"==": "eq", "!=": "ne", ">": "gt", ">=": "ge", "<": "lt", "<=": "le"}
_COMPARE = ("eq", "ne", "gt", "ge", "lt", "le")
_UNARY = ("exists", "absent", "nonempty")
OPS = (*_UNARY, *_COMPARE, "in", "not_in", "contains", "matches", *(f"len_{c}" for c in _COMPARE))
_WORDS = {"not in": "not_in", **{op: op for op in OPS}}
_SHOWN = 60
_LEN = re.compile(r"len\(\s*([^()\s]+)\s*\)")
_REF = re.compile(r"\$[A-Za-z_][\w.]*\Z")


class _Missing:
    def __repr__(self) -> str:
        return "missing"


MISSING: Any = _Missing()


@dataclass(frozen=True)
class Rule:
    """One parsed rule: ``root.path OP value``."""

    root: str
    path: tuple[str, ...]
    op: str
    value: Any = None
    text: str = ""
    """The rule as a person reads it, for reasons: ``report.rows >= 2``."""
    pattern: re.Pattern[str] | None = None
    ref: tuple[str, tuple[str, ...]] | None = None
    """``(root, path)`` of another value to compare with instead of ``value``."""

    @property
    def dotted(self) -> str:
        """The path without its root (``report.rows``)."""
        return ".".join(self.path)

    def failure(self, roots: Mapping[str, Any]) -> str | None:
        """``None`` when the rule holds over ``roots``, else why not (one line)."""
        actual = _lookup(roots.get(self.root, MISSING), self.path)
        value = self.value
        if self.ref is not None:
            value = _lookup(roots.get(self.ref[0], MISSING), self.ref[1])
            if value is MISSING:
                return f"`{self.text}` does not hold ({self._ref_name} is missing)"
        if _holds(self, actual, value):
            return None
        shown = "missing" if actual is MISSING else _short(actual)
        against = f", {self._ref_name} is {_short(value)}" if self.ref is not None else ""
        return f"`{self.text}` does not hold ({self.root}.{self.dotted} is {shown}{against})"

    @property
    def _ref_name(self) -> str:
        return ".".join((self.ref[0], *self.ref[1])) if self.ref is not None else ""

    def holds(self, roots: Mapping[str, Any]) -> bool:
        return self.failure(roots) is None


def parse_rules(raw: Any, *, where: str, roots: Sequence[str]) -> tuple[Rule, ...]:
    """The rules of a list (``where`` names it in errors); ``roots[0]`` is the default."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise UsageError(f"{where}: expected a list of rules, got {type(raw).__name__}")
    return tuple(_parse(item, where=f"{where}[{i}]", roots=roots) for i, item in enumerate(raw))


def _parse(raw: Any, *, where: str, roots: Sequence[str]) -> Rule:
    if isinstance(raw, str):
        path, op, value, has_value = _split(raw, where)
    elif isinstance(raw, Mapping):
        unknown = sorted(set(raw) - {"field", "op", "value", "ref"})
        if unknown:
            raise UsageError(
                f"{where}: unknown key(s) {', '.join(map(str, unknown))} "
                "(a rule has field, op and value or ref)"
            )
        field, symbol = raw.get("field"), raw.get("op")
        if not isinstance(field, str) or not field:
            raise UsageError(f"{where}.field: expected a dotted path")
        if not isinstance(symbol, str):
            raise UsageError(f"{where}.op: expected one of {', '.join(OPS)}")
        path, op = field, symbol
        op = _SYMBOLS.get(op, op)
        value, has_value = raw.get("value"), "value" in raw
        if "ref" in raw:
            if has_value or not isinstance(raw["ref"], str):
                raise UsageError(f"{where}.ref: a path to compare with, instead of a value")
            value, has_value = Ref(raw["ref"]), True
    else:
        raise UsageError(
            f"{where}: expected a rule (a string or a mapping), got {type(raw).__name__}"
        )
    _check_op(op, value, has_value, where)
    root, parts = _rooted(path, roots, where)
    ref = None
    if isinstance(value, Ref):
        ref = _rooted(value.path, roots, f"{where}.ref")
    pattern = None
    if op == "matches":
        try:
            pattern = re.compile(value)
        except re.error as exc:
            raise UsageError(f"{where}: invalid regular expression {value!r}: {exc}") from None
    text = raw if isinstance(raw, str) else _text(path, op, value, has_value)
    return Rule(root, parts, op, None if ref else value, text.strip(), pattern, ref)


@dataclass(frozen=True)
class Ref:
    """A rule's value read from another path (``$order.total``, ``ref: order.total``)."""

    path: str

    def __str__(self) -> str:
        return f"${self.path}"


def _rooted(path: str, roots: Sequence[str], where: str) -> tuple[str, tuple[str, ...]]:
    """``(root, parts)`` of a dotted path (``roots[0]`` when it names none)."""
    parts = tuple(path.split("."))
    if any(not p for p in parts):
        raise UsageError(f"{where}: the path {path!r} has an empty segment")
    if len(parts) > 1 and parts[0] in roots:
        return parts[0], parts[1:]
    return roots[0], parts


def _check_op(op: str, value: Any, has_value: bool, where: str) -> None:
    """Refuse an unknown operator, or a value that does not fit it."""
    if op not in OPS:
        raise UsageError(f"{where}: unknown op {op!r} (expected one of {', '.join(OPS)})")
    if op in _UNARY and has_value:
        raise UsageError(f"{where}: {op} takes no value")
    if op not in _UNARY and not has_value:
        raise UsageError(f"{where}: {op} needs a value")
    if isinstance(value, Ref):
        if op in ("in", "not_in", "matches"):
            raise UsageError(f"{where}: {op} takes a value written in the rule, not a path")
        return
    if op in ("in", "not_in") and not isinstance(value, list):
        raise UsageError(f"{where}: {op} needs a list value")
    if op == "matches" and not isinstance(value, str):
        raise UsageError(f"{where}: matches needs a regular expression (a string)")
    if op.startswith("len_") and (isinstance(value, bool) or not isinstance(value, int)):
        raise UsageError(f"{where}: {op} needs an integer value")


def _split(text: str, where: str) -> tuple[str, str, Any, bool]:
    """``PATH OP [VALUE]`` (or ``len(PATH) OP VALUE``) split, the value read as YAML."""
    stripped = text.strip()
    length = _LEN.match(stripped)
    if length:
        path, rest = length.group(1), stripped[length.end() :].strip()
    else:
        path, _, rest = stripped.partition(" ")
        rest = rest.strip()
    if not path or not rest:
        raise UsageError(f"{where}: expected PATH OP [VALUE], got {text!r}")
    for word in sorted((*_SYMBOLS, *_WORDS), key=len, reverse=True):
        spaced = rest == word or rest.startswith(word + " ")
        glued = word in _SYMBOLS and rest.startswith(word) and rest[len(word) :][:1] not in "<>=!"
        if spaced or glued:
            op = _SYMBOLS.get(word) or _WORDS[word]
            literal = rest[len(word) :].strip()
            break
    else:
        raise UsageError(
            f"{where}: no operator in {text!r} (expected one of {', '.join((*_SYMBOLS, *OPS))})"
        )
    if length:
        if op not in _COMPARE:
            raise UsageError(f"{where}: len(...) takes a comparison (== != > >= < <=)")
        op = f"len_{op}"
    if not literal:
        return path, op, None, False
    if _REF.match(literal):
        return path, op, Ref(literal[1:]), True
    return path, op, load_yaml(literal, what=f"{where} value"), True


def _text(path: str, op: str, value: Any, has_value: bool) -> str:
    symbol = {v: k for k, v in _SYMBOLS.items()}
    if op.startswith("len_"):
        return f"len({path}) {symbol[op[4:]]} {_short(value)}"
    shown = symbol.get(op, op)
    return f"{path} {shown} {_short(value)}" if has_value else f"{path} {shown}"


def _lookup(node: Any, path: Sequence[str]) -> Any:
    for key in path:
        if node is MISSING or node is None:
            return MISSING
        if isinstance(node, BaseModel):
            node = getattr(node, key) if key in type(node).model_fields else MISSING
        elif isinstance(node, Mapping):
            node = node.get(key, MISSING)
        elif isinstance(node, list | tuple):
            try:
                node = node[int(key)]
            except (ValueError, IndexError):
                return MISSING
        elif hasattr(node, "__dataclass_fields__") and key in node.__dataclass_fields__:
            node = getattr(node, key)  # an Outcome
        else:
            return MISSING
    if isinstance(node, BaseModel):
        return node.model_dump(mode="json")
    return node


def _holds(rule: Rule, actual: Any, value: Any) -> bool:
    op = rule.op
    if op == "absent":
        return actual is MISSING or actual is None
    if actual is MISSING:
        return False
    if op == "exists":
        return actual is not None
    if op == "nonempty":
        return actual is not None and (not isinstance(actual, Sized) or len(actual) > 0)
    if op.startswith("len_"):
        if not isinstance(actual, Sized):
            return False
        return _compare(op[4:], len(actual), value)
    if op in _COMPARE:
        return _compare(op, actual, value)
    if op in ("in", "not_in"):
        assert isinstance(value, list)
        inside = any(_equal(actual, item) for item in value)
        return inside if op == "in" else not inside
    if op == "contains":
        wanted = value if isinstance(value, list) else [value]
        return all(_has(actual, item) for item in wanted)
    assert rule.pattern is not None  # matches
    return isinstance(actual, str) and rule.pattern.search(actual) is not None


def _compare(op: str, actual: Any, value: Any) -> bool:
    if op == "eq":
        return _equal(actual, value)
    if op == "ne":
        return not _equal(actual, value)
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (actual, value))
    if not numbers and not (isinstance(actual, str) and isinstance(value, str)):
        return False  # not comparable: the rule does not hold
    return bool(
        {
            "gt": actual > value,
            "ge": actual >= value,
            "lt": actual < value,
            "le": actual <= value,
        }[op]
    )


def _equal(actual: Any, value: Any) -> bool:
    # YAML gives lists where the card holds tuples; a bool is never equal to 1.
    if isinstance(actual, tuple):
        actual = list(actual)
    if isinstance(actual, bool) != isinstance(value, bool):
        return False
    return bool(actual == value)


def _has(actual: Any, item: Any) -> bool:
    if isinstance(actual, str):
        return isinstance(item, str) and item in actual
    if isinstance(actual, Mapping):
        return item in actual
    if isinstance(actual, list | tuple | set | frozenset):
        return any(_equal(a, item) for a in actual)
    return False


def _short(value: Any) -> str:
    if isinstance(value, Ref):
        return str(value)
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"
