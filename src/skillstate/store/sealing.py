"""Artifacts encrypted at rest: what a store writes for a tool's raw output when a key is set.

With ``SKILLSTATE_KEY`` set (the key of :mod:`skillstate.state.secrets`),
:func:`seal_artifact` turns bytes into :data:`MAGIC` followed by a Fernet token;
:func:`open_artifact` turns them back. Without a key, bytes pass through both
unchanged (but see the escape below), and bytes without a prefix always pass
through :func:`open_artifact`, so stores written before sealing (or without a key)
still read.

**Deterministic on purpose.** Stores address an artifact by the sha256 of the bytes
they hold, so identical outputs share one ref and one copy. Fernet normally draws a
random IV and stamps the current time, which would give the same output a new ref on
every call. Here the token is built by the Fernet spec with two fixed inputs:

* the timestamp is 0 (artifacts are never checked for age; this hides when they
  were written, too);
* the IV is ``HMAC-SHA256(k_iv, plaintext)[:16]``, with ``k_iv`` derived from the key
  by HMAC under a fixed label, so it is separate from Fernet's own signing and
  encryption keys. This is the synthetic-IV construction (as in SIV mode): equal
  plaintexts give equal tokens under one key and nothing else is shared between
  tokens. What an observer of the store learns is *which artifacts are equal*
  (which the content-addressed refs showed anyway) and their sizes, as with any
  Fernet token. The ref is the hash of the
  ciphertext, never of the plaintext, so it cannot be used to confirm a guessed
  content (a plain hash of a phone number can be brute-forced; this cannot without
  the key).

Tokens are ordinary Fernet tokens: any Fernet implementation opens them with the key.
With several comma-separated keys, the first seals and all open (rotation); after a
rotation the same output sealed again gets a new ref under the new key.

``open_artifact(seal_artifact(data)) == data`` for all bytes. The one collision,
plaintext that itself starts with a prefix, is escaped: without a key such bytes
are stored behind :data:`PLAIN` (with a key they are simply encrypted). Seal once,
where bytes are stored: sealing sealed bytes nests them.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import threading
from typing import TYPE_CHECKING

from skillstate.errors import SecretKeyMissing
from skillstate.state.secrets import ENV_KEY, _keyring

if TYPE_CHECKING:
    from skillstate.store.base import Store

__all__ = [
    "MAGIC",
    "PLAIN",
    "is_sealed_artifact",
    "open_artifact",
    "read_artifact",
    "seal_artifact",
    "write_artifact",
]

MAGIC = b"skillstate-sealed:v1:"
"""Marks stored bytes as a sealed artifact; ``v1`` is a Fernet token with a synthetic IV."""
PLAIN = b"skillstate-plain:v1:"
"""Marks stored plaintext that would otherwise look sealed (or look escaped)."""

_IV_LABEL = b"skillstate/artifact-iv/v1"
_FERNET_VERSION = b"\x80"
_ZERO_TIME = bytes(8)

_KEYS: dict[str, tuple[bytes, bytes, bytes]] = {}
_KEYS_LOCK = threading.Lock()


def is_sealed_artifact(data: bytes) -> bool:
    """Whether ``data`` is a sealed artifact (starts with :data:`MAGIC`)."""
    return data.startswith(MAGIC)


def _primary() -> tuple[bytes, bytes, bytes] | None:
    """(signing key, encryption key, IV key) of the first key in ``SKILLSTATE_KEY``, or None.

    ``_keyring`` validates every key (and says which one is bad, without echoing it);
    the raw bytes are read here because Fernet does not expose them.
    """
    if _keyring() is None:
        return None
    raw = os.environ.get(ENV_KEY, "").strip()
    with _KEYS_LOCK:
        keys = _KEYS.get(raw)
    if keys is None:
        first = next(p.strip() for p in raw.split(",") if p.strip())
        key = base64.urlsafe_b64decode(first.encode("ascii"))
        keys = (key[:16], key[16:], hmac.new(key, _IV_LABEL, hashlib.sha256).digest())
        with _KEYS_LOCK:
            if len(_KEYS) >= 8:  # keys hardly ever change within a process
                _KEYS.clear()
            _KEYS[raw] = keys
    return keys


def seal_artifact(data: bytes) -> bytes:
    """``data`` as stored: sealed when ``SKILLSTATE_KEY`` is set, else unchanged.

    Deterministic for a given key (see the module docstring). Without a key, bytes
    that start with :data:`MAGIC` or :data:`PLAIN` get :data:`PLAIN` in front, so
    reading them back cannot mistake them for a sealed artifact.
    """
    keys = _primary()
    if keys is None:
        return PLAIN + data if data.startswith((MAGIC, PLAIN)) else data
    from cryptography.hazmat.primitives import padding
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    signing, encryption, iv_key = keys
    iv = hmac.new(iv_key, data, hashlib.sha256).digest()[:16]
    padder = padding.PKCS7(algorithms.AES.block_size).padder()
    padded = padder.update(data) + padder.finalize()
    encryptor = Cipher(algorithms.AES(encryption), modes.CBC(iv)).encryptor()
    body = _FERNET_VERSION + _ZERO_TIME + iv + encryptor.update(padded) + encryptor.finalize()
    tag = hmac.new(signing, body, hashlib.sha256).digest()
    return MAGIC + base64.urlsafe_b64encode(body + tag)


def open_artifact(data: bytes) -> bytes:
    """The plaintext of stored bytes: sealed ones are decrypted, others returned as they are.

    Raises :class:`~skillstate.errors.SecretKeyMissing` when ``data`` is sealed and
    the key is unset or is not (one of) the key(s) it was sealed with.
    """
    if data.startswith(PLAIN):
        return data[len(PLAIN) :]
    if not data.startswith(MAGIC):
        return data
    ring = _keyring()
    if ring is None:
        raise SecretKeyMissing(
            f"artifact is encrypted: set {ENV_KEY} to the key it was stored with"
        )
    from cryptography.fernet import InvalidToken

    token = data[len(MAGIC) :]
    for key in (ring.primary, *ring.others):
        try:
            return key.decrypt(token)
        except InvalidToken:
            continue
    raise SecretKeyMissing(
        f"cannot open artifact: {ENV_KEY} does not match the key it was stored with"
    )


def write_artifact(
    store: Store, data: bytes, *, media_type: str = "application/octet-stream"
) -> str:
    """Store ``data`` as an artifact, sealed when a key is set; returns its ref.

    Every writer goes through this (and every reader through :func:`read_artifact`),
    so artifacts are encrypted at rest whatever the backend.
    """
    return store.put_artifact(seal_artifact(data), media_type=media_type)


def read_artifact(store: Store, ref: str) -> bytes:
    """The plaintext of the artifact under ``ref`` (see :func:`write_artifact`)."""
    return open_artifact(store.get_artifact(ref))
