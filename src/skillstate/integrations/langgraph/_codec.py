"""Channel values as JSON the store can diff, and sealed when they are sensitive.

LangGraph's own savers keep every value as the serializer's bytes (msgpack). Bytes
are opaque to a JSON Patch: a list that grew by one message would be rewritten
whole at every step. So a value that *is* JSON (``None``, booleans, strings, finite
numbers, and lists and string-keyed dicts of those) is stored as itself, element by
element: an appended message is an ``add .../-`` in the delta, and the inspector
shows the value as it is. Anything else (a LangChain message, a pydantic model,
bytes, a tuple) goes through the saver's ``serde`` and is stored as a tagged object,
``{"$lg": TYPE, "b64": BASE64}``, where it sits in the structure, so a list of
messages still grows by appends.

A dict that itself has a ``"$lg"`` key is stored through ``serde`` whole, so the
tag is never ambiguous. Only exact ``list`` and ``dict`` instances are taken apart
(a subclass, a tuple, a set keep their type through ``serde``), so a value reads
back equal and of the same type as it was written.

With another serializer than the default ``JsonPlusSerializer`` (an
``EncryptedSerializer``, say) nothing bypasses it: ``native=False`` stores every value
through ``serde``, so what it would have encrypted is never written in the clear.

Sensitive channels are sealed on top: the encoded value's JSON text is encrypted with
skillstate's own key (``SKILLSTATE_KEY``, :mod:`skillstate.state.secrets`) and stored as
``{"$lg": "sealed", "token": "enc:v1:..."}``. The token is a standard sealed value, so
``skillstate rekey`` re-seals it like any other.
"""

from __future__ import annotations

import base64
import math
from typing import Any, cast

import orjson
from langgraph.checkpoint.serde.base import SerializerProtocol

from skillstate import _json
from skillstate.errors import SecretKeyMissing
from skillstate.state.secrets import ENV_KEY, is_sealed, open_text, seal_text

__all__ = ["TAG", "Codec", "Undecodable"]

TAG = "$lg"
"""The key that marks an object as an encoded (or sealed) value rather than a dict."""

SEALED = "sealed"
_TAG_BYTES = b'"' + TAG.encode() + b'"'
MAX_DEPTH = 32
"""Deeper JSON is stored through ``serde`` whole: keeps the walk (and the patch paths) short."""


class Undecodable(ValueError):
    """A stored value is not what this module writes (the reader names the task)."""


