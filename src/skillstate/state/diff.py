"""JSON Patch (RFC 6902) between two versions of a state, via ``jsonpatch``.

Every committed event carries the patch from the previous version, so the event
log alone is an audit trail: ``skillstate log ID`` prints it, and replaying the
patches over the first version reproduces every later one exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jsonpatch

from skillstate.errors import StateError

__all__ = ["Patch", "apply_patch", "make_patch"]

Patch = list[dict[str, Any]]
"""A JSON Patch document: a list of ``{"op", "path", ...}`` operations."""


def make_patch(before: dict[str, Any], after: dict[str, Any]) -> Patch:
    """The operations that turn ``before`` into ``after`` (both plain JSON)."""
    ops: Patch = jsonpatch.make_patch(before, after).patch
    return ops


def apply_patch(document: dict[str, Any], patch: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """``document`` with ``patch`` applied; the input is left untouched."""
    try:
        result: dict[str, Any] = jsonpatch.apply_patch(document, list(patch), in_place=False)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
        raise StateError(f"patch does not apply: {exc}") from exc
    return result
