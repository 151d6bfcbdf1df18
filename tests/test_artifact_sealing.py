"""Artifacts sealed at rest: round trips, deterministic refs, missing and wrong keys."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skillstate.errors import SecretKeyMissing
from skillstate.state.secrets import ENV_KEY, generate_key
from skillstate.store.base import artifact_ref
from skillstate.store.memory import MemoryStore
from skillstate.store.sealing import (
    MAGIC,
    PLAIN,
    is_sealed_artifact,
    open_artifact,
    seal_artifact,
)

OUTPUT = b'{"user_phone": "13812345678", "items": [1, 2, 3]}'


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh SKILLSTATE_KEY for the test."""
    value = generate_key()
    monkeypatch.setenv(ENV_KEY, value)
    return value


@pytest.fixture
def no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """No SKILLSTATE_KEY at all."""
    monkeypatch.delenv(ENV_KEY, raising=False)


def test_round_trip_with_a_key(key: str) -> None:
    """With a key, sealed bytes carry the prefix, hide the plaintext and open back."""
    sealed = seal_artifact(OUTPUT)
    assert is_sealed_artifact(sealed)
    assert sealed.startswith(MAGIC)
    assert b"13812345678" not in sealed
    assert open_artifact(sealed) == OUTPUT
    assert open_artifact(seal_artifact(b"")) == b""


def test_tokens_are_standard_fernet(key: str) -> None:
    """Any Fernet implementation opens the token with the key; its timestamp says nothing."""
    token = seal_artifact(OUTPUT)[len(MAGIC) :]
    assert Fernet(key).decrypt(token) == OUTPUT
    assert Fernet(key).extract_timestamp(token) == 0


def test_sealing_is_deterministic_so_refs_deduplicate(key: str) -> None:
    """The same output sealed twice gives the same bytes, hence one ref and one stored copy."""
    first, second = seal_artifact(OUTPUT), seal_artifact(OUTPUT)
    assert first == second
    assert seal_artifact(OUTPUT + b" ") != first
    store = MemoryStore()
    assert store.put_artifact(first) == store.put_artifact(second) == artifact_ref(first)
    assert artifact_ref(first) != artifact_ref(OUTPUT)  # the ref is not a hash of the plaintext
    assert open_artifact(store.get_artifact(artifact_ref(first))) == OUTPUT


def test_different_keys_give_unrelated_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    """The synthetic IV depends on the key: the same output under two keys shares nothing."""
    monkeypatch.setenv(ENV_KEY, generate_key())
    a = seal_artifact(OUTPUT)
    monkeypatch.setenv(ENV_KEY, generate_key())
    b = seal_artifact(OUTPUT)
    iv = slice(len(MAGIC) + 12, len(MAGIC) + 32)  # base64 text of IV bytes only
    assert a[iv] != b[iv]


def test_sealing_twice_nests(key: str) -> None:
    """Sealed bytes sealed again open back to the sealed bytes: seal once, where stored."""
    sealed = seal_artifact(OUTPUT)
    twice = seal_artifact(sealed)
    assert twice != sealed
    assert open_artifact(open_artifact(twice)) == OUTPUT


@pytest.mark.parametrize("data", [MAGIC, MAGIC + b"not a token", PLAIN + b"x", PLAIN])
def test_lookalike_plaintext_round_trips(data: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    """Plaintext starting with a prefix reads back as itself, with a key or without."""
    monkeypatch.delenv(ENV_KEY, raising=False)
    stored = seal_artifact(data)
    assert stored.startswith(PLAIN)
    assert open_artifact(stored) == data
    monkeypatch.setenv(ENV_KEY, generate_key())
    assert open_artifact(seal_artifact(data)) == data


def test_no_key_passes_through(no_key: None) -> None:
    """Without a key, bytes are stored and read exactly as they are."""
    assert seal_artifact(OUTPUT) is OUTPUT
    assert open_artifact(OUTPUT) is OUTPUT


def test_opening_sealed_bytes_without_a_key_fails(
    key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sealed artifact read without the key raises SecretKeyMissing with one line."""
    sealed = seal_artifact(OUTPUT)
    monkeypatch.delenv(ENV_KEY)
    with pytest.raises(SecretKeyMissing, match=ENV_KEY) as info:
        open_artifact(sealed)
    assert "\n" not in str(info.value)


def test_wrong_key_fails(key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sealed artifact read under another key raises SecretKeyMissing, never garbage."""
    sealed = seal_artifact(OUTPUT)
    monkeypatch.setenv(ENV_KEY, generate_key())
    with pytest.raises(SecretKeyMissing, match="does not match") as info:
        open_artifact(sealed)
    assert "\n" not in str(info.value)
    assert key not in str(info.value)


def test_tampered_token_fails(key: str) -> None:
    """A token whose bytes were changed is refused rather than decrypted."""
    sealed = bytearray(seal_artifact(OUTPUT))
    sealed[-5] = ord("A") if sealed[-5] != ord("A") else ord("B")
    with pytest.raises(SecretKeyMissing):
        open_artifact(bytes(sealed))


def test_rotation_opens_old_artifacts(key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a rotation (new key first, old second) old artifacts open; new ones use the new key."""
    old = seal_artifact(OUTPUT)
    new_key = generate_key()
    monkeypatch.setenv(ENV_KEY, f"{new_key}, {key}")
    assert open_artifact(old) == OUTPUT
    resealed = seal_artifact(OUTPUT)
    assert resealed != old
    assert Fernet(new_key).decrypt(resealed[len(MAGIC) :]) == OUTPUT


def test_plaintext_passes_through_with_a_key(key: str) -> None:
    """Bytes without the prefix (an old store) are returned as they are, key or not."""
    assert open_artifact(OUTPUT) is OUTPUT
    assert open_artifact(b"") == b""


def test_invalid_key_is_reported_without_echoing_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A malformed SKILLSTATE_KEY is a SecretKeyMissing that does not print the key."""
    monkeypatch.setenv(ENV_KEY, "not-a-fernet-key")
    with pytest.raises(SecretKeyMissing, match="not a valid Fernet key") as info:
        seal_artifact(OUTPUT)
    assert "not-a-fernet-key" not in str(info.value)


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.one_of(st.binary(max_size=2048), st.binary(max_size=64).map(lambda b: MAGIC + b)))
def test_any_bytes_round_trip(key: str, data: bytes) -> None:
    """Any bytes, including empty ones and ones that start like a sealed artifact, open back."""
    sealed = seal_artifact(data)
    assert open_artifact(sealed) == data
    assert seal_artifact(data) == sealed


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.one_of(st.binary(max_size=256), st.binary(max_size=64).map(lambda b: PLAIN + b)))
def test_any_bytes_round_trip_without_a_key(no_key: None, data: bytes) -> None:
    """Without a key, storing and reading any bytes gives them back unchanged."""
    assert open_artifact(seal_artifact(data)) == data
