"""Sensitive state fields: encrypted in every store, masked everywhere else.

A field is sensitive when its type is :data:`Sensitive` (``Sensitive[str]`` is
``Annotated[str, SENSITIVE]``, so in memory it is a plain ``str`` a skill can use)
or when its field metadata says so::

    class OrdersState(AgentState):
        api_token: Sensitive[str] | None = None
        password: str | None = Field(default=None, json_schema_extra={"sensitive": True})

In memory the value is plaintext. Whenever the card leaves the process it does
not: :meth:`AgentState.to_json` (what stores persist and patches diff) holds
``"enc:v1:" + <Fernet token>`` instead, and every rendering for people or models
(prompt views, ``skillstate show``, ``repr``) shows ``"***"``.

The key comes from ``SKILLSTATE_KEY``: one Fernet key, or several separated by
commas to rotate (the first encrypts, all decrypt). Without a key a non-null
sensitive value is refused, never written in the clear; a ``None`` needs no key.

Only top-level fields of the card can be sensitive: that is what keeps sealing a
cheap, shallow pass over a handful of names instead of a walk of the whole card.
"""

from __future__ import annotations

import json
import os
import threading
import types
import weakref
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, Union, get_args, get_origin

from skillstate.errors import MissingExtra, SecretKeyMissing

if TYPE_CHECKING:
    from cryptography.fernet import Fernet

    from skillstate.state.model import AgentState

__all__ = [
    "ENV_KEY",
    "MASK",
    "PREFIX",
    "SENSITIVE",
    "Sensitive",
    "generate_key",
    "is_sealed",
    "mask",
    "open_text",
    "seal",
    "seal_text",
    "secret_values",
    "sensitive_fields",
    "unseal",
]

ENV_KEY = "SKILLSTATE_KEY"
"""The environment variable holding the Fernet key(s)."""
PREFIX = "enc:v1:"
"""Marks a stored value as ciphertext; ``v1`` is a Fernet token of the value's JSON text."""
MASK = "***"
"""What every rendering shows instead of a sensitive value."""

_HOW_TO_KEY = "make one with `skillstate keygen` or Fernet.generate_key()"
_INSTALL = "sensitive fields need cryptography: pip install 'skillstate[secrets]'"


class _SensitiveMarker:
    """The ``Annotated`` metadata that marks a field sensitive (one instance: SENSITIVE)."""

    _instance: _SensitiveMarker | None = None

    def __new__(cls) -> _SensitiveMarker:
        # A singleton, so pickling or copying a model's metadata cannot make a second
        # marker that `is SENSITIVE` would miss.
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "SENSITIVE"

    def __reduce__(self) -> str:
        return "SENSITIVE"


SENSITIVE = _SensitiveMarker()
"""Metadata marker: ``Annotated[str, SENSITIVE]`` is what ``Sensitive[str]`` means."""

T = TypeVar("T")

Sensitive = Annotated[T, SENSITIVE]
"""``Sensitive[X]`` is ``Annotated[X, SENSITIVE]``: type checkers and pydantic see an
``X`` (the value in memory is usable as is); skillstate seals it on the way out."""


# ---------------------------------------------------------------- which fields

_FIELDS: weakref.WeakKeyDictionary[type[Any], frozenset[str]] = weakref.WeakKeyDictionary()


def sensitive_fields(cls: type[AgentState]) -> frozenset[str]:
    """Top-level fields of ``cls`` marked sensitive (by type or by field metadata).

    Cached per class: the runtime asks on every validation, and a card without
    sensitive fields must pay no more than this lookup.
    """
    cached = _FIELDS.get(cls)
    if cached is not None:
        return cached
    names = frozenset(
        name
        for name, info in cls.model_fields.items()
        if _marked(info.annotation)
        or SENSITIVE in info.metadata
        or (isinstance(info.json_schema_extra, dict) and info.json_schema_extra.get("sensitive"))
    )
    # A class still waiting for forward references may not list all its fields yet.
    if cls.__pydantic_complete__:
        _FIELDS[cls] = names
    return names