class Codec:
    """Encodes values for the store and decodes them back, with one ``serde``."""

    def __init__(
        self, serde: SerializerProtocol, *, native: bool, sensitive: frozenset[str]
    ) -> None:
        self.serde = serde
        self.native = native
        self.sensitive = sensitive

    # ------------------------------------------------------------ encoding

    def encode(self, value: Any, channel: str | None = None) -> Any:
        """The stored form of ``value``; sealed when ``channel`` is sensitive."""
        encoded = self._encode(value, 0) if self.native else self._blob(value)
        if channel is not None and channel in self.sensitive and value is not None:
            return _seal(channel, encoded)
        return encoded

    def encode_record(self, value: Any) -> Any:
        """LangGraph's own bookkeeping (checkpoint fields, metadata): always as JSON.

        It is what LangGraph's savers keep in plain columns too, and what the saver
        reads ids from; only channel values and writes go through ``serde``."""
        return self._encode(value, 0)

    def _encode(self, value: Any, depth: int) -> Any:
        kind = type(value)
        if value is None or kind is bool:
            return value
        if kind is int:
            return value  # any size: msgpack itself stops at 64 bits
        if kind is str:
            return value if value.isascii() or _text_ok(value) else self._blob(value)
        if kind is float:
            return value if math.isfinite(value) else self._blob(value)
        if depth >= MAX_DEPTH:
            return self._blob(value)
        if kind is list:
            return [item if _plain_leaf(item) else self._encode(item, depth + 1) for item in value]
        if kind is dict and TAG not in value:
            # One pass (this runs on every put): a key that is not plain text sends
            # the whole dict through ``serde`` instead, as if checked up front.
            encoded: dict[str, Any] = {}
            for key, item in value.items():
                if type(key) is not str or not (key.isascii() or _text_ok(key)):
                    return self._blob(value)
                encoded[key] = item if _plain_leaf(item) else self._encode(item, depth + 1)
            return encoded
        return self._blob(value)

    def _blob(self, value: Any) -> Any:
        if value is None:
            return None
        type_, data = self.serde.dumps_typed(value)
        return {TAG: type_, "b64": base64.b64encode(data).decode("ascii")}

    # ------------------------------------------------------------ decoding

    def decode(self, stored: Any, channel: str | None = None) -> Any:
        """The value ``stored`` was encoded from (opened first when it is sealed)."""
        kind = type(stored)
        if kind is dict and stored.get(TAG) == SEALED:
            stored = _open(channel or "value", stored.get("token"))
        elif kind is dict or kind is list:
            copied = _plain_copy(stored)
            if copied is not _NOT_PLAIN:
                return copied
        return self._decode(stored)

    def decode_values(self, stored: dict[str, Any]) -> dict[str, Any]:
        """``{name: decode(value, name)}`` for many channels at once.

        Stored values that hold no encoded or sealed object are plain JSON already:
        they are copied in one orjson round trip (the caller may keep the store's
        document, so what is returned must be its own), with no Python walk. The
        test is on the serialized bytes: every tag is written as the key ``"$lg"``,
        so bytes without it hold none (a string that merely contains it only takes
        the slower path).
        """
        copied = _plain_copy(stored)
        if copied is not _NOT_PLAIN:
            return cast("dict[str, Any]", copied)
        return {name: self.decode(value, name) for name, value in stored.items()}

    def _decode(self, stored: Any) -> Any:
        kind = type(stored)
        if kind is list:
            return [self._decode(item) for item in stored]
        if kind is not dict:
            return stored
        tag = stored.get(TAG)
        if tag is None:
            return {k: self._decode(v) for k, v in stored.items()}
        try:
            data = base64.b64decode(stored["b64"], validate=True)
        except (KeyError, TypeError, ValueError) as exc:
            raise Undecodable(f"stored {tag!r} value is not base64") from exc
        return self.serde.loads_typed((str(tag), data))


_NOT_PLAIN = object()


def _plain_leaf(value: Any) -> bool:
    """Whether ``value`` is stored as itself with no walk (the common leaves, inline)."""
    kind = type(value)
    return value is None or kind is int or kind is bool or (kind is str and value.isascii())


def _plain_copy(stored: Any) -> Any:
    """A copy of ``stored`` when it holds no tagged object, else ``_NOT_PLAIN``."""
    try:
        data = orjson.dumps(stored)
    except TypeError:  # an integer beyond 64 bits: the Python walk keeps it exact
        return _NOT_PLAIN
    return _NOT_PLAIN if _TAG_BYTES in data else orjson.loads(data)


def _text_ok(text: str) -> bool:
    """Whether every backend can store ``text``: lone surrogates cannot be UTF-8."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _seal(channel: str, encoded: Any) -> dict[str, str]:
    # An unchanged value sealed again gives the same token, so it makes no delta.
    token = seal_text(channel, _json.dumps(encoded))
    if token is None:
        raise SecretKeyMissing(
            f"channel {channel!r} is sensitive: set {ENV_KEY} to store it encrypted "
            "(make one with `skillstate keygen`)"
        )
    return {TAG: SEALED, "token": token}


def _open(channel: str, token: Any) -> Any:
    if not is_sealed(token):
        raise Undecodable(f"sealed value of channel {channel!r} is not a token")
    text = open_text(channel, str(token))
    if text is None:
        raise SecretKeyMissing(
            f"channel {channel!r} is encrypted: set {ENV_KEY} to the key it was stored with"
        )
    return _json.loads(text)
