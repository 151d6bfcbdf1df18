"""The stores' JSON text: orjson where it writes what the stdlib would, the stdlib elsewhere."""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import pytest
from hypothesis import given, settings

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
