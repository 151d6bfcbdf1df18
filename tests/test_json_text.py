"""The stores' JSON text: orjson where it writes what the stdlib would, the stdlib elsewhere."""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skillstate import _json
from skillstate.errors import StateCorrupted, UsageError
from skillstate.store.chain import SORTED_PREFIX, sorted_digest, verify_document
from tests.test_diff import json_values


def _stdlib(value: Any, *, sort: bool = False) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=sort)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_text_parses_back_to_the_same_value(value: Any) -> None:
    """Whatever serializer wrote it, the text is the value (types included)."""
    text = _json.dumps(value)
    assert _stdlib(_json.loads(text)) == _stdlib(value)
    assert _json.loads(_json.dumps_sorted(value)) == json.loads(_stdlib(value, sort=True))


def test_values_orjson_refuses_fall_back_to_the_stdlib() -> None:
    """Huge integers, non-string keys and lone surrogates are written as before."""
    for value in ({"n": 2**80}, {1: "a", "b": 2}, {"s": "x\ud800y"}):
        assert _json.dumps(value) == _stdlib(value)
    assert _json.loads(_stdlib({"n": 2**80})) == {"n": 2**80}
    assert _json.loads('"x\\ud800"') == "x\ud800"
    for text in ("18446744073709551616", "-9223372036854775809", '{"n":[1,12345678901234567890]}'):
        assert _json.loads(text) == json.loads(text)  # exact ints, never rounded floats


def test_checksums_written_with_the_stdlib_text_still_verify() -> None:
    """A version checksummed before orjson (``1e-07``, not ``1e-7``) is not damage."""
    document = {"tiny": 1.5e-07, "b": [1, 2e-05]}
    legacy = SORTED_PREFIX + hashlib.sha256(_stdlib(document, sort=True).encode()).hexdigest()
    assert legacy != sorted_digest(document)
    verify_document("t", 2, document, legacy)  # no error
    exact = "sha256:" + hashlib.sha256(_stdlib(document).encode()).hexdigest()
    verify_document("t", 2, document, exact)
    with pytest.raises(StateCorrupted):
        verify_document("t", 2, {**document, "tiny": 1.6e-07}, legacy)


def test_a_task_cannot_start_with_a_value_json_cannot_store() -> None:
    """NaN would be stored as null: refused with the field named, nothing written."""
    from skillstate import Runtime
    from skillstate.examples.ledger import agent
    from skillstate.store import open_store

    store = open_store("memory://")
    runtime = Runtime(agent, store)
    with pytest.raises(UsageError, match=r"facts: it holds a number JSON cannot store"):
        runtime.start("t", facts={"x": math.nan})
    assert store.tasks() == []


_long_ints = st.integers(min_value=2**63 - 10**6, max_value=2**90) | st.integers(
    min_value=-(2**90), max_value=-(2**63) + 10**6
)


@settings(max_examples=300, deadline=None)
@given(json_values, _long_ints, st.sampled_from(["", " ", "\n", "\t "]))
def test_long_integers_anywhere_parse_exactly(value: Any, number: int, space: str) -> None:
    """A 19+ digit integer, after any token and any whitespace, is never rounded."""
    for text in (
        f"[{space}{number}{space}]",
        f'{{{space}"n"{space}:{space}{number}{space}}}',
        f"[{_stdlib(value)},{space}{number}]",
        f'{{"v":{_stdlib(value)},"n":{number},"s":"{number}"}}',
    ):
        parsed = _json.loads(text)
        assert _stdlib(parsed) == _stdlib(json.loads(text))
        assert number in (parsed if isinstance(parsed, list) else parsed.values())


def test_long_digit_runs_in_strings_and_floats_take_the_fast_parser() -> None:
    """A 64-digit hash in a string, or a float's long fraction, is orjson's: same values."""
    run = "0123456789" * 7
    for text in (
        '{"ref":"' + run + '","id":"a12345678901234567890"}',
        '{"ref":"sha256:' + run + '","n":[1, 2]}',
        '{"s":"n: 12345678901234567890","t":"\\\\","u":"\\" 12345678901234567890"}',
        '{"f":0.12345678901234567890123,"g":1234567890123456789012.5}',
    ):
        assert not _json._may_round(text.encode()), text
        assert _stdlib(_json.loads(text)) == _stdlib(json.loads(text))


@pytest.mark.parametrize(
    "text",
    [
        '["\\\\", 12345678901234567890]',  # an escaped backslash ends before the quote
        '["\\"", 12345678901234567890]',  # an escaped quote, then the string ends
        '["\\\\\\"", 12345678901234567890]',
        '{"a":"x: 12345678901234567890", "b": -12345678901234567890}',
        '["' + "1" * 30 + '", 12345678901234567890, "' + "2" * 30 + '"]',
        '{"k"' + " " * 100 + ":" + " " * 100 + "12345678901234567890}",  # far back: "may be"
        "[true ,\n\t-12345678901234567890]",
    ],
)
def test_integers_after_strings_with_escapes_are_exact(text: str) -> None:
    assert _json._may_round(text.encode())
    assert _stdlib(_json.loads(text)) == _stdlib(json.loads(text))
    parsed = _json.loads(text)
    values = parsed if isinstance(parsed, list) else list(parsed.values())
    assert 12345678901234567890 in values or -12345678901234567890 in values


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.text(alphabet='0123456789 :,["\\x', max_size=30) | _long_ints,
        max_size=6,
    )
)
def test_digits_in_strings_never_change_values(items: list[Any]) -> None:
    """Strings full of digits, quotes and backslashes next to long integers: exact."""
    for text in (_stdlib(items), json.dumps(items)):
        assert _stdlib(_json.loads(text)) == _stdlib(json.loads(text))
