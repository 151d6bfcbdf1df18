"""JSON Patch (RFC 6902) between two versions of a state.

Every committed event carries the patch from the previous version: it is the
audit line ``skillstate log ID`` prints, and the delta the stores keep instead of
a full copy of the state.

:func:`make_patch` is built for the runtime's hot path rather than for minimal
patches. A step rewrites a few fields of a document that may be large, so it
compares subtrees for equality first and only diffs the ones that differ; a
list that only grew becomes ``add .../-`` operations (the common
append-only shape: completed steps, logs), and any other changed list or scalar
is replaced whole. A generic JSON diff (``jsonpatch.make_patch``) instead walks
every node and costs about a millisecond per step on a 100 KB state.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Sequence
from typing import Any

import jsonpatch

from skillstate._json import dumps
from skillstate.errors import StateError

__all__ = ["Differ", "JsonDocument", "Patch", "apply_patch", "make_patch"]

Patch = list[dict[str, Any]]
"""A JSON Patch document: a list of ``{"op", "path", ...}`` operations."""


def make_patch(before: dict[str, Any], after: dict[str, Any]) -> Patch:
    """The operations that turn ``before`` into ``after`` (both plain JSON objects)."""
    ops: Patch = []
    _diff_object(before, after, "", ops)
    return ops


_dumps = dumps  # the exact text stores write


class JsonDocument(dict[str, Any]):
    """A JSON object that carries its serialized text, so a store need not dump it again."""

    text: str

    @classmethod
    def of(cls, value: dict[str, Any], text: str) -> JsonDocument:
        document = cls(value)
        document.text = text
        return document


class Differ:
    """Diffs successive versions of one document, the way the runtime commits them.

    Each top-level value is serialized once; its JSON text is kept for the next
    diff. A key whose text did not change is skipped without walking it (text
    equality is exact: ``1``, ``1.0`` and ``true`` differ), and a list whose old
    text is a prefix of its new text only grew, so it becomes appends. Only keys
    that really changed are diffed structurally. The texts also assemble the
    document's own serialization (:class:`JsonDocument`), which the store writes.
    """

    def __init__(self) -> None:
        self._last: tuple[dict[str, Any], dict[str, Any]] | None = None
        self._texts: dict[str, str] = {}
        self._parts: dict[str, str] = {}
        """Each key's ``"key":text`` piece of the last document, in its order."""

    def diff(
        self,
        before: dict[str, Any],
        after: dict[str, Any],
        *,
        changed: Collection[str] | None = None,
    ) -> tuple[Patch, JsonDocument]:
        """The patch from ``before`` to ``after``, and ``after`` with its JSON text.

        ``changed`` names the only keys whose values may differ (the caller knows
        which fields a step replaced): the others are taken as equal and their texts
        reused, so a commit serializes only what it changed.
        """
        if self._last is not None and (before is self._last[0] or before is self._last[1]):
            old_texts = self._texts
            if changed is not None and list(after) == list(old_texts):
                return self._changed(before, after, changed)
        else:
            old_texts = {key: _dumps(value) for key, value in before.items()}
            changed = None
        if changed is None:
            new_texts = {key: _dumps(value) for key, value in after.items()}
        else:
            new_texts = {
                key: _dumps(value) if key in changed or key not in old_texts else old_texts[key]
                for key, value in after.items()
            }
        ops: Patch = []
        for key in before:
            if key not in after:
                ops.append({"op": "remove", "path": f"/{_escape(key)}"})
        for key, new in after.items():
            text = new_texts[key]
            old_text = old_texts.get(key)
            if text == old_text:
                continue
            where = f"/{_escape(key)}"
            if old_text is None:
                ops.append({"op": "add", "path": where, "value": new})
            else:
                _diff_value(before[key], old_text, new, text, where=where, ops=ops)
        parts = {key: _key_prefix(key) + text for key, text in new_texts.items()}
        return ops, self._keep(after, new_texts, parts)

    def _changed(
        self, before: dict[str, Any], after: dict[str, Any], changed: Collection[str]
    ) -> tuple[Patch, JsonDocument]:
        """:meth:`diff` when ``after`` has ``before``'s keys, in the same order, and only
        ``changed`` ones may differ: the work is proportional to what the step changed,
        not to the size of the card (the other keys' texts and pieces are reused)."""
        texts, parts = dict(self._texts), dict(self._parts)
        ops: Patch = []
        for key in [key for key in after if key in changed]:
            new, text = after[key], _dumps(after[key])
            old_text = texts[key]
            if text == old_text:
                continue
            texts[key], parts[key] = text, _key_prefix(key) + text
            _diff_value(before[key], old_text, new, text, where=f"/{_escape(key)}", ops=ops)
        return ops, self._keep(after, texts, parts)

    def _keep(
        self, after: dict[str, Any], texts: dict[str, str], parts: dict[str, str]
    ) -> JsonDocument:
        """``after`` with its text, remembered as the ``before`` of the next diff."""
        document = JsonDocument.of(after, "{" + ",".join(parts.values()) + "}")
        # The caller may pass either object back as the next ``before``.
        self._last = (after, document)
        self._texts, self._parts = texts, parts
        return document


