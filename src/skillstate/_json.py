"""The one JSON text form every store writes: compact, UTF-8, no NaN, key order kept.

Serializing and parsing are on every commit's and every load's path, so both go
through orjson (about ten times the stdlib's speed). Its text is the stdlib's
compact form for every value a card can hold, except exponents: ``1e-07`` is
``1e-7``. Whatever orjson refuses or would write differently falls back to the
stdlib's encoder (writing floats as orjson does), which serializes or raises as it
always did: integers beyond 64 bits, keys that are not strings, lone surrogates,
and types JSON does not have (dataclasses, datetimes: passed through, never
converted). Parsing falls back the same way, and for any text with a 19-digit run,
which orjson could round to a float. NaN and infinity are kept out of cards where
values come in (:mod:`skillstate.limits`): orjson would write them as ``null``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import orjson

__all__ = ["dumps", "dumps_sorted", "get_path", "loads"]

_stdlib = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
_sorted_stdlib = json.JSONEncoder(
    separators=(",", ":"), ensure_ascii=False, allow_nan=False, sort_keys=True
)


def _float_text(value: float) -> str:
    if not math.isfinite(value):
        raise ValueError(f"Out of range float values are not JSON compliant: {value!r}")
    return orjson.dumps(float(value)).decode()


class _Fallback(json.JSONEncoder):
    """The stdlib's encoder writing floats as orjson does (``6e-05`` as ``0.00006``).

    A document orjson refuses (an integer beyond 64 bits somewhere) is serialized
    here whole, while the differ assembles a head's text from per-field texts that
    orjson wrote: both must be the same text, or the head's checksum would not match
    the document it is rebuilt from. Pure Python, so slow; such documents are rare.
    """

    def iterencode(self, o: Any, _one_shot: bool = False) -> Iterator[str]:
        return json.encoder._make_iterencode(  # type: ignore[attr-defined,no-any-return]
            {} if self.check_circular else None,
            self.default,
            _escape,
            self.indent,
            _float_text,
            self.key_separator,
            self.item_separator,
            self.sort_keys,
            self.skipkeys,
            _one_shot,
        )(o, 0)


_encoder = _Fallback(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
_sorted_encoder = _Fallback(
    separators=(",", ":"), ensure_ascii=False, allow_nan=False, sort_keys=True
)
_escape: Callable[[str], str] = json.encoder.encode_basestring
# Dataclasses and datetimes go to the stdlib, which refuses them as it always did.
# Subclasses of dict, list and str (a stored document, a str enum) are serialized
# like their base types, as the stdlib does.
_PASS = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME


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
    return _stdlib.encode(value)


def dumps_sorted_stdlib(value: Any) -> str:
    """The stdlib's sorted text, as checksums written before orjson hashed it."""
    return _sorted_stdlib.encode(value)


_DIGITS = bytes(0x30 if 0x30 <= i <= 0x39 else 0x20 for i in range(256))
_LONG_RUN = b"0" * 19
"""19 digits in a row: maybe an integer beyond 64 bits, which orjson would parse as a
float (silently rounded). Such texts are parsed by the stdlib, exactly. (Found by
mapping digits to ``0`` and everything else to a space, then one substring search:
a regex took 20 ms on a 500 KB head.)"""


def loads(text: str | bytes) -> Any:
    """Parse JSON text; what orjson refuses or would round, the stdlib reads."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    if _LONG_RUN not in data.translate(_DIGITS):
        try:
            return orjson.loads(data)
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