def _marked(annotation: Any) -> bool:
    """Whether ``SENSITIVE`` appears in ``annotation``, through unions and ``Annotated``."""
    if annotation is None:
        return False
    origin = get_origin(annotation)
    if origin is Annotated:
        if any(meta is SENSITIVE for meta in getattr(annotation, "__metadata__", ())):
            return True
        return _marked(get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        return any(_marked(arg) for arg in get_args(annotation))
    return False


# ---------------------------------------------------------------- keys

_CACHE_SIZE = 4096
"""Per key: how many (field, value) -> token pairs to remember."""


@dataclass
class _Keyring:
    """The parsed ``SKILLSTATE_KEY`` and the tokens made or read under it.

    ``tokens`` maps (field, JSON text) to the token last written for it, so sealing
    an unchanged value again gives the same ciphertext: Fernet tokens are
    randomized, and a fresh one on every commit would show up as a change in every
    delta and every diff. Only tokens under the *primary* key are remembered, so
    after a rotation an unchanged value is re-encrypted once under the new key.
    ``plain`` maps token to JSON text, to skip re-decrypting on every load.
    """

    primary: Fernet
    others: tuple[Fernet, ...]
    tokens: OrderedDict[tuple[str, str], str] = field(default_factory=OrderedDict)
    plain: OrderedDict[str, str] = field(default_factory=OrderedDict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def remember(self, name: str, text: str, token: str, *, primary: bool) -> None:
        with self.lock:
            _put(self.plain, token, text)
            if primary:
                _put(self.tokens, (name, text), token)

    def encrypt(self, name: str, text: str) -> str:
        with self.lock:
            token = self.tokens.get((name, text))
        if token is None:
            token = self.primary.encrypt(text.encode("utf-8")).decode("ascii")
            self.remember(name, text, token, primary=True)
        return token

    def decrypt(self, name: str, token: str) -> str:
        with self.lock:
            text = self.plain.get(token)
        if text is not None:
            return text
        from cryptography.fernet import InvalidToken

        for i, key in enumerate((self.primary, *self.others)):
            try:
                text = key.decrypt(token.encode("ascii")).decode("utf-8")
            except (InvalidToken, UnicodeError):
                continue
            self.remember(name, text, token, primary=i == 0)
            return text
        raise SecretKeyMissing(
            f"cannot decrypt field {name!r}: {ENV_KEY} does not match the key it was stored with"
        )


def _put(cache: OrderedDict[Any, str], key: Any, value: str) -> None:
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > _CACHE_SIZE:
        cache.popitem(last=False)


_KEYRINGS: dict[str, _Keyring] = {}
_KEYRINGS_LOCK = threading.Lock()


def _require_cryptography() -> None:
    try:
        import cryptography.fernet  # noqa: F401
    except ImportError as exc:
        raise MissingExtra(_INSTALL) from exc


def _keyring() -> _Keyring | None:
    """The keyring for the current ``SKILLSTATE_KEY``, or ``None`` when it is unset.

    Read on each call (tests and long-lived workers may change it) but parsed once
    per distinct value, so its token cache lives as long as the process.
    """
    raw = os.environ.get(ENV_KEY, "").strip()
    if not raw:
        return None
    with _KEYRINGS_LOCK:
        ring = _KEYRINGS.get(raw)
    if ring is not None:
        return ring
    _require_cryptography()
    from cryptography.fernet import Fernet

    parts = [p.strip() for p in raw.split(",") if p.strip()]
    keys: list[Fernet] = []
    for i, part in enumerate(parts, 1):
        try:
            keys.append(Fernet(part.encode("ascii")))
        except (ValueError, UnicodeError):
            # Never echo the key text: it is the secret this module protects.
            which = f"key {i} of {len(parts)}" if len(parts) > 1 else "it"
            raise SecretKeyMissing(
                f"{ENV_KEY} is not a valid Fernet key ({which} is not 32 url-safe "
                f"base64-encoded bytes); {_HOW_TO_KEY}"
            ) from None
    ring = _Keyring(primary=keys[0], others=tuple(keys[1:]))
    with _KEYRINGS_LOCK:
        if len(_KEYRINGS) >= 8:  # keys hardly ever change within a process
            _KEYRINGS.clear()
        return _KEYRINGS.setdefault(raw, ring)


def generate_key() -> str:
    """A new random Fernet key, as text ready for ``SKILLSTATE_KEY``."""
    _require_cryptography()
    from cryptography.fernet import Fernet

    return Fernet.generate_key().decode("ascii")


def seal_text(name: str, text: str) -> str | None:
    """``text`` sealed under the current ``SKILLSTATE_KEY``, as a stored token
    (``enc:v1:...``); ``None`` when no key is set.

    For values outside a state card (a LangGraph channel): ``name`` is what the value
    is, so that sealing an unchanged value again gives the same token (no delta, no
    diff), as it does for a card's fields.
    """
    ring = _keyring()
    return None if ring is None else PREFIX + ring.encrypt(name, text)


def open_text(name: str, token: str) -> str | None:
    """The text a :func:`seal_text` token holds; ``None`` when no key is set.

    Raises :class:`~skillstate.errors.SecretKeyMissing` when no key set matches the
    token. ``token`` must be sealed (:func:`is_sealed`).
    """
    ring = _keyring()
    return None if ring is None else ring.decrypt(name, token[len(PREFIX) :])


# ---------------------------------------------------------------- documents


def is_sealed(value: Any) -> bool:
    """Whether ``value`` is a stored ciphertext: ``enc:v1:`` and a Fernet token.

    The prefix alone is not enough: a plaintext that happens to start with
    ``enc:v1:`` must be sealed like any other, not passed through in the clear.
    """
    return isinstance(value, str) and value.startswith(PREFIX) and _token_shaped(value)


def _token_shaped(value: str) -> bool:
    """A Fernet token: url-safe base64 of version 0x80, a timestamp, an IV, a body, a MAC."""
    import base64
    import binascii

    token = value[len(PREFIX) :]
    try:
        raw = base64.urlsafe_b64decode(token.encode("ascii"))
    except (ValueError, binascii.Error, UnicodeEncodeError):
        return False
    # 1 version + 8 time + 16 IV + at least one 16-byte block + 32 HMAC
    return len(raw) >= 73 and raw[0] == 0x80 and (len(raw) - 57) % 16 == 0


def _present(cls: type[AgentState], doc: Mapping[str, Any]) -> Iterator[str]:
    """The sensitive fields of ``cls`` that hold a value in ``doc``."""
    for name in sorted(sensitive_fields(cls)):
        if doc.get(name) is not None:
            yield name


def seal(cls: type[AgentState], doc: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the JSON state ``doc`` with every non-null sensitive value encrypted.

    Values already sealed pass through (sealing is idempotent, so a stored document
    can be written again without the key). Raises :class:`SecretKeyMissing` rather
    than return a sensitive value in the clear.
    """
    out = dict(doc)
    ring: _Keyring | None = None
    for name in _present(cls, out):
        value = out[name]
        if is_sealed(value):
            continue
        if ring is None:
            ring = _keyring()
            if ring is None:
                raise SecretKeyMissing(
                    f"field {name!r} is sensitive: set {ENV_KEY} to store it encrypted "
                    f"({_HOW_TO_KEY})"
                )
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        out[name] = PREFIX + ring.encrypt(name, text)
    return out


def unseal(cls: type[AgentState], doc: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``doc`` with sealed sensitive values decrypted; other values as they are.

    Raises :class:`SecretKeyMissing` when a sealed value is present and the key is
    unset or is not (one of) the key(s) it was sealed with.
    """
    out = dict(doc)
    ring: _Keyring | None = None
    for name in _present(cls, out):
        value = out[name]
        if not is_sealed(value):
            continue
        if ring is None:
            ring = _keyring()
            if ring is None:
                raise SecretKeyMissing(
                    f"field {name!r} is encrypted: set {ENV_KEY} to the key it was stored with"
                )
        out[name] = json.loads(ring.decrypt(name, value[len(PREFIX) :]))
    return out


def mask(cls: type[AgentState], doc: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``doc`` with every non-null sensitive value replaced by ``"***"``."""
    out = dict(doc)
    for name in _present(cls, out):
        out[name] = MASK
    return out


def secret_values(state: AgentState) -> tuple[str, ...]:
    """The plaintext of ``state``'s sensitive values, as strings to redact elsewhere.

    A non-string value contributes its string and number leaves: those are what
    could be copied into a tool argument, an error message or a log line.
    """
    out: list[str] = []
    for name in sorted(sensitive_fields(type(state))):
        leaf_texts(getattr(state, name), out)
    return tuple(dict.fromkeys(out))


def leaf_texts(value: Any, out: list[str]) -> None:
    """Append the text of every leaf of ``value`` (strings, numbers) to ``out``."""
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, (int, float)):
        out.append(str(value))
    elif isinstance(value, Mapping):
        for item in value.values():
            leaf_texts(item, out)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for item in value:
            leaf_texts(item, out)
    elif hasattr(value, "model_dump"):
        leaf_texts(value.model_dump(mode="json"), out)