def _diff_value(old: Any, old_text: str, new: Any, text: str, *, where: str, ops: Patch) -> None:
    """Ops for one changed top-level value, decided on its texts where they tell."""
    if isinstance(old, list) and isinstance(new, list):
        if len(new) > len(old):
            # Exact: a JSON array text ending in "," after k complete values fixes them.
            head = "[" if not old else old_text[:-1] + ","
            if text.startswith(head):
                ops.extend(
                    {"op": "add", "path": f"{where}/-", "value": item} for item in new[len(old) :]
                )
                return
        shifted = _shift(old, old_text, new, text)
        if shifted is not None:
            # A bounded window that moved on (recent steps, errors, evidence): drop
            # its oldest entries and append the new ones.
            ops.extend({"op": "remove", "path": f"{where}/0"} for _ in range(shifted))
            ops.extend(
                {"op": "add", "path": f"{where}/-", "value": item}
                for item in new[len(old) - shifted :]
            )
            return
    if isinstance(old, dict) and isinstance(new, dict):
        _diff_object(old, new, where, ops)
    else:
        ops.append({"op": "replace", "path": where, "value": new})


def _diff_object(before: dict[str, Any], after: dict[str, Any], path: str, ops: Patch) -> None:
    for key in before:
        if key not in after:
            ops.append({"op": "remove", "path": f"{path}/{_escape(key)}"})
    for key, new in after.items():
        where = f"{path}/{_escape(key)}"
        if key not in before:
            ops.append({"op": "add", "path": where, "value": new})
            continue
        old = before[key]
        if old == new and _strict_equal(old, new):
            continue  # the common case: a C-level comparison and a type check, no diff
        if isinstance(old, dict) and isinstance(new, dict):
            _diff_object(old, new, where, ops)
        elif (
            isinstance(old, list)
            and isinstance(new, list)
            and len(new) > len(old)
            and _strict_equal(new[: len(old)], old)
        ):
            ops.extend(
                {"op": "add", "path": f"{where}/-", "value": item} for item in new[len(old) :]
            )
        else:
            ops.append({"op": "replace", "path": where, "value": new})


MAX_SHIFT = 8
"""How many dropped entries a window shift may have before the list is replaced whole."""


def _shift(old: list[Any], old_text: str, new: list[Any], text: str) -> int | None:
    """``k`` when ``new`` is ``old`` without its first ``k`` entries, plus appended ones.

    Decided on the texts, exactly like an append: ``old``'s text less its first
    ``k`` values must open ``new``'s text, followed by ``,`` or the closing ``]``.
    """
    cut = 1  # past "["
    for k in range(1, min(MAX_SHIFT, len(old) - 1) + 1):
        cut += len(_dumps(old[k - 1])) + 1  # the value and its ","
        rest = old_text[cut:-1]
        if text.startswith(rest, 1) and text[len(rest) + 1 : len(rest) + 2] in (",", "]"):
            kept = len(old) - k
            return k if len(new) >= kept else None
    return None


@functools.lru_cache(maxsize=4096)
def _key_prefix(key: str) -> str:
    return _dumps(key) + ":"


def _strict_equal(a: Any, b: Any) -> bool:
    """``a == b`` as JSON sees it: Python's ``1 == 1.0 == True`` must not hide a change."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_strict_equal(v, b[k]) for k, v in a.items())
    if isinstance(a, list):
        return len(a) == len(b) and all(_strict_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def apply_patch(document: dict[str, Any], patch: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """``document`` with ``patch`` applied; the input is left untouched."""
    try:
        result: dict[str, Any] = jsonpatch.apply_patch(document, list(patch), in_place=False)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
        raise StateError(f"patch does not apply: {exc}") from exc
    return result
