"""make_patch: exact on any JSON pair, and shaped for the runtime's hot path."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from skillstate._json import dumps
from skillstate.state.diff import Differ, apply_patch, make_patch

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=20,
)
documents = st.dictionaries(st.text(max_size=6), json_values, max_size=6)


@settings(max_examples=300, deadline=None)
@given(documents, documents)
def test_patch_turns_before_into_after(before: dict[str, Any], after: dict[str, Any]) -> None:
    """Applying the patch gives exactly ``after``, types included (1, 1.0 and True differ)."""
    result = apply_patch(copy.deepcopy(before), make_patch(before, after))
    assert json.dumps(result, sort_keys=True) == json.dumps(after, sort_keys=True)


def test_type_only_changes_are_recorded() -> None:
    """1 -> True and 1 -> 1.0 are equal in Python but different JSON: they are patched."""
    patch = make_patch({"a": 1, "b": [1], "c": {"d": 1}}, {"a": True, "b": [1.0], "c": {"d": 1}})
    assert {op["path"] for op in patch} == {"/a", "/b"}


def test_appends_become_add_ops() -> None:
    """A list that only grew is patched with appends, not replaced."""
    before = {"log": ["a", "b"], "n": 1}
    after = {"log": ["a", "b", "c"], "n": 1}
    assert make_patch(before, after) == [{"op": "add", "path": "/log/-", "value": "c"}]


def test_nested_changes_are_local_and_keys_escaped() -> None:
    """Only the changed leaf is written; ``/`` and ``~`` in keys are escaped."""
    before = {"facts": {"a/b": 1, "c~": {"x": 1}, "big": list(range(100))}}
    after = {"facts": {"a/b": 2, "c~": {"x": 1}, "big": list(range(100))}}
    assert make_patch(before, after) == [{"op": "replace", "path": "/facts/a~1b", "value": 2}]


@settings(max_examples=200, deadline=None)
@given(st.lists(documents, min_size=2, max_size=5))
def test_differ_over_a_chain_of_versions(versions: list[dict[str, Any]]) -> None:
    """Successive diffs (with cached texts) rebuild every version; the text is the JSON."""
    differ = Differ()
    current = versions[0]
    for nxt in versions[1:]:
        patch, document = differ.diff(current, nxt)
        rebuilt = apply_patch(copy.deepcopy(current), patch)
        assert json.dumps(rebuilt, sort_keys=True) == json.dumps(nxt, sort_keys=True)
        assert json.loads(document.text) == nxt
        # The stores' own text (orjson's; the stdlib's save exponents: 1e-7, not 1e-07).
        assert document.text == dumps(nxt)
        current = document  # what the runtime passes next: the committed document


def test_differ_appends_and_detects_type_changes() -> None:
    """Grown lists become appends; 1 -> true is a change even though 1 == True."""
    differ = Differ()
    first = {"log": ["a"], "n": 1, "same": {"x": [1, 2]}}
    patch, doc = differ.diff({}, first)
    patch, _ = differ.diff(doc, {"log": ["a", "b,c"], "n": True, "same": {"x": [1, 2]}})
    assert patch == [
        {"op": "add", "path": "/log/-", "value": "b,c"},
        {"op": "replace", "path": "/n", "value": True},
    ]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(json_values, min_size=1, max_size=8),
    st.integers(min_value=0, max_value=9),
    st.lists(json_values, max_size=3),
)
def test_a_window_that_moved_on_is_patched_exactly(
    old: list[Any], dropped: int, appended: list[Any]
) -> None:
    """A bounded window (oldest entries out, new ones in) rebuilds exactly, types included."""
    new = old[dropped:] + appended
    differ = Differ()
    _, document = differ.diff({}, {"w": old})
    patch, _ = differ.diff(document, {"w": new})
    rebuilt = apply_patch(copy.deepcopy({"w": old}), patch)
    assert json.dumps(rebuilt) == json.dumps({"w": new})


def test_a_window_shift_is_removes_and_appends() -> None:
    """Dropping the oldest record and appending one costs two ops, not the whole list."""
    differ = Differ()
    old = [{"id": f"{i:04d}", "n": i} for i in range(20)]
    new = [*old[1:], {"id": "0020", "n": 20}]
    _, document = differ.diff({}, {"steps": old, "v": 1})
    patch, _ = differ.diff(document, {"steps": new, "v": 2})
    assert patch == [
        {"op": "remove", "path": "/steps/0"},
        {"op": "add", "path": "/steps/-", "value": {"id": "0020", "n": 20}},
        {"op": "replace", "path": "/v", "value": 2},
    ]
    # 1 -> 1.0 inside the window is not a shift: the list is replaced.
    moved = [{"id": "0001", "n": 1.0}, *old[2:]]
    patch, _ = differ.diff({"steps": old}, {"steps": moved})
    assert patch == [{"op": "replace", "path": "/steps", "value": moved}]


def test_changed_keys_are_the_only_ones_serialized_again() -> None:
    """With ``changed``, the other keys reuse their texts: the caller vouches they are equal."""
    differ = Differ()
    _, document = differ.diff({}, {"a": [1, 2], "b": {"x": 1}})
    after = {"a": [1, 2, 3], "b": {"x": 1}}
    patch, stored = differ.diff(document, after, changed={"a"})
    assert patch == [{"op": "add", "path": "/a/-", "value": 3}]
    assert stored.text == '{"a":[1,2,3],"b":{"x":1}}'
    # A `before` the differ did not produce: everything is compared, the hint ignored.
    patch, _ = Differ().diff({"a": [1, 2], "b": {"x": 1}}, {"a": [1, 2], "b": {"x": 2}}, changed=())
    assert patch == [{"op": "replace", "path": "/b/x", "value": 2}]


@settings(max_examples=200, deadline=None)
@given(documents, st.lists(st.lists(json_values, min_size=6, max_size=6), min_size=1, max_size=4))
def test_a_chain_with_changed_keys_matches_a_full_diff(
    first: dict[str, Any], steps: list[list[Any]]
) -> None:
    """The fast path (same keys, only ``changed`` may differ) gives the full diff's patch
    and text at every step, whichever of the changed keys really changed."""
    fast, full = Differ(), Differ()
    _, current = fast.diff({}, first)
    _, reference = full.diff({}, first)
    keys = list(first)
    for values in steps:
        changed = set(keys[::2])  # every other key may change; the rest stay
        nxt = {k: (values[i] if k in changed else first[k]) for i, k in enumerate(keys)}
        patch, document = fast.diff(current, nxt, changed=changed)
        expected, expected_doc = full.diff(reference, nxt)
        assert patch == expected
        assert document.text == expected_doc.text == dumps(nxt)
        assert json.dumps(apply_patch(copy.deepcopy(dict(current)), patch), sort_keys=True) == (
            json.dumps(nxt, sort_keys=True)
        )
        current, reference = document, expected_doc
