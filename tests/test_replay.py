"""The plain patch applier of rebuilds: jsonpatch's result and jsonpatch's refusals."""

from __future__ import annotations

import contextlib
import copy
import json
from datetime import datetime, timezone
from typing import Any

import jsonpatch
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skillstate import _json
from skillstate.errors import StateCorrupted
from skillstate.state.diff import make_patch
from skillstate.store.chain import Row, rebuild, sorted_digest
from skillstate.store.replay import _apply_one, apply_patch
from tests.test_diff import documents, json_values

_FAILED = "failed"


def _text(value: Any) -> str:
    """Types included (1, 1.0 and True differ), key order included."""
    return json.dumps(value)


def _jsonpatch(document: Any, ops: Any) -> Any:
    try:
        return _text(jsonpatch.apply_patch(copy.deepcopy(document), copy.deepcopy(ops)))
    except Exception:  # whatever it raises: the applier must refuse too
        return _FAILED


def _ours(document: Any, ops: Any) -> Any:
    try:
        return _text(apply_patch(copy.deepcopy(document), copy.deepcopy(ops)))
    except Exception:
        return _FAILED


def _paths(value: Any, prefix: str = "") -> list[str]:
    """Every pointer into ``value`` (escaped), so random ops hit real members often."""
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, f"{prefix}/{key.replace('~', '~0').replace('/', '~1')}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, f"{prefix}/{index}")
    return found


_RARELY = st.sampled_from([False] * 20 + [True])
"""True now and then (hypothesis favours the ends of an integer range: 0 is drawn often)."""
_JUNK = st.sampled_from(["-", "01", "00", "1e2", " 1", "x", "~", "~2", "~01", "", "99", "-1", "²"])


@st.composite
def _operation(draw: st.DrawFn, document: Any) -> Any:
    """Mostly plain operations on real members (so whole patches apply), some broken."""
    path = draw(st.sampled_from(_paths(document)[1:] or [""]))
    roll = draw(st.integers(0, 19))
    if roll < 3:
        path = f"{path}/{draw(_JUNK)}"
    elif roll < 7:  # a new member, an append, an insert
        path = f"{path}/{draw(st.sampled_from(['-', '0', '1', 'new', 'a~1b', '~0']))}"
    elif roll == 19:
        path = draw(st.sampled_from(["", "a", 3, None]))
    if not draw(_RARELY):
        kind = draw(st.sampled_from(["add", "replace", "remove"]))
    else:
        kind = draw(st.sampled_from(["move", "copy", "test", "bogus", None]))
    op: dict[str, Any] = {"op": kind, "path": path}
    if not draw(_RARELY):
        op["value"] = draw(json_values)
    if kind in ("move", "copy"):
        op["from"] = draw(st.sampled_from(_paths(document)))
    if draw(_RARELY):
        return draw(st.sampled_from(["add", 3, None, [op]]))
    if draw(_RARELY):
        del op["op"]
    return op


@st.composite
def _random_case(draw: st.DrawFn) -> tuple[Any, Any]:
    document = draw(documents)
    ops = []
    current = document
    for _ in range(draw(st.integers(0, 4))):
        op = draw(_operation(current))
        ops.append(op)
        with contextlib.suppress(Exception):  # the next op aims at the document as it is now
            current = jsonpatch.apply_patch(copy.deepcopy(current), [copy.deepcopy(op)])
    if draw(_RARELY):
        return document, draw(st.sampled_from([{"op": "add"}, "add", 3, None]))
    return document, ops


@settings(max_examples=600, deadline=None)
@given(_random_case())
def test_random_patches_apply_as_jsonpatch_applies_them(case: tuple[Any, Any]) -> None:
    """Valid or not, plain or not: the same document, or a refusal where jsonpatch refuses."""
    document, ops = case
    assert _ours(document, ops) == _jsonpatch(document, ops)


