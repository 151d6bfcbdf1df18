"""The one JSON text form every store writes: compact, UTF-8, no NaN, key order kept.

Serializing and parsing are on every commit's and every load's path, so both go
through orjson (about ten times the stdlib's speed). Its text is the stdlib's
compact form for every value a card can hold, except exponents: ``1e-07`` is
``1e-7``. Whatever orjson refuses or would write differently falls back to the
stdlib's encoder (writing floats as orjson does), which serializes or raises as it
always did: integers beyond 64 bits, keys that are not strings, lone surrogates,
and types JSON does not have (dataclasses, datetimes: passed through, never
converted). Parsing falls back the same way, and for any text where a run of 19
digits could be an integer token (not one inside a quoted hash or a float's
fraction), which orjson would round to a float. NaN and infinity are kept out of
cards where values come in (:mod:`skillstate.limits`): orjson would write them as
``null``.
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
_VALUE_END = frozenset(b'"]}0123456789el')
"""The last byte of a JSON value (``true``, ``false`` and ``null`` end in ``e``/``l``)."""
_FLOAT_GOES_ON = frozenset(b".eE")
"""After a run of digits, these make it a float's (orjson and the stdlib agree on floats)."""


def _back(data: bytes, i: int) -> int | None:
    """The index of the last non-space byte at or before ``i``: -1 if there is none,
    ``None`` if it lies more than 64 bytes back (one C call, never a Python loop over a
    long run of spaces; :func:`_may_be_token` then answers "may be")."""
    low = max(0, i - 63)
    kept = len(data[low : i + 1].rstrip(b" \t\n\r"))
    return None if kept == 0 and low > 0 else low + kept - 1


def _may_be_token(data: bytes, start: int) -> bool:
    """Whether the bytes before the digits at ``start`` allow an integer token there.

    Outside a string, a number follows ``[``, the start of the text, a ``:`` that
    follows a key's closing quote, or a ``,`` that follows a value (an optional ``-``
    and spaces between). Digits after anything else (``"sha256:0123..."``, ``"x:
    1234..."``, a letter) are inside a string: ``False``, decided from a few bytes.
    """
    i = start - 1
    if i >= 0 and data[i] == 0x2D:  # "-"
        i -= 1
    at = _back(data, i)
    if at is None or at < 0 or data[at] == 0x5B:  # far back, the start, or "["
        return True
    if data[at] == 0x3A:  # ":"
        at = _back(data, at - 1)
        return at is None or (at >= 0 and data[at] == 0x22)  # '"'
    if data[at] == 0x2C:  # ","
        at = _back(data, at - 1)
        return at is None or (at >= 0 and data[at] in _VALUE_END)
    return False


def _may_round(data: bytes) -> bool:
    """Whether ``data`` may hold an integer of 19+ digits that orjson would round.

    Only a run that may be a whole integer token counts: no ``.``/``e`` after it (a
    float's digits parse the same in both parsers), bytes before it that allow a
    token (:func:`_may_be_token`), and outside every string, which is the parity of
    the quotes before it less the escaped ones: in JSON text a backslash occurs only
    inside strings, where ``\\\\`` pairs up from the left, so once those pairs are
    blanked out every remaining ``\\"`` is an escaped quote. A text that is not
    JSON at all fails in orjson and goes to the stdlib anyway.
    """
    digits = data.translate(_DIGITS)
    start = digits.find(_LONG_RUN)
    blanked = b""
    seen = quotes = 0
    while start != -1:
        end = digits.find(b" ", start)
        if end == -1:
            end = len(data)
        if (end == len(data) or data[end] not in _FLOAT_GOES_ON) and _may_be_token(data, start):
            if not blanked:
                blanked = data.replace(b"\\\\", b"__")  # same length: positions hold
            # Counted from the last candidate on (a digit there: no pair is cut in two).
            quotes += blanked.count(b'"', seen, start) - blanked.count(b'\\"', seen, start)
            seen = start
            if quotes % 2 == 0:
                return True
        start = digits.find(_LONG_RUN, end)
    return False


def loads(text: str | bytes) -> Any:
    """Parse JSON text; what orjson refuses or would round, the stdlib reads."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    if not _may_round(data):
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
