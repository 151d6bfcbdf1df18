"""The one JSON text form every store writes: compact, UTF-8, no NaN, key order kept.

Serializing and parsing are on every commit's and every load's path, so both go
through orjson (about ten times the stdlib's speed). Its text is the stdlib's
compact form for every value a card can hold, except exponents: ``1e-07`` is
``1e-7``. Whatever orjson refuses or would write differently falls back to the
stdlib, which then serializes or raises as it always did: integers beyond 64
bits, keys that are not strings, lone surrogates, subclasses and types JSON does
not have (passed through, never converted). Parsing falls back the same way,
and for any text with a 19-digit run, which orjson could round to a float. NaN
and infinity are kept out of
cards where values come in (:mod:`skillstate.limits`): orjson would write them
as ``null``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

import orjson

__all__ = ["dumps", "dumps_sorted", "get_path", "loads"]

_encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
_sorted_encoder = json.JSONEncoder(
    separators=(",", ":"), ensure_ascii=False, allow_nan=False, sort_keys=True
)
_escape: Callable[[str], str] = json.encoder.encode_basestring
# Subclasses (str enums), dataclasses and datetimes go to the stdlib: it serializes
# or refuses them exactly as before orjson was used.
_PASS = orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATACLASS
_PASS |= orjson.OPT_PASSTHROUGH_DATETIME


def dumps(value: Any) -> str:
    """``value`` as compact JSON text (raises ``TypeError``/``ValueError`` like json)."""
    if type(value) is str:
        return _escape(value)
    try:
        return orjson.dumps(value, option=_PASS).decode()
    except TypeError:
        return _encoder.encode(value)


def dumps_sorted(value: Any) -> str:
    """:func:`dumps` with object keys sorted (what version checksums hash)."""
    try:
        return orjson.dumps(value, option=_PASS | orjson.OPT_SORT_KEYS).decode()
    except TypeError:
        return _sorted_encoder.encode(value)


def dumps_stdlib(value: Any) -> str:
    """The stdlib's compact text, as checksums written before orjson hashed it."""
    return _encoder.encode(value)


def dumps_sorted_stdlib(value: Any) -> str:
    """The stdlib's sorted text, as checksums written before orjson hashed it."""
    return _sorted_encoder.encode(value)


_LONG_NUMBER = re.compile(r"\d{19}")
_LONG_NUMBER_BYTES = re.compile(rb"\d{19}")
"""19 digits in a row: maybe an integer beyond 64 bits, which orjson would parse as a
float (silently rounded). Such texts are parsed by the stdlib, exactly."""


def loads(text: str | bytes) -> Any:
    """Parse JSON text; what orjson refuses or would round, the stdlib reads."""
    long = _LONG_NUMBER if isinstance(text, str) else _LONG_NUMBER_BYTES
    if long.search(text) is None:  # type: ignore[arg-type]
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
    return json.loads(text)


def get_path(document: Mapping[str, Any], path: str) -> Any:
    """The value at dotted ``path`` of a JSON document, or ``None`` where it is missing."""
    node: Any = document
    for part in path.split("."):
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node
