"""The one JSON text form every store writes: compact, UTF-8, no NaN, key order kept.

Serializing is on every commit's path (the runtime dumps each top-level field of
the state to diff it, and the store writes the result), so this calls CPython's C
encoder directly: ``json.dumps`` with options builds a new encoder per call, and
its circular-reference bookkeeping is wasted on documents that are trees by
construction (they come from ``model_dump``/``json.loads``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["dumps", "get_path"]

_encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
_escape: Callable[[str], str] = json.encoder.encode_basestring
_c_make_encoder: Any = getattr(json.encoder, "c_make_encoder", None)


def _fallback(value: Any) -> str:
    return _encoder.encode(value)


if _c_make_encoder is not None:
    _iterencode = _c_make_encoder(
        None,  # no circular-reference markers: see the module docstring
        _encoder.default,
        _escape,
        None,  # no indent
        ":",
        ",",
        False,  # sort_keys
        False,  # skipkeys
        False,  # allow_nan
    )

    def dumps(value: Any) -> str:
        """``value`` as compact JSON text (raises ``TypeError``/``ValueError`` like json)."""
        if type(value) is str:
            return _escape(value)
        return "".join(_iterencode(value, 0))

else:  # pragma: no cover - interpreters without the C accelerator
    dumps = _fallback


def get_path(document: Mapping[str, Any], path: str) -> Any:
    """The value at dotted ``path`` of a JSON document, or ``None`` where it is missing."""
    node: Any = document
    for part in path.split("."):
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node