@settings(max_examples=300, deadline=None)
@given(documents, documents)
def test_differ_patches_apply_as_jsonpatch_applies_them(
    before: dict[str, Any], after: dict[str, Any]
) -> None:
    """What the differ writes (appends, window shifts, escaped keys) rebuilds ``after``."""
    ops = _json.loads(_json.dumps(make_patch(before, after)))
    ours = _ours(before, ops)
    plain = copy.deepcopy(before)  # every operation the differ writes takes the fast path
    assert all(_apply_one(plain, op) for op in copy.deepcopy(ops))
    assert _text(plain) == ours
    assert ours == _jsonpatch(before, ops)  # key order included
    assert json.loads(ours) == after  # a patch does not carry key order
    assert json.dumps(json.loads(ours), sort_keys=True) == json.dumps(after, sort_keys=True)


def test_operations_it_does_not_take_go_to_jsonpatch() -> None:
    """move, copy and test apply (after and before plain ones), exactly as jsonpatch does."""
    document = {"a": {"b": [1, 2]}, "c": 1}
    ops = [
        {"op": "add", "path": "/a/b/-", "value": 3},
        {"op": "copy", "from": "/a", "path": "/d"},
        {"op": "add", "path": "/d/b/0", "value": 0},  # the copy is its own object
        {"op": "move", "from": "/c", "path": "/e"},
        {"op": "test", "path": "/e", "value": 1},
        {"op": "remove", "path": "/a/b/0"},
    ]
    result = apply_patch(copy.deepcopy(document), copy.deepcopy(ops))
    assert result == {"a": {"b": [2, 3]}, "d": {"b": [0, 1, 2, 3]}, "e": 1}
    assert _ours(document, ops) == _jsonpatch(document, ops)
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        apply_patch({"e": 1}, [{"op": "test", "path": "/e", "value": 2}])


def _rows(states: list[dict[str, Any]]) -> list[Row]:
    now = datetime.now(timezone.utc)
    rows = [Row(1, _json.dumps(states[0]), None, now, sorted_digest(states[0]))]
    for version in range(2, len(states) + 1):
        patch = _json.dumps(make_patch(states[version - 2], states[version - 1]))
        rows.append(Row(version, None, patch, now, sorted_digest(states[version - 1])))
    return rows


def test_rebuild_owns_what_it_returns() -> None:
    """Two rebuilds of one chain share nothing: changing one leaves the other as stored."""
    states = [{"task_id": "t", "version": 1, "log": [], "card": {"n": 0}}]
    for version in range(2, 6):
        previous = states[-1]
        states.append(
            {
                **previous,
                "version": version,
                "log": [*previous["log"], {"at": version}],
                "card": {"n": version},
            }
        )
    rows = _rows(states)
    first = rebuild("t", 5, rows)
    second = rebuild("t", 5, rows)
    assert first == second == states[-1]
    first["log"][0]["at"] = "changed"
    first["card"]["n"] = "changed"
    assert second == states[-1]
    assert rebuild("t", 5, rows) == states[-1]


@pytest.mark.parametrize(
    "patch",
    [
        '[{"op":"remove","path":"/missing"}]',
        '[{"op":"replace","path":"/log/7","value":1}]',
        '[{"op":"remove","path":"/task_id/0"}]',  # into a string: jsonpatch's TypeError
        '[{"op":"add","path":"/log/01","value":1}]',
        '[{"op":"bogus","path":"/log"}]',
        '{"op":"add"}',
        "7",
        "not json",
    ],
)
def test_a_delta_that_does_not_apply_is_corruption(patch: str) -> None:
    states = [{"task_id": "t", "version": 1, "log": []}, {"task_id": "t", "version": 2, "log": []}]
    rows = _rows(states)
    rows[1] = Row(2, None, patch, rows[1].created_at, rows[1].digest)
    with pytest.raises(StateCorrupted, match="delta does not apply"):
        rebuild("t", 2, rows)
